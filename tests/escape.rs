//! Invariant 3 against an agent that tries to get out: the daemon's descriptors are out of
//! reach of its own user (non-dumpable daemon); history-destroying commands (gc, checkpoint
//! delete, unpin, unmount) are refused to every process of an agent session's tree, ended
//! or not, outside the tree, with a scrubbed environment, mounted or not; and a daemon
//! killed or unmounted from outside agx is reported by the next command until the next
//! mount, naming the sessions that were open.

mod common;
mod hist;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{agx_bin, output_of, Mounted};
use hist::{ok, stderr, stdout, user_error};

fn json(o: Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&ok(o, what)).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"))
}

/// A copy of the system shell named `name` in `dir`: a process running it has that name,
/// like a real agent binary.
fn stand_in(dir: &Path, name: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let p = bin.join(name);
    std::fs::copy("/bin/sh", &p).unwrap();
    p
}

/// Waits up to 20 s for `cond`.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    // A zombie still has its /proc entry; its state is 'Z'.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// History that gc would drop (`--keep 0s`), held by a checkpoint and a pin.
fn history(m: &Mounted) -> usize {
    std::fs::write(m.p("f"), "1\n").unwrap();
    hist::wait_event(m, 0, "f");
    ok(m.agx(["checkpoint", "keepme"]), "checkpoint");
    ok(m.agx(["pin", "now"]), "pin");
    let first = hist::last_seq(m);
    std::fs::write(m.p("f"), "2\n").unwrap();
    hist::wait_event(m, first, "f");
    hist::events(m).len()
}

/// Nothing of `history` was dropped.
fn history_intact(m: &Mounted, events: usize) {
    assert_eq!(hist::events(m).len(), events, "events dropped");
    let cps = json(m.agx(["checkpoint", "list", "--json"]), "checkpoints");
    assert_eq!(cps.as_array().unwrap().len(), 1, "{cps}");
    let pins = json(m.agx(["pin", "--json"]), "pins");
    assert_eq!(pins.as_array().unwrap().len(), 1, "{pins}");
}

/// Lines of `out` as the loop `for c in gc unpin delete; do agx $c; echo rc=$?` prints them:
/// each command one refusal line, then rc=1.
fn assert_refused_three(out: &str) {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    for (i, what) in ["agx gc", "agx checkpoint delete", "agx unpin"]
        .iter()
        .enumerate()
    {
        assert!(
            lines[2 * i].contains(&format!("{what} is refused inside an agent session")),
            "{out}"
        );
        assert_eq!(lines[2 * i + 1], "rc=1", "{out}");
    }
}

/// agx's session mark, RLIMIT_RTTIME 2^62 us, as /proc/PID/limits shows it.
const MARK: &str = "4611686018427387904";

const THREE: &str = r#"for c in 'gc --keep 0s' 'checkpoint delete keepme' 'unpin now'; do "$AGX" $c 2>&1; echo "rc=$?"; done"#;

