//! Identity through the mount: inode numbers and timestamps equal the backing ones and stay
//! the same across cache drops and remounts, so tools that trust stat data (git's index,
//! make, rsync) see nothing change when nothing changed.

mod common;
mod util;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::Mounted;
use util::{drop_caches, git, git_ok, ident};

type Ident = (u64, i128, i128, u64, u32, u64);

fn populate(p: &Path) {
    std::fs::create_dir_all(p.join("src/deep/er")).unwrap();
    for i in 0..20 {
        std::fs::write(p.join(format!("src/f{i}.rs")), format!("fn f{i}() {{}}\n")).unwrap();
    }
    std::fs::write(p.join("src/deep/er/leaf"), "leaf").unwrap();
    std::fs::write(p.join("README"), "readme\n").unwrap();
    std::fs::hard_link(p.join("README"), p.join("README.hard")).unwrap();
    std::os::unix::fs::symlink("README", p.join("link")).unwrap();
    std::os::unix::fs::symlink("gone", p.join("dangling")).unwrap();
    let out = util::sh_out(p, "mkfifo fifo");
    assert!(out.status.success());
}

/// ident() of every object under `root` except the top `.agx`, keyed by relative path.
fn idents(root: &Path) -> BTreeMap<PathBuf, Ident> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            if r == Path::new(".agx") {
                continue;
            }
            let p = root.join(&r);
            out.insert(r.clone(), ident(&p));
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(r);
            }
        }
    }
    out
}

#[test]
fn inode_numbers_and_times_through_the_mount_are_the_backing_ones() {
    let m = Mounted::at(populate);
    let backing = idents(&m.project);
    assert_eq!(backing.len(), 29);
    assert_eq!(idents(m.path()), backing);
    // Owners too.
    for rel in backing.keys() {
        let (a, b) = (
            std::fs::symlink_metadata(m.project.join(rel)).unwrap(),
            std::fs::symlink_metadata(m.p(rel)).unwrap(),
        );
        assert_eq!((a.uid(), a.gid()), (b.uid(), b.gid()), "{}", rel.display());
    }
    // The root keeps its own number; readdir's d_ino agrees with stat.
    assert_eq!(
        std::fs::metadata(m.path()).unwrap().ino(),
        std::fs::metadata(&m.project).unwrap().ino()
    );
    for (name, ino) in util::raw_readdir(&m.p("src")) {
        if name != ".." {
            assert_eq!(
                ino,
                m.project.join("src").join(&name).metadata().unwrap().ino()
            );
        }
    }
    // And again once the kernel has forgotten everything.
    drop_caches();
    assert_eq!(idents(m.path()), backing);
}

