//! Helpers shared by the history tests (capture, restore, crash): reading `agx log --json`,
//! checking command outcomes, and snapshots of a project tree that leave out agx's own
//! `.agx`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::Mounted;

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that a command succeeded; returns its stdout bytes.
pub fn ok(o: Output, what: &str) -> Vec<u8> {
    assert!(
        o.status.success(),
        "{what} failed ({:?}):\nstdout: {}\nstderr: {}",
        o.status.code(),
        stdout(&o),
        stderr(&o)
    );
    o.stdout
}

/// Asserts that a command failed as a user error: exit 1, exactly one line on stderr.
/// Returns that line.
pub fn user_error(o: &Output, what: &str) -> String {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{what}: expected exit 1\nstdout: {}\nstderr: {err}",
        stdout(o)
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one line on stderr: {err:?}"
    );
    assert!(!lines[0].trim().is_empty(), "{what}: empty error line");
    lines[0].to_string()
}

/// Every event of the project, oldest first.
pub fn events(m: &Mounted) -> Vec<serde_json::Value> {
    events_of(m, &[])
}

/// `agx log --json` with extra arguments, oldest first.
pub fn events_of(m: &Mounted, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["log", "--json"];
    args.extend_from_slice(extra);
    let out = ok(m.agx(&args), "agx log --json");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("log --json is JSON");
    let mut list = v.as_array().expect("log --json is an array").clone();
    list.sort_by_key(|e| e["seq"].as_i64().expect("seq"));
    list
}

/// Waits (up to 10 s) until a change of `path` after event `seq` has ended. The kernel sends
/// a file's release after `close` returns, so a write's event can end a moment later.
pub fn wait_event(m: &Mounted, seq: i64, path: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !events_after(m, seq).iter().any(|e| e["path"] == path) {
        assert!(
            std::time::Instant::now() < deadline,
            "no event of {path} after event {seq} within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The highest event number so far (0 when there is none).
pub fn last_seq(m: &Mounted) -> i64 {
    events_of(m, &["--limit", "1"])
        .last()
        .map(|e| e["seq"].as_i64().unwrap())
        .unwrap_or(0)
}

/// Events after `seq`, oldest first.
pub fn events_after(m: &Mounted, seq: i64) -> Vec<serde_json::Value> {
    events(m)
        .into_iter()
        .filter(|e| e["seq"].as_i64().unwrap() > seq)
        .collect()
}

/// The REF of the point just before the first event after `seq`, if there is one.
pub fn ref_after(m: &Mounted, seq: i64) -> Option<String> {
    events_after(m, seq)
        .first()
        .map(|e| format!("event:{}", e["seq"]))
}

/// `agx show REF PATH`'s bytes, asserting success.
pub fn show(m: &Mounted, at: &str, path: &str) -> Vec<u8> {
    ok(
        m.agx(["show", at, &m.p(path).to_string_lossy()]),
        &format!("agx show {at} {path}"),
    )
}

/// BLAKE3 of `data`, hex, as `agx log --json` reports content.
pub fn b3(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// Runs `agx restore REF [PATHS] --yes`, asserting success; returns the REF that undoes
/// it (from "to undo this restore: agx restore event:N"), if it changed anything.
pub fn restore(m: &Mounted, at: &str, paths: &[&str]) -> Option<String> {
    let mut args: Vec<OsString> = vec!["restore".into(), at.into()];
    for p in paths {
        args.push(m.p(p).into_os_string());
    }
    args.push("--yes".into());
    let o = m.agx(&args);
    let err = stderr(&o);
    ok(o, &format!("agx restore {at} {paths:?}"));
    err.lines()
        .find_map(|l| l.strip_prefix("to undo this restore: agx restore "))
        .map(|s| s.trim().to_string())
}

/// What a path is, for tree comparisons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Obj {
    File(Vec<u8>),
    Dir,
    Symlink(OsString),
    Other,
}

/// One entry of a [`tree`]: kind (with content or target) and permission bits (none for
/// symlinks, whose mode means nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub obj: Obj,
    pub mode: Option<u32>,
}

/// Every object below `root` (not `root` itself, and not `.agx` at the top), keyed by
/// relative path: empty directories included.
pub fn tree(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), &mut out);
    out
}

fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Node>) {
    let dir = root.join(rel);
    let mut names: Vec<OsString> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for name in names {
        if rel.as_os_str().is_empty() && name == ".agx" {
            continue;
        }
        let rel = rel.join(&name);
        let p = root.join(&rel);
        let md = std::fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let ft = md.file_type();
        let obj = if ft.is_file() {
            Obj::File(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        } else if ft.is_dir() {
            Obj::Dir
        } else if ft.is_symlink() {
            Obj::Symlink(std::fs::read_link(&p).unwrap().into_os_string())
        } else {
            Obj::Other
        };
        let mode = (!ft.is_symlink()).then_some(md.mode() & 0o7777);
        let is_dir = obj == Obj::Dir;
        out.insert(rel.clone(), Node { obj, mode });
        if is_dir {
            walk(root, &rel, out);
        }
    }
}

/// A readable account of how two trees differ (empty when they are equal).
pub fn tree_diff(want: &BTreeMap<PathBuf, Node>, got: &BTreeMap<PathBuf, Node>) -> Vec<String> {
    let keys: std::collections::BTreeSet<_> = want.keys().chain(got.keys()).collect();
    let short = |n: &Node| {
        let mode = n.mode.map(|m| format!("{m:o}")).unwrap_or_default();
        match &n.obj {
            Obj::File(b) if b.len() <= 40 => {
                format!("file {:?} mode {mode}", String::from_utf8_lossy(b))
            }
            Obj::File(b) => format!("file of {} bytes ({}) mode {mode}", b.len(), &b3(b)[..12]),
            o => format!("{o:?} mode {mode}"),
        }
    };
    keys.into_iter()
        .filter(|k| want.get(*k) != got.get(*k))
        .map(|k| match (want.get(k), got.get(k)) {
            (Some(a), Some(b)) => format!("{}: want {} got {}", k.display(), short(a), short(b)),
            (Some(a), None) => format!("{}: missing (want {})", k.display(), short(a)),
            (None, Some(b)) => format!("{}: unexpected {}", k.display(), short(b)),
            (None, None) => unreachable!(),
        })
        .take(30)
        .collect()
}

/// Asserts two trees are equal, listing the differences otherwise.
#[track_caller]
pub fn assert_same_tree(want: &BTreeMap<PathBuf, Node>, got: &BTreeMap<PathBuf, Node>, what: &str) {
    let d = tree_diff(want, got);
    assert!(d.is_empty(), "{what}: trees differ:\n  {}", d.join("\n  "));
}

/// Whether any FUSE mount of agx is at `p`.
pub fn is_agx_mount(p: &Path) -> bool {
    let want = p.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()) && l.contains("fuse.agx"))
}

/// Waits (bounded) until process `pid` is gone.
pub fn wait_gone(pid: u32) {
    for _ in 0..1000 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("process {pid} did not exit");
}

/// Cases per property test: `default`, or AGX_PROP_CASES=N for a longer hunt for
/// counterexamples.
pub fn prop_cases(default: u32) -> u32 {
    std::env::var("AGX_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
