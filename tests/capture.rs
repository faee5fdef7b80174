//! Capture (DESIGN.md invariant 1): every mutation through the mount keeps the true
//! before-image, as one event per logical change; `agx log --json` reports it with stable
//! field names; ignored paths and files over the size limit are handled as configured.

mod common;
mod hist;
mod util;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::Mounted;
use hist::{b3, events_after, last_seq, ok, show, stderr};

const OLD_A: &[u8] = b"a: the old content, long enough to be overwritten in part\n";
const OLD_B: &[u8] = b"b: replaced by the rename\n";
const OLD_C: &[u8] = b"c: removed by unlink\n";
const OLD_T: &[u8] = b"t: truncated by O_TRUNC\n";

fn setup(p: &Path) {
    std::fs::write(p.join("a"), OLD_A).unwrap();
    std::fs::write(p.join("b"), OLD_B).unwrap();
    std::fs::write(p.join("c"), OLD_C).unwrap();
    std::fs::write(p.join("t"), OLD_T).unwrap();
    std::fs::write(p.join("r"), b"r: renamed away\n").unwrap();
    std::fs::write(p.join("u"), b"u: opened, never written\n").unwrap();
}

fn seq(e: &serde_json::Value) -> i64 {
    e["seq"].as_i64().unwrap()
}

/// The events after `since`, asserting there is exactly one and that it is `op` on `path`.
fn only_event(m: &Mounted, since: i64, op: &str, path: &str) -> serde_json::Value {
    let ev = events_after(m, since);
    assert_eq!(ev.len(), 1, "expected one {op} event on {path}: {ev:#?}");
    let e = ev.into_iter().next().unwrap();
    assert_eq!(e["op"], op, "{e:#}");
    assert_eq!(e["path"], path, "{e:#}");
    e
}

fn before_images_are_kept(m: &Mounted) {
    // open(O_WRONLY), three writes, close: one event, the old bytes kept.
    let s = last_seq(m);
    {
        let f = OpenOptions::new().write(true).open(m.p("a")).unwrap();
        f.write_all_at(b"NEW", 0).unwrap();
        f.write_all_at(b"-", 10).unwrap();
        f.write_all_at(b"tail", OLD_A.len() as u64).unwrap();
    }
    let mut new_a = OLD_A.to_vec();
    new_a[..3].copy_from_slice(b"NEW");
    new_a[10] = b'-';
    new_a.extend_from_slice(b"tail");
    assert_eq!(std::fs::read(m.p("a")).unwrap(), new_a);
    let e = only_event(m, s, "write", "a");
    assert_eq!(show(m, &format!("event:{}", seq(&e)), "a"), OLD_A);
    assert_eq!(e["before"], b3(OLD_A));
    assert_eq!(e["after"], b3(&new_a));
    assert_eq!(e["size_before"], OLD_A.len());
    assert_eq!(e["size_after"], new_a.len());
    assert_eq!(e["captured"], true);
    assert_eq!(show(m, "now", "a"), new_a);

    // An O_TRUNC open without a write.
    let s = last_seq(m);
    drop(
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(m.p("t"))
            .unwrap(),
    );
    assert_eq!(std::fs::read(m.p("t")).unwrap(), b"");
    let e = only_event(m, s, "write", "t");
    assert_eq!(show(m, &format!("event:{}", seq(&e)), "t"), OLD_T);
    assert_eq!(e["before"], b3(OLD_T));
    assert_eq!(e["after"], b3(b""));

    // Rename over an existing file: one event with both paths and the replaced content.
    let s = last_seq(m);
    std::fs::rename(m.p("a"), m.p("b")).unwrap();
    let e = only_event(m, s, "rename", "a");
    assert_eq!(e["to_path"], "b");
    let at = format!("event:{}", seq(&e));
    assert_eq!(show(m, &at, "b"), OLD_B);
    assert_eq!(show(m, &at, "a"), new_a);
    assert_eq!(show(m, "now", "b"), new_a);

    // A plain rename.
    let s = last_seq(m);
    std::fs::rename(m.p("r"), m.p("r2")).unwrap();
    let e = only_event(m, s, "rename", "r");
    assert_eq!(e["to_path"], "r2");

    // Unlink keeps the content.
    let s = last_seq(m);
    std::fs::remove_file(m.p("c")).unwrap();
    let e = only_event(m, s, "unlink", "c");
    assert_eq!(e["before"], b3(OLD_C));
    assert_eq!(e["after"], serde_json::Value::Null);
    assert_eq!(show(m, &format!("event:{}", seq(&e)), "c"), OLD_C);

    // Opened for writing (and read-write), nothing changed: no event.
    let s = last_seq(m);
    drop(OpenOptions::new().write(true).open(m.p("u")).unwrap());
    assert!(events_after(m, s).is_empty(), "{:#?}", events_after(m, s));
    drop(
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.p("u"))
            .unwrap(),
    );
    assert!(events_after(m, s).is_empty(), "{:#?}", events_after(m, s));
    // Rewriting the same bytes changes nothing either.
    {
        let f = OpenOptions::new().write(true).open(m.p("u")).unwrap();
        f.write_all_at(b"u", 0).unwrap();
    }
    assert!(events_after(m, s).is_empty(), "{:#?}", events_after(m, s));
}

