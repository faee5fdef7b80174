//! Point 15: the file-flag ioctls through the mount. `lsattr` and `chattr` work where the
//! disk supports them, `FS_IOC_FSGETXATTR` too, and a change of flags is recorded like any
//! other metadata change (and undone by a restore).

use crate::common::{sh, Mounted};
use crate::hist;

fn lsattr(m: &Mounted, what: &str) -> String {
    let out = std::process::Command::new("lsattr")
        .arg("-d")
        .arg(m.p(what))
        .output()
        .unwrap();
    let text = String::from_utf8(hist::ok(out, &format!("lsattr -d {what}"))).unwrap();
    text.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn lsattr_and_chattr_work_and_a_change_of_flags_is_recorded_and_undone() {
    let m = Mounted::new();
    sh(m.path(), "echo x > f && mkdir d && echo y > d/g");
    let plain_f = lsattr(&m, "f");
    let plain_d = lsattr(&m, "d");
    hist::ok(m.agx(["checkpoint", "c0"]), "checkpoint");
    sh(m.path(), "chattr +d f && chattr +A d && chattr +i d/g");
    assert!(lsattr(&m, "f").contains('d'), "{}", lsattr(&m, "f"));
    assert!(lsattr(&m, "d").contains('A'), "{}", lsattr(&m, "d"));
    assert!(lsattr(&m, "d/g").contains('i'));
    // Immutable means it through the mount too.
    assert!(std::fs::write(m.p("d/g"), "z").is_err());
    let chattrs: Vec<_> = hist::events(&m)
        .into_iter()
        .filter(|e| e["op"] == "chattr")
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        chattrs,
        ["f", "d", "d/g"],
        "each change of flags is an event"
    );
    hist::restore(&m, "c0", &[]);
    assert_eq!(lsattr(&m, "f"), plain_f);
    assert_eq!(lsattr(&m, "d"), plain_d);
    assert!(!lsattr(&m, "d/g").contains('i'), "immutable undone");
    std::fs::write(m.p("d/g"), "z\n").unwrap();
}

#[test]
fn fsgetxattr_answers_through_the_mount() {
    let m = Mounted::new();
    sh(m.path(), "echo x > f && chattr +A f");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import fcntl,struct,sys; f=open(sys.argv[1]); \
             b=fcntl.ioctl(f, 0x801c581f, bytes(28)); \
             print(struct.unpack('5I8x', b)[0])",
        )
        .arg(m.p("f"))
        .output()
        .unwrap();
    let xflags: u32 = String::from_utf8(hist::ok(out, "FS_IOC_FSGETXATTR"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // FS_XFLAG_NOATIME mirrors chattr +A.
    assert_ne!(xflags & 0x40, 0, "xflags {xflags:#x}");
}