#[test]
fn an_ended_hook_session_cannot_destroy_history() {
    let m = Mounted::new();
    let events = history(&m);
    let agent = stand_in(m.tmp.path(), "myagent");
    // The agent starts its session through a hook, ends it itself, then tries.
    let script = format!(
        r#""$AGX" hook generic --event session-start --session s-1 --agent myagent
grep "Max realtime timeout" /proc/$$/limits
"$AGX" session end 2>&1
{THREE}"#
    );
    let o = output_of(
        Command::new(&agent)
            .arg("-c")
            .arg(&script)
            .current_dir(m.path())
            .env("AGX", agx_bin()),
    );
    let out = stdout(&o);
    // The daemon marked the agent process the hook found (and so what it starts later).
    let (limits, out) = out.split_once('\n').unwrap();
    let hard = limits.split_whitespace().nth(4);
    assert_eq!(hard, Some(MARK), "{limits}");
    let out: String = out
        .lines()
        .filter(|l| !l.starts_with("agx: session "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_refused_three(&out);
    let list = json(m.agx(["session", "list", "--json"]), "sessions");
    assert!(!list[0]["ended"].is_null(), "the session ended: {list}");
    history_intact(&m, events);
    // Outside any session (this test process) gc runs.
    let r = json(m.agx(["gc", "--keep", "0s", "--json"]), "gc from outside");
    assert_eq!(r["held_by"], "pin now", "{r}");
}

/// Runs, under `agx run`, an orphan (`setsid -f`, no AGX_SESSION in its environment nor in
/// any ancestor's once `agx run` has exited) that waits for
/// `go`, then runs `agx -C PROJECT ARGS` into `out` and touches `done`. Returns once `agx
/// run` has exited (the orphan is then init's).
fn orphan_after_run(m: &Mounted, args: &str) -> (PathBuf, PathBuf, PathBuf) {
    let tmp = m.tmp.path();
    let (go, out, done) = (tmp.join("go"), tmp.join("out"), tmp.join("done"));
    let inner = format!(
        "n=0; while [ ! -e {go} ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; \
         {agx} -C {proj} {args} > {out} 2>&1; echo rc=$? >> {out}; touch {done}",
        go = go.display(),
        agx = agx_bin().display(),
        proj = m.project.display(),
        out = out.display(),
        done = done.display(),
    );
    let script =
        format!("setsid -f env -u AGX_SESSION sh -c '{inner}' < /dev/null > /dev/null 2>&1");
    let o = Command::new(agx_bin())
        .arg("-C")
        .arg(&m.project)
        .args(["run", "--", "sh", "-c", &script])
        .current_dir("/")
        .output()
        .unwrap();
    ok(o, "agx run");
    (go, out, done)
}

#[test]
fn an_orphan_with_a_scrubbed_environment_is_refused_after_the_session() {
    let m = Mounted::new();
    let events = history(&m);
    let (go, out, done) = orphan_after_run(&m, "gc --keep 0s");
    // `agx run` has exited and ended its session: the orphan is outside the tree, without
    // AGX_SESSION, in no open session.
    let list = json(m.agx(["session", "list", "--json"]), "sessions");
    assert!(!list[0]["ended"].is_null(), "{list}");
    std::fs::write(&go, "").unwrap();
    wait_for("the orphan", || done.exists());
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("agx gc is refused inside an agent session")
            && lines[0].contains("session mark"),
        "{text}"
    );
    assert_eq!(lines[1], "rc=1");
    history_intact(&m, events);
}

#[test]
fn an_unmounted_project_refuses_a_session_and_serves_a_person() {
    let mut m = Mounted::new();
    let events = history(&m);
    let (go, out, done) = orphan_after_run(&m, "unpin now");
    m.unmount();
    std::fs::write(&go, "").unwrap();
    wait_for("the orphan", || done.exists());
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("agx unpin is refused inside an agent session"),
        "{text}"
    );
    assert_eq!(lines[1], "rc=1");
    // Unmounted, the history is read directly: all there.
    let pins = json(m.agx(["pin", "--json"]), "pins");
    assert_eq!(pins.as_array().unwrap().len(), 1, "{pins}");
    let log = json(m.agx(["log", "--json"]), "log");
    assert_eq!(log.as_array().unwrap().len(), events);
    // A person's shell, in no session, may.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} -C {} gc --keep 0s",
            agx_bin().display(),
            m.project.display()
        ))
        .output()
        .unwrap();
    ok(o, "gc from a person's shell");
}