#[test]
fn before_images_are_kept_with_passthrough() {
    let m = Mounted::with(setup);
    let st: serde_json::Value =
        serde_json::from_slice(&ok(m.agx(["status", "--json"]), "status")).unwrap();
    assert_eq!(st["mode"], "passthrough", "root on 6.18 gets passthrough");
    before_images_are_kept(&m);
}

#[test]
fn before_images_are_kept_without_passthrough() {
    let m = Mounted::with_env(setup, util::NO_PASSTHROUGH);
    before_images_are_kept(&m);
}

/// Two quick writes in a row: the first is kept even when the capture worker reads its
/// after-image only after the second write changed the file back. (A burst of other
/// changes first keeps the worker behind.)
#[test]
fn a_change_and_its_undo_are_two_events() {
    let m = Mounted::with(|p| {
        std::fs::write(p.join("f"), "one\n").unwrap();
        std::fs::create_dir(p.join("burst")).unwrap();
    });
    for round in 0..5 {
        for i in 0..150 {
            std::fs::write(m.p(format!("burst/{i}")), format!("{round} {i}\n")).unwrap();
        }
        let s = last_seq(&m);
        std::fs::write(m.p("f"), "two\n").unwrap();
        std::fs::write(m.p("f"), "one\n").unwrap();
        let ev = events_after(&m, s);
        assert_eq!(ev.len(), 2, "round {round}: {ev:#?}");
        let at = format!("event:{}", seq(&ev[1]));
        assert_eq!(show(&m, &at, "f"), b"two\n", "round {round}");
        let at = format!("event:{}", seq(&ev[0]));
        assert_eq!(show(&m, &at, "f"), b"one\n", "round {round}");
    }
}

