//! Sessions: every change belongs to the agent session that caused it, through nested
//! shells, double forks, threads and concurrent sessions, never to a recycled pid's new
//! owner; undoing one session (conflicts, --skip-conflicts, --force), oops and its redo,
//! and blame across sessions (DESIGN.md section 5, issue 4).

mod common;
mod hist;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use common::Mounted;
use hist::{events, ok, stderr, stdout, tree, user_error};

/// `agx run [--agent A] -- sh -c SCRIPT` with the mount as working directory.
fn run(m: &Mounted, agent: &str, script: &str) -> Output {
    Command::new(common::agx_bin())
        .args(["-C", &m.project.to_string_lossy()])
        .args(["run", "--agent", agent, "--", "sh", "-c", script])
        .current_dir(m.path())
        .output()
        .expect("running agx run")
}

fn sessions(m: &Mounted) -> Vec<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_slice(&ok(m.agx(["session", "list", "--json"]), "session list")).unwrap();
    v.as_array().unwrap().clone()
}

/// The session of every event on `path`, oldest first.
fn sessions_of(m: &Mounted, path: &str) -> Vec<Option<String>> {
    events(m)
        .iter()
        .filter(|e| e["path"] == path || e["to_path"] == path)
        .map(|e| e["session"].as_str().map(String::from))
        .collect()
}

