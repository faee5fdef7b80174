//! Restore and hard links: names that were links of one file at the point restored to are
//! one file again (one inode, the right link count, the content of that point), however
//! the session broke the link (a write through one name, an editor's atomic save, a
//! delete and re-create); a link made during the session is removed and the file it
//! named gets its old content back, also when the session wrote through that new link
//! (and the kernel's cached link count of what stays is refreshed);
//! and undoing the restore gives the session's state back, links included (DESIGN.md
//! invariants 1 and 2).

mod common;
mod hist;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::Mounted;
use hist::{assert_same_tree, tree};

fn setup(p: &Path) {
    for d in ["g1", "g2/sub", "s", "t"] {
        std::fs::create_dir_all(p.join(d)).unwrap();
    }
    std::fs::write(p.join("g1/a"), "one\n").unwrap();
    std::fs::hard_link(p.join("g1/a"), p.join("g1/b")).unwrap();
    std::fs::write(p.join("g2/a"), "two\n").unwrap();
    std::fs::hard_link(p.join("g2/a"), p.join("g2/b")).unwrap();
    std::fs::hard_link(p.join("g2/a"), p.join("g2/sub/c")).unwrap();
    std::fs::write(p.join("s/x"), "x\n").unwrap();
    std::fs::write(p.join("s/plain"), "plain\n").unwrap();
    std::fs::write(p.join("t/x"), "t\n").unwrap();
}

/// (inode, link count) of `p`, not following symlinks.
fn id(p: &Path) -> (u64, u64) {
    let md = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (md.ino(), md.nlink())
}

/// Asserts that the names are one file with exactly that many links.
#[track_caller]
fn linked(root: &Path, names: &[&str], what: &str) {
    let first = id(&root.join(names[0]));
    for n in names {
        assert_eq!(
            id(&root.join(n)),
            (first.0, names.len() as u64),
            "{what}: {n} should be one of {} links of inode {} ({})",
            names.len(),
            first.0,
            root.display()
        );
    }
}

/// Changes every group of links in a different way.
fn change(m: &Mounted) {
    // g1: written in place through one name (both names see it).
    std::fs::write(m.p("g1/a"), "one changed\n").unwrap();
    assert_eq!(std::fs::read(m.p("g1/b")).unwrap(), b"one changed\n");
    // g2: an editor's atomic save of one name, another name deleted and re-created.
    std::fs::write(m.p("g2/.a.swp"), "two saved\n").unwrap();
    std::fs::rename(m.p("g2/.a.swp"), m.p("g2/a")).unwrap();
    std::fs::remove_file(m.p("g2/b")).unwrap();
    std::fs::write(m.p("g2/b"), "two other\n").unwrap();
    // s: a link made during the session, and a write through it.
    std::fs::hard_link(m.p("s/x"), m.p("s/y")).unwrap();
    std::fs::write(m.p("s/y"), "x via y\n").unwrap();
    assert_eq!(std::fs::read(m.p("s/x")).unwrap(), b"x via y\n");
    // t: only a link made.
    std::fs::hard_link(m.p("t/x"), m.p("t/y")).unwrap();
}

#[test]
fn restore_makes_links_one_file_again_and_can_be_undone() {
    let m = Mounted::at(setup);
    let start = tree(m.path());
    let start_seq = hist::last_seq(&m);
    change(&m);
    let changed = tree(m.path());
    linked(m.path(), &["g1/a", "g1/b"], "changed");
    linked(m.path(), &["s/x", "s/y"], "changed");
    linked(m.path(), &["t/x", "t/y"], "changed");
    let at = hist::ref_after(&m, start_seq).expect("events");

    let undo = hist::restore(&m, &at, &[]).expect("the restore changed something");
    // Through the mount and on the disk alike.
    for root in [m.path(), m.project.as_path()] {
        linked(root, &["g1/a", "g1/b"], "restored g1");
        linked(root, &["g2/a", "g2/b", "g2/sub/c"], "restored g2");
        linked(root, &["s/x"], "the session's link is gone");
        assert!(!root.join("s/y").exists());
        assert_eq!(std::fs::read(root.join("s/x")).unwrap(), b"x\n");
        linked(
            root,
            &["t/x"],
            "the link made is gone, the file keeps its inode",
        );
        assert!(!root.join("t/y").exists());
    }
    assert_same_tree(&start, &tree(m.path()), "after the restore");

    // The restore is undone like any change, links included.
    hist::restore(&m, &undo, &[]);
    assert_same_tree(&changed, &tree(m.path()), "after undoing the restore");
    for root in [m.path(), m.project.as_path()] {
        linked(root, &["g1/a", "g1/b"], "undone g1");
        linked(root, &["s/x", "s/y"], "undone s");
        linked(root, &["t/x", "t/y"], "undone t");
        linked(root, &["g2/a"], "undone g2/a");
        linked(root, &["g2/b"], "undone g2/b");
        linked(root, &["g2/sub/c"], "undone g2/sub/c");
    }
}

/// A restore limited to some paths links only the names inside them: names outside are
/// left as they are.
#[test]
fn a_restore_of_some_paths_links_only_names_inside_them() {
    let m = Mounted::at(setup);
    let start_seq = hist::last_seq(&m);
    change(&m);
    let at = hist::ref_after(&m, start_seq).expect("events");
    hist::restore(&m, &at, &["g2/a", "g2/b"]);
    for root in [m.path(), m.project.as_path()] {
        linked(root, &["g2/a", "g2/b"], "restored g2/a and g2/b");
        assert_eq!(std::fs::read(root.join("g2/a")).unwrap(), b"two\n");
        linked(root, &["g2/sub/c"], "g2/sub/c is outside the restore");
        linked(root, &["g1/a", "g1/b"], "g1 is outside the restore");
        assert_eq!(std::fs::read(root.join("g1/a")).unwrap(), b"one changed\n");
    }
}
