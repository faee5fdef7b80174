//! agx's own state directory: the physical `.agx/` of the project never shows through the
//! mount, the virtual `.agx` shown instead is read-only and cannot be moved or removed, and
//! a git project gets `/.agx/` excluded exactly once, with nothing else in `.git` touched.

mod common;
mod util;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::Mounted;
use util::{differing, err, git_ok, snapshot, Entry, Snap};

const EROFS: i32 = libc::EROFS;

fn with_secret(p: &Path) {
    std::fs::write(p.join("top"), "t").unwrap();
    std::fs::create_dir_all(p.join(".agx/sub")).unwrap();
    std::fs::write(p.join(".agx/secret"), "hidden").unwrap();
    std::fs::write(p.join(".agx/sub/deeper"), "hidden").unwrap();
    // A `.agx` below the top is an ordinary directory.
    std::fs::create_dir_all(p.join("nested/.agx")).unwrap();
    std::fs::write(p.join("nested/.agx/visible"), "v").unwrap();
}

/// What the attacks below could have changed in the physical `.agx`: its identity and
/// mode, the files that were there, and whether any name they tried to create appeared.
/// (Not a full snapshot: agx's own history may legitimately grow in there meanwhile.)
fn backing_state(project: &Path) -> (u64, u32, String, String, Vec<&'static str>) {
    let agx = project.join(".agx");
    let md = std::fs::metadata(&agx).unwrap();
    let landed = ["x", "d", "l", "f", "n"]
        .into_iter()
        .filter(|n| std::fs::symlink_metadata(agx.join(n)).is_ok())
        .collect();
    (
        md.ino(),
        md.mode(),
        std::fs::read_to_string(agx.join("secret")).unwrap(),
        std::fs::read_to_string(agx.join("sub/deeper")).unwrap(),
        landed,
    )
}

#[test]
fn physical_agx_dir_never_shows_through_the_mount() {
    let m = Mounted::at(with_secret);
    let agx = m.p(".agx");
    assert_eq!(err(std::fs::metadata(agx.join("secret"))), libc::ENOENT);
    assert_eq!(err(std::fs::metadata(agx.join("sub/deeper"))), libc::ENOENT);
    assert_eq!(err(std::fs::read(agx.join("secret"))), libc::ENOENT);
    // Only the views directory (`at`) is in it.
    assert_eq!(util::names(&agx), ["at"]);
    let md = std::fs::metadata(&agx).unwrap();
    // Its `.`, `..` and `at` carry the numbers stat reports for them.
    let mut raw = util::raw_readdir(&agx);
    raw.sort();
    let root_ino = std::fs::metadata(m.path()).unwrap().ino();
    let at_ino = std::fs::metadata(agx.join("at")).unwrap().ino();
    assert_eq!(
        raw,
        [
            (".".into(), md.ino()),
            ("..".into(), root_ino),
            ("at".into(), at_ino)
        ],
        "readdir of .agx"
    );
    assert!(md.is_dir());
    assert_eq!(md.mode() & 0o7777, 0o555);
    assert_ne!(
        md.ino(),
        std::fs::metadata(m.project.join(".agx")).unwrap().ino()
    );

    // The root lists `.agx` exactly once, with readdir and with readdirplus (ls -l).
    let count = |v: &[std::ffi::OsString]| v.iter().filter(|n| *n == ".agx").count();
    let raw: Vec<_> = util::raw_readdir(m.path())
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(count(&raw), 1, "{raw:?}");
    assert_eq!(util::names(m.path()), util::names(&m.project));
    let ls = util::sh_out(m.path(), "ls -a; ls -la | grep -c ' \\.agx$'");
    let out = String::from_utf8_lossy(&ls.stdout);
    assert_eq!(out.lines().filter(|l| *l == ".agx").count(), 1, "{out}");
    assert!(out.ends_with("\n1\n"), "{out}");
    // Nothing under it for tools that walk the tree but the views directory, empty
    // without named checkpoints.
    let find = util::sh_out(m.path(), "find . | LC_ALL=C sort");
    assert_eq!(
        String::from_utf8_lossy(&find.stdout),
        ".\n./.agx\n./.agx/at\n./nested\n./nested/.agx\n./nested/.agx/visible\n./top\n"
    );
    // Looking up the hidden names many times (negative entries) changes nothing.
    drop_and_retry(&m);
    assert_eq!(
        std::fs::read_to_string(m.p("nested/.agx/visible")).unwrap(),
        "v"
    );
}

