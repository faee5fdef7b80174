//! SIGKILL while a branch is being written: no before-image is lost, and no object of the
//! branch is left half made.

use crate::common::{sh, Mounted};
use crate::{branch, hist, tree};

#[test]
fn sigkill_while_writing_in_a_branch_then_remount() {
    let m = Mounted::with(|p| {
        sh(
            p,
            "mkdir -p d/e; for i in $(seq 1 200); do echo $i > d/f$i; done; seq 1 50000 > d/e/big",
        );
    });
    let base = tree(m.path());
    let b = branch(&m, "k", None);
    // Writers in the branch: copy-ups, fills of directories, creations, renames. The loop
    // ends at the first append that fails (the daemon is gone), not after 100,000 rounds of
    // failing commands.
    let dir = b.clone();
    let writer = std::thread::spawn(move || {
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(
                "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo $i >> d/f$((i % 200 + 1)) || exit 0; \
                  echo n > n$i; mv n$i d/e/m$i 2>/dev/null; cat d/e/big > /dev/null; done",
            )
            .current_dir(&dir)
            .output();
    });
    std::thread::sleep(std::time::Duration::from_millis(700));
    let pid = m.daemon_pid().expect("daemon pid");
    // SAFETY: kill(2) with a pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    writer.join().unwrap();
    hist::wait_gone(pid);
    hist::ok(
        crate::common::agx(["mount".as_ref(), m.project.as_os_str()]),
        "agx mount after a killed daemon",
    );
    let m2 = &m;
    // The main tree is as it was; the branch is whole: every file of the base reads as a
    // prefix-extended version of itself, never zeros or a half copy.
    hist::assert_same_tree(&base, &tree(m2.path()), "main tree after the crash");
    let b = m2.p(".agx/branches/k");
    for i in 1..=200 {
        let s = std::fs::read_to_string(b.join(format!("d/f{i}"))).unwrap();
        assert!(
            s.starts_with(&format!("{i}\n")) && !s.contains('\0'),
            "d/f{i} in the branch: {s:?}"
        );
    }
    let big = std::fs::read(b.join("d/e/big")).unwrap();
    assert_eq!(
        big,
        std::fs::read(m2.p("d/e/big")).unwrap(),
        "an unchanged file reads whole"
    );
    hist::ok(m2.agx(["verify"]), "verify");
}
