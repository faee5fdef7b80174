//! Views: `.agx/at/<ref>/` in the mount shows the whole project at any REF, read-only, by
//! the same state-at-a-point rule as restore, and stays correct while the live tree changes.

mod common;
mod hist;
mod mutations;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{sh, Mounted};
use hist::{assert_same_tree, ok, tree};
use mutations::{apply, setup, step, Step};
use proptest::prelude::*;

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn view(m: &Mounted, at: &str) -> PathBuf {
    m.p(".agx/at").join(at)
}

fn project(p: &Path) {
    std::fs::write(p.join("a"), "one\n").unwrap();
    std::fs::create_dir_all(p.join("d/sub")).unwrap();
    std::fs::write(p.join("d/f"), "f1\n").unwrap();
    std::fs::write(p.join("d/sub/g"), "g1\n").unwrap();
    std::os::unix::fs::symlink("a", p.join("l")).unwrap();
    std::fs::write(p.join("keep"), "unchanged\n").unwrap();
}

#[test]
fn files_and_directories_at_events_times_and_sessions() {
    let m = Mounted::with(project);
    let before = tree(m.path());
    let start = hist::last_seq(&m);
    std::fs::write(m.p("a"), "two\n").unwrap();
    let first = hist::ref_after(&m, start).expect("the write is recorded");
    std::fs::remove_file(m.p("d/f")).unwrap();
    std::fs::remove_dir_all(m.p("d/sub")).unwrap();
    std::fs::create_dir(m.p("e")).unwrap();
    std::fs::write(m.p("e/new"), "new\n").unwrap();
    std::fs::rename(m.p("keep"), m.p("kept")).unwrap();

    // Before the first change: the project as it was set up.
    let v = view(&m, &first);
    assert_eq!(names(&v), set(&["a", "d", "keep", "l"]));
    assert_eq!(names(&v.join("d")), set(&["f", "sub"]));
    assert_eq!(names(&v.join("d/sub")), set(&["g"]));
    assert_eq!(std::fs::read(v.join("a")).unwrap(), b"one\n");
    assert_eq!(std::fs::read(v.join("d/f")).unwrap(), b"f1\n");
    assert_eq!(std::fs::read(v.join("d/sub/g")).unwrap(), b"g1\n");
    assert_eq!(std::fs::read(v.join("keep")).unwrap(), b"unchanged\n");
    assert_eq!(std::fs::read_link(v.join("l")).unwrap(), Path::new("a"));
    assert!(std::fs::symlink_metadata(v.join("e")).is_err());
    assert!(std::fs::symlink_metadata(v.join("kept")).is_err());
    // The whole view equals the project as it was.
    assert_same_tree(&before, &tree(&v), "the view of the start");

    // `now` is the live tree; a relative time before everything is the start.
    assert_eq!(names(&view(&m, "now")), set(&["a", "d", "e", "kept", "l"]));
    assert_eq!(std::fs::read(view(&m, "now/a")).unwrap(), b"two\n");
    assert_eq!(std::fs::read(view(&m, "1h/a")).unwrap(), b"one\n");
    assert_same_tree(&tree(&v), &tree(&view(&m, "1h")), "1h and the first event");

    // session:ID is the point just before the session's first change.
    let script = format!("echo three > '{}'", m.p("a").display());
    let out = ok(
        m.agx(["run", "--json", "--", "sh", "-c", &script]),
        "agx run",
    );
    let run: serde_json::Value = serde_json::from_slice(&out).expect("run --json");
    let id = run["session"].as_str().expect("session id").to_string();
    assert_eq!(std::fs::read(m.p("a")).unwrap(), b"three\n");
    let s = view(&m, &format!("session:{id}"));
    assert_eq!(std::fs::read(s.join("a")).unwrap(), b"two\n");
    assert_eq!(names(&s), set(&["a", "d", "e", "kept", "l"]));

    // Names that are no REF, and events that do not exist, are not there.
    for bad in ["nonsense", "event:99999", "cp:77", "session:999"] {
        let e = std::fs::symlink_metadata(view(&m, bad)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{bad}");
    }
    // agx's own state is never part of a view.
    assert!(std::fs::symlink_metadata(view(&m, "now/.agx")).is_err());
}

/// Views compared with restore: after random mutations, the view of the point before them
/// is the tree restore brings back, and it still is after the live tree changed again.
fn compare_with_restore(steps: &[Step]) {
    let m = Mounted::with(setup);
    let before = tree(m.path());
    let start = hist::last_seq(&m);
    for s in steps {
        apply(m.path(), s);
    }
    let Some(at) = hist::ref_after(&m, start) else {
        return;
    };
    let v = view(&m, &at);
    let seen = tree(&v);
    assert_same_tree(&before, &seen, &format!("view {at}"));
    hist::restore(&m, &at, &[]);
    assert_same_tree(&seen, &tree(m.path()), &format!("restore {at} vs its view"));
    assert_same_tree(&seen, &tree(&v), &format!("view {at} after the restore"));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: hist::prop_cases(6),
        max_shrink_iters: 100,
        ..ProptestConfig::default()
    })]

    #[test]
    fn views_match_restore(steps in proptest::collection::vec(step(), 1..30)) {
        compare_with_restore(&steps);
    }
}

