//! The history commands around restore: restoring only some paths, dry runs, the
//! unmounted project, diffs (renames, binary files, stats), and bad input — malformed or
//! unknown REFs and corrupt objects — refused with one clear line and no change
//! (DESIGN.md invariants 2 and 5, section 8).

mod common;
mod hist;

use std::path::Path;

use common::Mounted;
use hist::{assert_same_tree, events, ok, show, stderr, stdout, tree, user_error};

fn setup(p: &Path) {
    std::fs::write(p.join("a.txt"), "a one\na two\na three\n").unwrap();
    std::fs::write(p.join("b.txt"), "b\n").unwrap();
    std::fs::create_dir(p.join("d")).unwrap();
    std::fs::write(p.join("d/x.txt"), "x\n").unwrap();
    std::fs::write(p.join("d/y.txt"), "y\n").unwrap();
    std::fs::write(p.join("keep.txt"), "kept\n").unwrap();
    std::fs::write(p.join("bin"), b"\x00\x01binary\x00data\xff").unwrap();
}

/// Changes a.txt, b.txt, d/ and bin; renames keep.txt.
fn change(m: &Mounted) {
    std::fs::write(m.p("a.txt"), "a one\na 2\na three\n").unwrap();
    std::fs::write(m.p("b.txt"), "b changed\n").unwrap();
    std::fs::remove_file(m.p("d/x.txt")).unwrap();
    std::fs::write(m.p("d/z.txt"), "z\n").unwrap();
    std::fs::write(m.p("bin"), b"\x00\x02binary\x00DATA").unwrap();
    std::fs::rename(m.p("keep.txt"), m.p("kept.txt")).unwrap();
}

fn arg(m: &Mounted, p: &str) -> String {
    m.p(p).to_string_lossy().into_owned()
}

#[test]
fn restore_of_some_paths_touches_only_those() {
    let m = Mounted::with(setup);
    let start = tree(m.path());
    change(&m);
    let changed = tree(m.path());
    let at = hist::ref_after(&m, 0).expect("events");

    // A dry run shows the plan and changes nothing, not even the timeline.
    let n = events(&m).len();
    let o = m.agx(["restore", &at, &arg(&m, "a.txt"), "--dry-run"]);
    let err = stderr(&o);
    ok(o, "restore --dry-run");
    assert!(err.contains("a.txt"), "the plan names a.txt: {err}");
    assert!(!err.contains("b.txt"), "only a.txt is planned: {err}");
    assert_same_tree(&changed, &tree(m.path()), "after --dry-run");
    assert_eq!(events(&m).len(), n, "a dry run records nothing");
    let o = m.agx(["restore", &at, "--dry-run", "--json"]);
    let plan: serde_json::Value =
        serde_json::from_slice(&ok(o, "restore --dry-run --json")).unwrap();
    assert!(plan["report"].is_null());
    assert!(
        plan["plan"]["steps"].as_array().unwrap().len() >= 6,
        "{plan:#}"
    );
    assert_same_tree(&changed, &tree(m.path()), "after --dry-run --json");

    // One file, then one directory.
    hist::restore(&m, &at, &["a.txt"]);
    let mut want = changed.clone();
    want.insert("a.txt".into(), start[Path::new("a.txt")].clone());
    assert_same_tree(&want, &tree(m.path()), "after restoring a.txt");
    hist::restore(&m, &at, &["d"]);
    for p in ["d/x.txt", "d/y.txt", "d"] {
        want.insert(p.into(), start[Path::new(p)].clone());
    }
    want.remove(Path::new("d/z.txt"));
    assert_same_tree(&want, &tree(m.path()), "after restoring d");
    // The rest of the way, and each restore recorded its events.
    let notes: Vec<String> = events(&m)
        .iter()
        .filter_map(|e| e["note"].as_str().map(String::from))
        .collect();
    assert!(
        notes
            .iter()
            .all(|n| n.starts_with(&format!("restore to {at}"))),
        "{notes:?}"
    );
    assert!(notes.len() >= 3, "{notes:?}");
    hist::restore(&m, &at, &[]);
    assert_same_tree(&start, &tree(m.path()), "after the full restore");
}