#[test]
fn stat_is_stable_across_reads_cache_drops_and_remounts() {
    let mut m = Mounted::with(populate);
    let first = idents(m.path());
    // Reading every file and listing every directory changes no identity or time.
    for (rel, _) in first.iter() {
        let p = m.p(rel);
        let md = std::fs::symlink_metadata(&p).unwrap();
        if md.is_file() {
            std::fs::read(&p).unwrap();
        } else if md.is_dir() {
            util::names(&p);
        }
    }
    assert_eq!(idents(m.path()), first, "after reading everything");
    drop_caches();
    assert_eq!(idents(m.path()), first, "after drop_caches");
    m.unmount();
    assert_eq!(idents(&m.project), first, "the bare directory");
    let o = common::agx(["mount".as_ref(), m.project.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(idents(m.path()), first, "after a remount");
}

/// One entry of `git ls-files --debug`: path -> (ctime, mtime, ino, uid, gid, size), times
/// as (seconds, nanoseconds).
type GitStat = ((i64, i64), (i64, i64), u64, u32, u32, u64);

fn parse_time(s: &str) -> (i64, i64) {
    let (a, b) = s.split_once(':').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

fn git_index_stat(dir: &Path) -> BTreeMap<String, GitStat> {
    let out = git_ok(dir, &["ls-files", "--debug"]);
    let mut map = BTreeMap::new();
    let mut lines = out.lines();
    while let Some(path) = lines.next() {
        let mut field = |name: &str| -> String {
            let l = lines.next().unwrap();
            let v = l.split_whitespace().collect::<Vec<_>>();
            let i = v.iter().position(|w| *w == name).unwrap();
            v[i + 1].to_string()
        };
        let ctime = parse_time(&field("ctime:"));
        let mtime = parse_time(&field("mtime:"));
        let ino_line = lines.next().unwrap();
        let ino = ino_line.split_whitespace().last().unwrap().parse().unwrap();
        let ids = lines.next().unwrap();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        let size_line = lines.next().unwrap();
        let size = size_line
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        map.insert(
            path.to_string(),
            (
                ctime,
                mtime,
                ino,
                ids[1].parse().unwrap(),
                ids[3].parse().unwrap(),
                size,
            ),
        );
    }
    map
}

/// What stat through `dir` says, in git's terms (git keeps 32 bits of ino).
fn stat_as_git(dir: &Path, rel: &str) -> GitStat {
    let md = std::fs::symlink_metadata(dir.join(rel)).unwrap();
    (
        (md.ctime(), md.ctime_nsec()),
        (md.mtime(), md.mtime_nsec()),
        md.ino() & 0xffff_ffff,
        md.uid(),
        md.gid(),
        md.size(),
    )
}

fn index_state(dir: &Path) -> (Vec<u8>, (i64, i64)) {
    let p = dir.join(".git/index");
    let md = std::fs::metadata(&p).unwrap();
    (std::fs::read(&p).unwrap(), (md.mtime(), md.mtime_nsec()))
}

fn assert_index_matches_stat(dir: &Path, when: &str) {
    let idx = git_index_stat(dir);
    assert!(idx.len() > 20, "{idx:?}");
    for (path, st) in &idx {
        assert_eq!(*st, stat_as_git(dir, path), "{path} {when}");
    }
}

fn status(dir: &Path) -> String {
    git_ok(dir, &["status", "--porcelain"])
}

/// git records stat data in its index and trusts it on the next `git status`. Through the
/// mount that data must match what stat reports, and stay matching across cache drops and
/// remounts: otherwise git re-reads files and rewrites the index on every status.
#[test]
fn git_status_trusts_its_index_across_cache_drops_and_remounts() {
    let mut m = Mounted::new();
    let dir = m.path().to_path_buf();
    git_ok(&dir, &["init", "-q"]);
    populate(&dir);
    std::fs::remove_file(dir.join("fifo")).unwrap();
    // Old mtimes: no entry is "racily clean", so an unchanged tree needs no index update.
    let o = util::sh_out(
        &dir,
        "find . -path ./.git -prune -o ! -type d -exec touch -h -d '2020-01-02 03:04:05.678' {} +",
    );
    assert!(o.status.success());
    git_ok(&dir, &["add", "-A"]);
    git_ok(&dir, &["commit", "-q", "-m", "init"]);
    assert_eq!(status(&dir), "");
    let before = index_state(&dir);
    assert_index_matches_stat(&dir, "after commit");

    assert_eq!(status(&dir), "");
    assert_eq!(
        index_state(&dir),
        before,
        "a second git status rewrote the index"
    );

    drop_caches();
    assert_eq!(status(&dir), "");
    assert_eq!(
        index_state(&dir),
        before,
        "git status after drop_caches rewrote the index"
    );
    assert_index_matches_stat(&dir, "after drop_caches");

    m.unmount();
    let o = common::agx(["mount".as_ref(), m.project.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_index_matches_stat(&dir, "after a remount");
    assert_eq!(status(&dir), "");
    assert_eq!(
        index_state(&dir),
        before,
        "git status after a remount rewrote the index"
    );

    // Sanity: a real change is seen.
    std::fs::write(dir.join("src/f3.rs"), "changed\n").unwrap();
    assert_eq!(status(&dir), " M src/f3.rs\n");
    let o = git(&dir, &["diff", "--quiet"]);
    assert_eq!(o.status.code(), Some(1));
}