#[test]
fn a_view_stays_correct_while_the_live_file_changes() {
    let m = Mounted::with(project);
    let start = hist::last_seq(&m);
    std::fs::write(m.p("a"), "two\n").unwrap();
    let at = hist::ref_after(&m, start).unwrap();
    let v = view(&m, &at);
    // `keep` has not changed since the point: the view reads the live file.
    assert_eq!(std::fs::read(v.join("keep")).unwrap(), b"unchanged\n");
    let mut open = std::fs::File::open(v.join("keep")).unwrap();
    // Now it changes (twice); the view still shows it as it was at the point, through
    // the handle opened before and through new opens.
    std::fs::write(m.p("keep"), "changed once, and longer\n").unwrap();
    std::fs::write(m.p("keep"), "changed twice\n").unwrap();
    let mut got = Vec::new();
    open.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"unchanged\n");
    assert_eq!(std::fs::read(v.join("keep")).unwrap(), b"unchanged\n");
    assert_eq!(std::fs::metadata(v.join("keep")).unwrap().len(), 10);
    assert_eq!(std::fs::read(v.join("a")).unwrap(), b"one\n");
    // A directory listed, then changed: the view lists it as it was.
    assert_eq!(names(&v.join("d")), set(&["f", "sub"]));
    let before_x = hist::last_seq(&m);
    std::fs::write(m.p("d/x"), "x").unwrap();
    std::fs::remove_file(m.p("d/f")).unwrap();
    // Until its release reaches agx, the creation of `x` is under way and not yet history;
    // once it has ended, the view (listed before) must leave `x` out.
    hist::wait_event(&m, before_x, "d/x");
    assert_eq!(names(&v.join("d")), set(&["f", "sub"]));
    // Listed while a creation is still under way (the file is open), then again once it
    // has ended: no change began in between, and the view must not keep the first answer.
    let before_y = hist::last_seq(&m);
    let y = std::fs::File::create(m.p("d/y")).unwrap();
    let _ = names(&v.join("d"));
    drop(y);
    hist::wait_event(&m, before_y, "d/y");
    assert_eq!(names(&v.join("d")), set(&["f", "sub"]));
    assert_eq!(std::fs::read(v.join("d/f")).unwrap(), b"f1\n");
    // And `now` follows the live tree.
    assert_eq!(names(&view(&m, "now/d")), set(&["sub", "x", "y"]));
    assert_eq!(
        std::fs::read(view(&m, "now/keep")).unwrap(),
        b"changed twice\n"
    );
}

