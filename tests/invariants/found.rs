//! Holes an independent run of POSIX suites and fsstress found in the fixes above, each
//! pinned on a real mount.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::process::Command;

use crate::common::{sh, Mounted};
use crate::hist;

/// `renameat2(RENAME_WHITEOUT)` leaves a whiteout (a 0:0 character device) at the source:
/// it is a creation agx records with the move, not a change made outside agx that a
/// restore would then remove.
#[test]
fn a_rename_that_leaves_a_whiteout_records_it() {
    let m = Mounted::new();
    sh(m.path(), "echo a > a");
    let out = Command::new("python3")
        .args([
            "-c",
            "import ctypes,os; assert ctypes.CDLL(None, use_errno=True).renameat2(-100,b'a',-100,b'b',4)==0, os.strerror(ctypes.get_errno())",
        ])
        .current_dir(m.path())
        .output()
        .unwrap();
    hist::ok(out, "renameat2 RENAME_WHITEOUT");
    let ft = std::fs::symlink_metadata(m.p("a")).unwrap().file_type();
    assert!(ft.is_char_device(), "a whiteout at a");
    hist::ok(m.agx(["checkpoint", "mid"]), "checkpoint");
    let ops: Vec<_> = hist::events(&m)
        .into_iter()
        .map(|e| (e["op"].as_str().unwrap().to_string(), e["process"].clone()))
        .collect();
    assert!(
        ops.iter().all(|(_, p)| p != "(outside agx)"),
        "nothing looks changed outside agx: {ops:?}"
    );
    let out = hist::ok(m.agx(["restore", "mid", "--yes"]), "restore mid");
    assert!(
        m.p("a").exists(),
        "the whiteout stays: {}",
        String::from_utf8_lossy(&out)
    );
    // Before the move: the file again, no whiteout.
    hist::restore(&m, "event:2", &[]);
    assert_eq!(std::fs::read(m.p("a")).unwrap(), b"a\n");
    assert!(!m.p("b").exists());
}

/// A metadata change the creating process makes right after a checkpoint is not folded
/// into the creation (which is before the checkpoint): restoring the checkpoint undoes it.
#[test]
fn a_change_after_a_checkpoint_is_not_folded_into_an_earlier_creation() {
    let m = Mounted::new();
    let f = m.p("f");
    let go = m.tmp.path().join("go");
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import os,time\nopen({f:?},'w').write('hi\\n')\nwhile not os.path.exists({go:?}): time.sleep(0.01)\nos.chown({f:?},1234,5678); os.chmod({f:?},0o600)"
        ))
        .spawn()
        .unwrap();
    while !f.exists() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    hist::ok(m.agx(["checkpoint", "mid"]), "checkpoint");
    std::fs::write(&go, "").unwrap();
    assert!(child.wait().unwrap().success());
    let md = std::fs::metadata(&f).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o777), (1234, 0o600));
    hist::restore(&m, "mid", &[]);
    let md = std::fs::metadata(&f).unwrap();
    assert_eq!((md.uid(), md.gid(), md.mode() & 0o777), (0, 0, 0o644));
}

/// Paths longer than PATH_MAX from the project root (each name legal) do not stop
/// whole-tree commands.
#[test]
fn paths_longer_than_path_max_do_not_stop_whole_tree_commands() {
    let m = Mounted::new();
    sh(m.path(), "echo a > a.txt");
    hist::ok(m.agx(["checkpoint", "cp0"]), "checkpoint");
    // Made one directory at a time, relative to the last (the whole path is past
    // PATH_MAX).
    sh(
        m.path(),
        "python3 -c \"import os\nfor i in range(17):\n n='d%02d'%i+'x'*240; os.mkdir(n); os.chdir(n)\nopen('f','w').write('deep')\"",
    );
    sh(m.path(), "echo changed >> a.txt");
    hist::ok(m.agx(["diff", "--stat"]), "diff --stat");
    hist::ok(m.agx(["restore", "cp0", "--dry-run"]), "restore --dry-run");
    hist::restore(&m, "cp0", &[]);
    assert_eq!(std::fs::read(m.p("a.txt")).unwrap(), b"a\n");
    assert!(!m.p(format!("d00{}", "x".repeat(240))).exists());
}

/// The timeline database lags the changes begun (the worker writes in batches): a lookup
/// right after a directory moved must not compare the live tree with a timeline that does
/// not have the move yet (that took the moved files for creations made outside agx).
#[test]
fn a_lookup_right_after_a_directory_move_sees_no_outside_change() {
    let m = Mounted::new();
    for i in 0..10 {
        sh(m.path(), &format!("mkdir top{i} d{i} && echo x > d{i}/f"));
        hist::ok(m.agx(["checkpoint", &format!("c{i}")]), "checkpoint");
        crate::util::drop_caches();
        sh(
            m.path(),
            &format!("mv d{i} top{i}/d && stat top{i}/d/f >/dev/null"),
        );
    }
    let outside: Vec<_> = hist::events(&m)
        .into_iter()
        .filter(|e| e["process"] == "(outside agx)")
        .collect();
    assert!(outside.is_empty(), "false outside changes: {outside:?}");
}

/// A file with two names whose directory moves away: a restore moves it back as the same
/// file (a link of the name that stayed), not a copy.
#[test]
fn a_moved_directory_of_a_linked_file_comes_back_linked() {
    let m = Mounted::new();
    sh(m.path(), "mkdir D E && echo x > D/a && ln D/a E/b");
    hist::ok(m.agx(["checkpoint", "c"]), "checkpoint");
    sh(m.path(), "mv D/a E/b; mv D F");
    hist::restore(&m, "c", &[]);
    let (a, b) = (
        std::fs::metadata(m.p("D/a")).unwrap(),
        std::fs::metadata(m.p("E/b")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino(), "D/a and E/b are one file again");
    assert_eq!(a.nlink(), 2);
    assert!(!m.p("F").exists());
}
