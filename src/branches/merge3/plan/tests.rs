use super::*;

fn file(s: &str) -> Entry {
    Entry::File {
        content: Content::Bytes(s.as_bytes().to_vec()),
        mode: 0o644,
    }
}

fn exe(s: &str) -> Entry {
    Entry::File {
        content: Content::Bytes(s.as_bytes().to_vec()),
        mode: 0o755,
    }
}

fn tree(items: &[(&str, Entry)]) -> Tree {
    items
        .iter()
        .map(|(p, e)| (p.to_string(), e.clone()))
        .collect()
}

fn run(b: &Tree, o: &Tree, t: &Tree) -> Plan {
    plan(b, o, t, &Options::default()).unwrap()
}

fn take(side: Side, from: &str) -> Action {
    Action::Take {
        side,
        from: from.into(),
        mode: None,
    }
}

fn kind_at(p: &Plan, path: &str) -> ConflictKind {
    match p.actions.get(path) {
        Some(Action::Conflict(c)) => c.conflict.kind.clone(),
        other => panic!("{path}: not a conflict: {other:?}"),
    }
}

const TEXT: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n";

#[test]
fn one_sided_changes_become_actions() {
    let b = tree(&[("a", file("a\n")), ("b", file("b\n")), ("c", file("c\n"))]);
    let o = tree(&[("a", file("A\n")), ("b", file("b\n")), ("c", file("c\n"))]);
    let t = tree(&[("a", file("a\n")), ("c", file("C\n")), ("n", file("new\n"))]);
    let p = run(&b, &o, &t);
    assert!(p.is_clean());
    assert_eq!(
        p.actions,
        BTreeMap::from([
            ("b".to_string(), Action::Delete),
            ("c".to_string(), take(Side::Theirs, "c")),
            ("n".to_string(), take(Side::Theirs, "n")),
        ])
    );
}

#[test]
fn both_modified_text_merges_or_conflicts() {
    let b = tree(&[("f", file("1\n2\n3\n"))]);
    let o = tree(&[("f", file("one\n2\n3\n"))]);
    let t = tree(&[("f", file("1\n2\nthree\n"))]);
    let p = run(&b, &o, &t);
    assert_eq!(
        p.actions["f"],
        Action::Write {
            bytes: b"one\n2\nthree\n".to_vec(),
            mode: 0o644
        }
    );
    let t = tree(&[("f", file("uno\n2\n3\n"))]);
    let p = run(&b, &o, &t);
    assert_eq!(kind_at(&p, "f"), ConflictKind::BothModified);
    let (_, c) = p.conflicts().next().unwrap();
    assert_eq!(c.conflict.text.as_ref().unwrap().hunks().count(), 1);
}

#[test]
fn mode_change_merges_with_content_change() {
    let b = tree(&[("f", file("1\n"))]);
    let o = tree(&[("f", file("2\n"))]);
    let t = tree(&[("f", exe("1\n"))]);
    let p = run(&b, &o, &t);
    assert_eq!(
        p.actions["f"],
        Action::Take {
            side: Side::Ours,
            from: "f".into(),
            mode: Some(0o755)
        }
    );
}

#[test]
fn rename_on_theirs_with_edit_on_ours_merges_at_new_name() {
    let b = tree(&[("old.txt", file(TEXT))]);
    let o = tree(&[("old.txt", file(&TEXT.replace("two", "TWO")))]);
    let t = tree(&[("dir/new.txt", file(&TEXT.replace("seven", "SEVEN")))]);
    let p = run(&b, &o, &t);
    assert_eq!(p.renamed_theirs["old.txt"], "dir/new.txt");
    assert_eq!(p.actions["old.txt"], Action::Delete);
    assert_eq!(
        p.actions["dir/new.txt"],
        Action::Write {
            bytes: TEXT
                .replace("two", "TWO")
                .replace("seven", "SEVEN")
                .into_bytes(),
            mode: 0o644
        }
    );
}

#[test]
fn rename_on_ours_with_edit_on_theirs() {
    let b = tree(&[("old", file(TEXT))]);
    let o = tree(&[("new", file(TEXT))]);
    let t = tree(&[("old", file(&TEXT.replace("one", "ONE")))]);
    let p = run(&b, &o, &t);
    // The edit lands at ours' new name; the old name stays gone.
    assert_eq!(p.actions.len(), 1);
    assert_eq!(p.actions["new"], take(Side::Theirs, "old"));
}

#[test]
fn pure_rename_on_theirs_moves_ours_unchanged_file() {
    let b = tree(&[("a", file(TEXT))]);
    let o = tree(&[("a", file(TEXT))]);
    let t = tree(&[("b", file(TEXT))]);
    let p = run(&b, &o, &t);
    // The same file either way; ours' is moved (the main tree's file keeps its history).
    assert_eq!(p.actions["a"], Action::Delete);
    assert_eq!(p.actions["b"], take(Side::Ours, "a"));
    // Ours edited it, theirs only renamed: ours' content moves to the new name.
    let o = tree(&[("a", file(&TEXT.replace("one", "1")))]);
    let p = run(&b, &o, &t);
    assert_eq!(p.actions["b"], take(Side::Ours, "a"));
    assert_eq!(p.actions["a"], Action::Delete);
}