#[test]
fn a_session_can_neither_unmount_nor_stop_agx() {
    let m = Mounted::new();
    let pid = m.daemon_pid().expect("daemon pid");
    let mp = m.path().to_string_lossy().into_owned();
    // `agx unmount` (and --lazy), and SIGTERM from the session's shell.
    let script = format!(
        r#""$AGX" unmount {mp} 2>&1; echo "rc=$?"; "$AGX" unmount --lazy {mp} 2>&1; echo "rc=$?"; kill -TERM {pid}; sleep 0.3; echo after > {mp}/after"#
    );
    let o = Command::new(agx_bin())
        .current_dir("/")
        .arg("-C")
        .arg(&m.project)
        .args(["run", "--", "sh", "-c", &script])
        .env("AGX", agx_bin())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    for i in [0, 2] {
        assert!(
            lines[i].contains("agx unmount is refused inside an agent session"),
            "{out}"
        );
        assert_eq!(lines[i + 1], "rc=1", "{out}");
    }
    // Still serving, and recording: the write after the signal is an event.
    assert!(alive(pid));
    hist::wait_event(&m, 0, "after");
    // The daemon refuses the request itself too (a client that skips the CLI's check).
    if Path::new("/usr/bin/python3").exists() {
        let st = json(m.agx(["status", "--json"]), "status");
        let sock = PathBuf::from(st["log"].as_str().unwrap()).with_extension("sock");
        let py = format!(
            "import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); \
             s.sendall(b'{{\"cmd\": \"unmount\"}}\\n'); print(s.makefile().readline().strip())",
            sock.display()
        );
        let o = Command::new(agx_bin())
            .current_dir("/")
            .arg("-C")
            .arg(&m.project)
            .args(["run", "--", "/usr/bin/python3", "-c", &py])
            .output()
            .unwrap();
        let reply: serde_json::Value =
            serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {o:?}"));
        assert_eq!(reply["ok"], false, "{reply}");
        assert!(
            reply["error"]
                .as_str()
                .unwrap()
                .contains("agx unmount is refused inside an agent session"),
            "{reply}"
        );
        assert!(alive(pid));
    }
    // A termination signal from outside any session stops it cleanly: no warning after.
    // SAFETY: kill(2) with a pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    wait_for("the daemon to exit", || !alive(pid));
    let o = m.agx(["log", "--json"]);
    assert_eq!(stderr(&o), "", "a clean stop is not reported");
    ok(o, "log");
}

/// Reads `agx status --json`'s `interrupted` field.
fn interrupted(m: &Mounted) -> serde_json::Value {
    json(m.agx(["status", "--json"]), "status")["interrupted"].clone()
}