/// The fields of `agx log --json`, for each kind of change.
#[test]
fn log_json_fields() {
    let m = Mounted::with(|p| std::fs::write(p.join("old"), "old\n").unwrap());
    let me = std::process::id();
    std::fs::create_dir(m.p("d")).unwrap();
    std::fs::write(m.p("d/new"), "new content\n").unwrap();
    std::fs::rename(m.p("d/new"), m.p("d/moved")).unwrap();
    // (A file this process did not just create: metadata set right after a create may
    // count as part of the creation.)
    std::fs::set_permissions(
        m.p("old"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::os::unix::fs::symlink("moved", m.p("d/link")).unwrap();
    std::fs::remove_file(m.p("old")).unwrap();
    std::fs::remove_file(m.p("d/link")).unwrap();
    let ev = events_after(&m, 0);
    let got: Vec<(String, String, Option<String>)> = ev
        .iter()
        .map(|e| {
            (
                e["op"].as_str().unwrap().to_string(),
                e["path"].as_str().unwrap().to_string(),
                e["to_path"].as_str().map(String::from),
            )
        })
        .collect();
    let want: Vec<(String, String, Option<String>)> = [
        ("mkdir", "d", None),
        ("create", "d/new", None),
        ("rename", "d/new", Some("d/moved")),
        ("chmod", "old", None),
        ("symlink", "d/link", None),
        ("unlink", "old", None),
        ("unlink", "d/link", None),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.map(String::from)))
    .collect();
    assert_eq!(got, want, "{ev:#?}");
    for (i, e) in ev.iter().enumerate() {
        for k in [
            "seq",
            "time",
            "op",
            "path",
            "to_path",
            "session",
            "pid",
            "process",
            "exe",
            "before",
            "after",
            "size_before",
            "size_after",
            "captured",
            "note",
        ] {
            assert!(e.get(k).is_some(), "event {i} lacks {k}: {e:#}");
        }
        assert!(seq(e) > 0);
        if i > 0 {
            assert!(seq(e) > seq(&ev[i - 1]));
        }
        let t = e["time"].as_str().unwrap();
        chrono::DateTime::parse_from_rfc3339(t).unwrap_or_else(|_| panic!("time {t}"));
        let pid = e["pid"].as_u64().unwrap();
        assert!(
            Path::new(&format!("/proc/{me}/task/{pid}")).exists(),
            "made by this test process: {e:#}"
        );
        assert!(!e["process"].as_str().unwrap().is_empty());
        assert_eq!(e["captured"], true);
        assert_eq!(e["note"], serde_json::Value::Null);
    }
    let create = &ev[1];
    assert_eq!(create["before"], serde_json::Value::Null);
    assert_eq!(create["after"], b3(b"new content\n"));
    assert_eq!(create["size_after"], 12);
    // Changes that leave the content alone name it when it is known for free.
    for (e, content) in [(&ev[2], &b"new content\n"[..]), (&ev[3], b"old\n")] {
        for k in ["before", "after"] {
            assert!(e[k].is_null() || e[k] == b3(content), "{k} of {e:#}");
        }
        assert_eq!(e["size_after"], content.len());
    }
    let unlink = &ev[5];
    assert_eq!(unlink["before"], b3(b"old\n"));
    assert_eq!(unlink["after"], serde_json::Value::Null);
    assert_eq!(unlink["size_before"], 4);
    assert_eq!(unlink["size_after"], serde_json::Value::Null);
    // Filters: --path, --since, --limit.
    let only_d: Vec<i64> = hist::events_of(&m, &["--path", &m.p("d").to_string_lossy()])
        .iter()
        .map(seq)
        .collect();
    assert_eq!(
        only_d,
        [
            seq(&ev[0]),
            seq(&ev[1]),
            seq(&ev[2]),
            seq(&ev[4]),
            seq(&ev[6])
        ]
    );
    let since: Vec<i64> = hist::events_of(&m, &["--since", &format!("event:{}", seq(&ev[5]))])
        .iter()
        .map(seq)
        .collect();
    assert_eq!(since, [seq(&ev[5]), seq(&ev[6])]);
    assert_eq!(hist::events_of(&m, &["--limit", "2"]).len(), 2);
}

/// A .gitignore written through the mount applies from then on, in the directory it is
/// in and below (the cached verdicts of directories seen before are dropped), and only
/// there.
#[test]
fn a_gitignore_written_through_the_mount_applies_at_once() {
    let m = Mounted::with(|p| {
        std::fs::create_dir_all(p.join("sub/deep")).unwrap();
        std::fs::create_dir(p.join("other")).unwrap();
    });
    // Verdicts for these directories are cached before the rules change.
    for d in ["sub", "sub/deep", "other"] {
        std::fs::write(m.p(format!("{d}/before.tmp")), "1\n").unwrap();
    }
    std::fs::write(m.p("sub/.gitignore"), "*.tmp\n").unwrap();
    let s = last_seq(&m);
    assert_eq!(events_after(&m, s - 1)[0]["path"], "sub/.gitignore");
    for d in ["sub", "sub/deep", "other"] {
        std::fs::write(m.p(format!("{d}/after.tmp")), "2\n").unwrap();
    }
    std::fs::write(m.p("sub/kept"), "3\n").unwrap();
    let ev = events_after(&m, s);
    let paths: Vec<&str> = ev.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["other/after.tmp", "sub/kept"], "{ev:#?}");
}

