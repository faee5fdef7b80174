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
