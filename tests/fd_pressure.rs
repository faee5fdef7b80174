//! The daemon under a small descriptor limit (`AGX_MAX_FDS`): the kernel may cache far more
//! inodes than the daemon may hold descriptors, so it holds some and reopens the others by
//! name. Trees many times larger than the limit must work as on the disk, and restore.

mod common;
mod hist;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::Mounted;
use hist::{assert_same_tree, ok, ref_after, tree};

const LIMIT: &str = "400";

fn content(d: usize, f: usize) -> String {
    format!("dir {d} file {f}\n").repeat(1 + f % 7)
}

/// The daemon's open descriptors, from /proc.
fn daemon_fds(m: &Mounted) -> usize {
    let pid = m.daemon_pid().expect("daemon pid");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("daemon's fd dir")
        .count()
}

#[test]
fn a_tree_far_larger_than_the_limit_works_and_restores() {
    let mut m = Mounted::with_env(|_| {}, &[("AGX_MAX_FDS", LIMIT)]);
    let root = m.path().to_path_buf();
    // 3,000 files in 30 directories: every one a node the kernel caches.
    for d in 0..30 {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}")), content(d, f)).unwrap();
        }
    }
    // Read back twice (the second pass reaches nodes whose descriptors were released).
    for _ in 0..2 {
        for d in 0..30 {
            for f in 0..100 {
                let p = root.join(format!("d{d}/f{f}"));
                let got = std::fs::read_to_string(&p).unwrap();
                assert_eq!(got, content(d, f), "{}", p.display());
                assert_eq!(std::fs::metadata(&p).unwrap().len(), got.len() as u64);
            }
        }
    }
    let find = std::process::Command::new("find")
        .args([".", "-type", "f", "-not", "-path", "./.agx/*"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(find.status.success(), "find: {}", hist::stderr(&find));
    assert_eq!(hist::stdout(&find).lines().count(), 3000);
    let held = daemon_fds(&m);
    assert!(
        held < 400,
        "the daemon holds {held} descriptors, over its limit"
    );

    // 1,500 renames over existing files, each replacing a file whose before-image must
    // be kept, then restored.
    let before = tree(&root);
    let seq = hist::last_seq(&m);
    for d in 0..30 {
        for f in 0..50 {
            let dir = root.join(format!("d{d}"));
            std::fs::rename(dir.join(format!("f{f}")), dir.join(format!("f{}", f + 50))).unwrap();
        }
    }
    assert_eq!(
        std::fs::read_to_string(root.join("d3/f60")).unwrap(),
        content(3, 10)
    );
    let at = ref_after(&m, seq).expect("the renames' events");
    ok(
        m.agx(["restore", &at, "--yes"]),
        "restore after the renames",
    );
    assert_same_tree(
        &before,
        &tree(&root),
        "restored after 1,500 renames over files",
    );
    m.unmount();
}

#[test]
fn a_hard_link_whose_other_name_went_stays_usable() {
    let m = Mounted::with_env(|_| {}, &[("AGX_MAX_FDS", LIMIT)]);
    let root = m.path();
    std::fs::write(root.join("a"), "shared\n").unwrap();
    let ino = std::fs::metadata(root.join("a")).unwrap().ino();
    // Linked last as "b": that is the name the daemon would reopen it by. Then "b" goes.
    std::fs::hard_link(root.join("a"), root.join("b")).unwrap();
    std::fs::remove_file(root.join("b")).unwrap();
    // Enough other nodes that every idle descriptor is released at least once.
    std::fs::create_dir(root.join("many")).unwrap();
    for i in 0..1500 {
        std::fs::write(root.join(format!("many/{i}")), "x").unwrap();
    }
    let md = std::fs::metadata(root.join("a")).unwrap();
    assert_eq!((md.ino(), md.nlink()), (ino, 1));
    assert_eq!(std::fs::read_to_string(root.join("a")).unwrap(), "shared\n");
    std::fs::write(root.join("a"), "changed\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("a")).unwrap(),
        "changed\n"
    );
    let held = daemon_fds(&m);
    assert!(
        held < 400,
        "the daemon holds {held} descriptors, over its limit"
    );
}

#[test]
fn a_renamed_directory_keeps_its_released_children_reachable() {
    let m = Mounted::with_env(|_| {}, &[("AGX_MAX_FDS", LIMIT)]);
    let root = m.path();
    std::fs::create_dir_all(root.join("top/mid")).unwrap();
    for i in 0..600 {
        std::fs::write(root.join(format!("top/mid/{i}")), format!("{i}\n")).unwrap();
    }
    std::fs::rename(root.join("top"), root.join("moved")).unwrap();
    std::fs::rename(root.join("moved/mid"), root.join("moved/inner")).unwrap();
    for i in 0..600 {
        let p = root.join(format!("moved/inner/{i}"));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{i}\n"));
    }
    let ls = std::process::Command::new("ls")
        .args(["-laR", "moved"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(ls.status.success(), "ls -laR: {}", hist::stderr(&ls));
    assert!(!Path::new(&root.join("top")).exists());
    let held = daemon_fds(&m);
    assert!(
        held < 400,
        "the daemon holds {held} descriptors, over its limit"
    );
}

/// A shell whose working directory is removed lists it (empty, as on the disk) after the
/// daemon had to release descriptors: the removed directory has no name to be reopened by.
fn removed_cwd(dir: &Path) -> String {
    let script = "mkdir many gone && cd gone && rmdir ../gone && \
                  i=0; while [ $i -lt 1200 ]; do : > ../many/$i; i=$((i+1)); done; \
                  ls -a .; echo ls=$?";
    let o = std::process::Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_removed_working_directory_stays_reachable() {
    let bare = tempfile::tempdir().unwrap();
    let want = removed_cwd(bare.path());
    let m = Mounted::with_env(|_| {}, &[("AGX_MAX_FDS", LIMIT)]);
    assert_eq!(removed_cwd(m.path()), want);
    assert!(want.contains("ls=0"), "{want}");
}