#[test]
fn rename_rename_conflicts_at_both_names() {
    let b = tree(&[("a", file(TEXT))]);
    let o = tree(&[("x", file(TEXT))]);
    let t = tree(&[("y", file(TEXT))]);
    let p = run(&b, &o, &t);
    let rr = ConflictKind::RenameRename {
        base: "a".into(),
        ours: "x".into(),
        theirs: "y".into(),
    };
    assert_eq!(kind_at(&p, "x"), rr);
    assert_eq!(kind_at(&p, "y"), rr);
    assert!(!p.actions.contains_key("a"));
    // Same new name on both sides: no conflict, nothing to do.
    let p = run(&b, &o, &o);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // --theirs: x goes, y comes.
    let r = resolve(
        &run(&b, &o, &t),
        &Choices {
            all: Some(Choice::Theirs),
            ..Choices::default()
        },
    )
    .unwrap();
    assert_eq!(r["x"], Action::Delete);
    assert_eq!(r["y"], take(Side::Theirs, "y"));
}

#[test]
fn rename_delete_is_a_conflict() {
    let b = tree(&[("a", file(TEXT))]);
    let o = tree(&[]);
    let t = tree(&[("b", file(TEXT))]);
    let p = run(&b, &o, &t);
    assert_eq!(
        kind_at(&p, "b"),
        ConflictKind::DeleteModify {
            deleted_by: Side::Ours
        }
    );
}

#[test]
fn similar_renames_pair_at_fifty_percent() {
    let edited = TEXT.replace("one", "1").replace("two", "2");
    let b = tree(&[("a", file(TEXT)), ("z", file("unrelated\ncontent\n"))]);
    let o = tree(&[("b", file(&edited)), ("z", file("unrelated\ncontent\n"))]);
    let r = find_renames(&b, &o, &Options::default());
    assert_eq!(r, BTreeMap::from([("a".into(), "b".into())]));
    // Under the threshold: not a rename.
    let other = "x\ny\nz\nw\nthree\nfour\nq\nr\n";
    let o = tree(&[("b", file(other))]);
    assert!(find_renames(&b, &o, &Options::default()).is_empty());
    // Similarity off: only identical content pairs.
    let o = tree(&[("b", file(&edited))]);
    let opts = Options {
        similarity: None,
        ..Options::default()
    };
    assert!(find_renames(&b, &o, &opts).is_empty());
}

#[test]
fn exact_renames_prefer_the_same_file_name() {
    let b = tree(&[("src/lib.rs", file(TEXT))]);
    let o = tree(&[("a/other.rs", file(TEXT)), ("b/lib.rs", file(TEXT))]);
    let r = find_renames(&b, &o, &Options::default());
    assert_eq!(r["src/lib.rs"], "b/lib.rs");
}

#[test]
fn empty_files_are_not_paired() {
    let b = tree(&[("a", file(""))]);
    let o = tree(&[("b", file(""))]);
    assert!(find_renames(&b, &o, &Options::default()).is_empty());
}

#[test]
fn rename_onto_a_path_the_other_side_added_is_not_followed() {
    let b = tree(&[("a", file(TEXT))]);
    let o = tree(&[("a", file(TEXT)), ("b", file("mine\n"))]);
    let t = tree(&[("b", file(TEXT))]);
    let p = run(&b, &o, &t);
    assert_eq!(kind_at(&p, "b"), ConflictKind::AddAdd);
    assert_eq!(p.actions["a"], Action::Delete);
}

#[test]
fn binary_and_delete_modify_need_a_side_even_with_markers() {
    let b = tree(&[("bin", file("a\0")), ("t", file("1\n")), ("d", file("x\n"))]);
    let o = tree(&[("bin", file("b\0")), ("t", file("2\n")), ("d", file("y\n"))]);
    let t = tree(&[("bin", file("c\0")), ("t", file("3\n"))]);
    let p = run(&b, &o, &t);
    assert_eq!(kind_at(&p, "bin"), ConflictKind::Binary);
    assert_eq!(
        kind_at(&p, "d"),
        ConflictKind::DeleteModify {
            deleted_by: Side::Theirs
        }
    );
    let mut ch = Choices {
        all: Some(Choice::Markers),
        ..Choices::default()
    };
    let e = resolve(&p, &ch).unwrap_err();
    assert_eq!(
        e.paths.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["bin", "d"]
    );
    ch.paths.insert("bin".into(), Choice::Theirs);
    ch.paths.insert("d".into(), Choice::Theirs);
    let r = resolve(&p, &ch).unwrap();
    assert_eq!(r["bin"], take(Side::Theirs, "bin"));
    assert_eq!(r["d"], Action::Delete);
    assert_eq!(
        r["t"],
        Action::Write {
            bytes: b"<<<<<<< ours\n2\n||||||| base\n1\n=======\n3\n>>>>>>> theirs\n".to_vec(),
            mode: 0o644
        }
    );
    // --ours for the text conflict: ours' lines, which is ours' file here.
    ch.paths.insert("t".into(), Choice::Ours);
    ch.paths.insert("d".into(), Choice::Ours);
    let r = resolve(&p, &ch).unwrap();
    assert_eq!(
        r["t"],
        Action::Write {
            bytes: b"2\n".to_vec(),
            mode: 0o644
        }
    );
    assert!(!r.contains_key("d"), "ours keeps its modified file");
}