fn drop_and_retry(m: &Mounted) {
    util::drop_caches();
    assert_eq!(err(std::fs::metadata(m.p(".agx/secret"))), libc::ENOENT);
    assert_eq!(util::names(&m.p(".agx")), ["at"]);
}

/// Every way of writing into, moving or removing the virtual `.agx`; returns the errnos.
fn attack(dir: &Path) -> Vec<(String, i32)> {
    let agx = dir.join(".agx");
    std::fs::write(dir.join("f"), "f").unwrap();
    std::fs::create_dir(dir.join("d")).unwrap();
    let mut r = Vec::new();
    let mut note = |what: &str, e: i32| r.push((what.to_string(), e));
    note("create file", err(File::create(agx.join("x"))));
    note("mkdir", err(std::fs::create_dir(agx.join("d"))));
    note(
        "symlink",
        err(std::os::unix::fs::symlink("f", agx.join("l"))),
    );
    note(
        "hard link",
        err(std::fs::hard_link(dir.join("f"), agx.join("f"))),
    );
    note(
        "rename into",
        err(std::fs::rename(dir.join("f"), agx.join("f"))),
    );
    note("rename away", err(std::fs::rename(&agx, dir.join("x"))));
    note("rename dir over", err(std::fs::rename(dir.join("d"), &agx)));
    note(
        "rename file over",
        err(std::fs::rename(dir.join("f"), &agx)),
    );
    note(
        "exchange",
        err(util::renameat2(&dir.join("d"), &agx, libc::RENAME_EXCHANGE)),
    );
    note("rmdir", err(std::fs::remove_dir(&agx)));
    note("unlink", err(std::fs::remove_file(&agx)));
    note(
        "chmod",
        err(std::fs::set_permissions(
            &agx,
            std::fs::Permissions::from_mode(0o777),
        )),
    );
    note("chown", err(std::os::unix::fs::chown(&agx, Some(1), None)));
    note(
        "utimes",
        err(File::open(&agx).and_then(|f| f.set_modified(std::time::SystemTime::now()))),
    );
    let (c, n) = (util::cstr(&agx), util::cstr("user.x"));
    // SAFETY: valid strings and buffer.
    let rc = unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
    note(
        "setxattr",
        if rc == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap()
        },
    );
    note("mkdir over", err(std::fs::create_dir(&agx)));
    note("symlink over", err(std::os::unix::fs::symlink("f", &agx)));
    // The shell way.
    for (what, script) in [
        ("rm -rf .agx", "rm -rf .agx"),
        ("mv .agx x", "mv .agx x"),
        ("mv d .agx", "mv d .agx"),
        ("mv f .agx", "mv f .agx"),
        ("touch .agx/n", "touch .agx/n"),
        ("echo > .agx/n", "echo hi > .agx/n"),
        ("cp -r d .agx/", "cp -r d .agx/"),
    ] {
        let o = util::sh_out(dir, &format!("{script} 2>/dev/null"));
        note(what, o.status.code().unwrap_or(-1));
    }
    note("d still there", err(std::fs::metadata(dir.join("d"))));
    note("f still there", err(std::fs::metadata(dir.join("f"))));
    r
}

fn expected_attack() -> Vec<(String, i32)> {
    [
        ("create file", EROFS),
        ("mkdir", EROFS),
        ("symlink", EROFS),
        ("hard link", EROFS),
        ("rename into", EROFS),
        ("rename away", EROFS),
        ("rename dir over", EROFS),
        // The kernel refuses a file over a directory before asking agx.
        ("rename file over", libc::EISDIR),
        ("exchange", EROFS),
        ("rmdir", EROFS),
        ("unlink", libc::EISDIR),
        ("chmod", EROFS),
        ("chown", EROFS),
        ("utimes", EROFS),
        ("setxattr", EROFS),
        ("mkdir over", libc::EEXIST),
        ("symlink over", libc::EEXIST),
        ("rm -rf .agx", 1),
        ("mv .agx x", 1),
        ("mv d .agx", 1),
        ("mv f .agx", 1),
        ("touch .agx/n", 1),
        ("echo > .agx/n", 2),
        ("cp -r d .agx/", 1),
        ("d still there", 0),
        ("f still there", 0),
    ]
    .iter()
    .map(|(w, e)| (w.to_string(), *e))
    .collect()
}

