//! A daemon killed with SIGKILL leaves its mount in the kernel's table, answering every
//! access with ENOTCONN. `agx mount` right after the kill replaces it (one line says so)
//! with nothing recorded lost, also when its own check of the mount was waiting on the
//! daemon as it died; `agx status` and the history commands name the dead mount and leave
//! it in place (writers keep failing rather than reaching the bare directory unrecorded);
//! `agx unmount` removes it.

mod common;
mod hist;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{agx, Mounted};
use hist::{ok, stderr, stdout, user_error};

/// SIGKILLs `pid` and returns at once, as `kill -9` does: the process may still be exiting.
fn kill9(pid: u32) {
    // SAFETY: kill(2) with a pid and a signal number has no memory effects.
    let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(r, 0, "kill -9 {pid}: {}", std::io::Error::last_os_error());
}

/// Kills a stopped daemon when dropped, so a failing test never leaves a mount whose
/// daemon cannot answer (the `Mounted` guard, dropped after this, would wait on it).
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: as in kill9.
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGKILL) };
    }
}

fn project_files(p: &Path) {
    std::fs::write(p.join("notes"), "first\n").unwrap();
    std::fs::create_dir(p.join("src")).unwrap();
    std::fs::write(p.join("src/main.rs"), "fn main() {}\n").unwrap();
}

/// Changes made through the mount before each kill: an edit and a creation.
fn work(m: &Mounted, round: usize) {
    std::fs::write(m.p("notes"), format!("round {round}\n")).unwrap();
    std::fs::write(m.p(format!("src/new{round}.rs")), "// new\n").unwrap();
}

fn remount(m: &Mounted) -> String {
    let out = ok(
        agx(["mount".as_ref(), m.project.as_os_str()]),
        "agx mount right after kill -9",
    );
    String::from_utf8(out).unwrap()
}

fn assert_recovered(out: &str) {
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("recovered from a crashed daemon"))
        .collect();
    assert_eq!(lines.len(), 1, "one line about the recovery: {out:?}");
}

fn is_dead(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN) | Some(libc::ECONNABORTED)
    )
}

/// Three rounds of: change files, SIGKILL the daemon, `agx mount` at once (no waiting for
/// the process to be gone). Every change is then readable, in the log, and undone by a
/// restore to the start, which is itself undone.
#[test]
fn mount_right_after_kill_9_recovers_and_loses_nothing() {
    let m = Mounted::with(project_files);
    let original = hist::tree(m.path());
    for round in 0..3 {
        work(&m, round);
        kill9(m.daemon_pid().expect("daemon pid"));
        assert_recovered(&remount(&m));
        assert_eq!(
            std::fs::read_to_string(m.p("notes")).unwrap(),
            format!("round {round}\n")
        );
    }
    let worked = hist::tree(m.path());
    let events = hist::events(&m);
    for round in 0..3 {
        let path = format!("src/new{round}.rs");
        assert!(
            events.iter().any(|e| e["path"] == path.as_str()),
            "{path} is in the history: {events:#?}"
        );
    }
    let first = format!("event:{}", events[0]["seq"]);
    let undo = hist::restore(&m, &first, &[]).expect("the restore changed something");
    hist::assert_same_tree(&original, &hist::tree(m.path()), "restored to the start");
    hist::restore(&m, &undo, &[]);
    hist::assert_same_tree(&worked, &hist::tree(m.path()), "the restore undone");
}

/// Whether every thread of `pid` is stopped (or the process is gone).
fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.filter_map(|t| t.ok()).all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
            .is_none_or(|r| r.starts_with('T') || r.starts_with('t'))
    })
}

/// Whether a thread of `pid` is waiting for a FUSE answer.
fn waits_on_fuse(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks.filter_map(|t| t.ok()).any(|t| {
                std::fs::read_to_string(t.path().join("wchan"))
                    .is_ok_and(|w| w.trim() == "request_wait_answer")
            })
        })
        .unwrap_or(false)
}

/// The narrow case behind "already mounted" after a kill: `agx mount` is already asking
/// the mount whether its daemon lives when the daemon dies, and its request ends with
/// ECONNABORTED rather than ENOTCONN. Made deterministic by stopping the daemon first:
/// `agx mount` is started and the daemon killed only once the request is waiting.
#[test]
fn mount_whose_check_was_waiting_when_the_daemon_died() {
    let m = Mounted::with(project_files);
    work(&m, 0);
    let pid = m.daemon_pid().expect("daemon pid");
    let _guard = KillOnDrop(pid);
    // SAFETY: as in kill9.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    while !all_stopped(pid) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut child = Command::new(common::agx_bin())
        .arg("mount")
        .arg(&m.project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while !waits_on_fuse(child.id()) && child.try_wait().unwrap().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    kill9(pid);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "agx mount: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_recovered(&stdout(&out));
    assert_eq!(std::fs::read_to_string(m.p("notes")).unwrap(), "round 0\n");
    assert!(hist::events(&m).iter().any(|e| e["path"] == "src/new0.rs"));
}

/// `agx status` names a dead mount (exit 0) and leaves it alone; `agx log` is a one-line
/// error naming the way out; `agx unmount` removes it; `agx mount` then serves the project
/// with its history.
#[test]
fn status_names_a_dead_mount_and_unmount_removes_it() {
    let m = Mounted::with(project_files);
    work(&m, 0);
    let pid = m.daemon_pid().expect("daemon pid");
    kill9(pid);
    hist::wait_gone(pid);

    let st = m.agx(["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&ok(st, "agx status --json")).unwrap();
    assert_eq!(v["dead"], true, "{v}");
    assert_eq!(v["mounted"], false, "{v}");
    assert_eq!(v["pid"], serde_json::Value::Null, "{v}");
    assert_eq!(v["mountpoint"], m.project.to_str().unwrap(), "{v}");
    let text = String::from_utf8(ok(m.agx(["status"]), "agx status")).unwrap();
    assert!(text.contains("dead mount"), "{text}");
    assert!(text.contains("agx mount"), "{text}");
    // Still there: writers fail instead of reaching the bare directory.
    let err = std::fs::write(m.p("notes"), "lost?\n").unwrap_err();
    assert!(is_dead(&err), "{err}");
    assert!(hist::is_agx_mount(&m.project));

    let line = user_error(&m.agx(["log"]), "agx log on a dead mount");
    assert!(line.contains("dead"), "{line}");

    let out = ok(
        agx(["unmount".as_ref(), m.project.as_os_str()]),
        "agx unmount",
    );
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("removed a dead mount"), "{out}");
    assert!(!hist::is_agx_mount(&m.project));
    let v: serde_json::Value =
        serde_json::from_slice(&ok(m.agx(["status", "--json"]), "agx status")).unwrap();
    assert_eq!(
        (v["dead"].clone(), v["mounted"].clone()),
        (false.into(), false.into())
    );

    let out = remount(&m);
    assert!(!out.contains("recovered"), "nothing left to recover: {out}");
    assert_eq!(std::fs::read_to_string(m.p("notes")).unwrap(), "round 0\n");
    assert!(hist::events(&m).iter().any(|e| e["path"] == "src/new0.rs"));
}
