//! Untrusted input never takes agx down, and every failure is one clear line: non-ASCII
//! REFs under `.agx/at/` and on the command line, commands whose stdout is a closed
//! pipe, hooks called with bad arguments, restores of paths that never existed, and bad
//! values in `.agx/config.toml`.

mod common;
mod hist;

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{agx_bin, Mounted};
use hist::{ok, stderr, user_error};

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

/// Runs `agx ARGS` with its stdout a pipe whose reader has already gone.
fn into_closed_pipe(m: &Mounted, args: &[&str]) -> Output {
    let (r, w) = rustix::pipe::pipe().unwrap();
    drop(r);
    Command::new(agx_bin())
        .arg("-C")
        .arg(&m.project)
        .args(args)
        .stdout(Stdio::from(w))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// Ended quietly on a closed stdout: killed by SIGPIPE (as git is) or exit 0, and no panic.
fn assert_quiet(o: &Output, what: &str) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_ne!(o.status.code(), Some(101), "{what}: {err}");
    assert!(
        o.status.signal() == Some(libc::SIGPIPE) || o.status.code() == Some(0),
        "{what}: {:?} {err}",
        o.status
    );
}

#[test]
fn no_command_panics_on_a_closed_stdout() {
    let mut m = Mounted::with(|p| std::fs::write(p.join("f"), "one\n").unwrap());
    std::fs::write(m.p("f"), "two\n").unwrap();
    ok(m.agx(["checkpoint", "cp1"]), "agx checkpoint");
    ok(
        m.agx([
            "run",
            "--name",
            "s",
            "--",
            "sh",
            "-c",
            &format!("echo three >> '{}'", m.p("f").display()),
        ]),
        "agx run",
    );
    ok(m.agx(["pin", "cp1"]), "agx pin");
    let f = m.p("f").to_string_lossy().into_owned();
    let cmds: Vec<Vec<&str>> = vec![
        vec!["status"],
        vec!["status", "--json"],
        vec!["log"],
        vec!["log", "--json"],
        vec!["show", "cp1", &f],
        vec!["diff", "event:1"],
        vec!["diff", "event:1", "--stat"],
        vec!["session", "list"],
        vec!["session", "list", "--json"],
        vec!["session", "show", "1"],
        vec!["checkpoint", "list"],
        vec!["blame", &f],
        vec!["pin"],
        vec!["verify"],
        vec!["restore", "event:1", "--dry-run"],
        vec!["--help"],
        vec!["log", "--help"],
        vec!["--version"],
    ];
    for c in &cmds {
        assert_quiet(&into_closed_pipe(&m, c), &format!("mounted: agx {c:?}"));
    }
    m.unmount();
    for c in &cmds {
        assert_quiet(&into_closed_pipe(&m, c), &format!("unmounted: agx {c:?}"));
    }
}

