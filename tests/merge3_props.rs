//! merge3 on arbitrary input: nothing panics, and the plain laws of a three-way merge
//! hold. For text: one side unchanged gives the other side; for trees: a plan for an
//! unchanged main tree, applied, gives the branch's tree; an unchanged branch or equal
//! sides give an empty plan; `--ours`/`--theirs` for the run always settle everything.
//!
//! AGX_PROP_CASES=N runs N cases per property (default 200).

use std::collections::BTreeMap;

use agx::branches::merge3::{
    merge_text, plan, resolve, Action, Choice, Choices, Content, Entry, Labels, Options, Side,
    TextMerge, Tree,
};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("AGX_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Bytes with many newlines, CRs, NULs and invalid UTF-8.
fn text() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            4 => Just(b'\n'),
            1 => Just(b'\r'),
            1 => Just(0u8),
            1 => Just(0xffu8),
            6 => b'a'..b'e',
        ],
        0..40,
    )
}

fn entry() -> impl Strategy<Value = Entry> {
    let content = prop_oneof![
        Just(b"one\ntwo\nthree\nfour\n".to_vec()),
        Just(b"one\nTWO\nthree\nfour\n".to_vec()),
        Just(b"one\ntwo\nthree\nFOUR\n".to_vec()),
        Just(b"x\n".to_vec()),
        Just(Vec::new()),
        Just(b"\0bin".to_vec()),
        Just(b"\0BIN".to_vec()),
    ];
    prop_oneof![
        4 => (content, prop_oneof![Just(0o644u32), Just(0o755), Just(0o600)])
            .prop_map(|(c, mode)| Entry::File { content: Content::Bytes(c), mode }),
        1 => prop_oneof![Just("t1"), Just("t2")]
            .prop_map(|t| Entry::Symlink { target: t.as_bytes().to_vec() }),
        1 => Just(Entry::Dir),
        1 => Just(Entry::Other { mode: 0o10644, rdev: 0 }),
    ]
}

fn tree() -> impl Strategy<Value = Tree> {
    let path = prop_oneof![
        Just("a"),
        Just("b"),
        Just("d"),
        Just("d/a"),
        Just("d/b"),
        Just("d/e"),
        Just("d/e/f"),
        Just("x"),
    ];
    proptest::collection::btree_map(path.prop_map(String::from), entry(), 0..6).prop_map(
        |mut t: Tree| {
            // A real tree has nothing below a file, symlink or special.
            let blocked: Vec<String> = t
                .keys()
                .filter(|p| {
                    t.iter()
                        .any(|(q, e)| !e.is_dir() && p.starts_with(&format!("{q}/")))
                })
                .cloned()
                .collect();
            for p in blocked {
                t.remove(&p);
            }
            // ...and has the directories above each path.
            let parents: Vec<String> = t
                .keys()
                .flat_map(|p| {
                    p.match_indices('/')
                        .map(|(i, _)| p[..i].to_string())
                        .collect::<Vec<_>>()
                })
                .collect();
            for d in parents {
                t.insert(d, Entry::Dir);
            }
            t
        },
    )
}

/// The main tree after the (conflict-free) actions: every source is read first.
fn apply(ours: &Tree, theirs: &Tree, actions: &BTreeMap<String, Action>) -> Tree {
    let mut out = ours.clone();
    for (p, a) in actions {
        match a {
            Action::Delete => {
                out.remove(p);
            }
            Action::Write { bytes, mode } => {
                out.insert(
                    p.clone(),
                    Entry::File {
                        content: Content::Bytes(bytes.clone()),
                        mode: *mode,
                    },
                );
            }
            Action::Take { side, from, mode } => {
                let src = match side {
                    Side::Ours => ours,
                    Side::Theirs => theirs,
                };
                let mut e = src.get(from).cloned().expect("a source exists");
                if let (Entry::File { mode: m, .. }, Some(new)) = (&mut e, mode) {
                    *m = *new;
                }
                out.insert(p.clone(), e);
            }
            Action::Conflict(_) => panic!("conflict left in resolved actions"),
        }
    }
    out
}

fn same_tree(a: &Tree, b: &Tree) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|((p, x), (q, y))| p == q && x.same(y))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn text_merge_never_panics_and_one_side_unchanged_gives_the_other(
        b in text(), o in text(), t in text(),
    ) {
        match merge_text(&b, &o, &t) {
            TextMerge::Clean(m) => {
                if o == t { prop_assert_eq!(&m, &o); }
            }
            TextMerge::Conflicted(c) => {
                prop_assert!(c.hunks().count() > 0);
                let _ = c.with_markers(&Labels::default());
                let _ = c.resolve(Side::Ours);
                let _ = c.resolve(Side::Theirs);
            }
        }
        prop_assert_eq!(merge_text(&b, &b, &t), TextMerge::Clean(t.clone()));
        prop_assert_eq!(merge_text(&b, &o, &b), TextMerge::Clean(o.clone()));
        prop_assert_eq!(merge_text(&b, &o, &o), TextMerge::Clean(o.clone()));
    }

    #[test]
    fn plans_never_panic_and_sides_settle_everything(
        b in tree(), o in tree(), t in tree(),
    ) {
        let p = plan(&b, &o, &t, &Options::default()).unwrap();
        for choice in [Choice::Ours, Choice::Theirs] {
            let ch = Choices { all: Some(choice), ..Choices::default() };
            let r = resolve(&p, &ch);
            prop_assert!(r.is_ok(), "{:?}: {:?}", choice, r);
            let _ = apply(&o, &t, &r.unwrap());
        }
        let ch = Choices { all: Some(Choice::Markers), ..Choices::default() };
        let _ = resolve(&p, &ch);
    }

    #[test]
    fn unchanged_main_tree_becomes_the_branch(b in tree(), t in tree()) {
        let p = plan(&b, &b, &t, &Options::default()).unwrap();
        prop_assert!(p.is_clean(), "{:?}", p.actions);
        let r = resolve(&p, &Choices::default()).unwrap();
        let got = apply(&b, &t, &r);
        prop_assert!(same_tree(&got, &t), "got {:?}\nwant {:?}", got, t);
    }

    #[test]
    fn unchanged_branch_or_equal_sides_do_nothing(b in tree(), o in tree()) {
        let p = plan(&b, &o, &b, &Options::default()).unwrap();
        prop_assert!(p.actions.is_empty(), "{:?}", p.actions);
        let p = plan(&b, &o, &o, &Options::default()).unwrap();
        prop_assert!(p.actions.is_empty(), "{:?}", p.actions);
    }
}
