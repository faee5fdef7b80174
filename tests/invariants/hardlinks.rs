//! Point 2: hard links. A change is recorded under a name the object has when it is made
//! (never a name that has gone, or gone to another file), a change whose name cannot be
//! determined does not go through unrecorded, and the views agree with restore.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};

use crate::common::{sh, Mounted};
use crate::hist;

#[test]
fn a_write_through_the_first_name_after_the_second_was_replaced() {
    let m = Mounted::new();
    sh(
        m.path(),
        "printf 'one\\n' > A; ln A B; printf 'new\\n' > B.tmp; mv B.tmp B",
    );
    hist::ok(m.agx(["checkpoint", "hlc"]), "checkpoint");
    sh(m.path(), "printf 'two\\n' >> A");
    let last = hist::events(&m).pop().unwrap();
    assert_eq!(last["path"], "A", "the write is recorded under A: {last}");
    hist::restore(&m, "hlc", &[]);
    assert_eq!(std::fs::read(m.p("A")).unwrap(), b"one\n");
    assert_eq!(std::fs::read(m.p("B")).unwrap(), b"new\n");
}

#[test]
fn a_change_through_a_link_whose_looked_up_directory_was_removed() {
    let m = Mounted::new();
    sh(
        m.path(),
        "mkdir d1 d2; echo x > d1/f; ln d1/f d2/g; stat d2/g >/dev/null; stat d1/f >/dev/null; rm -rf d1",
    );
    hist::ok(m.agx(["checkpoint", "t"]), "checkpoint");
    sh(m.path(), "echo Y > d2/g; chmod 711 d2/g");
    for e in hist::events(&m).iter().rev().take(2) {
        assert_eq!(
            e["path"], "d2/g",
            "recorded under the name the file has: {e}"
        );
    }
    hist::restore(&m, "t", &[]);
    assert_eq!(std::fs::read(m.p("d2/g")).unwrap(), b"x\n");
    let mode = std::fs::metadata(m.p("d2/g")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o644);
}

#[test]
fn a_view_of_a_hard_linked_file_agrees_with_show_and_restore() {
    let m = Mounted::new();
    sh(m.path(), "echo v1 > a; ln a b");
    hist::ok(m.agx(["checkpoint", "c0"]), "checkpoint");
    sh(m.path(), "echo v2 > b");
    assert_eq!(hist::show(&m, "c0", "a"), b"v1\n");
    assert_eq!(hist::show(&m, "c0", "b"), b"v1\n");
    assert_eq!(std::fs::read(m.p(".agx/at/c0/a")).unwrap(), b"v1\n");
    assert_eq!(std::fs::read(m.p(".agx/at/c0/b")).unwrap(), b"v1\n");
    hist::restore(&m, "c0", &[]);
    assert_eq!(std::fs::read(m.p("a")).unwrap(), b"v1\n");
}

/// The object keeps a name the kernel never looked up after its only known one went: a
/// change through a descriptor is recorded under that other name.
#[test]
fn a_change_through_a_descriptor_finds_a_name_never_looked_up() {
    let m = Mounted::with(|p| {
        std::fs::write(p.join("x"), "keep me\n").unwrap();
        std::fs::hard_link(p.join("x"), p.join("y")).unwrap();
    });
    let f = std::fs::File::open(m.p("x")).unwrap();
    std::fs::remove_file(m.p("x")).unwrap();
    hist::ok(m.agx(["checkpoint", "c"]), "checkpoint");
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .unwrap();
    // Reopened for writing through /proc (the kernel sends an OPEN of the node).
    let again = format!("/proc/self/fd/{}", f.as_raw_fd());
    std::fs::write(&again, "new\n").unwrap();
    drop(f);
    let evs = hist::events(&m);
    let after: Vec<_> = evs.iter().filter(|e| e["op"] != "unlink").collect();
    assert!(
        after.len() >= 2 && after.iter().all(|e| e["path"] == "y"),
        "the chmod and the write are recorded under y: {evs:?}"
    );
    hist::restore(&m, "c", &[]);
    assert_eq!(std::fs::read(m.p("y")).unwrap(), b"keep me\n");
    assert_eq!(std::fs::metadata(m.p("y")).unwrap().mode() & 0o777, 0o644);
}

/// A removed file is kept by a hard link into staging until the worker stores it; the
/// object can still be reopened (an `O_PATH` descriptor through /proc) and truncated. Its
/// before-image must survive that (point 1: "whatever the interleaving").
#[test]
fn a_removed_file_reopened_through_proc_keeps_its_before_image() {
    let m = Mounted::new();
    for round in 0..20 {
        let name = format!("z{round}");
        let z = m.p(&name);
        std::fs::write(&z, format!("precious {round}\n")).unwrap();
        let start = hist::last_seq(&m);
        let pathfd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&z)
            .unwrap();
        std::fs::remove_file(&z).unwrap();
        let again = format!("/proc/self/fd/{}", pathfd.as_raw_fd());
        std::fs::write(&again, "junk\n").unwrap();
        drop(pathfd);
        let at = hist::ref_after(&m, start).expect("the removal is recorded");
        assert_eq!(
            hist::show(&m, &at, &name),
            format!("precious {round}\n").into_bytes(),
            "round {round}: the before-image of the removal"
        );
    }
}

/// A restore that gives a name its point's content by a new file changes which object the
/// name is even when the content is equal: that is history, or undoing the restore cannot
/// make the name one file with the names it shared a file with (found by the model
/// property test; the event was dropped as "changed nothing").
#[test]
fn undoing_a_restore_brings_back_which_names_are_one_file() {
    let m = Mounted::with(|p| {
        std::fs::create_dir(p.join("d")).unwrap();
        std::fs::write(p.join("a"), "a0\n").unwrap();
        std::fs::hard_link(p.join("a"), p.join("d/e")).unwrap();
        std::fs::write(p.join("b"), "b0\n").unwrap();
    });
    sh(m.path(), "cat a d/e b > /dev/null");
    hist::ok(m.agx(["checkpoint", "k1"]), "checkpoint");
    sh(m.path(), "echo r > d/.t && mv d/.t d/e");
    hist::ok(m.agx(["checkpoint", "k2"]), "checkpoint");
    hist::restore(&m, "k1", &[]);
    sh(m.path(), "mv a b");
    // b and d/e are one file now; restores to k2 and back make it a new one each time.
    let undo = hist::restore(&m, "k2", &[]).expect("k2 changes something");
    hist::restore(&m, &undo, &[]);
    let ino = |p: &str| std::fs::metadata(m.p(p)).unwrap().ino();
    assert_eq!(ino("b"), ino("d/e"));
    let undo = hist::restore(&m, "k1", &[]).expect("k1 changes something");
    assert_eq!(ino("a"), ino("d/e"));
    hist::restore(&m, &undo, &[]);
    assert!(!m.p("a").exists());
    assert_eq!(std::fs::read(m.p("b")).unwrap(), b"a0\n");
    assert_eq!(ino("b"), ino("d/e"), "b and d/e are one file again");
}