fn errno_of<T>(r: std::io::Result<T>, what: &str) -> i32 {
    match r {
        Ok(_) => panic!("{what} succeeded in a view"),
        Err(e) => e.raw_os_error().unwrap_or_else(|| panic!("{what}: {e}")),
    }
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn libc_result(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn every_write_into_a_view_fails_with_erofs() {
    let m = Mounted::with(project);
    let start = hist::last_seq(&m);
    std::fs::write(m.p("a"), "two\n").unwrap();
    let at = hist::ref_after(&m, start).unwrap();
    let live_before = tree(m.path());
    for v in [view(&m, &at), view(&m, "now")] {
        let f = v.join("a");
        let d = v.join("d");
        let tries: Vec<(&str, std::io::Result<()>)> = vec![
            (
                "open for writing",
                OpenOptions::new().write(true).open(&f).map(drop),
            ),
            (
                "open for appending",
                OpenOptions::new().append(true).open(&f).map(drop),
            ),
            (
                "open with O_TRUNC",
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .truncate(true)
                    .open(&f)
                    .map(drop),
            ),
            ("create", std::fs::write(v.join("new"), "x")),
            (
                "create in a subdirectory",
                std::fs::write(d.join("new"), "x"),
            ),
            ("mkdir", std::fs::create_dir(v.join("m"))),
            ("unlink", std::fs::remove_file(&f)),
            ("rmdir", std::fs::remove_dir(d.join("sub"))),
            ("rename inside", std::fs::rename(&f, v.join("b"))),
            ("rename out", std::fs::rename(&f, m.p("out"))),
            ("rename in", std::fs::rename(m.p("keep"), v.join("keep2"))),
            (
                "chmod",
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)),
            ),
            // SAFETY: a valid NUL-terminated path.
            (
                "truncate",
                libc_result(unsafe { libc::truncate(c(&f).as_ptr(), 0) }),
            ),
            (
                "utimes",
                std::fs::File::open(&f)
                    .and_then(|h| h.set_modified(std::time::SystemTime::UNIX_EPOCH)),
            ),
            ("symlink", std::os::unix::fs::symlink("a", v.join("s"))),
            ("hard link out", std::fs::hard_link(&f, m.p("hl"))),
            (
                "hard link in",
                std::fs::hard_link(m.p("keep"), v.join("hl")),
            ),
            ("setxattr", xattr_set(&f)),
            ("removexattr", xattr_remove(&f)),
            (
                "create a view name",
                std::fs::create_dir(m.p(".agx/at/mine")),
            ),
        ];
        for (what, r) in tries {
            assert_eq!(errno_of(r, what), libc::EROFS, "{what} in {}", v.display());
        }
        // touch through the real tool: it reports the failure.
        let out = Command::new("touch").arg(&f).output().unwrap();
        assert!(!out.status.success(), "touch in a view succeeded");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
            "touch: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_same_tree(&live_before, &tree(m.path()), "nothing changed");
    assert_eq!(std::fs::read(view(&m, &at).join("a")).unwrap(), b"one\n");
}

fn xattr_set(p: &Path) -> std::io::Result<()> {
    let out = Command::new("setfattr")
        .args(["-n", "user.agx", "-v", "1"])
        .arg(p)
        .output()?;
    tool_result(out)
}

fn xattr_remove(p: &Path) -> std::io::Result<()> {
    let out = Command::new("setfattr")
        .args(["-x", "user.agx"])
        .arg(p)
        .output()?;
    tool_result(out)
}

fn tool_result(out: std::process::Output) -> std::io::Result<()> {
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr);
    if msg.contains("Read-only file system") {
        Err(std::io::Error::from_raw_os_error(libc::EROFS))
    } else {
        Err(std::io::Error::other(msg.into_owned()))
    }
}

#[test]
fn diff_r_between_a_view_and_the_live_tree() {
    let m = Mounted::with(project);
    let start = hist::last_seq(&m);
    std::fs::write(m.p("d/f"), "f2\n").unwrap();
    let at = hist::ref_after(&m, start).unwrap();
    std::fs::write(m.p("d/added"), "added\n").unwrap();
    std::fs::remove_file(m.p("d/sub/g")).unwrap();
    let out = Command::new("diff")
        .arg("-r")
        .arg(format!(".agx/at/{at}/d"))
        .arg("d")
        .current_dir(m.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "diff finds differences");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("< f1") && text.contains("> f2"), "{text}");
    assert!(text.contains("Only in d: added"), "{text}");
    assert!(
        text.contains(&format!("Only in .agx/at/{at}/d/sub: g")),
        "{text}"
    );
    // The view of now and the live tree do not differ.
    sh(m.path(), "diff -r .agx/at/now/d d");
}

/// `.agx/at/` lists nothing (tools walking the project must not walk into the past; see
/// tests/views_walk.rs), yet serves every checkpoint by name.
#[test]
fn at_lists_nothing_and_serves_checkpoints_by_name() {
    let m = Mounted::with(project);
    assert!(names(&m.p(".agx/at")).is_empty());
    ok(m.agx(["checkpoint", "before-refactor"]), "agx checkpoint");
    std::fs::write(m.p("a"), "refactored\n").unwrap();
    std::fs::remove_dir_all(m.p("d")).unwrap();
    assert!(names(&m.p(".agx/at")).is_empty());
    let v = view(&m, "before-refactor");
    assert_eq!(std::fs::read(v.join("a")).unwrap(), b"one\n");
    assert_eq!(names(&v.join("d")), set(&["f", "sub"]));
    // The checkpoint is also reachable by its id.
    let list = ok(m.agx(["checkpoint", "list", "--json"]), "checkpoint list");
    let list: serde_json::Value = serde_json::from_slice(&list).unwrap();
    let id = list[0]["id"].as_i64().expect("checkpoint id");
    assert_eq!(
        std::fs::read(view(&m, &format!("cp:{id}")).join("a")).unwrap(),
        b"one\n"
    );
}