#[test]
fn nothing_resolves_without_choices() {
    let b = tree(&[("t", file("1\n"))]);
    let o = tree(&[("t", file("2\n"))]);
    let t = tree(&[("t", file("3\n"))]);
    let p = run(&b, &o, &t);
    assert!(resolve(&p, &Choices::default()).is_err());
}

#[test]
fn mode_conflict_resolution_keeps_merged_content() {
    let b = tree(&[("f", file("1\n2\n3\n"))]);
    let o = tree(&[(
        "f",
        Entry::File {
            content: Content::Bytes(b"one\n2\n3\n".to_vec()),
            mode: 0o600,
        },
    )]);
    let t = tree(&[("f", exe("1\n2\nthree\n"))]);
    let p = run(&b, &o, &t);
    assert_eq!(kind_at(&p, "f"), ConflictKind::Mode);
    let r = resolve(
        &p,
        &Choices {
            all: Some(Choice::Theirs),
            ..Choices::default()
        },
    )
    .unwrap();
    assert_eq!(
        r["f"],
        Action::Write {
            bytes: b"one\n2\nthree\n".to_vec(),
            mode: 0o755
        }
    );
}

#[test]
fn symlinks_and_type_changes() {
    let l = |t: &str| Entry::Symlink {
        target: t.as_bytes().to_vec(),
    };
    let b = tree(&[("l", l("a")), ("m", l("a")), ("f", file("x\n"))]);
    let o = tree(&[("l", l("b")), ("m", l("a")), ("f", file("y\n"))]);
    let t = tree(&[("l", l("c")), ("m", l("c")), ("f", l("x"))]);
    let p = run(&b, &o, &t);
    assert_eq!(kind_at(&p, "l"), ConflictKind::Symlink);
    assert_eq!(p.actions["m"], take(Side::Theirs, "m"));
    assert_eq!(kind_at(&p, "f"), ConflictKind::TypeChange);
}

#[test]
fn directory_deleted_on_one_side_while_the_other_adds_below_stays() {
    let b = tree(&[("d", Entry::Dir), ("d/a", file("a\n"))]);
    let o = tree(&[
        ("d", Entry::Dir),
        ("d/a", file("a\n")),
        ("d/b", file("b\n")),
    ]);
    let t = tree(&[]);
    let p = run(&b, &o, &t);
    assert!(p.is_clean());
    assert_eq!(p.actions.get("d"), None, "d stays: ours added d/b");
    assert_eq!(p.actions["d/a"], Action::Delete);
}

#[test]
fn file_replacing_a_directory_with_content_is_a_directory_file_conflict() {
    let b = tree(&[("d", Entry::Dir), ("d/a", file("a\n"))]);
    let o = tree(&[
        ("d", Entry::Dir),
        ("d/a", file("a\n")),
        ("d/b", file("b\n")),
    ]);
    let t = tree(&[("d", file("now a file\n"))]);
    let p = run(&b, &o, &t);
    assert_eq!(kind_at(&p, "d"), ConflictKind::DirectoryFile);
    let theirs = Choices {
        paths: BTreeMap::from([("d".to_string(), Choice::Theirs)]),
        ..Choices::default()
    };
    let r = resolve(&p, &theirs).unwrap();
    assert_eq!(r["d"], take(Side::Theirs, "d"));
    assert_eq!(r["d/a"], Action::Delete);
    assert_eq!(r["d/b"], Action::Delete);
    let ours = Choices {
        all: Some(Choice::Ours),
        ..Choices::default()
    };
    let r = resolve(&p, &ours).unwrap();
    assert!(r.is_empty(), "ours keeps its directory: {r:?}");
    // Without content left below, the file simply replaces the directory.
    let o = tree(&[("d", Entry::Dir), ("d/a", file("a\n"))]);
    let p = run(&b, &o, &t);
    assert!(p.is_clean());
    assert_eq!(p.actions["d"], take(Side::Theirs, "d"));
}

#[test]
fn missing_bytes_are_an_error_only_when_needed() {
    let h = |s: &str| Entry::File {
        content: Content::Hash(crate::ids::ContentHash::of(s.as_bytes())),
        mode: 0o644,
    };
    let b = tree(&[("f", h("1\n")), ("g", h("1\n"))]);
    let o = tree(&[("f", h("1\n")), ("g", h("2\n"))]);
    let t = tree(&[("f", h("3\n")), ("g", h("3\n"))]);
    let e = plan(&b, &o, &t, &Options::default()).unwrap_err();
    assert!(matches!(e, MergeError::MissingContent { ref path, .. } if path == "g"));
    let t = tree(&[("f", h("3\n")), ("g", h("1\n"))]);
    assert!(plan(&b, &o, &t, &Options::default()).unwrap().is_clean());
}
