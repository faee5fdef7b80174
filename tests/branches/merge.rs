//! `agx merge NAME`: a branch's changes into the main tree, three-way per file (base: the
//! branch's base point). Changes on one side are taken, text changes in different places
//! combined, conflicts listed and nothing applied until each has a choice; a merge is one
//! recorded operation that `agx restore event:N` undoes.

use std::os::unix::fs::PermissionsExt;

use crate::common::{sh, Mounted};
use crate::{branch, hist, tree};

fn json(o: std::process::Output, what: &str) -> serde_json::Value {
    let out = hist::ok(o, what);
    serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The JSON report of `agx merge NAME ARGS` (any exit code) and the exit code.
fn merge(m: &Mounted, name: &str, args: &[&str]) -> (serde_json::Value, Option<i32>) {
    let mut a = vec!["--json", "merge", name];
    a.extend_from_slice(args);
    let o = m.agx(&a);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "merge {args:?}: {e}: {}{}",
            hist::stdout(&o),
            hist::stderr(&o)
        )
    });
    (v, o.status.code())
}

fn text(lines: &[&str]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn base_project(p: &std::path::Path) {
    std::fs::create_dir_all(p.join("src/mod")).unwrap();
    let ten: Vec<String> = (1..=10).map(|i| format!("line {i}")).collect();
    let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
    std::fs::write(p.join("src/lib.rs"), text(&ten)).unwrap();
    std::fs::write(
        p.join("src/mod/moved.rs"),
        text(&["fn moved() {}", "// body", "// end"]),
    )
    .unwrap();
    std::fs::write(p.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(p.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    std::os::unix::fs::symlink("src/lib.rs", p.join("link")).unwrap();
    std::fs::write(p.join("same.txt"), "same\n").unwrap();
}

#[test]
fn changes_on_both_sides_in_different_places_merge_and_the_merge_is_undone_in_one_command() {
    let m = Mounted::with(base_project);
    let b = branch(&m, "feature", None);
    // The branch: an edit near the top, a new file, a deletion, a mode change, a symlink
    // retargeted, and a file renamed (the main tree edits it meanwhile).
    sh(
        &b,
        "sed -i 's/line 2/line two (branch)/' src/lib.rs && echo new > src/new.rs && rm gone.txt \
         && chmod 755 run.sh && ln -sfn src/new.rs link && mkdir lib && mv src/mod/moved.rs lib/moved.rs",
    );
    // The main tree: an edit near the bottom of the same file, and in the renamed file.
    sh(
        m.path(),
        "sed -i 's/line 9/line nine (main)/' src/lib.rs && sed -i 's|// end|// end (main)|' src/mod/moved.rs",
    );
    let before = tree(m.path());
    let (v, code) = merge(&m, "feature", &["--dry-run"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["conflicts"], serde_json::json!([]), "{v}");
    hist::assert_same_tree(&before, &tree(m.path()), "a dry run changes nothing");

    let (v, code) = merge(&m, "feature", &[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["applied"], true);
    let lib = std::fs::read_to_string(m.p("src/lib.rs")).unwrap();
    assert!(
        lib.contains("line two (branch)") && lib.contains("line nine (main)"),
        "{lib}"
    );
    assert_eq!(std::fs::read(m.p("src/new.rs")).unwrap(), b"new\n");
    assert!(!m.p("gone.txt").exists());
    let mode = std::fs::metadata(m.p("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(m.p("link")).unwrap().to_str(),
        Some("src/new.rs")
    );
    // The rename was followed: the main tree's edit is at the new name.
    assert!(!m.p("src/mod/moved.rs").exists());
    assert_eq!(
        std::fs::read_to_string(m.p("lib/moved.rs")).unwrap(),
        text(&["fn moved() {}", "// body", "// end (main)"])
    );
    assert_eq!(std::fs::read(m.p("same.txt")).unwrap(), b"same\n");
    // Every change of the merge is recorded as one operation: one restore undoes it.
    let first = v["first_event"].as_i64().expect("first event");
    let merged = tree(m.path());
    let undo = hist::restore(&m, &format!("event:{first}"), &[]).expect("undo changes things");
    hist::assert_same_tree(&before, &tree(m.path()), "after undoing the merge");
    hist::restore(&m, &undo, &[]);
    hist::assert_same_tree(&merged, &tree(m.path()), "after redoing the merge");
    // The branch is as it was, and says it was merged.
    let show = json(
        m.agx(["--json", "branch", "show", "feature"]),
        "branch show",
    );
    assert!(
        show["note"].as_str().unwrap_or("").contains("merged"),
        "{show}"
    );
}

fn conflicted_project(p: &std::path::Path) {
    std::fs::create_dir_all(p.join("dir")).unwrap();
    std::fs::write(p.join("text.txt"), text(&["a", "b", "c", "d", "e"])).unwrap();
    std::fs::write(p.join("bin"), b"\0\x01base").unwrap();
    std::fs::write(p.join("delmod.txt"), "base\n").unwrap();
    std::fs::write(p.join("mode.sh"), "x\n").unwrap();
    std::os::unix::fs::symlink("a", p.join("sl")).unwrap();
    std::fs::write(p.join("rr.txt"), text(&["renamed", "on", "both", "sides"])).unwrap();
    std::fs::write(p.join("typ"), "file\n").unwrap();
    std::fs::write(p.join("dir/f"), "in dir\n").unwrap();
    std::fs::write(p.join("clean.txt"), "clean\n").unwrap();
}

/// Every kind of conflict at once, and one clean change.
fn conflicting(m: &Mounted, b: &std::path::Path) {
    sh(
        b,
        "sed -i 's/^c$/c (branch)/' text.txt; printf '\\0\\2branch' > bin; echo changed > delmod.txt; \
         chmod 755 mode.sh; ln -sfn b sl; mv rr.txt rr-branch.txt; echo added-b > addadd.txt; \
         rm typ; mkdir typ; echo clean-b > clean.txt; rm -r dir; echo now-a-file > dir",
    );
    sh(
        m.path(),
        "sed -i 's/^c$/c (main)/' text.txt; printf '\\0\\3main' > bin; rm delmod.txt; \
         chmod 700 mode.sh; ln -sfn c sl; mv rr.txt rr-main.txt; echo added-m > addadd.txt; \
         rm typ; ln -s elsewhere typ; echo more > dir/g",
    );
}

#[test]
fn each_kind_of_conflict_is_listed_and_nothing_changes_until_each_has_a_choice() {
    let m = Mounted::with(conflicted_project);
    let b = branch(&m, "clash", None);
    conflicting(&m, &b);
    let before = tree(m.path());
    let (v, code) = merge(&m, "clash", &[]);
    assert_eq!(code, Some(1), "unsettled conflicts fail: {v}");
    assert_eq!(v["applied"], false);
    hist::assert_same_tree(&before, &tree(m.path()), "nothing merged");
    let kinds: std::collections::BTreeMap<String, String> = v["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (path, kind) in [
        ("text.txt", "both-modified"),
        ("bin", "binary"),
        ("delmod.txt", "delete-modify"),
        ("mode.sh", "mode"),
        ("sl", "symlink"),
        ("addadd.txt", "add-add"),
        ("typ", "type-change"),
        ("dir", "directory-file"),
    ] {
        assert_eq!(
            kinds.get(path).map(String::as_str),
            Some(kind),
            "{path}: {kinds:?}"
        );
    }
    assert!(
        kinds.values().any(|k| k == "rename-rename"),
        "a file renamed differently on both sides: {kinds:?}"
    );
    // The text conflict comes with its hunk.
    let text_conflict = v["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "text.txt")
        .unwrap()
        .clone();
    assert_eq!(text_conflict["hunks"][0]["ours"], "c (main)\n");
    assert_eq!(text_conflict["hunks"][0]["theirs"], "c (branch)\n");
    assert_eq!(text_conflict["hunks"][0]["base"], "c\n");

    // --markers settles only the text conflicts: the rest still block the merge.
    let (v, code) = merge(&m, "clash", &["--markers"]);
    assert_eq!(code, Some(1), "{v}");
    hist::assert_same_tree(&before, &tree(m.path()), "markers alone settle not all");

    // --ours: every conflict keeps the main tree's version; the clean change lands.
    let (v, code) = merge(&m, "clash", &["--ours"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(std::fs::read(m.p("clean.txt")).unwrap(), b"clean-b\n");
    let now = tree(m.path());
    let mut want = before.clone();
    let clean = std::path::PathBuf::from("clean.txt");
    want.insert(clean.clone(), now[&clean].clone());
    hist::assert_same_tree(
        &want,
        &tree(m.path()),
        "--ours keeps the main tree's versions",
    );
    let first = v["first_event"].as_i64().unwrap();
    hist::restore(&m, &format!("event:{first}"), &[]);
    hist::assert_same_tree(&before, &tree(m.path()), "after undoing --ours");

    // --theirs: the branch's versions.
    let (v, code) = merge(&m, "clash", &["--theirs"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(std::fs::read(m.p("bin")).unwrap(), b"\0\x02branch");
    assert_eq!(std::fs::read(m.p("delmod.txt")).unwrap(), b"changed\n");
    assert_eq!(std::fs::read_link(m.p("sl")).unwrap().to_str(), Some("b"));
    assert!(m.p("typ").is_dir());
    assert_eq!(std::fs::read(m.p("dir")).unwrap(), b"now-a-file\n");
    assert_eq!(std::fs::read(m.p("addadd.txt")).unwrap(), b"added-b\n");
    let mode = std::fs::metadata(m.p("mode.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    let first = v["first_event"].as_i64().unwrap();
    hist::restore(&m, &format!("event:{first}"), &[]);
    hist::assert_same_tree(&before, &tree(m.path()), "after undoing --theirs");

    // Per path: markers for the text, the branch for the rest.
    let (v, code) = merge(&m, "clash", &["--theirs", "--take", "text.txt=markers"]);
    assert_eq!(code, Some(0), "{v}");
    let t = std::fs::read_to_string(m.p("text.txt")).unwrap();
    assert!(
        t.contains("<<<<<<< main\nc (main)\n")
            && t.contains("=======\nc (branch)\n>>>>>>> clash\n"),
        "{t}"
    );
}

#[test]
fn a_merge_waits_for_no_writer_unless_forced_and_needs_the_mount() {
    let mut m = Mounted::with(|p| std::fs::write(p.join("f"), "f\n").unwrap());
    let b = branch(&m, "w", None);
    sh(&b, "echo branch > f");
    let held = std::fs::OpenOptions::new()
        .append(true)
        .open(m.p("other"))
        .or_else(|_| std::fs::File::create(m.p("other")))
        .unwrap();
    let o = m.agx(["merge", "w"]);
    let line = hist::user_error(&o, "merge with a writer");
    assert!(
        line.contains("open for writing") && line.contains("--force"),
        "{line}"
    );
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"f\n");
    hist::ok(m.agx(["merge", "w", "--force"]), "merge --force");
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"branch\n");
    drop(held);
    let o = m.agx(["merge", "nosuch"]);
    let line = hist::user_error(&o, "merge of an unknown branch");
    assert!(line.contains("nosuch"), "{line}");
    m.unmount();
    let o = m.agx(["merge", "w"]);
    let line = hist::user_error(&o, "merge unmounted");
    assert!(line.contains("agx mount"), "{line}");
}
