//! Point 4: files changed while nothing was mounted. The model never takes a live file
//! changed outside agx for its recorded after-image; the outside change becomes history
//! itself (an event by "(outside agx)") as soon as agx notices it, so it can be undone.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::common::{agx_bin, sh, Mounted};
use crate::hist;

const OUTSIDE: &str = "(outside agx)";

fn outside_events(m: &Mounted) -> Vec<serde_json::Value> {
    hist::events(m)
        .into_iter()
        .filter(|e| e["process"] == OUTSIDE)
        .collect()
}

fn remount(m: &Mounted) {
    let out = Command::new(agx_bin())
        .arg("mount")
        .arg(&m.project)
        .output()
        .unwrap();
    hist::ok(out, "agx mount");
}

#[test]
fn an_edit_made_while_unmounted_is_history_and_restore_sees_through_it() {
    let mut m = Mounted::new();
    sh(m.path(), "echo v1 > f");
    hist::ok(m.agx(["checkpoint", "c0"]), "checkpoint");
    sh(m.path(), "echo v2 > f");
    m.unmount();
    sh(&m.project, "sed -i s/v2/v3/ f");
    // Unmounted: show and log see it.
    assert_eq!(hist::show(&m, "c0", "f"), b"v1\n");
    let ev = outside_events(&m);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["path"], "f");
    assert_eq!(ev[0]["before"], hist::b3(b"v2\n"));
    assert_eq!(ev[0]["after"], hist::b3(b"v3\n"));
    // Mounted again: the outside change can be undone, and so can everything before it.
    remount(&m);
    let before_outside = format!("event:{}", ev[0]["seq"]);
    hist::restore(&m, &before_outside, &[]);
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"v2\n");
    hist::restore(&m, "c0", &[]);
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"v1\n");
    assert_eq!(outside_events(&m).len(), 1, "noticed once");
}

#[test]
fn a_change_is_noticed_at_the_first_lookup_before_any_new_change() {
    let mut m = Mounted::with(|p| std::fs::create_dir(p.join("d")).unwrap());
    // Contents written twice: a creation's content is only hashed, a rewrite's is stored.
    sh(
        m.path(),
        "printf on > d/f && echo e >> d/f && printf kee > d/g && echo p >> d/g && chmod 600 d/g && ln -s f d/l",
    );
    m.unmount();
    sh(
        &m.project,
        "echo two > d/f && ln -sfn g d/l && echo new > d/new && rm d/g",
    );
    remount(&m);
    // Through the mount: the lookup notices before the write goes through.
    sh(
        m.path(),
        "cat d/f >/dev/null; echo three > d/f; ls -l d >/dev/null",
    );
    let at = outside_events(&m);
    let names: Vec<_> = at.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert!(names.contains(&"d/f") && names.contains(&"d/l"), "{at:?}");
    let first_write = hist::events(&m)
        .into_iter()
        .find(|e| {
            e["process"] != OUTSIDE
                && e["path"] == "d/f"
                && e["op"] == "write"
                && e["before"] == hist::b3(b"two\n")
        })
        .expect("the write through the mount, after the outside change");
    let outside_f = at.iter().find(|e| e["path"] == "d/f").unwrap();
    assert!(outside_f["seq"].as_i64() < first_write["seq"].as_i64());
    // Before the outside changes: exactly the tree agx last saw (the removal of d/g is
    // noticed by the restore itself).
    let start = at.iter().map(|e| e["seq"].as_i64().unwrap()).min().unwrap();
    hist::restore(&m, &format!("event:{start}"), &[]);
    assert_eq!(std::fs::read(m.p("d/f")).unwrap(), b"one\n");
    assert_eq!(std::fs::read(m.p("d/g")).unwrap(), b"keep\n");
    let mode = std::fs::metadata(m.p("d/g")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(std::fs::read_link(m.p("d/l")).unwrap().to_str(), Some("f"));
    // d/new has no history: agx cannot tell it is new, so it stays.
    assert!(m.p("d/new").exists());
}

/// A copy of the project (`cp -a`) keeps its history: same contents, new inodes.
#[test]
fn a_copied_project_keeps_a_true_history() {
    let mut m = Mounted::new();
    sh(m.path(), "echo v1 > f && mkdir d && echo x > d/x");
    hist::ok(m.agx(["checkpoint", "c0"]), "checkpoint");
    sh(m.path(), "echo v2 > f && rm d/x");
    m.unmount();
    let copy = m.tmp.path().join("copy");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&m.project)
        .arg(&copy)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let agx = |args: &[&str]| {
        Command::new(agx_bin())
            .arg("-C")
            .arg(&copy)
            .args(args)
            .output()
            .unwrap()
    };
    assert_eq!(
        hist::ok(
            agx(&["show", "c0", &copy.join("f").to_string_lossy()]),
            "show"
        ),
        b"v1\n"
    );
    hist::ok(agx(&["restore", "c0", "--yes"]), "restore in the copy");
    assert_eq!(std::fs::read(copy.join("f")).unwrap(), b"v1\n");
    assert_eq!(std::fs::read(copy.join("d/x")).unwrap(), b"x\n");
    let log: serde_json::Value =
        serde_json::from_slice(&hist::ok(agx(&["log", "--json"]), "log")).unwrap();
    let outside = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["process"] == OUTSIDE)
        .count();
    assert_eq!(outside, 0, "a copy changes nothing: {log}");
}

