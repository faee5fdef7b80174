//! Point 6: identity is never inferred from an inode number alone where the number can be
//! reused. A fresh ext4 hands a freed inode number out again at once.

use std::os::unix::fs::MetadataExt;

use crate::common::Mounted;
use crate::fsimage::Scratch;
use crate::hist;

/// A file deleted after the point gives its inode number to a new file agx does not record
/// (an ignored path): restoring the point must not take the new file for a name of the
/// deleted one (it used to be linked to it and lose its own content).
#[test]
fn a_reused_inode_number_is_not_the_same_file() {
    let mut fs = None;
    let m = Mounted::with(|p| {
        fs = Some(Scratch::ext4(p, 32));
        std::fs::write(p.join(".gitignore"), "build/\n").unwrap();
        std::fs::write(p.join("a"), "A\n").unwrap();
        std::fs::hard_link(p.join("a"), p.join("a2")).unwrap();
        std::fs::write(p.join("f"), "F\n").unwrap();
        std::fs::create_dir(p.join("build")).unwrap();
    });
    hist::ok(m.agx(["checkpoint", "c0"]), "checkpoint");
    // A recorded change of a file with two links.
    let mut a = std::fs::OpenOptions::new()
        .append(true)
        .open(m.p("a"))
        .unwrap();
    std::io::Write::write_all(&mut a, b"more\n").unwrap();
    drop(a);
    let f_ino = std::fs::metadata(m.p("f")).unwrap().ino();
    std::fs::remove_file(m.p("f")).unwrap();
    hist::ok(
        m.agx(["log"]),
        "log (the unlink is recorded and its staging link gone)",
    );
    std::fs::write(m.p("build/out"), "OUT\n").unwrap();
    let out_ino = std::fs::metadata(m.p("build/out")).unwrap().ino();
    assert_eq!(
        out_ino, f_ino,
        "precondition: ext4 gave the deleted file's inode number to build/out"
    );
    hist::restore(&m, "c0", &[]);
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"F\n");
    assert_eq!(std::fs::read(m.p("a")).unwrap(), b"A\n");
    assert_eq!(std::fs::read(m.p("build/out")).unwrap(), b"OUT\n");
    assert_eq!(std::fs::metadata(m.p("build/out")).unwrap().nlink(), 1);
}
