//! Point 7: a full disk. Deleting still works and is captured, and commands see every
//! change the journal holds (the timeline keeps up, or commands say it could not).

use std::io::Write;

use crate::common::{sh, Mounted};
use crate::fsimage::Scratch;
use crate::hist;

/// Fills the filesystem through the mount with one file until writes fail for room.
fn fill(path: &std::path::Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5au8; 64 << 10];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    while f.write_all(&[1]).is_ok() {}
    let _ = f.sync_all();
}

#[test]
fn on_a_full_disk_deleting_works_and_commands_see_every_change() {
    let mut fs = None;
    let m = Mounted::with(|p| {
        fs = Some(Scratch::tmpfs(p, "24m"));
        for i in 0..5 {
            std::fs::write(p.join(format!("keep{i}")), format!("keep {i}\n")).unwrap();
        }
    });
    hist::ok(m.agx(["checkpoint", "c0"]), "checkpoint");
    fill(&m.p("filler"));
    // Changes that need no room for content: empty files, removals, renames.
    sh(
        m.path(),
        "touch new1 new2 && rm keep0 keep1 && mv keep2 moved",
    );
    let log = hist::events(&m);
    let paths: Vec<&str> = log.iter().filter_map(|e| e["path"].as_str()).collect();
    for p in ["filler", "new1", "new2", "keep0", "keep1", "keep2"] {
        assert!(
            paths.contains(&p),
            "{p} is in agx log on a full disk: {paths:?}"
        );
    }
    let plan = hist::ok(m.agx(["restore", "c0", "--dry-run", "--json"]), "dry run");
    let plan: serde_json::Value = serde_json::from_slice(&plan).unwrap();
    let steps = plan["plan"]["steps"]
        .as_array()
        .or(plan["steps"].as_array())
        .map_or(0, |s| s.len());
    assert!(steps >= 5, "the dry run lists the changes: {plan}");
    let status: serde_json::Value =
        serde_json::from_slice(&hist::ok(m.agx(["status", "--json"]), "status")).unwrap();
    assert!(status["events"].as_i64().unwrap_or(0) >= 6, "{status}");
    // The content of what was removed is kept whatever the disk: bring it back.
    assert_eq!(hist::show(&m, "c0", "keep0"), b"keep 0\n");
}

/// Incompressible bytes, different for each `seed`.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A disk filled to its last block, by agx's history and then by the user (who takes the
/// room agx gave back for its records too): removals and small rewrites still work and
/// are recorded, and the project mounts again; once there is room again the changes the
/// journal kept are history (found by an independent fsstress run on a small disk: `rm`
/// failed with ENOSPC, and the next mount failed while storing what the journal held).
#[test]
fn a_disk_full_to_the_last_block_takes_removals_and_mounts_again() {
    let mut fs = None;
    let mut m = Mounted::with(|p| {
        fs = Some(Scratch::ext4(p, 64));
        // Room the user frees later, outside agx (never recorded: it has no history).
        std::fs::write(p.join("ballast"), noise(24 << 20, 99)).unwrap();
        std::fs::write(p.join("doomed"), "bye\n").unwrap();
        std::fs::write(p.join("s"), "small\n").unwrap();
    });
    hist::ok(m.agx(["checkpoint", "c0"]), "checkpoint");
    // Rewrites of an incompressible file: every old version is history, until the disk
    // is full and the rewrites fail.
    for i in 0..64 {
        if std::fs::write(m.p("v"), noise(1 << 20, i)).is_err() {
            break;
        }
    }
    fill(&m.p("filler"));
    std::fs::write(m.p("s"), "small\nmore\n").expect("a small rewrite on a full disk");
    std::fs::remove_file(m.p("doomed")).expect("a removal on a full disk");
    std::fs::remove_file(m.p("filler")).expect("a removal on a full disk");
    // Mounting again on the full disk works; what the timeline has no room for waits in
    // the journal, and commands say so rather than answer without it.
    m.unmount();
    m.remount();
    let o = m.agx(["log"]);
    if !o.status.success() {
        let line = hist::user_error(&o, "log on a full disk");
        assert!(line.contains("disk is full"), "{line}");
    }
    // Room again: the changes the journal kept are history.
    m.unmount();
    std::fs::remove_file(m.project.join("ballast")).unwrap();
    m.remount();
    let log = hist::events(&m);
    assert!(
        log.iter()
            .any(|e| e["path"] == "doomed" && e["op"] == "unlink"),
        "the removal is history: {log:?}"
    );
    assert_eq!(hist::show(&m, "c0", "doomed"), b"bye\n");
    hist::restore(&m, "c0", &["doomed", "s"]);
    assert_eq!(std::fs::read(m.p("doomed")).unwrap(), b"bye\n");
    assert_eq!(std::fs::read(m.p("s")).unwrap(), b"small\n");
}
