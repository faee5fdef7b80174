//! History in a branch: log, show, diff, restore, checkpoints, oops and blame act on the
//! branch when run in its view (or with --branch NAME), and never on the main tree;
//! `agx run --branch NAME` works in the branch.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{agx_bin, sh, Mounted};
use crate::{branch, hist, tree};

fn project(p: &Path) {
    sh(
        p,
        "mkdir -p src/deep/er docs; printf 'one\\ntwo\\nthree\\n' > src/lib.rs; echo d > docs/d; \
         echo 3 > src/deep/er/c; echo top > top",
    );
}

/// `agx ARGS` run in `dir` (no -C: the project and the branch come from the directory).
fn agx_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(agx_bin())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn json(o: Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&hist::ok(o, what)).unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[test]
fn log_show_diff_restore_and_checkpoints_act_on_the_branch_they_run_in() {
    let m = Mounted::with(project);
    hist::ok(m.agx(["checkpoint", "before-branch"]), "checkpoint in main");
    sh(m.path(), "echo 2 > src/deep/er/c");
    let main_before = tree(m.path());
    let b = branch(&m, "work", None);
    hist::ok(
        agx_in(&b, &["checkpoint", "in-work"]),
        "checkpoint in the branch",
    );
    sh(
        &b,
        "echo four >> src/lib.rs; rm docs/d; echo new > src/new.rs",
    );
    let at_change = tree(&b);

    // log: only the branch's events, named relative to the branch.
    let log = json(agx_in(&b, &["--json", "log"]), "log in the branch");
    let paths: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert!(
        paths.contains(&"src/lib.rs") && paths.contains(&"docs/d"),
        "{paths:?}"
    );
    let from_main = json(m.agx(["--json", "--branch", "work", "log"]), "log --branch");
    assert_eq!(from_main, log, "--branch from anywhere is the same history");
    let main_log = json(m.agx(["--json", "log"]), "main log");
    let main_paths: Vec<&str> = main_log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(
        main_paths,
        ["src/deep/er/c"],
        "the main tree's own history only"
    );

    // show: the branch at the checkpoint, by a path inside the view or relative to it.
    assert_eq!(
        hist::ok(agx_in(&b, &["show", "in-work", "src/lib.rs"]), "show"),
        b"one\ntwo\nthree\n"
    );
    assert_eq!(
        hist::ok(
            agx_in(&b.join("src"), &["show", "in-work", "lib.rs"]),
            "show in a subdir"
        ),
        b"one\ntwo\nthree\n"
    );
    assert_eq!(
        hist::ok(
            agx_in(&b, &["show", "in-work", "docs/d"]),
            "show a removed file"
        ),
        b"d\n"
    );
    // A branch name stands for its current state.
    assert_eq!(
        hist::ok(
            m.agx(["show", "work", &m.p("src/new.rs").to_string_lossy()]),
            "show NAME"
        ),
        b"new\n"
    );

    // diff: from the branch's base by default; main vs the branch the other way round.
    let d = json(agx_in(&b, &["--json", "diff"]), "diff in the branch");
    let changed: Vec<&str> = d
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["path"].as_str())
        .collect();
    assert_eq!(changed, ["docs/d", "src/lib.rs", "src/new.rs"], "{d}");
    let d = json(m.agx(["--json", "diff", "main", "work"]), "diff main work");
    let added: Vec<&str> = d
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["change"] == "added")
        .filter_map(|x| x["path"].as_str())
        .collect();
    assert_eq!(added, ["src/new.rs"], "{d}");
    let d = json(m.agx(["--json", "diff", "work", "main"]), "diff work main");
    let deleted: Vec<&str> = d
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["change"] == "deleted")
        .filter_map(|x| x["path"].as_str())
        .collect();
    assert_eq!(deleted, ["src/new.rs"], "{d}");

    // restore: the branch goes back, the main tree does not move, and it is undone.
    let o = agx_in(&b, &["restore", "in-work", "--yes"]);
    let err = hist::stderr(&o);
    hist::ok(o, "restore in the branch");
    hist::assert_same_tree(&main_before, &tree(&b), "branch after its restore");
    hist::assert_same_tree(
        &main_before,
        &tree(m.path()),
        "main tree after the branch's restore",
    );
    let undo = err
        .lines()
        .find_map(|l| l.strip_prefix("to undo this restore: agx restore "))
        .unwrap()
        .trim()
        .to_string();
    hist::ok(
        agx_in(&b, &["restore", &undo, "--yes"]),
        "undo in the branch",
    );
    hist::assert_same_tree(&at_change, &tree(&b), "branch after the undo");

    // A point before the branch's base is the main tree's history: refused, with the way.
    let o = agx_in(&b, &["show", "before-branch", "src/deep/er/c"]);
    let line = hist::user_error(&o, "a point before the base");
    assert!(
        line.contains("base") && line.contains("branch create"),
        "{line}"
    );
    assert_eq!(
        hist::ok(
            m.agx([
                "show",
                "before-branch",
                &m.p("src/deep/er/c").to_string_lossy()
            ]),
            "in main"
        ),
        b"3\n"
    );
    // A path of another branch's view is named as such.
    let other = branch(&m, "other", None);
    let o = agx_in(&b, &["log", "--path", &other.join("top").to_string_lossy()]);
    let line = hist::user_error(&o, "a path in another branch");
    assert!(line.contains("--branch other"), "{line}");
}