fn session_ids(m: &Mounted) -> Vec<String> {
    sessions(m)
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn run_attributes_nested_shells_and_returns_the_exit_code() {
    let m = Mounted::new();
    let o = run(
        &m,
        "bot",
        "echo a > a; sh -c 'bash -c \"echo b > b\"'; (cd sub 2>/dev/null || mkdir sub; echo c > sub/c); exit 7",
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    std::fs::write(m.p("mine"), "user\n").unwrap();
    let ids = session_ids(&m);
    assert_eq!(ids.len(), 1);
    for p in ["a", "b", "sub", "sub/c"] {
        assert_eq!(sessions_of(&m, p), vec![Some(ids[0].clone())], "{p}");
    }
    assert_eq!(sessions_of(&m, "mine"), vec![None]);
    let s = &sessions(&m)[0];
    for k in [
        "id",
        "agent",
        "name",
        "started",
        "ended",
        "events",
        "files_changed",
    ] {
        assert!(s.get(k).is_some(), "session list lacks {k}: {s}");
    }
    assert_eq!(s["agent"], "bot");
    assert!(s["ended"].is_string(), "the session ended with its command");
    assert_eq!(s["files_changed"], 4);
    let show: serde_json::Value =
        serde_json::from_slice(&ok(m.agx(["session", "show", &ids[0], "--json"]), "show")).unwrap();
    let files: BTreeSet<&str> = show["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(files, BTreeSet::from(["a", "b", "sub", "sub/c"]));
}

#[test]
fn a_double_forked_grandchild_writing_after_its_parents_exit_stays_in_the_session() {
    let m = Mounted::new();
    // The grandchild outlives the shell that started it and `agx run` itself.
    let o = run(
        &m,
        "bot",
        "sh -c '(sleep 1; echo late > late) >/dev/null 2>&1 &' ; echo early > early",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for _ in 0..100 {
        if m.p("late").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let id = session_ids(&m)[0].clone();
    assert_eq!(sessions_of(&m, "early"), vec![Some(id.clone())]);
    assert_eq!(sessions_of(&m, "late"), vec![Some(id)]);
}

#[test]
fn threads_of_one_process_are_attributed_to_its_session() {
    let m = Mounted::new();
    let script = "python3 -c '
import threading
def w(i):
    with open(\"t%d\" % i, \"w\") as f:
        f.write(\"x\" * 100)
ts = [threading.Thread(target=w, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
'";
    let o = run(&m, "bot", script);
    assert!(o.status.success(), "{}", stderr(&o));
    let id = session_ids(&m)[0].clone();
    for i in 0..8 {
        assert_eq!(sessions_of(&m, &format!("t{i}")), vec![Some(id.clone())]);
    }
}

#[test]
fn two_concurrent_sessions_are_told_apart_also_on_the_same_file() {
    let m = Mounted::new();
    std::fs::write(m.p("shared"), "").unwrap();
    let spawn = |agent: &str, tag: &str| {
        Command::new(common::agx_bin())
            .args(["-C", &m.project.to_string_lossy()])
            .args(["run", "--agent", agent, "--name", tag, "--", "sh", "-c"])
            .arg(format!(
                "for i in 1 2 3 4 5 6 7 8 9 10; do echo {tag}$i >> shared; echo $i > own-{tag}; sleep 0.05; done"
            ))
            .current_dir(m.path())
            .spawn()
            .unwrap()
    };
    let mut a = spawn("alpha", "A");
    let mut b = spawn("beta", "B");
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let list = sessions(&m);
    assert_eq!(list.len(), 2);
    let id_of = |name: &str| {
        list.iter().find(|s| s["name"] == name).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (ia, ib) = (id_of("A"), id_of("B"));
    assert!(sessions_of(&m, "own-A")
        .iter()
        .all(|s| s.as_deref() == Some(ia.as_str())));
    assert!(sessions_of(&m, "own-B")
        .iter()
        .all(|s| s.as_deref() == Some(ib.as_str())));
    // Each append to the shared file is its own event, attributed to its writer.
    let shared = sessions_of(&m, "shared");
    let na = shared
        .iter()
        .filter(|s| s.as_deref() == Some(ia.as_str()))
        .count();
    let nb = shared
        .iter()
        .filter(|s| s.as_deref() == Some(ib.as_str()))
        .count();
    assert_eq!((na, nb), (10, 10), "{shared:?}");
}

/// Makes the next process the kernel creates get `pid` (root only: ns_last_pid).
fn spawn_with_pid(pid: u32, dir: &Path, script: &str) -> Option<Output> {
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("[ $$ = {pid} ] || exit 99; {script}"))
            .current_dir(dir)
            .output()
            .unwrap();
        if child.status.code() != Some(99) {
            return Some(child);
        }
    }
    None
}

#[test]
fn a_recycled_pid_is_not_taken_for_the_session_process_that_had_it() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to choose a pid");
        return;
    }
    let m = Mounted::new();
    // A session process records its pid, writes, and exits.
    let o = run(&m, "bot", "sh -c 'echo $$ > pidfile; echo s > s'");
    assert!(o.status.success(), "{}", stderr(&o));
    let pid: u32 = std::fs::read_to_string(m.p("pidfile"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let Some(out) = spawn_with_pid(pid, m.path(), "echo user > reused") else {
        eprintln!("skipped: could not get pid {pid} again");
        return;
    };
    assert!(out.status.success());
    let ev: Vec<_> = events(&m)
        .into_iter()
        .filter(|e| e["path"] == "reused")
        .collect();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        ev[0]["pid"].as_u64(),
        Some(pid as u64),
        "the pid was reused"
    );
    assert!(
        ev[0]["session"].is_null(),
        "attributed to a dead session: {}",
        ev[0]
    );
}

#[test]
fn session_start_and_end_for_tools_that_manage_their_processes() {
    let m = Mounted::new();
    let mp = m.path().to_string_lossy().into_owned();
    let proj = m.project.to_string_lossy().into_owned();
    let agx = common::agx_bin().to_string_lossy().into_owned();
    // A shell starts a session rooted at itself, works, ends it, then works outside it.
    let script = format!(
        "cd {mp} && id=$({agx} -C {proj} session start --agent tool --name t) && echo in > in && \
         {agx} -C {proj} session end && echo out > out && echo $id"
    );
    let out = common::sh(Path::new("/"), &script);
    let id = out.trim().to_string();
    assert_eq!(sessions_of(&m, "in"), vec![Some(id.clone())]);
    assert_eq!(sessions_of(&m, "out"), vec![None]);
    // Bad input: one line, exit 1.
    user_error(
        &m.agx(["session", "show", "999"]),
        "show of an unknown session",
    );
    user_error(
        &m.agx(["session", "end", "999"]),
        "end of an unknown session",
    );
    user_error(
        &m.agx(["session", "start", "--pid", "999999999"]),
        "a session rooted at no process",
    );
}

fn setup(p: &Path) {
    for i in 0..5 {
        std::fs::write(p.join(format!("f{i}")), format!("file {i}\n")).unwrap();
    }
    std::fs::write(p.join("user.txt"), "mine\n").unwrap();
}

#[test]
fn restoring_a_500_file_session_leaves_the_users_concurrent_edits_alone() {
    let m = Mounted::with(setup);
    let before = tree(&m.project);
    let mp = m.path().to_string_lossy().into_owned();
    let mut agent = Command::new(common::agx_bin())
        .args(["-C", &m.project.to_string_lossy()])
        .args(["run", "--agent", "bot", "--", "sh", "-c"])
        .arg(format!(
            "cd {mp} && mkdir gen && i=0; while [ $i -lt 500 ]; do echo $i > gen/$i; i=$((i+1)); done; \
             echo changed > f1; rm f2; mv f3 f3.moved"
        ))
        .spawn()
        .unwrap();
    // The user keeps editing their own file meanwhile.
    for i in 0..20 {
        std::fs::write(m.p("user.txt"), format!("mine {i}\n")).unwrap();
    }
    assert!(agent.wait().unwrap().success());
    let id = session_ids(&m)[0].clone();
    ok(
        m.agx(["restore", &format!("session:{id}"), "--yes"]),
        "restore of the session",
    );
    let mut want = before.clone();
    want.insert(
        "user.txt".into(),
        hist::Node {
            obj: hist::Obj::File(b"mine 19\n".to_vec()),
            mode: want[Path::new("user.txt")].mode,
        },
    );
    hist::assert_same_tree(&want, &tree(&m.project), "after undoing the session");
}

#[test]
fn conflicts_are_refused_skipped_or_forced() {
    let m = Mounted::with(setup);
    let o = run(
        &m,
        "bot",
        "echo agent > f0; echo agent > f1; echo agent > f2",
    );
    assert!(o.status.success());
    let id = session_ids(&m)[0].clone();
    // The user changes one of the session's files afterwards.
    std::fs::write(m.p("f1"), "user after agent\n").unwrap();
    let r = format!("session:{id}");
    // Refused: the conflicts are listed, the last line says why, exit 1.
    let o = m.agx(["restore", &r, "--yes"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("conflict  f1"), "{err}");
    assert!(
        err.lines().last().unwrap().contains("someone else"),
        "{err}"
    );
    for f in ["f0", "f2"] {
        assert_eq!(
            std::fs::read_to_string(m.p(f)).unwrap(),
            "agent\n",
            "nothing restored"
        );
    }
    let dry = m.agx(["restore", &r, "--dry-run"]);
    assert!(stderr(&dry).contains("conflict  f1"), "{}", stderr(&dry));
    ok(
        m.agx(["restore", &r, "--yes", "--skip-conflicts"]),
        "--skip-conflicts",
    );
    assert_eq!(std::fs::read_to_string(m.p("f0")).unwrap(), "file 0\n");
    assert_eq!(std::fs::read_to_string(m.p("f2")).unwrap(), "file 2\n");
    assert_eq!(
        std::fs::read_to_string(m.p("f1")).unwrap(),
        "user after agent\n",
        "the conflicting file is left alone"
    );
    ok(m.agx(["restore", &r, "--yes", "--force"]), "--force");
    assert_eq!(std::fs::read_to_string(m.p("f1")).unwrap(), "file 1\n");
    // Unknown sessions are one-line errors.
    user_error(
        &m.agx(["restore", "session:77", "--yes"]),
        "unknown session",
    );
}

#[test]
fn oops_undoes_the_latest_session_and_again_redoes_it() {
    let m = Mounted::with(setup);
    let before = tree(&m.project);
    let o = run(&m, "first", "echo one > f0");
    assert!(o.status.success());
    let after_first = tree(&m.project);
    let o = run(
        &m,
        "second",
        "echo two > f1; rm f2; mkdir newdir; echo n > newdir/n; mv f3 g3",
    );
    assert!(o.status.success());
    let after_second = tree(&m.project);
    std::fs::write(m.p("user.txt"), "edited by the user\n").unwrap();
    let user_tree = |t: &std::collections::BTreeMap<std::path::PathBuf, hist::Node>| {
        let mut t = t.clone();
        t.insert(
            "user.txt".into(),
            hist::Node {
                obj: hist::Obj::File(b"edited by the user\n".to_vec()),
                mode: before[Path::new("user.txt")].mode,
            },
        );
        t
    };
    let dry = m.agx(["oops", "--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(stderr(&dry).contains("undo session 2"), "{}", stderr(&dry));
    assert_eq!(
        tree(&m.project),
        user_tree(&after_second),
        "dry run changed something"
    );

    ok(m.agx(["oops", "--yes"]), "oops");
    hist::assert_same_tree(&user_tree(&after_first), &tree(&m.project), "after oops");
    ok(m.agx(["oops", "--yes"]), "oops again (redo)");
    hist::assert_same_tree(
        &user_tree(&after_second),
        &tree(&m.project),
        "after the redo",
    );
    ok(m.agx(["oops", "--yes"]), "a third oops undoes again");
    hist::assert_same_tree(&user_tree(&after_first), &tree(&m.project), "third oops");
    let j: serde_json::Value =
        serde_json::from_slice(&ok(m.agx(["oops", "--dry-run", "--json"]), "json")).unwrap();
    assert_eq!(j["target"]["redo"], true, "{j}");
}

#[test]
fn oops_without_sessions_undoes_the_latest_burst() {
    let m = Mounted::with(setup);
    let before = tree(&m.project);
    std::fs::write(m.p("f0"), "burst\n").unwrap();
    std::fs::remove_file(m.p("f4")).unwrap();
    ok(m.agx(["oops", "--yes"]), "oops");
    hist::assert_same_tree(&before, &tree(&m.project), "after oops");
    let empty = Mounted::new();
    let line = user_error(&empty.agx(["oops", "--yes"]), "oops with no history");
    assert!(line.contains("nothing to undo"), "{line}");
}

#[test]
fn blame_names_the_session_that_last_changed_each_line() {
    let m = Mounted::with(|p| std::fs::write(p.join("doc"), "l1\nl2\nl3\n").unwrap());
    assert!(run(&m, "alpha", "printf 'l1\\nA2\\nl3\\n' > doc")
        .status
        .success());
    assert!(run(
        &m,
        "beta",
        "printf 'l1\\nA2\\nl3\\nB4\\n' > doc.tmp && mv doc.tmp doc"
    )
    .status
    .success());
    std::fs::write(m.p("doc"), "U1\nA2\nl3\nB4\n").unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ok(
        m.agx(["blame", &m.p("doc").to_string_lossy(), "--json"]),
        "blame",
    ))
    .unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        for k in ["line", "text", "seq", "session", "agent", "time"] {
            assert!(r.get(k).is_some(), "blame row lacks {k}: {r}");
        }
    }
    let who: Vec<(String, Option<String>)> = rows
        .iter()
        .map(|r| {
            (
                r["text"].as_str().unwrap().to_string(),
                r["agent"].as_str().map(String::from),
            )
        })
        .collect();
    assert_eq!(who[0], ("U1".into(), None), "the user's line");
    assert!(rows[0]["seq"].is_i64(), "the user's change is an event");
    assert_eq!(who[1], ("A2".into(), Some("alpha".into())));
    assert_eq!(who[2], ("l3".into(), None));
    assert!(rows[2]["seq"].is_null(), "a line older than the history");
    assert_eq!(who[3], ("B4".into(), Some("beta".into())));
    // Binary files and missing files are refused with one line.
    std::fs::write(m.p("bin"), b"\x00\x01\x02").unwrap();
    user_error(
        &m.agx(["blame", &m.p("bin").to_string_lossy()]),
        "binary blame",
    );
    user_error(
        &m.agx(["blame", &m.p("nope").to_string_lossy()]),
        "missing file",
    );
    assert!(stdout(&m.agx(["blame", &m.p("doc").to_string_lossy()])).contains("alpha"));
}

#[test]
fn run_refuses_an_unmounted_project() {
    let t = tempfile::tempdir().unwrap();
    let o = common::agx(["-C", &t.path().to_string_lossy(), "run", "--", "true"]);
    user_error(&o, "run without a mount");
}

#[test]
fn oops_of_a_session_that_committed_survives_a_later_git_status() {
    let m = Mounted::with(|p| {
        std::fs::write(p.join("a"), "a\n").unwrap();
        common::sh(
            p,
            "git init -q && git add -A && git -c user.name=u -c user.email=u@x commit -qm init",
        );
    });
    let o = run(
        &m,
        "bot",
        "echo changed > a && echo new > b && git add -A && git -c user.name=b -c user.email=b@x commit -qm agent",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // The user looks: git status refreshes the index outside the session.
    common::sh(
        m.path(),
        "git status --porcelain >/dev/null; git diff >/dev/null; git status >/dev/null",
    );
    ok(m.agx(["oops", "--yes"]), "oops");
    assert_eq!(
        common::sh(m.path(), "git log --oneline | wc -l").trim(),
        "1"
    );
    assert_eq!(common::sh(m.path(), "git status --porcelain"), "");
    ok(m.agx(["oops", "--yes"]), "redo after another git status");
    assert_eq!(
        common::sh(m.path(), "git log --oneline | wc -l").trim(),
        "2"
    );
    assert_eq!(std::fs::read_to_string(m.p("b")).unwrap(), "new\n");
}