#[test]
fn a_killed_daemon_is_reported_until_the_next_mount() {
    let mut m = Mounted::new();
    std::fs::write(m.p("f"), "1\n").unwrap();
    hist::wait_event(&m, 0, "f");
    let pid = m.daemon_pid().expect("daemon pid");
    let mp = m.path().to_string_lossy().into_owned();
    // The agent kills the daemon, then tries to remove the dead mount.
    let script = format!(r#"kill -9 {pid}; sleep 0.3; "$AGX" unmount {mp} 2>&1; echo "rc=$?""#);
    let o = Command::new(agx_bin())
        .current_dir("/")
        .arg("-C")
        .arg(&m.project)
        .args(["run", "--name", "escaper", "--", "sh", "-c", &script])
        .env("AGX", agx_bin())
        .output()
        .unwrap();
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}{}", stderr(&o));
    assert!(
        lines[0].contains("agx unmount is refused inside an agent session"),
        "{out}"
    );
    assert_eq!(lines[1], "rc=1");
    let sid = stderr(&o)
        .lines()
        .find_map(|l| l.strip_prefix("agx: session ")?.strip_suffix(" started"))
        .expect("agx run names its session")
        .to_string();
    wait_for("the killed daemon to go", || !alive(pid));
    // From outside, the dead mount goes, and the stop is reported.
    let o = Command::new(agx_bin())
        .arg("unmount")
        .arg(&m.project)
        .current_dir("/")
        .output()
        .unwrap();
    let err = stderr(&o);
    ok(o, "agx unmount of the dead mount from outside");
    m.forget_mounted();
    assert!(err.contains("not recorded by agx"), "{err}");
    // Changes now reach the bare directory, unrecorded; every command says so, once.
    std::fs::write(m.project.join("f"), "unrecorded\n").unwrap();
    let o = m.agx(["log", "--json"]);
    let err = stderr(&o);
    ok(o, "log");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    for want in [
        "stopped without `agx unmount`",
        &format!("session {sid} (sh, escaper) was open"),
        "changes made since were not recorded by agx",
        &format!("pid {pid}"),
    ] {
        assert!(lines[0].contains(want), "{want:?} in {err}");
    }
    let i = interrupted(&m);
    assert_eq!(i["how"], "killed", "{i}");
    assert_eq!(i["sessions"][0]["id"], sid.as_str(), "{i}");
    assert!(i["last_change"].is_string(), "{i}");
    // The next mount reports it once, and takes over.
    let o = m.agx(["mount", m.project.to_str().unwrap()]);
    let err = stderr(&o);
    ok(o, "mount");
    assert!(
        err.contains(&format!("session {sid}")) && err.contains("not recorded by agx"),
        "{err}"
    );
    let o = m.agx(["log", "--json"]);
    assert_eq!(stderr(&o), "", "reported once");
    ok(o, "log");
    assert!(interrupted(&m).is_null());
    m.unmount();
    // A clean unmount leaves nothing to report.
    let o = m.agx(["log", "--json"]);
    assert_eq!(stderr(&o), "");
    assert!(interrupted(&m).is_null());
}

#[test]
fn an_unmount_from_outside_agx_is_reported() {
    let mut m = Mounted::new();
    std::fs::write(m.p("f"), "1\n").unwrap();
    hist::wait_event(&m, 0, "f");
    let pid = m.daemon_pid().expect("daemon pid");
    // A session is open as it happens.
    let mut root = Command::new("sleep").arg("30").spawn().unwrap();
    let s = json(
        m.agx([
            "session",
            "start",
            "--agent",
            "bot",
            "--pid",
            &root.id().to_string(),
            "--json",
        ]),
        "session start",
    );
    let sid = s["id"].as_str().unwrap().to_string();
    // The daemon marked the root it was given.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", root.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max realtime timeout"))
        .unwrap();
    assert_eq!(line.split_whitespace().nth(4), Some(MARK), "{line}");
    let tool = if rustix::process::geteuid().is_root() {
        "umount"
    } else {
        "fusermount3"
    };
    let mut cmd = Command::new(tool);
    if tool == "fusermount3" {
        cmd.arg("-u");
    }
    let o = cmd.arg(&m.mountpoint).output().unwrap();
    let _ = root.kill();
    let _ = root.wait();
    assert!(o.status.success(), "{tool}: {}", stderr(&o));
    m.forget_mounted();
    wait_for("the daemon to exit", || !alive(pid));
    let o = m.agx(["log", "--json"]);
    let err = stderr(&o);
    ok(o, "log");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("was unmounted from outside agx at")
            && lines[0].contains(&format!("session {sid} (bot) was open"))
            && lines[0].contains("changes made since were not recorded by agx"),
        "{err}"
    );
    assert_eq!(interrupted(&m)["how"], "unmounted from outside agx");
    // Status says it in words too.
    let o = m.agx(["status"]);
    assert!(stdout(&o).contains("unmounted from outside agx"), "{o:?}");
    let o = m.agx(["mount", m.project.to_str().unwrap()]);
    let err = stderr(&o);
    ok(o, "mount");
    assert!(err.contains("unmounted from outside agx"), "{err}");
    assert!(interrupted(&m).is_null());
}

