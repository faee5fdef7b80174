//! Restore with hard links, as a property: after any sequence of links, writes through one
//! name, editor-style replacements, renames, deletes and mode changes through the mount,
//! restoring to the point before them gives back the tree exactly and the same names as
//! links of one file; restoring to the point before that restore gives back the
//! mutations' tree and links (DESIGN.md invariants 1 and 2).

mod common;
mod hist;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::Mounted;
use hist::{assert_same_tree, tree};
use proptest::prelude::*;

const NAMES: &[&str] = &["a", "b", "c", "x", "d/e", "d/f", "d/g"];

#[derive(Clone, Debug)]
enum Op {
    /// `to` becomes another name of `from` (when `to` is free).
    Link {
        from: usize,
        to: usize,
    },
    /// Rewritten in place (O_TRUNC): every name of the file shows it.
    Write {
        f: usize,
        tag: u8,
    },
    /// An editor's save: a new file renamed over the name.
    Replace {
        f: usize,
        tag: u8,
    },
    Rename {
        f: usize,
        to: usize,
    },
    Unlink {
        f: usize,
    },
    Chmod {
        f: usize,
        exec: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let i = || 0usize..NAMES.len();
    prop_oneof![
        3 => (i(), i()).prop_map(|(from, to)| Op::Link { from, to }),
        3 => (i(), any::<u8>()).prop_map(|(f, tag)| Op::Write { f, tag }),
        2 => (i(), any::<u8>()).prop_map(|(f, tag)| Op::Replace { f, tag }),
        2 => (i(), i()).prop_map(|(f, to)| Op::Rename { f, to }),
        2 => i().prop_map(|f| Op::Unlink { f }),
        1 => (i(), any::<bool>()).prop_map(|(f, exec)| Op::Chmod { f, exec }),
    ]
}

fn setup(p: &Path) {
    std::fs::create_dir(p.join("d")).unwrap();
    std::fs::write(p.join("a"), "a\n").unwrap();
    std::fs::hard_link(p.join("a"), p.join("b")).unwrap();
    std::fs::write(p.join("c"), "c\n").unwrap();
    std::fs::hard_link(p.join("c"), p.join("d/e")).unwrap();
    std::fs::hard_link(p.join("c"), p.join("d/f")).unwrap();
    std::fs::write(p.join("x"), "x\n").unwrap();
}

/// Applies one step; a step that does not apply (a missing name) is skipped.
fn apply(root: &Path, op: &Op) {
    let p = |i: usize| root.join(NAMES[i]);
    let _ = match op {
        Op::Link { from, to } => std::fs::hard_link(p(*from), p(*to)),
        Op::Write { f, tag } if p(*f).exists() => std::fs::write(p(*f), format!("w{tag}\n")),
        Op::Replace { f, tag } => std::fs::write(root.join("d/.tmp"), format!("r{tag}\n"))
            .and_then(|()| std::fs::rename(root.join("d/.tmp"), p(*f))),
        Op::Rename { f, to } => std::fs::rename(p(*f), p(*to)),
        Op::Unlink { f } => std::fs::remove_file(p(*f)),
        Op::Chmod { f, exec } => std::fs::set_permissions(
            p(*f),
            std::fs::Permissions::from_mode(if *exec { 0o755 } else { 0o600 }),
        ),
        Op::Write { .. } => Ok(()),
    };
}

/// The names of each file that has more than one, as sets of paths.
fn links(root: &Path) -> BTreeSet<BTreeSet<PathBuf>> {
    let mut by_ino: BTreeMap<u64, BTreeSet<PathBuf>> = BTreeMap::new();
    for rel in tree(root).keys() {
        let md = std::fs::symlink_metadata(root.join(rel)).unwrap();
        if md.is_file() {
            by_ino.entry(md.ino()).or_default().insert(rel.clone());
        }
    }
    by_ino.into_values().filter(|s| s.len() > 1).collect()
}

fn run(ops: &[Op]) {
    let m = Mounted::at(setup);
    let (before, before_links) = (tree(m.path()), links(m.path()));
    let start = hist::last_seq(&m);
    for o in ops {
        apply(m.path(), o);
    }
    let (after, after_links) = (tree(m.path()), links(m.path()));
    let Some(at) = hist::ref_after(&m, start) else {
        return;
    };
    let undo = hist::restore(&m, &at, &[]);
    assert_same_tree(&before, &tree(m.path()), &format!("after restore {at}"));
    assert_eq!(before_links, links(&m.project), "links after restore {at}");
    assert_eq!(before_links, links(m.path()), "links through the mount");
    if let Some(undo) = undo {
        hist::restore(&m, &undo, &[]);
        assert_same_tree(&after, &tree(m.path()), &format!("after restore {undo}"));
        assert_eq!(after_links, links(&m.project), "links after restore {undo}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: hist::prop_cases(24),
        max_shrink_iters: 300,
        ..ProptestConfig::default()
    })]

    #[test]
    fn restore_brings_back_contents_and_links(ops in proptest::collection::vec(op(), 1..16)) {
        run(&ops);
    }
}
