//! Keeping history: O(1) checkpoints, their names, automatic checkpoints of sessions, REFs
//! to checkpoints and sessions, pins and gc (which must never break a kept point), and the
//! refusal of history-destroying commands inside an agent session (invariant 3).

mod common;
mod hist;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{agx_bin, Mounted};
use hist::{assert_same_tree, ok, stderr, stdout, tree, user_error, Node, Obj};
use proptest::prelude::*;

fn json(o: std::process::Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&ok(o, what)).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"))
}

fn checkpoints(m: &Mounted, all: bool) -> Vec<serde_json::Value> {
    let mut args = vec!["checkpoint", "list", "--json"];
    if all {
        args.push("--all");
    }
    json(m.agx(&args), "checkpoint list")
        .as_array()
        .expect("an array")
        .clone()
}

/// Number of objects in the store (the backing directory must be visible: `Mounted::at`).
fn object_count(project: &Path) -> usize {
    let dir = project.join(".agx/objects");
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().len() == 2)
        .map(|e| std::fs::read_dir(e.path()).unwrap().count())
        .sum()
}

/// One checkpoint on a tree of `n` files: it must add no event and no object, and mark
/// the latest point.
fn checkpoint_on_tree_of(n: usize) {
    let m = Mounted::at(|p| {
        for i in 0..n {
            let d = p.join(format!("d{}", i / 1000));
            if i % 1000 == 0 {
                std::fs::create_dir(&d).unwrap();
            }
            std::fs::write(d.join(format!("f{i}")), format!("file {i}\n")).unwrap();
        }
    });
    std::fs::write(m.p("d0/f0"), "changed\n").unwrap();
    let events = hist::events(&m);
    let last = events.last().unwrap()["seq"].as_i64().unwrap();
    let objects = object_count(&m.project);
    let t = Instant::now();
    let c = json(
        m.agx(["checkpoint", "big", "--message", "on a big tree", "--json"]),
        "checkpoint",
    );
    let took = t.elapsed();
    eprintln!("checkpoint on a tree of {n} files: {took:?}");
    assert_eq!(c["seq"].as_i64(), Some(last), "marks the latest point");
    assert_eq!(c["name"], "big");
    assert_eq!(c["message"], "on a big tree");
    assert_eq!(c["auto"], false);
    assert!(c["id"].as_i64().is_some() && c["time"].as_str().is_some());
    assert_eq!(hist::events(&m).len(), events.len(), "no event added");
    assert_eq!(object_count(&m.project), objects, "nothing copied");
    assert_eq!(hist::show(&m, "big", "d0/f0"), b"changed\n");
}

#[test]
fn checkpoint_does_not_grow_with_the_tree() {
    checkpoint_on_tree_of(100);
    checkpoint_on_tree_of(100_000);
}

#[test]
fn names_are_validated_and_unique() {
    let m = Mounted::new();
    std::fs::write(m.p("f"), "1\n").unwrap();
    ok(m.agx(["checkpoint", "first"]), "checkpoint first");
    let before = checkpoints(&m, true);
    for (args, want) in [
        (vec!["checkpoint", "first"], "exists already"),
        (vec!["checkpoint", "now"], "reads as another REF"),
        (vec!["checkpoint", "10m"], "reads as another REF"),
        (vec!["checkpoint", "2026-01-01"], "reads as another REF"),
        (vec!["checkpoint", "a/b"], "'/'"),
        (vec!["checkpoint", "--", "-x"], "'-'"),
        (vec!["checkpoint", "cp:3"], "':'"),
        (vec!["checkpoint", "--", "list"], "subcommand"),
        (vec!["checkpoint", "--", "delete"], "subcommand"),
        (
            vec!["checkpoint", "delete", "nosuch"],
            "no checkpoint 'nosuch'",
        ),
    ] {
        let line = user_error(&m.agx(&args), &format!("{args:?}"));
        assert!(line.contains(want), "{args:?}: {line}");
    }
    assert_eq!(checkpoints(&m, true), before, "refusals changed nothing");
    // An unnamed one is known as cp:ID; deleting by either form works.
    let c = json(m.agx(["checkpoint", "--json"]), "unnamed");
    assert_eq!(c["name"], serde_json::Value::Null);
    let id = c["id"].as_i64().unwrap();
    assert_eq!(c["ref"], format!("cp:{id}"));
    ok(
        m.agx(["checkpoint", "delete", &format!("cp:{id}")]),
        "delete cp:ID",
    );
    ok(m.agx(["checkpoint", "delete", "first"]), "delete by name");
    assert!(checkpoints(&m, true).is_empty());
    // The name is free again.
    ok(m.agx(["checkpoint", "first"]), "reuse a deleted name");
}

