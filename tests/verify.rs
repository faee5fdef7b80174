//! `agx verify`: every object against its hash, every event's references, the schema;
//! each problem named (object hash, event), exit 1 when there is any; `--repair` moves
//! corrupt objects to `.agx/quarantine/` and deletes nothing.

mod common;
mod hist;

use std::path::{Path, PathBuf};

use common::Mounted;
use hist::{b3, ok, stderr, stdout};

/// A project with history: "a" written twice (before-images "one\n", "two\n"), "b"
/// removed (before-image "bb\n"). Mounted at a separate mountpoint, so the backing `.agx`
/// can be damaged while mounted.
fn project() -> Mounted {
    let m = Mounted::at(|p| {
        std::fs::write(p.join("a"), "one\n").unwrap();
        std::fs::write(p.join("b"), "bb\n").unwrap();
    });
    std::fs::write(m.p("a"), "two\n").unwrap();
    std::fs::write(m.p("a"), "three\n").unwrap();
    std::fs::remove_file(m.p("b")).unwrap();
    ok(m.agx(["verify"]), "verify of a fresh history");
    m
}

fn object(m: &Mounted, content: &[u8]) -> PathBuf {
    let h = b3(content);
    m.project.join(".agx/objects").join(&h[..2]).join(&h[2..])
}

/// The seq of the event whose before-image is `content`.
fn event_of(m: &Mounted, content: &[u8]) -> i64 {
    let h = b3(content);
    hist::events(m)
        .into_iter()
        .find(|e| e["before"].as_str() == Some(h.as_str()))
        .unwrap_or_else(|| panic!("no event with before-image {h}"))["seq"]
        .as_i64()
        .unwrap()
}

/// Runs `agx verify --json`, expecting exit 1; returns the problems.
fn problems(m: &Mounted, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["verify", "--json"];
    args.extend_from_slice(extra);
    let o = m.agx(&args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "verify should fail: {}{}",
        stdout(&o),
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("verify --json: {e}: {}{}", stdout(&o), stderr(&o)));
    v["problems"].as_array().unwrap().clone()
}

fn find<'a>(ps: &'a [serde_json::Value], kind: &str, h: &str) -> &'a serde_json::Value {
    ps.iter()
        .find(|p| p["kind"] == kind && p["object"] == h)
        .unwrap_or_else(|| panic!("no {kind} problem for {h} in {ps:#?}"))
}

fn objects_count(project: &Path) -> usize {
    walkdir(&project.join(".agx/objects"))
}

fn walkdir(d: &Path) -> usize {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walkdir(&e.path())
            } else {
                1
            }
        })
        .sum()
}

#[test]
fn a_clean_store_passes_mounted_and_unmounted() {
    let mut m = project();
    let o = m.agx(["verify", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&ok(o, "verify --json")).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    assert!(v["objects"].as_u64().unwrap() >= 3);
    assert!(v["events"].as_u64().unwrap() >= 3);
    assert_eq!(v["schema_version"], agx::timeline::SCHEMA_VERSION);
    m.unmount();
    let o = m.agx(["verify"]);
    assert!(stderr(&o).contains("no problems"), "{}", stderr(&o));
    ok(o, "verify unmounted");
}

#[test]
fn a_flipped_bit_is_caught_and_named_mounted() {
    let m = project();
    let p = object(&m, b"one\n");
    let mut raw = std::fs::read(&p).unwrap();
    let i = raw.len() - 3;
    raw[i] ^= 0x10;
    std::fs::write(&p, raw).unwrap();
    let ps = problems(&m, &[]);
    let h = b3(b"one\n");
    let pr = find(&ps, "corrupt-object", &h);
    assert_eq!(pr["events"][0].as_i64(), Some(event_of(&m, b"one\n")));
    // The text form names the object and the event, and exits 1.
    let o = m.agx(["verify"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains(&h), "{out}");
    assert!(
        out.contains(&format!("event:{}", event_of(&m, b"one\n"))),
        "{out}"
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn a_truncated_object_is_caught_unmounted() {
    let mut m = project();
    let seq = event_of(&m, b"two\n");
    m.unmount();
    let p = object(&m, b"two\n");
    let raw = std::fs::read(&p).unwrap();
    std::fs::write(&p, &raw[..raw.len() / 2]).unwrap();
    let ps = problems(&m, &[]);
    let pr = find(&ps, "corrupt-object", &b3(b"two\n"));
    assert_eq!(pr["events"][0].as_i64(), Some(seq));
    assert_eq!(pr["quarantined"], false);
    assert!(p.exists(), "verify without --repair changes nothing");
}

#[test]
fn a_missing_object_is_caught_with_the_events_needing_it() {
    let m = project();
    let seq = event_of(&m, b"bb\n");
    std::fs::remove_file(object(&m, b"bb\n")).unwrap();
    let ps = problems(&m, &[]);
    let pr = find(&ps, "missing-object", &b3(b"bb\n"));
    assert_eq!(pr["events"].as_array().unwrap(), &[serde_json::json!(seq)]);
}

/// An event referring to an object the store never had (its row rewritten behind agx's
/// back): the event is named with the hash it dangles on.
#[test]
fn a_dangling_event_is_caught() {
    let mut m = project();
    let seq = event_of(&m, b"one\n");
    m.unmount();
    let old = b3(b"one\n");
    let fake = b3(b"never stored");
    let db = rusqlite::Connection::open(m.project.join(".agx/timeline.db")).unwrap();
    let n = db
        .execute(
            "UPDATE events SET body = replace(body, ?1, ?2), before_hash = ?2 WHERE seq = ?3",
            rusqlite::params![old, fake, seq],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(db);
    let ps = problems(&m, &[]);
    let pr = find(&ps, "missing-object", &fake);
    assert_eq!(pr["events"].as_array().unwrap(), &[serde_json::json!(seq)]);
    let o = m.agx(["verify"]);
    assert!(
        stdout(&o).contains(&format!("event:{seq}")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn repair_quarantines_the_corrupt_object_and_deletes_nothing() {
    let m = project();
    let p = object(&m, b"one\n");
    let h = b3(b"one\n");
    let mut raw = std::fs::read(&p).unwrap();
    raw[7] ^= 0xff;
    std::fs::write(&p, &raw).unwrap();
    let before = objects_count(&m.project);
    let ps = problems(&m, &["--repair"]);
    assert_eq!(find(&ps, "corrupt-object", &h)["quarantined"], true);
    let q = m.project.join(".agx/quarantine").join(&h);
    assert_eq!(std::fs::read(&q).unwrap(), raw, "moved as it was");
    assert!(!p.exists());
    assert_eq!(objects_count(&m.project), before - 1, "only that one moved");
    // What remains is named: the events that needed it now dangle.
    let ps = problems(&m, &[]);
    assert!(ps.iter().all(|p| p["kind"] != "corrupt-object"), "{ps:#?}");
    find(&ps, "missing-object", &h);
    // History that does not need it is intact: the other versions still show.
    let e2 = format!("event:{}", event_of(&m, b"two\n"));
    assert_eq!(hist::show(&m, &e2, "a"), b"two\n");
}
