//! Untrusted input never takes agx down, and every failure is one clear line: non-ASCII
//! REFs under `.agx/at/` and on the command line, commands whose stdout is a closed
//! pipe, hooks called with bad arguments, restores of paths that never existed, and bad
//! values in `.agx/config.toml`.

mod common;
mod hist;

use std::ffi::OsStr;
use std::path::Path;

use common::Mounted;
use hist::{ok, user_error};

fn errno(p: &Path) -> Option<i32> {
    std::fs::symlink_metadata(p)
        .err()
        .and_then(|e| e.raw_os_error())
}

/// The REFs that once sliced a `&str` off a character boundary (`s[..4]`), and their
/// neighbours.
const NON_ASCII_REFS: &[&str] = &[
    "abcé",
    "é",
    "2026é",
    "abé",
    "aébc",
    "éé",
    "ééé-",
    "2026-é",
    "10é",
    "1é",
    "abc€",
    "ab€",
    "a€",
    "日本語の名前",
    "🦀🦀",
    "abc\u{301}",
];

#[test]
fn non_ascii_refs_under_at_are_enoent_and_the_daemon_keeps_serving() {
    let m = Mounted::with(|p| std::fs::write(p.join("f"), "one").unwrap());
    ok(m.agx(["checkpoint", "before"]), "agx checkpoint");
    std::fs::write(m.p("f"), "two").unwrap();
    // More lookups than the daemon has request threads (AGX_THREADS, default 4), twice.
    for _ in 0..3 {
        for r in NON_ASCII_REFS {
            let at = m.p(".agx/at").join(r);
            assert_eq!(errno(&at), Some(libc::ENOENT), "stat .agx/at/{r}");
            assert_eq!(
                errno(&at.join("f")),
                Some(libc::ENOENT),
                "stat .agx/at/{r}/f"
            );
        }
    }
    // Still serving: the tree, the views, the control socket.
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"two");
    assert_eq!(std::fs::read(m.p(".agx/at/before/f")).unwrap(), b"one");
    std::fs::write(m.p("g"), "new").unwrap();
    assert_eq!(std::fs::read(m.p("g")).unwrap(), b"new");
    ok(m.agx(["status"]), "agx status");
}

#[test]
fn non_ascii_refs_on_the_command_line_are_one_line_user_errors() {
    let mut m = Mounted::with(|p| std::fs::write(p.join("f"), "one").unwrap());
    std::fs::write(m.p("f"), "two").unwrap();
    let f = m.p("f");
    let check = |m: &Mounted, how: &str| {
        for r in NON_ASCII_REFS {
            let line = user_error(
                &m.agx([OsStr::new("show"), OsStr::new(r), f.as_os_str()]),
                r,
            );
            assert!(line.contains(r), "{how} agx show {r}: {line}");
            user_error(&m.agx(["log", "--since", r]), r);
            user_error(&m.agx(["diff", r]), r);
            user_error(&m.agx(["restore", r, "--dry-run"]), r);
        }
    };
    check(&m, "mounted");
    m.unmount();
    check(&m, "unmounted");
}