#[test]
fn unmounted_project_keeps_its_history_and_restores() {
    let mut m = Mounted::with(setup);
    let start = tree(m.path());
    change(&m);
    let changed = tree(m.path());
    let n = events(&m).len();
    m.unmount();
    assert!(!hist::is_agx_mount(&m.project));
    // log, show and diff read the bare project's .agx directly.
    assert_eq!(events(&m).len(), n);
    let first = hist::ref_after(&m, 0).unwrap();
    assert_eq!(show(&m, &first, "a.txt"), b"a one\na two\na three\n");
    assert_eq!(show(&m, "now", "a.txt"), b"a one\na 2\na three\n");
    let o = m.agx(["diff", &first, "--stat"]);
    let stat = stdout(&o);
    ok(o, "diff --stat unmounted");
    assert!(stat.contains("a.txt"), "{stat}");
    // restore works on the bare directory and records its own events.
    let undo = hist::restore(&m, &first, &[]).expect("the restore changed something");
    assert_same_tree(&start, &tree(&m.project), "restored while unmounted");
    let after = events(&m);
    assert!(after.len() > n);
    assert!(after[n..].iter().all(|e| e["note"]
        .as_str()
        .is_some_and(|s| s.starts_with("restore to"))));
    // And it can be undone, still unmounted.
    hist::restore(&m, &undo, &[]);
    assert_same_tree(
        &changed,
        &tree(&m.project),
        "restore undone while unmounted",
    );
    // Mounted again, the history is the same one.
    ok(
        common::agx(["mount".as_ref(), m.project.as_os_str()]),
        "remount",
    );
    assert!(events(&m).len() > n);
    assert_same_tree(&changed, &tree(m.path()), "remounted");
}

