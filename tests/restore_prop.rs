//! Restore, as a property: after any sequence of mutations through the mount, restoring to
//! the point before the first one gives back the tree exactly (contents, modes, symlink
//! targets, the set of paths including empty directories), and restoring to the point
//! before that restore gives back the tree the mutations had made (DESIGN.md invariants 1
//! and 2).

mod common;
mod hist;
mod mutations;

use common::Mounted;
use hist::{assert_same_tree, tree};
use mutations::{apply, setup, step, Data, Step};
use proptest::prelude::*;

/// Runs `steps` through a fresh mount (with kernel passthrough or through the daemon)
/// and checks both restores.
fn run(steps: &[Step], passthrough: bool) {
    let env: &[(&str, &str)] = if passthrough {
        &[]
    } else {
        &[("AGX_PASSTHROUGH", "0")]
    };
    let m = Mounted::with_env(setup, env);
    let before = tree(m.path());
    assert_eq!(
        before,
        tree(&m.project.clone()),
        "the mount shows the project"
    );
    let start = hist::last_seq(&m);
    for s in steps {
        apply(m.path(), s);
    }
    let after = tree(m.path());
    let Some(at) = hist::ref_after(&m, start) else {
        assert_same_tree(
            &before,
            &after,
            "no event recorded, so nothing may have changed",
        );
        return;
    };
    let undo = hist::restore(&m, &at, &[]);
    assert_same_tree(&before, &tree(m.path()), &format!("after restore {at}"));
    match undo {
        Some(undo) => {
            hist::restore(&m, &undo, &[]);
            assert_same_tree(&after, &tree(m.path()), &format!("after restore {undo}"));
        }
        None => assert_same_tree(&before, &after, "the restore changed nothing"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: hist::prop_cases(24),
        max_shrink_iters: 300,
        ..ProptestConfig::default()
    })]

    #[test]
    fn restore_to_the_start_and_back(
        steps in proptest::collection::vec(step(), 1..40),
        passthrough in any::<bool>(),
    ) {
        run(&steps, passthrough);
    }
}

/// Fixed sequences that once went wrong or exercise tricky moves.
#[test]
fn directory_moves_and_replacements() {
    use Step::*;
    run(
        &[
            // p moved into q, a file written inside it, q renamed over an empty dir.
            Rename { src: 0, d: 0, n: 4 },
            Mkdir { d: 0, n: 3 },
            Create {
                d: 1,
                n: 1,
                data: Data(b"new in p\n".to_vec()),
            },
            Write {
                f: 0,
                data: Data(b"rewritten\n".to_vec()),
            },
            Rename { src: 3, d: 0, n: 0 },
            Chmod { e: 2, mode: 3 },
            Unlink { f: 1 },
            Symlink { d: 0, n: 2, t: 1 },
        ],
        true,
    );
}