/// Work done through the mount leaves the timeline matching the tree: nothing looks
/// changed outside agx afterwards (folded metadata changes, copies, archives, git,
/// restores).
#[test]
fn ordinary_work_leaves_nothing_that_looks_changed_outside() {
    let mut m = Mounted::with(|p| {
        std::fs::create_dir(p.join("src")).unwrap();
        std::fs::write(p.join("src/a.c"), "int a;\n").unwrap();
    });
    sh(
        m.path(),
        "set -e
         mkdir -p t/x && echo 1 > t/x/one && chmod 751 t/x/one && touch -d 2001-01-01 t/x/one
         tar cf /tmp/agx-outside-$$.tar -C t x && mkdir u && tar xpf /tmp/agx-outside-$$.tar -C u
         rm /tmp/agx-outside-$$.tar
         cp -a src src2 && cp -a t/x t/y && install -m 700 src/a.c src/b.c
         git init -q . && git add src && git -c user.name=t -c user.email=t@t commit -q -m x
         echo more >> src/a.c && mv src/b.c src/c.c && chown 123:456 src/c.c",
    );
    hist::ok(m.agx(["checkpoint", "mid"]), "checkpoint");
    sh(m.path(), "rm -rf u && echo again > src/a.c");
    hist::restore(&m, "mid", &[]);
    m.unmount();
    remount(&m);
    sh(m.path(), "ls -lR . >/dev/null && cat src/a.c >/dev/null");
    hist::ok(m.agx(["diff", "--stat"]), "diff");
    hist::ok(m.agx(["restore", "mid", "--dry-run"]), "restore --dry-run");
    let ev = outside_events(&m);
    assert!(ev.is_empty(), "false outside changes: {ev:#?}");
}

/// A file with several names, edited while unmounted through a name agx never recorded:
/// the names with history see the change (their object's newest recorded state is not
/// what is there), so it is history and the point's content comes back for every name
/// (found by the model property test; such files were compared by kind only).
#[test]
fn an_edit_while_unmounted_through_another_name_of_a_file_is_noticed() {
    let mut m = Mounted::with(|p| {
        std::fs::create_dir(p.join("d")).unwrap();
        std::fs::write(p.join("a"), "setup\n").unwrap();
        std::fs::hard_link(p.join("a"), p.join("d/e")).unwrap();
    });
    sh(m.path(), "echo v1 > a && ln a b");
    hist::ok(m.agx(["checkpoint", "k0"]), "checkpoint");
    m.unmount();
    std::fs::write(m.project.join("d/e"), "outside\n").unwrap();
    m.remount();
    for name in ["a", "b", "d/e"] {
        assert_eq!(hist::show(&m, "k0", name), b"v1\n", "show k0 {name}");
    }
    hist::restore(&m, "k0", &[]);
    for name in ["a", "b", "d/e"] {
        assert_eq!(
            std::fs::read(m.p(name)).unwrap(),
            b"v1\n",
            "{name} after restore"
        );
    }
    assert!(!outside_events(&m).is_empty());
}

/// A point named after a remount comes after the changes made while unmounted, also those
/// no lookup has noticed yet (a removed file is never looked up): restoring to it keeps
/// them (found by the model property test: the file came back).
#[test]
fn a_checkpoint_after_a_remount_includes_what_changed_while_unmounted() {
    let mut m = Mounted::new();
    sh(
        m.path(),
        "mkdir s && echo one > s/t && echo two > s/t && echo k > keep",
    );
    m.unmount();
    std::fs::remove_file(m.project.join("s/t")).unwrap();
    std::fs::write(m.project.join("keep"), "changed\n").unwrap();
    m.remount();
    hist::ok(m.agx(["checkpoint", "after"]), "checkpoint");
    sh(m.path(), "echo later > s/u");
    hist::restore(&m, "after", &[]);
    assert!(!m.p("s/t").exists(), "s/t was gone at the checkpoint");
    assert!(!m.p("s/u").exists());
    assert_eq!(std::fs::read(m.p("keep")).unwrap(), b"changed\n");
    assert_eq!(hist::show(&m, "after", "keep"), b"changed\n");
}

/// The state at a point reads live files where they went since (a rename): a change made
/// while unmounted at the new name is history before that state is built, also when the
/// command names only the old name (found by the model property test: `show` said the
/// file "did not exist" at the point).
#[test]
fn a_file_moved_then_removed_while_unmounted_is_still_there_at_a_point_before_the_move() {
    let mut m = Mounted::with(|p| std::fs::create_dir(p.join("d")).unwrap());
    sh(m.path(), "echo v1 > c && echo v2 > c");
    hist::ok(m.agx(["checkpoint", "k0"]), "checkpoint");
    sh(m.path(), "mv c d/g");
    m.unmount();
    std::fs::remove_file(m.project.join("d/g")).unwrap();
    m.remount();
    assert_eq!(hist::show(&m, "k0", "c"), b"v2\n");
    assert_eq!(std::fs::read(m.p(".agx/at/k0/c")).unwrap(), b"v2\n");
    hist::restore(&m, "k0", &[]);
    assert_eq!(std::fs::read(m.p("c")).unwrap(), b"v2\n");
    assert!(!m.p("d/g").exists());
}
