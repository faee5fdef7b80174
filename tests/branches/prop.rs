//! A property: any sequence of operations applied to a branch and to a plain copy of the
//! base tree leaves the two equal (content, mode, symlinks, empty directories, hard-link
//! groups), while the main tree, changed meanwhile by its own sequence, stays equal to a
//! plain copy of it that got only its own steps.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use crate::common::Mounted;
use crate::hist::{self, assert_same_tree, tree};
use crate::mutations::{apply, setup, step, Step};

#[derive(Clone, Debug)]
enum Op {
    /// A step in the branch (and the branch's plain copy).
    Branch(Step),
    /// A hard link in the branch: file `f` to a new name.
    Link { f: usize, d: usize, n: usize },
    /// A step in the main tree (and the main tree's plain copy).
    Main(Step),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => step().prop_map(Op::Branch),
        1 => (0usize..64, 0usize..64, 0usize..64).prop_map(|(f, d, n)| Op::Link { f, d, n }),
        2 => step().prop_map(Op::Main),
    ]
}

fn link(root: &Path, f: usize, d: usize, n: usize) {
    let now = crate::mutations::now(root);
    let (Some(src), Some(dir)) = (
        crate::mutations::pick(&now.files, f),
        crate::mutations::pick(&now.dirs, d),
    ) else {
        return;
    };
    let _ = std::fs::hard_link(root.join(src), root.join(dir).join(format!("l{}", n % 4)));
}

/// Paths grouped by the file they are (only groups of more than one name).
fn link_groups(root: &Path) -> Vec<Vec<PathBuf>> {
    let mut by_ino: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    for (p, node) in tree(root) {
        if matches!(node.obj, hist::Obj::File(_)) {
            let ino = std::fs::symlink_metadata(root.join(&p)).unwrap().ino();
            by_ino.entry(ino).or_default().push(p);
        }
    }
    let mut groups: Vec<Vec<PathBuf>> = by_ino.into_values().filter(|g| g.len() > 1).collect();
    groups.sort();
    groups
}

fn run(ops: &[Op], passthrough: bool) {
    let env: &[(&str, &str)] = if passthrough {
        &[]
    } else {
        &[("AGX_PASSTHROUGH", "0")]
    };
    let m = Mounted::with_env(setup, env);
    let plain = tempfile::tempdir().unwrap();
    let (pb, pm) = (plain.path().join("branch"), plain.path().join("main"));
    for d in [&pb, &pm] {
        std::fs::create_dir(d).unwrap();
        setup(d);
    }
    hist::ok(m.agx(["branch", "create", "p"]), "branch create");
    let b = m.p(".agx/branches/p");
    for o in ops {
        match o {
            Op::Branch(s) => {
                apply(&b, s);
                apply(&pb, s);
            }
            Op::Link { f, d, n } => {
                link(&b, *f, *d, *n);
                link(&pb, *f, *d, *n);
            }
            Op::Main(s) => {
                apply(m.path(), s);
                apply(&pm, s);
            }
        }
    }
    assert_same_tree(&tree(&pb), &tree(&b), "branch against its plain copy");
    assert_eq!(
        link_groups(&pb),
        link_groups(&b),
        "hard links in the branch"
    );
    assert_same_tree(
        &tree(&pm),
        &tree(m.path()),
        "main tree against its plain copy",
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: hist::prop_cases(16),
        max_shrink_iters: 300,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_branch_behaves_as_a_plain_copy_of_its_base(
        ops in proptest::collection::vec(op(), 1..40),
        passthrough in any::<bool>(),
    ) {
        run(&ops, passthrough);
    }
}
