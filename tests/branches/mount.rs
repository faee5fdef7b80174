//! `agx branch mount NAME --at DIR`: a branch at a path of its own, served by the
//! project's daemon, its changes captured and visible in `.agx/branches/NAME/` at once.

use std::process::Command;

use crate::common::{agx_bin, sh, Mounted};
use crate::{branch, hist, tree};

fn project(p: &std::path::Path) {
    sh(p, "mkdir -p src; echo one > src/a; echo top > top");
}

fn is_mounted(p: &std::path::Path) -> bool {
    hist::is_agx_mount(&std::fs::canonicalize(p).unwrap())
}

#[test]
fn a_branch_mounted_at_its_own_path_is_the_branch() {
    let m = Mounted::with(project);
    let main_before = tree(m.path());
    let view = branch(&m, "wt", None);
    let dir = m.tmp.path().join("wt");
    std::fs::create_dir(&dir).unwrap();
    hist::ok(
        m.agx(["branch", "mount", "wt", "--at", &dir.to_string_lossy()]),
        "branch mount",
    );
    assert!(is_mounted(&dir));
    hist::assert_same_tree(&tree(&view), &tree(&dir), "the mount shows the branch");
    // Work at the mount: the branch's view sees it at once (no stale cache), the main
    // tree does not.
    sh(
        &dir,
        "echo two >> src/a && mkdir new && echo n > new/f && rm top && ls new >/dev/null",
    );
    assert_eq!(std::fs::read(view.join("src/a")).unwrap(), b"one\ntwo\n");
    assert!(!view.join("top").exists());
    hist::assert_same_tree(&tree(&view), &tree(&dir), "the view and the mount agree");
    // And the other way round.
    sh(&view, "echo from-view > new/g");
    assert_eq!(std::fs::read(dir.join("new/g")).unwrap(), b"from-view\n");
    hist::assert_same_tree(&main_before, &tree(m.path()), "the main tree is untouched");
    // Commands run at the mount are about the branch, paths relative to it.
    let out = Command::new(agx_bin())
        .args(["--json", "log", "--path", "src/a"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let log: serde_json::Value =
        serde_json::from_slice(&hist::ok(out, "log at the mount")).unwrap();
    assert_eq!(log.as_array().unwrap().len(), 1, "{log}");
    let list: serde_json::Value =
        serde_json::from_slice(&hist::ok(m.agx(["--json", "branch", "list"]), "list")).unwrap();
    assert_eq!(
        list[0]["mounted_at"][0].as_str(),
        Some(std::fs::canonicalize(&dir).unwrap().to_str().unwrap())
    );
    // A mounted branch is not deleted.
    let line = hist::user_error(&m.agx(["branch", "delete", "wt"]), "delete while mounted");
    assert!(line.contains("branch unmount"), "{line}");
    hist::ok(
        m.agx(["branch", "unmount", &dir.to_string_lossy()]),
        "branch unmount",
    );
    assert!(!is_mounted(&dir));
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "the directory is as it was"
    );
    // Mounted again, then the project unmounted: the branch mount goes with it.
    hist::ok(
        m.agx(["branch", "mount", "wt", "--at", &dir.to_string_lossy()]),
        "branch mount again",
    );
    let mut m = m;
    m.unmount();
    assert!(
        !is_mounted(&dir),
        "the branch mount ends with its project's daemon"
    );
}

#[test]
fn a_branch_mount_refuses_bad_places_with_one_line() {
    let m = Mounted::with(project);
    branch(&m, "b", None);
    let full = m.tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "x").unwrap();
    for (at, want) in [
        (full.to_string_lossy().into_owned(), "not empty"),
        (
            m.p("src").to_string_lossy().into_owned(),
            "inside its project",
        ),
        ("/no/such/dir".to_string(), "/no/such/dir"),
    ] {
        let line = hist::user_error(&m.agx(["branch", "mount", "b", "--at", &at]), &at);
        assert!(line.contains(want), "{at}: {line}");
    }
    let empty = m.tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let line = hist::user_error(
        &m.agx([
            "branch",
            "mount",
            "nosuch",
            "--at",
            &empty.to_string_lossy(),
        ]),
        "unknown branch",
    );
    assert!(line.contains("nosuch"), "{line}");
    assert!(!is_mounted(&empty));
}