#[test]
fn a_restore_in_a_branch_brings_back_a_moved_directory_whole() {
    let m = Mounted::with(project);
    let b = branch(&m, "mv", None);
    // src/deep/er was never reached in the branch: the move takes it unfilled.
    hist::ok(agx_in(&b, &["checkpoint", "before-mv"]), "checkpoint");
    let before = tree(&b);
    sh(&b, "mv src lib && echo x > lib/deep/er/c2 && rm lib/lib.rs");
    hist::ok(agx_in(&b, &["restore", "before-mv", "--yes"]), "restore");
    hist::assert_same_tree(&before, &tree(&b), "the directory came back whole");
}

#[test]
fn run_in_a_branch_works_there_and_oops_undoes_it_there() {
    let m = Mounted::with(project);
    branch(&m, "agent", None);
    let out = Command::new(agx_bin())
        .args([
            "run",
            "--branch",
            "agent",
            "--",
            "sh",
            "-c",
            "pwd; echo agent >> lib.rs; rm ../top",
        ])
        .current_dir(m.p("src"))
        .output()
        .unwrap();
    let stdout = hist::stdout(&out);
    hist::ok(out, "agx run --branch");
    assert!(
        stdout.trim_end().ends_with(".agx/branches/agent/src"),
        "the command runs at the same place in the branch: {stdout}"
    );
    let b = m.p(".agx/branches/agent");
    assert_eq!(
        std::fs::read_to_string(b.join("src/lib.rs")).unwrap(),
        "one\ntwo\nthree\nagent\n"
    );
    assert!(!b.join("top").exists());
    assert!(m.p("top").exists(), "the main tree is untouched");
    // The changes are the session's, in the branch.
    let log = json(m.agx(["--json", "--branch", "agent", "log"]), "log");
    assert!(
        log.as_array()
            .unwrap()
            .iter()
            .all(|e| e["session"].is_string()),
        "attributed: {log}"
    );
    // oops in the branch undoes the session there.
    hist::ok(agx_in(&b, &["oops", "--yes"]), "oops in the branch");
    assert_eq!(
        std::fs::read_to_string(b.join("src/lib.rs")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert!(b.join("top").exists());
    // blame in the branch names nobody for the base's lines.
    sh(&b, "echo mine >> src/lib.rs");
    let blame = json(agx_in(&b, &["--json", "blame", "src/lib.rs"]), "blame");
    let lines = blame.as_array().unwrap();
    assert_eq!(lines.len(), 4);
    assert!(lines[0]["seq"].is_null(), "{blame}");
    assert!(lines[3]["seq"].is_i64(), "{blame}");
}