#[test]
fn diff_shows_renames_binaries_and_stats() {
    let m = Mounted::with(setup);
    change(&m);
    let o = m.agx(["diff", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&ok(o, "diff --json")).unwrap();
    let by_path = |p: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|d| d["path"] == p)
            .unwrap_or_else(|| panic!("{p} in {v:#}"))
            .clone()
    };
    let keep = by_path("keep.txt");
    assert_eq!(keep["change"], "renamed");
    assert_eq!(keep["to_path"], "kept.txt");
    assert!(
        !v.as_array()
            .unwrap()
            .iter()
            .any(|d| d["path"] == "kept.txt"),
        "a rename is one entry: {v:#}"
    );
    let bin = by_path("bin");
    assert_eq!(bin["change"], "modified");
    assert_eq!(bin["binary"], true);
    let a = by_path("a.txt");
    assert_eq!(
        (a["added"].as_u64(), a["removed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(by_path("d/x.txt")["change"], "deleted");
    assert_eq!(by_path("d/z.txt")["change"], "added");

    let o = m.agx(["diff"]);
    let text = stdout(&o);
    ok(o, "diff");
    assert!(
        text.contains("rename from keep.txt\nrename to kept.txt"),
        "{text}"
    );
    assert!(
        text.contains("Binary files a/bin and b/bin differ"),
        "{text}"
    );
    assert!(text.contains("-a two\n+a 2\n"), "{text}");
    assert!(
        text.contains("+++ b/d/z.txt") || text.contains("+z"),
        "{text}"
    );

    let o = m.agx(["diff", "--stat"]);
    let stat = stdout(&o);
    ok(o, "diff --stat");
    assert!(stat.contains(" keep.txt => kept.txt |"), "{stat}");
    assert!(stat.contains(" bin | Bin"), "{stat}");
    assert!(stat.contains(" a.txt | 2 +-"), "{stat}");
    assert!(stat.contains("6 files changed"), "{stat}");

    // Limited to paths, and between two points.
    let o = m.agx(["diff", "--stat", "--", &arg(&m, "d")]);
    let stat = stdout(&o);
    ok(o, "diff --stat -- d");
    assert!(
        stat.contains("d/x.txt") && stat.contains("d/z.txt"),
        "{stat}"
    );
    assert!(!stat.contains("a.txt"), "{stat}");
    let first = hist::ref_after(&m, 0).unwrap();
    let o = m.agx(["diff", &first, &first, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&ok(o, "diff X X")).unwrap();
    assert_eq!(v, serde_json::json!([]), "a point against itself");
}

/// Every malformed or unknown REF, given to every command that takes one: exit 1, one line
/// on stderr naming the REF, nothing on stdout, nothing changed.
#[test]
fn bad_refs_are_one_line_errors_and_change_nothing() {
    let m = Mounted::with(setup);
    change(&m);
    let before = tree(m.path());
    let n = events(&m).len();
    let future = (chrono::Utc::now() + chrono::Duration::days(2))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for r in [
        "bogus",
        "event:0",
        "event:999999",
        "10y",
        future.as_str(),
        "event:-3",
        "",
    ] {
        let cmds: Vec<Vec<String>> = vec![
            vec!["show".into(), r.into(), arg(&m, "a.txt")],
            vec!["restore".into(), r.into(), "--yes".into()],
            vec![
                "restore".into(),
                r.into(),
                arg(&m, "a.txt"),
                "--dry-run".into(),
            ],
            vec!["diff".into(), r.into()],
            vec!["diff".into(), "now".into(), r.into()],
            vec!["log".into(), "--since".into(), r.into()],
        ];
        for c in cmds {
            let o = m.agx(&c);
            let line = user_error(&o, &format!("agx {c:?}"));
            assert!(o.stdout.is_empty(), "agx {c:?}: {}", stdout(&o));
            if !r.is_empty() {
                assert!(
                    line.contains(r) || line.contains("999999"),
                    "agx {c:?}: {line}"
                );
            }
        }
    }
    assert_same_tree(&before, &tree(m.path()), "after the refused commands");
    assert_eq!(events(&m).len(), n, "no events recorded");
}

/// Looks up the stored object of a hash in the backing `.agx/objects`.
fn object_path(project: &Path, hash: &str) -> std::path::PathBuf {
    project
        .join(".agx/objects")
        .join(&hash[..2])
        .join(&hash[2..])
}

#[test]
fn corrupt_or_missing_objects_are_reported_not_returned() {
    let original: Vec<u8> = (0..200)
        .map(|i| format!("original line {i}\n"))
        .collect::<String>()
        .into_bytes();
    let orig = original.clone();
    let m = Mounted::at(move |p| {
        std::fs::write(p.join("f"), &orig).unwrap();
        std::fs::write(p.join("g"), "g before\n").unwrap();
        std::fs::write(p.join("h"), "h before\n").unwrap();
    });
    std::fs::write(m.p("f"), "rewritten\n").unwrap();
    std::fs::write(m.p("g"), "g after\n").unwrap();
    std::fs::write(m.p("h"), "h after\n").unwrap();
    let ev = hist::events_after(&m, 0);
    let (ef, eg) = (&ev[0], &ev[1]);
    assert_eq!(ef["path"], "f");
    let at_f = format!("event:{}", ef["seq"]);
    assert_eq!(show(&m, &at_f, "f"), original, "intact before the damage");

    // Flip one byte in the middle of f's before-image.
    let obj = object_path(&m.project, ef["before"].as_str().unwrap());
    let mut raw = std::fs::read(&obj).unwrap();
    let mid = raw.len() / 2 + 3;
    raw[mid] ^= 0x40;
    std::fs::write(&obj, &raw).unwrap();
    // And remove g's.
    std::fs::remove_file(object_path(&m.project, eg["before"].as_str().unwrap())).unwrap();

    let live = tree(m.path());
    let n = events(&m).len();
    let o = m.agx(["show", &at_f, &arg(&m, "f")]);
    let line = user_error(&o, "show of a corrupt object");
    assert!(o.stdout.is_empty(), "nothing of it on stdout");
    assert!(line.contains("corrupt"), "{line}");
    let at_g = format!("event:{}", eg["seq"]);
    let o = m.agx(["show", &at_g, &arg(&m, "g")]);
    let line = user_error(&o, "show of a missing object");
    assert!(o.stdout.is_empty());
    assert!(line.contains("missing"), "{line}");

    for args in [
        vec!["restore".to_string(), at_f.clone(), "--yes".into()],
        vec![
            "restore".to_string(),
            at_f.clone(),
            arg(&m, "f"),
            "--yes".into(),
        ],
        vec!["restore".to_string(), at_f.clone(), "--dry-run".into()],
        vec![
            "restore".to_string(),
            at_g.clone(),
            arg(&m, "g"),
            "--yes".into(),
        ],
        vec!["diff".to_string(), at_f.clone()],
    ] {
        let o = m.agx(&args);
        let line = user_error(&o, &format!("agx {args:?}"));
        assert!(
            line.contains("corrupt") || line.contains("missing"),
            "{args:?}: {line}"
        );
        assert!(!stdout(&o).contains("original line"), "{args:?}");
    }
    assert_same_tree(&live, &tree(m.path()), "nothing restored from a bad object");
    assert_eq!(events(&m).len(), n, "nothing recorded");
    // What is intact still restores.
    hist::restore(&m, &at_f, &["h"]);
    assert_eq!(std::fs::read(m.p("h")).unwrap(), b"h before\n");
}

/// Paths outside the project are refused with one line, and nothing changes (invariant 5).
#[test]
fn paths_outside_the_project_are_refused() {
    let m = Mounted::with(setup);
    std::fs::write(m.p("a.txt"), "changed\n").unwrap();
    let before = tree(m.path());
    let outside = m.tmp.path().join("elsewhere.txt");
    std::fs::write(&outside, "not ours\n").unwrap();
    for args in [
        vec!["show", "event:1", outside.to_str().unwrap()],
        vec!["restore", "event:1", "--yes", outside.to_str().unwrap()],
        vec!["restore", "event:1", "--yes", "/etc"],
        vec!["diff", "--", "/etc/passwd"],
        vec!["log", "--path", "/etc"],
    ] {
        let msg = user_error(&m.agx(&args), &args.join(" "));
        assert!(msg.contains("outside the project"), "{args:?}: {msg}");
    }
    assert_same_tree(&before, &tree(m.path()), "after refused commands");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "not ours\n");
}
