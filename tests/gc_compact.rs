//! `agx gc` gives the space of the events it drops back to the filesystem: the timeline
//! database (`timeline.db` plus its WAL) shrinks, mounted (the daemon holds the database
//! open in WAL mode) and unmounted, and the history left stays intact and writable.

mod common;
mod hist;

use std::path::Path;

use common::Mounted;
use hist::ok;

/// Bytes of the timeline database and its WAL in the project's backing `.agx`.
fn db_bytes(project: &Path) -> u64 {
    ["timeline.db", "timeline.db-wal"]
        .iter()
        .filter_map(|n| std::fs::metadata(project.join(".agx").join(n)).ok())
        .map(|md| md.len())
        .sum()
}

fn json(o: std::process::Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&ok(o, what)).unwrap()
}

/// `n` writes through the mount (one event each), spread over a few long names so every
/// event row carries some weight.
fn churn(root: &Path, from: usize, n: usize) {
    let dir = root.join("a-directory-with-a-rather-long-name/and-another-level-below-it");
    std::fs::create_dir_all(&dir).unwrap();
    for i in from..from + n {
        let f = dir.join(format!("file-number-{:02}-with-a-long-name.txt", i % 40));
        std::fs::write(f, format!("version {i}\n")).unwrap();
    }
}

fn events(m: &Mounted) -> u64 {
    json(m.agx(["status", "--json"]), "agx status")["events"]
        .as_u64()
        .unwrap()
}

fn gc_all(m: &Mounted) -> serde_json::Value {
    json(m.agx(["gc", "--keep", "0s", "--json"]), "agx gc")
}

#[test]
fn gc_shrinks_the_timeline_database_mounted_and_unmounted() {
    let mut m = Mounted::at(|_| {});
    churn(m.path(), 0, 3000);
    assert!(events(&m) >= 3000);
    let before = db_bytes(&m.project);

    let r = gc_all(&m);
    assert!(r["events_deleted"].as_u64().unwrap() >= 3000, "{r}");
    let after = db_bytes(&m.project);
    assert!(
        after * 4 < before,
        "timeline.db + wal: {before} bytes before gc, {after} after"
    );
    assert_eq!(r["db_bytes_after"].as_u64(), Some(after), "{r}");
    assert!(r["db_bytes_before"].as_u64().unwrap() >= before, "{r}");

    // The history goes on, with all it needs.
    churn(m.path(), 3000, 5);
    assert_eq!(events(&m), 5);
    let last = hist::events(&m)[0]["seq"].as_i64().unwrap();
    assert!(
        last > 3000,
        "numbering goes on after the dropped events: {last}"
    );
    ok(m.agx(["verify"]), "agx verify after the gc");

    // Unmounted, the command compacts the database itself.
    churn(m.path(), 4000, 2000);
    m.unmount();
    let before = db_bytes(&m.project);
    let r = gc_all(&m);
    assert!(r["events_deleted"].as_u64().unwrap() >= 2000, "{r}");
    let after = db_bytes(&m.project);
    assert!(
        after * 4 < before,
        "unmounted: {before} bytes before gc, {after} after"
    );
    ok(m.agx(["verify"]), "agx verify after the unmounted gc");
}
