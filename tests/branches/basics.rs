//! Making, listing, naming and deleting branches, and what `.agx/branches/` shows.

use std::os::unix::fs::MetadataExt;

use crate::common::{sh, Mounted};
use crate::{branch, hist, tree};

fn project(p: &std::path::Path) {
    sh(
        p,
        "mkdir -p src/deep/er empty; echo one > a; printf 'two\\n' > src/b; echo 3 > src/deep/er/c; \
         ln -s a link; ln -s missing dangling; mkfifo fifo; chmod 600 src/b; chmod 751 src/deep; \
         touch -d 2001-02-03 a; printf '\\0\\1\\2' > bin",
    );
}

#[test]
fn a_new_branch_shows_the_tree_as_it_is_and_is_listed() {
    let m = Mounted::with(project);
    let b = branch(&m, "try", None);
    hist::assert_same_tree(&tree(m.path()), &tree(&b), "branch at creation");
    // Metadata as the base has it: times, owner.
    let (ma, mb) = (
        std::fs::metadata(m.p("a")).unwrap(),
        std::fs::metadata(b.join("a")).unwrap(),
    );
    assert_eq!(
        (ma.mtime(), ma.uid(), ma.gid(), ma.len()),
        (mb.mtime(), mb.uid(), mb.gid(), mb.len())
    );
    let names: Vec<String> = std::fs::read_dir(m.p(".agx/branches"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["try".to_string()]);
    let list: serde_json::Value =
        serde_json::from_slice(&hist::ok(m.agx(["--json", "branch", "list"]), "list")).unwrap();
    assert_eq!(list[0]["name"], "try");
    assert_eq!(list[0]["files_changed"], 0);
    let show: serde_json::Value = serde_json::from_slice(&hist::ok(
        m.agx(["--json", "branch", "show", "try"]),
        "show",
    ))
    .unwrap();
    assert_eq!(show["path"], ".agx/branches/try");
}

#[test]
fn walkers_of_the_project_never_enter_branches() {
    let m = Mounted::with(project);
    branch(&m, "w", None);
    // `.agx` lists `at` only; `find` and `du` of the project see no branch.
    let names: Vec<String> = std::fs::read_dir(m.p(".agx"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["at".to_string()]);
    let found = sh(m.path(), "find . | sort");
    assert!(
        !found.contains("branches"),
        "find went into the branches: {found}"
    );
    let tarred = sh(m.path(), "tar cf - . | tar tf - | sort");
    assert!(
        !tarred.contains("branches"),
        "tar went into the branches: {tarred}"
    );
    // By name, they are there.
    assert!(m.p(".agx/branches/w/src/deep/er/c").exists());
}

#[test]
fn bad_names_and_duplicates_are_refused_with_one_line_and_change_nothing() {
    let m = Mounted::new();
    for bad in [
        "", "a/b", "-x", ".hid", "now", "cp:1", "main", "list", "a b", "x:y",
    ] {
        let err = hist::user_error(&m.agx(["branch", "create", "--", bad]), bad);
        assert!(err.contains("cannot name a branch"), "{bad}: {err}");
    }
    branch(&m, "one", None);
    let err = hist::user_error(&m.agx(["branch", "create", "one"]), "duplicate");
    assert!(err.contains("exists already"), "{err}");
    hist::ok(m.agx(["checkpoint", "cpname"]), "checkpoint");
    let err = hist::user_error(&m.agx(["branch", "create", "cpname"]), "checkpoint name");
    assert!(err.contains("checkpoint"), "{err}");
    let err = hist::user_error(
        &m.agx(["branch", "create", "x", "--from", "nonsense:1"]),
        "bad ref",
    );
    assert!(!err.is_empty());
    let list: serde_json::Value =
        serde_json::from_slice(&hist::ok(m.agx(["--json", "branch", "list"]), "list")).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
}

#[test]
fn rename_and_delete() {
    let m = Mounted::with(project);
    let b = branch(&m, "old", None);
    std::fs::write(b.join("mine"), "branch file\n").unwrap();
    hist::ok(m.agx(["branch", "rename", "old", "new"]), "rename");
    assert!(!m.p(".agx/branches/old").exists());
    assert_eq!(
        std::fs::read(m.p(".agx/branches/new/mine")).unwrap(),
        b"branch file\n"
    );
    hist::ok(m.agx(["branch", "delete", "new"]), "delete");
    assert!(!m.p(".agx/branches/new").exists());
    let all: serde_json::Value = serde_json::from_slice(&hist::ok(
        m.agx(["--json", "branch", "list", "--all"]),
        "list",
    ))
    .unwrap();
    assert!(all[0]["deleted"].is_string(), "{all}");
    // The name is free again.
    branch(&m, "new", None);
    assert!(!m.p(".agx/branches/new/mine").exists());
}

#[test]
fn nothing_of_agx_shows_or_can_be_set_in_a_branch() {
    let m = Mounted::with(project);
    let b = branch(&m, "x", None);
    let xattrs = sh(&b, "getfattr -d -m - -R . 2>/dev/null || true");
    assert!(!xattrs.contains("agx"), "agx's own xattrs show: {xattrs}");
    let out = crate::util::sh_out(&b, "setfattr -n user.agx.lower -v dsrc a");
    assert!(!out.status.success(), "setting agx's xattr was allowed");
    assert!(!b.join(".agx").exists(), "a branch has no .agx");
    let out = crate::util::sh_out(&b, "mkdir .agx");
    assert!(
        !out.status.success(),
        "mkdir .agx at a branch's root was allowed"
    );
}

/// Under a small descriptor limit the daemon releases idle nodes' descriptors and reopens
/// them by name; a branch's root is reached through the virtual `.agx/branches/` and has
/// no name to be reopened by, so it keeps its descriptor (found by the branch benchmark:
/// a mkdir at the root of a branch failed with ESTALE after an untar of 5,000 files).
#[test]
fn a_branch_root_stays_reachable_under_a_small_descriptor_limit() {
    let m = Mounted::with_env(project, &[("AGX_MAX_FDS", "400")]);
    let b = branch(&m, "many", None);
    sh(
        &b,
        "for d in $(seq 1 20); do mkdir d$d; for f in $(seq 1 100); do echo $f > d$d/f$f; done; done",
    );
    sh(
        &b,
        "mkdir late && echo x > late/x && ls d7 > /dev/null && cat a",
    );
    assert_eq!(std::fs::read(b.join("late/x")).unwrap(), b"x\n");
    let n = sh(&b, "find . -type f | wc -l");
    assert!(n.trim().parse::<usize>().unwrap() >= 2001, "{n}");
}