#[test]
fn the_daemons_descriptors_are_out_of_reach_of_its_user() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to switch to uid 65534");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let proj = tmp.path().join("proj");
    std::fs::create_dir(&proj).unwrap();
    std::fs::write(proj.join("README.md"), "original\n").unwrap();
    common::sh(tmp.path(), "chown -R 65534:65534 proj");
    let nobody = |prog: &str| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", prog])
            .env_remove("XDG_RUNTIME_DIR")
            .current_dir("/");
        c
    };
    let agx = agx_bin().to_string_lossy().into_owned();
    let o = nobody(&agx).arg("mount").arg(&proj).output().unwrap();
    struct Guard(PathBuf, Option<u32>);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).output();
            if let Some(pid) = self.1 {
                // SAFETY: kill(2) with a pid and a signal number has no memory effects.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        }
    }
    let mut guard = Guard(proj.clone(), None);
    assert!(o.status.success(), "{}", stderr(&o));
    let st: serde_json::Value = serde_json::from_slice(
        &nobody(&agx)
            .arg("-C")
            .arg(&proj)
            .args(["status", "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let pid = st["pid"].as_u64().expect("daemon pid") as u32;
    guard.1 = Some(pid);
    // As the daemon's own user: its descriptors (the bare project under the mount, and
    // .agx), its cwd, root and environment.
    let script = format!(
        r#"P=/proc/{pid}
ls $P/fd/ >/dev/null 2>&1 && echo "listed fd"
for n in $(seq 0 40); do
  (echo X >> $P/fd/$n/README.md) 2>/dev/null && echo "wrote through fd $n"
  (echo X > $P/fd/$n/secret) 2>/dev/null && echo "created through fd $n"
  (cat $P/fd/$n/timeline.db > /dev/null) 2>/dev/null && echo "read the timeline through fd $n"
done
cat $P/environ > /dev/null 2>&1 && echo "read environ"
ls $P/cwd/ > /dev/null 2>&1 && echo "listed cwd"
ls $P/root/ > /dev/null 2>&1 && echo "listed root"
cat $P/mem > /dev/null 2>&1 && echo "read mem"
echo done"#
    );
    let o = nobody("sh").arg("-c").arg(&script).output().unwrap();
    assert_eq!(stdout(&o), "done\n", "{}", stderr(&o));
    // The daemon itself (which reopens through /proc/self/fd) still works and records.
    let o = nobody("sh")
        .arg("-c")
        .arg(format!(
            "cat {p}/README.md && echo new > {p}/made",
            p = proj.display()
        ))
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "original\n", "{}", stderr(&o));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let o = nobody(&agx)
            .arg("-C")
            .arg(&proj)
            .args(["log", "--json"])
            .output()
            .unwrap();
        let log: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if log.as_array().unwrap().iter().any(|e| e["path"] == "made") {
            break;
        }
        assert!(Instant::now() < deadline, "no event for made: {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = nobody(&agx).arg("unmount").arg(&proj).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    guard.1 = None;
    assert_eq!(
        std::fs::read_to_string(proj.join("README.md")).unwrap(),
        "original\n"
    );
    assert!(!proj.join("secret").exists());
}

#[test]
fn a_session_mark_in_a_persons_login_is_explained() {
    // A finite realtime-timeout hard limit that agx did not set (a login's limits.conf):
    // refused all the same, with the way out in the line.
    let m = Mounted::new();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "prlimit --rttime=200000:200000 {} -C {} gc --keep 0s",
            agx_bin().display(),
            m.project.display()
        ))
        .output()
        .unwrap();
    let line = user_error(&o, "gc under a finite RTTIME");
    assert!(
        line.contains("finite realtime-timeout hard limit (200000 us)")
            && line.contains("prlimit --rttime"),
        "{line}"
    );
    // A dry run changes nothing: allowed.
    ok(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "prlimit --rttime=200000:200000 {} -C {} gc --keep 0s --dry-run",
                agx_bin().display(),
                m.project.display()
            ))
            .output()
            .unwrap(),
        "gc --dry-run",
    );
}