/// Ignored paths pass through uncaptured; `include` in the config captures them (after a
/// remount); a file over `max_size` gets an event with captured=false and `show` refuses
/// its old content.
#[test]
fn ignore_rules_include_and_size_limit() {
    let mut m = Mounted::with(|p| {
        std::fs::write(p.join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::create_dir(p.join("target")).unwrap();
        std::fs::write(p.join("target/out"), "built\n").unwrap();
    });
    let s = last_seq(&m);
    std::fs::write(m.p("target/out"), "rebuilt\n").unwrap();
    std::fs::create_dir(m.p("target/debug")).unwrap();
    std::fs::write(m.p("target/debug/bin"), "binary\n").unwrap();
    std::fs::remove_file(m.p("target/out")).unwrap();
    std::fs::write(m.p("x.log"), "log\n").unwrap();
    std::fs::write(m.p("kept"), "kept\n").unwrap();
    let ev = events_after(&m, s);
    let paths: Vec<&str> = ev.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["kept"], "{ev:#?}");

    // Configure: capture target/, and a tiny size limit.
    m.unmount();
    std::fs::write(
        m.project.join(".agx/config.toml"),
        "[capture]\ninclude = [\"target/\"]\nmax_size = 1000\n",
    )
    .unwrap();
    std::fs::write(m.project.join("big"), vec![b'x'; 5000]).unwrap();
    let o = common::agx(["mount".as_ref(), m.project.as_os_str()]);
    ok(o, "remount");

    let s = last_seq(&m);
    std::fs::write(m.p("target/debug/bin"), "binary 2\n").unwrap();
    let e = only_event(&m, s, "write", "target/debug/bin");
    assert_eq!(
        show(&m, &format!("event:{}", seq(&e)), "target/debug/bin"),
        b"binary\n"
    );

    let s = last_seq(&m);
    std::fs::write(m.p("big"), "small now\n").unwrap();
    let e = only_event(&m, s, "write", "big");
    assert_eq!(e["captured"], false, "{e:#}");
    assert_eq!(
        e["before"],
        b3(&vec![b'x'; 5000]),
        "its hash is still known"
    );
    assert_eq!(e["size_before"], 5000);
    let o = m.agx([
        "show".into(),
        format!("event:{}", seq(&e)),
        m.p("big").to_string_lossy().into_owned(),
    ]);
    let line = hist::user_error(&o, "show of an uncaptured before-image");
    assert!(o.stdout.is_empty(), "no content on stdout");
    assert!(line.contains("big"), "{line}");
    assert!(line.contains("limit"), "{line}");
    // A restore says it cannot bring it back, and leaves it alone.
    let o = m.agx([
        "restore".into(),
        format!("event:{}", seq(&e)),
        m.p("big").to_string_lossy().into_owned(),
        "--yes".into(),
    ]);
    assert!(
        stderr(&o).contains("capture limit"),
        "restore explains: {}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(m.p("big")).unwrap(), b"small now\n");
    m.unmount();
}

/// A write in a new directory through a file descriptor opened before: still one event.
#[test]
fn many_writes_through_one_open_are_one_event() {
    let m = Mounted::with(|p| std::fs::write(p.join("log"), "").unwrap());
    let s = last_seq(&m);
    {
        let mut f = OpenOptions::new().append(true).open(m.p("log")).unwrap();
        for i in 0..200 {
            writeln!(f, "line {i}").unwrap();
        }
    }
    let e = only_event(&m, s, "write", "log");
    assert_eq!(show(&m, &format!("event:{}", seq(&e)), "log"), b"");
    let want: String = (0..200).map(|i| format!("line {i}\n")).collect();
    assert_eq!(e["after"], b3(want.as_bytes()));
}