/// Runs `agx ARGS` as an agent's hook would (stdin empty).
fn hook(args: &[&str]) -> Output {
    Command::new(agx_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_hook_with_bad_arguments_is_one_line_and_exit_0() {
    for args in [
        vec!["hook"],
        vec!["hook", "bogus"],
        vec!["hook", "generic"],
        vec!["hook", "generic", "--event", "nope", "--session", "s"],
        vec!["hook", "generic", "--event", "tool-start", "--session", "s"],
        vec!["hook", "generic", "--event", "prompt", "--session", "s"],
        vec!["hook", "generic", "--session"],
        vec!["hook", "claude", "--bogus"],
        vec!["hook", "claude", "extra"],
        vec!["-C", "/nonexistent", "hook", "codex", "--x"],
        vec!["--json", "hook", "gemini", "-z"],
    ] {
        let o = hook(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "agx {args:?}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "agx {args:?}: {err:?}");
        assert!(lines[0].starts_with("agx hook: "), "agx {args:?}: {err:?}");
        assert!(o.stdout.is_empty(), "agx {args:?}");
    }
    // Naming what was wrong.
    let err = stderr(&hook(&[
        "hook",
        "generic",
        "--event",
        "nope",
        "--session",
        "s",
    ]));
    assert!(err.contains("nope") && err.contains("tool-start"), "{err}");
    let err = stderr(&hook(&[
        "hook",
        "generic",
        "--event",
        "prompt",
        "--session",
        "s",
    ]));
    assert!(err.contains("--text"), "{err}");
    // Help is still help.
    let o = hook(&["hook", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(hist::stdout(&o).contains("generic"));
    // Other commands keep clap's usage errors (exit 2).
    for args in [
        vec!["log", "--bogus"],
        vec!["bogus"],
        vec!["hooks", "install"],
    ] {
        assert_eq!(hook(&args).status.code(), Some(2), "agx {args:?}");
    }
}

#[test]
fn a_hook_whose_stderr_is_a_closed_pipe_still_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    for (args, input) in [
        (vec!["hook", "generic", "--event", "nope"], None),
        (vec!["hook", "claude"], Some(&bad)),
        (vec!["--json", "hook", "claude"], Some(&bad)),
    ] {
        let (r, w) = rustix::pipe::pipe().unwrap();
        drop(r);
        let stdin = match input {
            Some(f) => Stdio::from(std::fs::File::open(f).unwrap()),
            None => Stdio::null(),
        };
        let o = Command::new(agx_bin())
            .args(&args)
            .current_dir(dir.path())
            .stdin(stdin)
            .stderr(Stdio::from(w))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "agx {args:?}: {:?}", o.status);
    }
}

#[test]
fn restoring_a_path_that_never_existed_is_a_user_error() {
    let mut m = Mounted::with(|p| {
        std::fs::write(p.join("kept"), "kept").unwrap();
        std::fs::write(p.join("gone"), "gone").unwrap();
        std::fs::create_dir_all(p.join("d/sub")).unwrap();
        std::fs::write(p.join("d/sub/x"), "x").unwrap();
    });
    ok(m.agx(["checkpoint", "start"]), "agx checkpoint");
    std::fs::remove_file(m.p("gone")).unwrap();
    std::fs::write(m.p("new"), "new").unwrap();
    std::fs::write(m.p("brief"), "brief").unwrap();
    std::fs::remove_file(m.p("brief")).unwrap();
    std::fs::rename(m.p("d"), m.p("e")).unwrap();
    std::fs::write(m.p("kept"), "changed").unwrap();

    let restore = |m: &Mounted, paths: &[&str], extra: &[&str]| {
        let mut args: Vec<std::ffi::OsString> = vec!["restore".into(), "start".into()];
        args.extend(paths.iter().map(|p| m.p(p).into_os_string()));
        args.extend(extra.iter().map(|a| a.into()));
        m.agx(&args)
    };
    let check = |m: &Mounted, how: &str| {
        for extra in [&["--dry-run"][..], &["--yes"], &["--yes", "--json"]] {
            for bad in [
                vec!["no/such/path"],
                vec!["nope"],
                vec!["d/sub/nope"],
                vec!["kept", "nope"],
                vec!["e/sub/x/below-a-file"],
            ] {
                let wrong = bad.last().unwrap();
                let line = user_error(&restore(m, &bad, extra), &format!("{how} {bad:?}"));
                assert!(line.contains(wrong), "{how} {bad:?} {extra:?}: {line}");
                assert!(line.contains("start"), "{how} {bad:?}: {line}");
            }
        }
        // Nothing changed by the refusals.
        assert_eq!(std::fs::read(m.project.join("kept")).unwrap(), b"changed");
        // Paths that exist at either end, or that an event touched, are fine requests
        // even when nothing changes.
        for good in [
            vec!["kept"],
            vec!["gone"],
            vec!["new"],
            vec!["brief"],
            vec!["d/sub/x"],
            vec!["e/sub"],
            vec!["d"],
        ] {
            ok(
                restore(m, &good, &["--dry-run"]),
                &format!("{how} {good:?}"),
            );
        }
    };
    check(&m, "mounted:");
    m.unmount();
    check(&m, "unmounted:");
}

#[test]
fn a_bad_config_value_stops_mount_and_commands_with_one_line() {
    let mut m = Mounted::with(|p| std::fs::write(p.join("f"), "one").unwrap());
    std::fs::write(m.p("f"), "two").unwrap();
    m.unmount();
    let events = ok(m.agx(["log", "--json"]), "agx log");
    let config = m.project.join(".agx/config.toml");
    for (text, key) in [
        ("[history]\nkeep = \"forever\"\n", "history.keep"),
        ("[history]\nkeep = \"-1d\"\n", "history.keep"),
        ("[history]\nkeep = \"0s\"\n", "history.keep"),
        ("[history]\nkeep = forever\n", "keep = forever"),
        ("[capture]\nexclude = [\"a[b\"]\n", "capture.exclude"),
        ("[capture]\ninclude = [\"a{b\"]\n", "capture.include"),
        ("[capture]\nmax_size = -1\n", "capture.max_size"),
        ("[capture]\nfsync = \"sometimes\"\n", "capture.fsync"),
        ("[hooks]\nprompt_max = \"big\"\n", "hooks.prompt_max"),
        ("[capture]\nmax_sise = 10\n", "capture.max_sise"),
        ("[capture\n", "line 1"),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = Command::new(agx_bin())
            .arg("mount")
            .arg(&m.project)
            .output()
            .unwrap();
        let line = user_error(&out, &format!("agx mount with {text:?}"));
        assert!(
            line.contains(".agx/config.toml") && line.contains(key),
            "{text:?}: {line}"
        );
        assert!(!hist::is_agx_mount(&m.project), "{text:?}: mounted anyway");
        let log = user_error(&m.agx(["log"]), &format!("agx log with {text:?}"));
        let why = line.split(".agx/config.toml").nth(1).unwrap();
        assert!(log.ends_with(why), "{text:?}: {log} / {line}");
    }
    // Nothing was changed by the refused runs.
    std::fs::remove_file(&config).unwrap();
    assert_eq!(ok(m.agx(["log", "--json"]), "agx log"), events);
    assert_eq!(std::fs::read(m.project.join("f")).unwrap(), b"two");
}