/// Sends one request to the daemon's control socket (what an agent hook does).
fn daemon_request(m: &Mounted, req: serde_json::Value) -> serde_json::Value {
    let st = json(m.agx(["status", "--json"]), "status");
    let sock = PathBuf::from(st["log"].as_str().unwrap()).with_extension("sock");
    let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    s.write_all(format!("{req}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    v["data"].clone()
}

#[test]
fn sessions_make_automatic_checkpoints() {
    let m = Mounted::new();
    std::fs::write(m.p("f"), "1\n").unwrap();
    let o = Command::new(agx_bin())
        .current_dir(m.path())
        .args(["run", "--json", "--", "sh", "-c", "echo 2 > f"])
        .output()
        .unwrap();
    let run: serde_json::Value = serde_json::from_slice(&ok(o, "agx run")).unwrap();
    let sid = run["session"].as_str().unwrap().to_string();
    assert!(checkpoints(&m, false).is_empty(), "auto ones need --all");
    let all = checkpoints(&m, true);
    let mine: Vec<_> = all
        .iter()
        .filter(|c| c["session"] == sid.as_str())
        .collect();
    assert_eq!(mine.len(), 2, "{all:?}");
    assert!(mine
        .iter()
        .all(|c| c["auto"] == true && c["name"].is_null()));
    assert_eq!(mine[0]["message"], format!("session {sid} started"));
    assert_eq!(mine[1]["message"], format!("session {sid} ended"));
    // The start checkpoint is the point before the session's change, the end one after it.
    let start = mine[0]["ref"].as_str().unwrap();
    let end = mine[1]["ref"].as_str().unwrap();
    assert_eq!(hist::show(&m, start, "f"), b"1\n");
    assert_eq!(hist::show(&m, end, "f"), b"2\n");

    // A tool call reported by a hook gets one before it.
    let mut root = Command::new("sleep").arg("30").spawn().unwrap();
    let s = json(
        m.agx([
            "session",
            "start",
            "--pid",
            &root.id().to_string(),
            "--json",
        ]),
        "session start",
    );
    let id: i64 = s["id"].as_str().unwrap().parse().unwrap();
    std::fs::write(m.p("f"), "3\n").unwrap();
    daemon_request(
        &m,
        serde_json::json!({"cmd": "tool-start", "session": id, "tool": "Bash", "tool_use_id": "t1"}),
    );
    ok(m.agx(["session", "end", &id.to_string()]), "session end");
    let _ = root.kill();
    let _ = root.wait();
    let msgs: Vec<String> = checkpoints(&m, true)
        .iter()
        .filter(|c| c["session"] == id.to_string().as_str())
        .map(|c| c["message"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        msgs,
        [
            format!("session {id} started"),
            format!("before Bash (session {id})"),
            format!("session {id} ended")
        ]
    );
}

#[test]
fn refs_to_checkpoints_and_sessions() {
    let m = Mounted::with(|p| std::fs::write(p.join("f"), "0\n").unwrap());
    std::fs::write(m.p("f"), "1\n").unwrap();
    let t1 = tree(m.path());
    ok(m.agx(["checkpoint", "one"]), "checkpoint one");
    std::fs::write(m.p("f"), "2\n").unwrap();
    std::fs::write(m.p("g"), "new\n").unwrap();
    let t2 = tree(m.path());
    let c2 = json(m.agx(["checkpoint", "--json"]), "checkpoint");
    let cp2 = c2["ref"].as_str().unwrap().to_string();
    let o = Command::new(agx_bin())
        .current_dir(m.path())
        .args([
            "run",
            "--json",
            "--",
            "sh",
            "-c",
            "echo 3 > f; rm g; mkdir d",
        ])
        .output()
        .unwrap();
    let run: serde_json::Value = serde_json::from_slice(&ok(o, "agx run")).unwrap();
    let session = format!("session:{}", run["session"].as_str().unwrap());
    let t3 = tree(m.path());

    assert_eq!(hist::show(&m, "one", "f"), b"1\n");
    assert_eq!(hist::show(&m, &cp2, "f"), b"2\n");
    assert_eq!(hist::show(&m, &session, "g"), b"new\n");
    hist::restore(&m, &session, &[]);
    assert_same_tree(&t2, &tree(m.path()), "restore session:ID");
    hist::restore(&m, "one", &[]);
    assert_same_tree(&t1, &tree(m.path()), "restore a checkpoint name");
    hist::restore(&m, &cp2, &[]);
    assert_same_tree(&t2, &tree(m.path()), "restore cp:ID");
    let _ = t3;
    let f = m.p("f");
    let line = user_error(
        &m.agx(["show".as_ref(), "nosuch".as_ref(), f.as_os_str()]),
        "unknown name",
    );
    assert!(line.contains("nosuch"), "{line}");
}

#[test]
fn history_commands_are_refused_inside_a_session() {
    let mut m = Mounted::new();
    // Each write's event ends when its release reaches agx, a moment after `close`: wait
    // for it, so `now` is the point after it.
    std::fs::write(m.p("f"), "1\n").unwrap();
    hist::wait_event(&m, 0, "f");
    ok(m.agx(["checkpoint", "keepme"]), "checkpoint");
    ok(m.agx(["pin", "now"]), "pin");
    let first = hist::last_seq(&m);
    std::fs::write(m.p("f"), "2\n").unwrap();
    hist::wait_event(&m, first, "f");
    let events = hist::events(&m).len();
    let agx = agx_bin();
    let script = format!(
        "for c in 'gc --keep 0s' 'checkpoint delete keepme' 'unpin now'; do {a} $c 2>&1; echo \"rc=$?\"; done",
        a = agx.display()
    );
    let o = Command::new(&agx)
        .current_dir(m.path())
        .args(["run", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
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
    assert_eq!(hist::events(&m).len(), events, "gc dropped nothing");
    assert_eq!(checkpoints(&m, false).len(), 1);
    let pins = json(m.agx(["pin", "--json"]), "pins");
    assert_eq!(pins.as_array().unwrap().len(), 1);

    // Unmounted, the environment marker of a session still refuses them.
    let sid = json(m.agx(["session", "list", "--json"]), "sessions")[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    m.unmount();
    let o = Command::new(&agx)
        .arg("-C")
        .arg(&m.project)
        .args(["gc", "--keep", "0s"])
        .env("AGX_SESSION", &sid)
        .output()
        .unwrap();
    let line = user_error(&o, "gc with AGX_SESSION");
    assert!(line.contains("refused inside an agent session"), "{line}");
    // Unmounted, status reads the history directly.
    let st = json(m.agx(["status", "--json"]), "status");
    assert_eq!(st["mounted"], false);
    assert_eq!(st["events"].as_u64(), Some(events as u64));
    assert_eq!(st["oldest_point"], 0);
    // Outside any session it runs (and keeps the pinned point).
    let r = json(m.agx(["gc", "--keep", "0s", "--json"]), "gc");
    assert_eq!(r["held_by"], "pin now", "{r}");
    assert_eq!(r["oldest_point"], 1, "{r}");
}

#[test]
fn gc_reports_and_refuses_bad_input() {
    let m = Mounted::new();
    std::fs::write(m.p("f"), "1\n").unwrap();
    std::fs::write(m.p("f"), "2\n").unwrap();
    let line = user_error(&m.agx(["gc", "--keep", "soon"]), "bad duration");
    assert!(line.contains("'soon' is not a duration"), "{line}");
    let line = user_error(&m.agx(["pin", "nosuch"]), "bad pin");
    assert!(line.contains("nosuch"), "{line}");
    let line = user_error(&m.agx(["unpin", "now"]), "no pin");
    assert!(line.contains("no pin"), "{line}");
    // Within the default window (30 days) nothing goes.
    let r = json(m.agx(["gc", "--json"]), "gc");
    assert_eq!(r["keep"], "30d");
    assert_eq!(r["events_deleted"], 0);
    let dry = json(m.agx(["gc", "--keep", "0s", "--dry-run", "--json"]), "dry");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["events_deleted"], 2);
    assert_eq!(hist::events(&m).len(), 2, "a dry run changes nothing");
    let st = json(m.agx(["status", "--json"]), "status");
    assert_eq!(st["events"], 2);
    assert_eq!(st["oldest_point"], 0);
    assert!(st["store_bytes"].as_u64().unwrap() > 0);
    let r = json(m.agx(["gc", "--keep", "0s", "--json"]), "gc");
    assert_eq!(r["events_deleted"], 2);
    assert_eq!(r["bytes_freed"], dry["bytes_freed"]);
    let st = json(m.agx(["status", "--json"]), "status");
    assert_eq!(st["events"], 0);
    assert_eq!(st["oldest_point"], 2);
    assert_eq!(st["mounted"], true, "existing fields stay");
    let f = m.p("f");
    let line = user_error(
        &m.agx(["show".as_ref(), "1h".as_ref(), f.as_os_str()]),
        "before the horizon",
    );
    assert!(
        line.contains("before the oldest restorable point"),
        "{line}"
    );
    // Numbering goes on after the dropped events.
    std::fs::write(m.p("f"), "3\n").unwrap();
    assert_eq!(hist::events(&m)[0]["seq"], 3);
    assert_eq!(hist::show(&m, "event:3", "f"), b"2\n");
}

// ---- gc never breaks a kept point: a property test ----

const NAMES: &[&str] = &["a", "b", "c", "d/x", "d/y"];

#[derive(Clone, Debug)]
enum Op {
    Write(usize, Vec<u8>),
    Append(usize, Vec<u8>),
    Create(usize, Vec<u8>),
    Rename(usize, usize),
    Unlink(usize),
    Chmod(usize, bool),
}

/// What marks the point after a segment of changes.
#[derive(Clone, Copy, Debug)]
enum Mark {
    Nothing,
    Named,
    Unnamed,
    Pin,
    /// `gc --keep 0s` in the middle of the history.
    Gc,
}

fn content() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::collection::vec(b'a'..=b'z', 0..30),
        1 => proptest::collection::vec(any::<u8>(), 0..3000),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let i = || 0usize..16;
    prop_oneof![
        3 => (i(), content()).prop_map(|(f, c)| Op::Write(f, c)),
        2 => (i(), content()).prop_map(|(f, c)| Op::Append(f, c)),
        2 => (i(), content()).prop_map(|(n, c)| Op::Create(n, c)),
        2 => (i(), i()).prop_map(|(f, n)| Op::Rename(f, n)),
        1 => i().prop_map(Op::Unlink),
        1 => (i(), any::<bool>()).prop_map(|(f, x)| Op::Chmod(f, x)),
    ]
}

fn mark() -> impl Strategy<Value = Mark> {
    prop_oneof![
        1 => Just(Mark::Nothing),
        2 => Just(Mark::Named),
        1 => Just(Mark::Unnamed),
        2 => Just(Mark::Pin),
        1 => Just(Mark::Gc),
    ]
}

fn files(t: &std::collections::BTreeMap<PathBuf, Node>) -> Vec<PathBuf> {
    t.iter()
        .filter(|(_, n)| matches!(n.obj, Obj::File(_)))
        .map(|(p, _)| p.clone())
        .collect()
}

fn apply(root: &Path, op: &Op) {
    let fs = files(&tree(root));
    let pick = |i: usize| (!fs.is_empty()).then(|| root.join(&fs[i % fs.len()]));
    let name = |i: usize| root.join(NAMES[i % NAMES.len()]);
    let _ = match op {
        Op::Write(f, c) => pick(*f).map(|p| std::fs::write(p, c)),
        Op::Append(f, c) => pick(*f).map(|p| {
            std::fs::OpenOptions::new()
                .append(true)
                .open(p)
                .and_then(|mut h| h.write_all(c))
        }),
        Op::Create(n, c) => Some(std::fs::write(name(*n), c)),
        Op::Rename(f, n) => pick(*f).map(|p| std::fs::rename(p, name(*n))),
        Op::Unlink(f) => pick(*f).map(std::fs::remove_file),
        // By another process: agx folds the creating process's own metadata changes
        // within 1 s into the creation (ARCHITECTURE.md), which no point can split.
        Op::Chmod(f, x) => pick(*f).map(|p| {
            Command::new("chmod")
                .arg(if *x { "755" } else { "644" })
                .arg(p)
                .status()
                .map(drop)
        }),
    };
}

/// Runs the history, marks its points, gcs, then restores every kept point and compares
/// it with the tree recorded when it was marked.
/// Returns how many events the gcs dropped.
fn gc_keeps_points(segments: &[(Vec<Op>, Mark)]) -> i64 {
    let m = Mounted::with(|p| {
        std::fs::write(p.join("a"), "alpha\n").unwrap();
        std::fs::write(p.join("b"), vec![7u8; 2000]).unwrap();
        std::fs::create_dir(p.join("d")).unwrap();
        std::fs::write(p.join("d/x"), "x\n").unwrap();
    });
    let mut kept: Vec<(String, std::collections::BTreeMap<PathBuf, Node>)> = Vec::new();
    let mut dropped = 0;
    for (i, (ops, mark)) in segments.iter().enumerate() {
        for o in ops {
            apply(m.path(), o);
        }
        let t = tree(m.path());
        match mark {
            Mark::Nothing => {}
            Mark::Named => {
                let name = format!("c{i}");
                ok(m.agx(["checkpoint", &name]), "checkpoint");
                kept.push((name, t));
            }
            Mark::Unnamed => {
                let c = json(m.agx(["checkpoint", "--json"]), "checkpoint");
                kept.push((c["ref"].as_str().unwrap().to_string(), t));
            }
            Mark::Pin => {
                // Pinned by time: restoring that time later finds the same point.
                ok(m.agx(["log", "--limit", "1"]), "flush");
                std::thread::sleep(std::time::Duration::from_millis(5));
                let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
                std::thread::sleep(std::time::Duration::from_millis(5));
                ok(m.agx(["pin", &at]), "pin");
                kept.push((at, t));
            }
            Mark::Gc => {
                let r = json(m.agx(["gc", "--keep", "0s", "--json"]), "gc");
                dropped += r["events_deleted"].as_i64().unwrap();
            }
        }
    }
    let r = json(m.agx(["gc", "--keep", "0s", "--json"]), "final gc");
    let horizon = r["oldest_point"].as_i64().unwrap();
    dropped += r["events_deleted"].as_i64().unwrap();
    if kept.is_empty() {
        assert_eq!(
            hist::events(&m).len(),
            0,
            "nothing kept, everything dropped: {r}"
        );
    }
    for e in hist::events(&m) {
        assert!(
            e["seq"].as_i64().unwrap() > horizon,
            "{e} is not after {horizon}"
        );
    }
    for (at, want) in kept.iter().rev() {
        hist::restore(&m, at, &[]);
        assert_same_tree(want, &tree(m.path()), &format!("after gc, restore {at}"));
    }
    for (at, want) in &kept {
        hist::restore(&m, at, &[]);
        assert_same_tree(
            want,
            &tree(m.path()),
            &format!("after gc, restore {at} again"),
        );
    }
    dropped
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: hist::prop_cases(6),
        max_shrink_iters: 100,
        ..ProptestConfig::default()
    })]

    #[test]
    fn gc_never_breaks_a_kept_point(
        segments in proptest::collection::vec(
            (proptest::collection::vec(op(), 0..6), mark()), 1..6),
    ) {
        gc_keeps_points(&segments);
    }
}

#[test]
fn gc_keeps_checkpoints_and_pins_through_renames() {
    use Op::*;
    let dropped = gc_keeps_points(&[
        (vec![Write(0, b"one".to_vec()), Rename(0, 2)], Mark::Gc),
        (vec![Create(3, b"dx".to_vec())], Mark::Named),
        (
            vec![Rename(1, 0), Write(0, vec![1; 2500]), Unlink(2)],
            Mark::Pin,
        ),
        (vec![Append(0, b"more".to_vec()), Chmod(1, true)], Mark::Gc),
        (
            vec![Rename(0, 4), Create(0, b"new a".to_vec())],
            Mark::Unnamed,
        ),
        (vec![Write(1, b"last".to_vec())], Mark::Nothing),
    ]);
    assert!(dropped >= 3, "the gcs dropped history ({dropped} events)");
}

/// A kept version stored as a patch against versions only dropped events referred to:
/// gc must keep the whole chain of bases, or the kept point could not be read back.
#[test]
fn gc_keeps_the_bases_of_kept_patches() {
    let mut x = 12345u64;
    let v0: Vec<u8> = (0..20000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect();
    let version = |i: u8| {
        let mut v = v0.clone();
        v[100 * i as usize] = i;
        v
    };
    let m = Mounted::at(|p| std::fs::write(p.join("f"), &v0).unwrap());
    for i in 1..=3 {
        std::fs::write(m.p("f"), version(i)).unwrap();
        // Each after-image is read (and stored as a patch) before the next write.
        hist::last_seq(&m);
    }
    // The point after the second write: f is version 2.
    let at = format!("event:{}", hist::events(&m)[2]["seq"]);
    ok(m.agx(["pin", &at]), "pin");
    let patches = walk_objects(&m.project)
        .iter()
        .filter(|o| std::fs::read(o).unwrap()[5] == 1)
        .count();
    assert!(patches >= 2, "versions are stored as patches ({patches})");
    let r = json(m.agx(["gc", "--keep", "0s", "--json"]), "gc");
    assert_eq!(r["events_deleted"], 2, "{r}");
    assert_eq!(hist::show(&m, &at, "f"), version(2));
    hist::restore(&m, &at, &[]);
    assert_eq!(std::fs::read(m.p("f")).unwrap(), version(2));
}

fn walk_objects(project: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(project.join(".agx/objects")).unwrap() {
        let d = d.unwrap();
        if d.file_name().len() == 2 {
            out.extend(
                std::fs::read_dir(d.path())
                    .unwrap()
                    .map(|e| e.unwrap().path()),
            );
        }
    }
    out
}

#[test]
fn a_checkpoint_includes_a_write_whose_release_is_still_on_its_way() {
    let m = Mounted::new();
    std::fs::write(m.p("f"), "old\n").unwrap();
    hist::wait_event(&m, 0, "f");
    let before = hist::last_seq(&m);
    // The shell opens f, writes and exits, and the child it started holds the descriptor
    // 0.3 s longer: the kernel releases the file (the write's change ends) only then.
    common::sh(
        m.path(),
        "exec 3>f; echo new >&3; (sleep 0.3) </dev/null >/dev/null 2>&1 & exit 0",
    );
    ok(m.agx(["checkpoint", "after"]), "checkpoint");
    assert!(
        hist::last_seq(&m) > before,
        "the checkpoint was taken before the write's change ended"
    );
    assert_eq!(hist::show(&m, "after", "f"), b"new\n");
}