#[test]
fn virtual_agx_dir_is_read_only_and_cannot_be_moved_or_removed() {
    let m = Mounted::at(with_secret);
    let before = backing_state(&m.project);
    assert_eq!(attack(m.path()), expected_attack());
    assert_eq!(
        backing_state(&m.project),
        before,
        "the physical .agx changed"
    );
    assert_eq!(util::names(&m.p(".agx")), ["at"]);
    // Nothing landed anywhere else either.
    let mut names = util::names(m.path());
    names.sort();
    assert_eq!(names, [".agx", "d", "f", "nested", "top"]);
}

#[test]
fn in_place_mount_keeps_its_state_dir_whatever_is_done_through_it() {
    let mut m = Mounted::with(with_secret);
    assert_eq!(attack(m.path()), expected_attack());
    m.unmount();
    assert_eq!(
        std::fs::read_to_string(m.project.join(".agx/secret")).unwrap(),
        "hidden"
    );
    assert_eq!(
        std::fs::read_to_string(m.project.join(".agx/sub/deeper")).unwrap(),
        "hidden"
    );
    assert_eq!(err(std::fs::metadata(m.project.join("x"))), libc::ENOENT);
}

// ---------------------------------------------------------------- git exclude

fn dot_git(dir: &Path) -> BTreeMap<PathBuf, Entry> {
    snapshot(
        &dir.join(".git"),
        Snap {
            file_times: true,
            dir_times: false,
        },
    )
}

fn exclude_lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join(".git/info/exclude"))
        .unwrap()
        .lines()
        .filter(|l| *l == "/.agx/")
        .count()
}

#[test]
fn git_exclude_gets_agx_once_and_nothing_else_in_dot_git_changes() {
    let mut before = None;
    let mut m = Mounted::with(|p| {
        git_ok(p, &["init", "-q"]);
        std::fs::write(p.join("tracked"), "t\n").unwrap();
        // Not racily clean: git status has no reason to rewrite the index.
        File::options()
            .write(true)
            .open(p.join("tracked"))
            .unwrap()
            .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000))
            .unwrap();
        git_ok(p, &["add", "tracked"]);
        git_ok(p, &["commit", "-q", "-m", "one"]);
        // An exclude file without a final newline.
        std::fs::write(p.join(".git/info/exclude"), "# mine\n*.o").unwrap();
        before = Some(dot_git(p));
    });
    let mut before = before.unwrap();
    assert_eq!(exclude_lines(m.path()), 1);
    let exclude = std::fs::read_to_string(m.p(".git/info/exclude")).unwrap();
    assert!(exclude.starts_with("# mine\n*.o\n"), "{exclude:?}");
    // Everything else in .git is as it was.
    let mut after = dot_git(m.path());
    after.remove(Path::new("info/exclude"));
    let excl_before = before.remove(Path::new("info/exclude")).unwrap();
    assert_eq!(differing(&before, &after), Vec::<String>::new());
    assert_eq!(git_ok(m.path(), &["status", "--porcelain"]), "");

    // Mounting again adds nothing.
    m.unmount();
    let o = common::agx(["mount".as_ref(), m.project.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(exclude_lines(m.path()), 1);
    assert_eq!(
        std::fs::read_to_string(m.p(".git/info/exclude")).unwrap(),
        exclude
    );
    let mut again = dot_git(m.path());
    again.remove(Path::new("info/exclude"));
    assert_eq!(differing(&before, &again), Vec::<String>::new());
    assert_ne!(excl_before.size, exclude.len() as u64);
}

/// The exclude is what keeps the physical `.agx` out of `git status` on the bare
/// directory (seen here through the backing path of a separate mountpoint).
#[test]
fn physical_agx_dir_is_ignored_by_git_on_the_backing_dir() {
    let m = Mounted::at(|p| {
        git_ok(p, &["init", "-q"]);
    });
    std::fs::write(m.project.join(".agx/state"), "s").unwrap();
    std::fs::write(m.p("new"), "n").unwrap();
    assert_eq!(git_ok(&m.project, &["status", "--porcelain"]), "?? new\n");
    assert_eq!(git_ok(m.path(), &["status", "--porcelain"]), "?? new\n");
    assert_eq!(exclude_lines(m.path()), 1);
}
