//! Restore at its edges: a git repository made during a session (objects included), files
//! whose content was never kept (over `capture.max_size`), and restores that move many
//! files' content around under a small descriptor limit (DESIGN.md invariants 2 and 5,
//! section 8).

mod common;
mod hist;

use std::path::Path;
use std::process::{Command, Output};

use common::Mounted;
use hist::{assert_same_tree, events, ok, stderr, tree, user_error};

/// `agx run -- sh -c SCRIPT` in the mount; asserts success.
fn run(m: &Mounted, script: &str) -> Output {
    let o = Command::new(common::agx_bin())
        .args(["-C", &m.project.to_string_lossy()])
        .args(["run", "--agent", "bot", "--", "sh", "-c", script])
        .current_dir(m.path())
        .output()
        .expect("running agx run");
    assert!(o.status.success(), "agx run {script}: {}", stderr(&o));
    o
}

fn last_session(m: &Mounted) -> String {
    let v: serde_json::Value =
        serde_json::from_slice(&ok(m.agx(["session", "list", "--json"]), "session list")).unwrap();
    let list = v.as_array().unwrap();
    list.iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .max_by_key(|s| s.parse::<i64>().unwrap_or(0))
        .expect("a session")
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A `.git` made during a session (objects and all) is removed by undoing the session;
/// the objects were recorded by that restore, so undoing the restore brings back a
/// working repository.
#[test]
fn a_repository_made_during_a_session_is_removed_and_comes_back() {
    let m = Mounted::with(|p| {
        std::fs::write(p.join("a.txt"), "a\n").unwrap();
        std::fs::create_dir(p.join("src")).unwrap();
        std::fs::write(p.join("src/main.rs"), "fn main() {}\n").unwrap();
    });
    let start = tree(m.path());
    let before_session = hist::last_seq(&m);
    run(
        &m,
        "git init -q -b main && git add -A && \
         git -c user.name=bot -c user.email=b@example.com commit -qm one && \
         echo more >> a.txt",
    );
    assert!(m.p(".git/objects").read_dir().unwrap().count() > 2);
    let with_git = tree(m.path());
    let id = last_session(&m);

    let undo = hist::restore(&m, &format!("session:{id}"), &[]).expect("it changed things");
    assert!(!m.p(".git").exists(), "the session's .git is gone");
    assert!(!m.project.join(".git").exists());
    assert_same_tree(&start, &tree(m.path()), "after undoing the session");

    // Nothing was lost: undoing the restore gives the repository back, objects included.
    hist::restore(&m, &undo, &[]);
    assert_same_tree(&with_git, &tree(m.path()), "after undoing the restore");
    assert!(git(m.path(), &["log", "--format=%s"]).contains("one"));
    git(m.path(), &["fsck", "--full", "--strict"]);

    // A plain REF before the session removes it too.
    let at = hist::ref_after(&m, before_session).unwrap();
    hist::restore(&m, &at, &[]);
    assert!(!m.p(".git").exists());
    assert_same_tree(
        &start,
        &tree(m.path()),
        "after restoring to before the session",
    );
}

fn setup_limit(p: &Path) {
    std::fs::create_dir(p.join(".agx")).unwrap();
    std::fs::write(p.join(".agx/config.toml"), "[capture]\nmax_size = 1000\n").unwrap();
    std::fs::write(p.join("big"), vec![b'x'; 5000]).unwrap();
    std::fs::write(p.join("small"), "small 1\n").unwrap();
}

/// A file whose content at REF was not kept (over the size limit): the plan says so, the
/// restore refuses with one line naming it and changes nothing; `--skip-missing` restores
/// the rest and reports what it left.
#[test]
fn content_that_was_not_kept_is_refused_unless_skipped() {
    let m = Mounted::with(setup_limit);
    let s = hist::last_seq(&m);
    std::fs::write(m.p("big"), "big is small now\n").unwrap();
    std::fs::write(m.p("small"), "small 2\n").unwrap();
    let at = hist::ref_after(&m, s).unwrap();
    let changed = tree(m.path());
    let n = events(&m).len();

    let o = m.agx(["restore", &at, "--dry-run"]);
    let err = stderr(&o);
    ok(o, "restore --dry-run");
    assert!(err.contains("cannot restore big"), "{err}");
    let o = m.agx(["restore", &at, "--dry-run", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&ok(o, "--dry-run --json")).unwrap();
    assert_eq!(v["plan"]["skipped"][0]["path"], "big", "{v:#}");

    for args in [
        vec!["restore", &at, "--yes"],
        vec!["restore", &at, "--yes", "--json"],
    ] {
        let o = m.agx(&args);
        let line = user_error(&o, &format!("{args:?}"));
        assert!(
            line.contains("big") && line.contains("--skip-missing"),
            "{line}"
        );
    }
    assert_same_tree(&changed, &tree(m.path()), "nothing restored");
    assert_eq!(events(&m).len(), n, "nothing recorded");

    let o = m.agx(["restore", &at, "--yes", "--skip-missing"]);
    let err = stderr(&o);
    ok(o, "restore --skip-missing");
    assert!(err.contains("not restored: big"), "{err}");
    assert_eq!(std::fs::read(m.p("small")).unwrap(), b"small 1\n");
    assert_eq!(std::fs::read(m.p("big")).unwrap(), b"big is small now\n");
}

/// Removing or replacing a file over the size limit would lose it (its before-image
/// cannot be kept): refused the same way.
#[test]
fn a_restore_never_drops_content_it_cannot_keep() {
    let m = Mounted::with(setup_limit);
    let s = hist::last_seq(&m);
    std::fs::write(m.p("made"), vec![b'y'; 3000]).unwrap();
    std::fs::write(m.p("small"), "small 2\n").unwrap();
    let at = hist::ref_after(&m, s).unwrap();
    let changed = tree(m.path());
    let line = user_error(&m.agx(["restore", &at, "--yes"]), "restore");
    assert!(line.contains("made"), "{line}");
    assert_same_tree(&changed, &tree(m.path()), "nothing restored");
    ok(
        m.agx(["restore", &at, "--yes", "--skip-missing"]),
        "--skip-missing",
    );
    assert_eq!(std::fs::read(m.p("made")).unwrap(), vec![b'y'; 3000]);
    assert_eq!(std::fs::read(m.p("small")).unwrap(), b"small 1\n");
}

const RENAMES: usize = 1500;

/// Undoing 1,500 renames over existing files restores each file from where its content
/// went: with only 400 descriptors, an unmounted restore still brings back every file.
#[test]
fn undoing_many_renames_works_under_a_small_descriptor_limit() {
    let mut m = Mounted::with(|p| {
        for d in ["f", "g"] {
            std::fs::create_dir(p.join(d)).unwrap();
        }
        for i in 0..RENAMES {
            std::fs::write(p.join(format!("f/{i:04}")), format!("old {i}\n")).unwrap();
            std::fs::write(p.join(format!("g/{i:04}")), format!("new {i}\n")).unwrap();
        }
    });
    let start = tree(m.path());
    let s = hist::last_seq(&m);
    for i in 0..RENAMES {
        std::fs::rename(m.p(format!("g/{i:04}")), m.p(format!("f/{i:04}"))).unwrap();
    }
    let at = hist::ref_after(&m, s).unwrap();
    m.unmount();
    let o = Command::new("prlimit")
        .arg("--nofile=400:400")
        .arg(common::agx_bin())
        .arg("-C")
        .arg(&m.project)
        .args(["restore", &at, "--yes"])
        .output()
        .unwrap();
    ok(o, "restore under prlimit --nofile=400");
    assert_same_tree(&start, &tree(&m.project), "every file restored");
}
