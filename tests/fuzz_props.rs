//! Every parser of untrusted input, fed arbitrary and near-valid input: REFs (also
//! resolved against a real timeline with a gc horizon), agent hook JSON, `.agx/config.toml`,
//! the control protocol (parsed, and sent to a live daemon), and names looked up under
//! `.agx/at/` through a real mount. None may panic; the daemon must answer every request
//! and keep serving. AGX_PROP_CASES=N runs a longer hunt (N cases per property).

mod common;
mod hist;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use agx::capture::config::Config;
use agx::control::proto::{Reply, Request};
use agx::hooks::Agent;
use agx::timeline::refs::{self, Ref};
use common::{agx_bin, Mounted};
use hist::ok;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::{json, Value};

fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(RunnerConfig {
        cases: hist::prop_cases(default_cases),
        failure_persistence: None,
        ..RunnerConfig::default()
    })
}

// ---- REFs -------------------------------------------------------------------------------

/// Arbitrary text and text close to every form of REF, where a parser's edge cases are.
fn ref_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "\\PC{0,12}",
        "(event|cp|session|branch|git|prompt|tool)?:?[-+]?[0-9]{0,25}",
        "[-+]?[0-9]{0,22}[smhdwyé€日]?[smhdw]?",
        "[0-9é€]{0,6}-?\\PC{0,4}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,12})?(Z|[+-][0-9]{2}:[0-9]{2})?)?",
        "[+-]?[0-9]{5,7}-[0-9]{2}-[0-9]{2}T00:00:00Z",
        "(now|cp-one|before)[\\x00-\\x1f\\x7f é/:.-]{0,3}",
        "[\\x00-\\x1f\\x7f]{1,4}\\PC{0,4}",
    ]
}

#[test]
fn ref_parse_never_panics() {
    runner(2000)
        .run(&ref_text(), |s| {
            let parsed = Ref::parse(&s);
            let name = refs::valid_name(&s);
            // A valid checkpoint name reads back as that name, never as another form.
            prop_assert!(!name || parsed.ok() == Some(Ref::Named(s.clone())));
            Ok(())
        })
        .unwrap();
}

#[test]
fn ref_resolve_never_panics_against_a_real_timeline() {
    // A timeline with events, a checkpoint, a session and a gc horizon.
    let mut m = Mounted::with(|p| std::fs::write(p.join("f"), "0").unwrap());
    std::fs::write(m.p("f"), "1").unwrap();
    std::fs::write(m.p("old"), "old").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    std::fs::write(m.p("f"), "2").unwrap();
    ok(m.agx(["checkpoint", "cp-one"]), "agx checkpoint");
    let f = m.p("f").display().to_string();
    ok(
        m.agx(["run", "--", "sh", "-c", &format!("echo 3 > '{f}'")]),
        "agx run",
    );
    ok(m.agx(["gc", "--keep", "1s"]), "agx gc");
    m.unmount();
    let tl = agx::timeline::Timeline::open_path(&m.project.join(".agx/timeline.db")).unwrap();
    assert!(tl.horizon().unwrap().is_some(), "gc left a horizon");
    let now = agx::capture::recorder::now_ns();
    let near_now = prop_oneof![
        any::<i64>(),
        Just(now),
        Just(i64::MIN),
        Just(i64::MAX),
        (now - 10_000_000_000..now + 10_000_000_000)
    ];
    runner(1500)
        .run(&(ref_text(), near_now), |(s, now_ns)| {
            let _ = refs::resolve(&s, &tl);
            if let Ok(r) = Ref::parse(&s) {
                let _ = r.resolve(&tl, now_ns, &s);
            }
            Ok(())
        })
        .unwrap();
    // The named forms resolve as they should (the fixture is what it claims).
    assert!(refs::resolve("cp-one", &tl).is_ok());
    assert!(refs::resolve("session:1", &tl).is_ok());
    assert!(refs::resolve("now", &tl).is_ok());
}

// ---- hook JSON --------------------------------------------------------------------------

const HOOK_KEYS: &[&str] = &[
    "session_id",
    "hook_event_name",
    "cwd",
    "tool_name",
    "tool_use_id",
    "prompt",
    "tool_input",
    "transcript_path",
];

const HOOK_EVENTS: &[&str] = &[
    "SessionStart",
    "SessionEnd",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
    "Notification",
];

fn short_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(HOOK_EVENTS).prop_map(String::from),
        "\\PC{0,12}",
        any::<String>(),
        "[\\x00-\\x1f\"\\\\/é€🦀]{0,6}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        short_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((json_key(HOOK_KEYS), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn json_key(known: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(known).prop_map(String::from),
        1 => "\\PC{0,8}",
    ]
}

/// An object that looks like a hook event: the known fields, with values of any type.
fn hook_event() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec((json_key(HOOK_KEYS), json_value()), 0..8),
        prop::sample::select(HOOK_EVENTS),
        short_text(),
        prop::option::of(short_text()),
    )
        .prop_map(|(fields, name, key, tool)| {
            let mut o = serde_json::Map::new();
            o.insert("hook_event_name".into(), name.into());
            o.insert("session_id".into(), key.into());
            if let Some(t) = tool {
                o.insert("tool_name".into(), t.into());
            }
            for (k, v) in fields {
                o.insert(k, v);
            }
            Value::Object(o)
        })
}

fn hook_input() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<Vec<u8>>().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        json_value().prop_map(|v| v.to_string()),
        hook_event().prop_map(|v| v.to_string()),
        hook_event().prop_map(|v| {
            // Cut short: a hook killed mid-write.
            let s = v.to_string();
            s.chars().take(s.chars().count() / 2).collect()
        }),
    ]
}

#[test]
fn hook_json_parsing_never_panics() {
    runner(1500)
        .run(&hook_input(), |input| {
            for agent in [Agent::Claude, Agent::Codex, Agent::Gemini] {
                let _ = agx::hooks::parse(agent, &input);
            }
            Ok(())
        })
        .unwrap();
    // Nesting far beyond any real event is refused, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(agx::hooks::parse(Agent::Claude, &deep).is_err());
    let deep = format!(r#"{{"session_id":"s","hook_event_name":"Stop","x":{deep}}}"#);
    assert!(agx::hooks::parse(Agent::Claude, &deep).is_err());
}

#[test]
fn prompt_truncation_never_panics() {
    runner(1500)
        .run(&(any::<String>(), 0usize..64), |(text, max)| {
            let t = agx::control::hooks::truncate_prompt(&text, max);
            prop_assert!(t.len() <= text.len().max(max + '…'.len_utf8()));
            Ok(())
        })
        .unwrap();
}

/// Arbitrary hook events through the real `agx hook` binary into a live daemon: every
/// one exits 0 with at most one line on stderr, and the daemon keeps serving.
#[test]
fn hook_events_into_a_live_daemon_never_fail_the_agent() {
    let m = Mounted::new();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("event.json");
    let n = AtomicUsize::new(0);
    runner(60)
        .run(
            &(
                prop::sample::select(&["claude", "codex", "gemini"][..]),
                hook_input(),
            ),
            |(agent, text)| {
                std::fs::write(&input, &text).unwrap();
                // Through `timeout`: a hook's session is rooted at its nearest non-shell
                // ancestor, which agx marks as an agent; that must not be this test
                // process, whose later commands (gc) would be refused.
                let out = Command::new("timeout")
                    .arg("60")
                    .arg(agx_bin())
                    .args(["hook", agent])
                    .current_dir(m.path())
                    .stdin(std::fs::File::open(&input).unwrap())
                    .output()
                    .unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                prop_assert_eq!(out.status.code(), Some(0), "{}", err);
                prop_assert!(err.lines().count() <= 1, "{}", err);
                n.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
        )
        .unwrap();
    assert!(n.into_inner() > 0);
    ok(m.agx(["session", "list"]), "agx session list");
    std::fs::write(m.p("alive"), "yes").unwrap();
}

// ---- .agx/config.toml -------------------------------------------------------------------

const CONFIG_KEYS: &[&str] = &[
    "max_size",
    "fsync",
    "include",
    "exclude",
    "prompt_max",
    "keep",
];

fn toml_value() -> impl Strategy<Value = String> {
    let s = prop_oneof![
        "\\PC{0,8}",
        "[-+]?[0-9]{0,20}[smhdwy]?",
        "[\\[\\]{}*?!\\\\/a,-]{0,6}",
        Just("never".to_string()),
        Just("always".to_string()),
    ];
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        any::<bool>().prop_map(|b| b.to_string()),
        s.clone().prop_map(|s| format!("{s:?}")),
        s.clone().prop_map(|s| format!("'{s}'")),
        prop::collection::vec(s.clone(), 0..4).prop_map(|v| format!("{v:?}")),
        s.clone().prop_map(|s| format!("{{ x = {s:?} }}")),
        "\\PC{0,10}",
    ]
}

fn config_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        prop::sample::select(&["capture", "hooks", "history", "x", "capture.y"][..])
            .prop_map(|s| format!("[{s}]")),
        (json_key(CONFIG_KEYS), toml_value()).prop_map(|(k, v)| format!("{k} = {v}")),
        "\\PC{0,16}",
    ];
    prop_oneof![
        any::<String>(),
        prop::collection::vec(line, 0..8).prop_map(|l| l.join("\n")),
    ]
}

#[test]
fn config_parsing_never_panics_and_errors_are_one_line() {
    runner(2000)
        .run(&config_text(), |text| {
            if let Err(e) = Config::parse(&text) {
                let e = e.to_string();
                prop_assert!(!e.contains('\n') && !e.is_empty(), "{:?}: {:?}", text, e);
            }
            Ok(())
        })
        .unwrap();
}

// ---- the control protocol ---------------------------------------------------------------

const COMMANDS: &[&str] = &[
    "flush",
    "summary",
    "log",
    "show",
    "diff",
    "plan",
    "oops-target",
    "blame",
    "session-list",
    "session-show",
    "whoami",
    "checkpoint",
    "checkpoint-list",
    "pin",
    "pins",
    "verify",
    "bogus",
];

const REQUEST_KEYS: &[&str] = &[
    "path",
    "since",
    "limit",
    "at",
    "from",
    "to",
    "paths",
    "id",
    "name",
    "message",
    "all",
    "repair",
    "on_conflict",
];

fn hexish() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<Vec<u8>>().prop_map(|b| Value::from(agx::control::proto::hex(&b))),
        prop::sample::select(
            &[
                "",
                "2e2e",
                "2e2e2f2e2e2f6574632f706173737764",
                "2e616778",
                "66",
                "6",
                "zz",
                "00"
            ][..]
        )
        .prop_map(Value::from),
    ]
}

/// A request line: any text, or an object with a known command and fields of any type,
/// or one whose fields have the right types and arbitrary contents.
fn request_line() -> impl Strategy<Value = String> {
    let typed = (
        prop::sample::select(COMMANDS),
        ref_text(),
        hexish(),
        prop::collection::vec(hexish(), 0..3),
        prop::option::of(0usize..5),
        any::<bool>(),
    )
        .prop_map(|(cmd, r, path, paths, limit, flag)| {
            json!({
                "cmd": cmd, "at": r, "since": r, "from": r, "to": null, "path": path,
                "paths": paths, "limit": limit, "id": r, "name": r, "message": null,
                "all": flag, "repair": false, "on_conflict": "refuse",
            })
            .to_string()
        });
    let loose = (
        prop::sample::select(COMMANDS),
        prop::collection::vec((json_key(REQUEST_KEYS), json_value()), 0..6),
    )
        .prop_map(|(cmd, fields)| {
            let mut o = serde_json::Map::new();
            o.insert("cmd".into(), cmd.into());
            for (k, v) in fields {
                // Never a real repair: it would move objects.
                if k != "repair" {
                    o.insert(k, v);
                }
            }
            Value::Object(o).to_string()
        });
    prop_oneof![
        "[^\n]{0,40}",
        json_value().prop_map(|v| v.to_string()),
        loose,
        typed,
    ]
}

#[test]
fn request_parsing_never_panics() {
    runner(2000)
        .run(&(request_line(), any::<String>()), |(line, s)| {
            let _ = serde_json::from_str::<Request>(&line);
            let _ = serde_json::from_str::<Reply>(&line);
            let _ = agx::control::proto::unhex(&s);
            Ok(())
        })
        .unwrap();
}

/// Sends one line to the daemon's socket; the replies it got, up to the final one.
fn call(socket: &Path, line: &str) -> Vec<Reply> {
    let mut s = UnixStream::connect(socket).expect("the daemon's socket");
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    s.write_all(line.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut out = Vec::new();
    for l in BufReader::new(s).lines() {
        let l = l.expect("a reply line, not a timeout");
        let r: Reply = serde_json::from_str(&l).expect("a reply");
        let last = r.progress.is_none();
        out.push(r);
        if last {
            break;
        }
    }
    out
}

#[test]
fn a_live_daemon_answers_every_request_line() {
    let m = Mounted::with(|p| {
        std::fs::write(p.join("f"), "1\n").unwrap();
        std::fs::create_dir(p.join("d")).unwrap();
    });
    std::fs::write(m.p("f"), "2\n").unwrap();
    std::fs::write(m.p("d/g"), "g\n").unwrap();
    ok(m.agx(["checkpoint", "cp-one"]), "agx checkpoint");
    let project = m.project.canonicalize().unwrap();
    let socket = agx::control::paths(&project).unwrap().socket;
    runner(400)
        .run(&request_line(), |line| {
            let replies = call(&socket, &line);
            prop_assert!(!replies.is_empty(), "no answer to {}", line);
            let last = replies.last().unwrap();
            if let Some(e) = &last.error {
                prop_assert!(!e.contains("internal error"), "{}: {}", line, e);
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"2\n");
    ok(m.agx(["status"]), "agx status");
    ok(m.agx(["log"]), "agx log");
}

// ---- names under .agx/at/ ---------------------------------------------------------------

/// Bytes of one file name (no '/' or NUL): near-REFs, non-ASCII, invalid UTF-8, and
/// lengths up to the 255 bytes of most filesystems and well beyond (FUSE passes longer
/// names on).
fn name_bytes() -> impl Strategy<Value = Vec<u8>> {
    let any_byte = prop::num::u8::ANY.prop_filter("a name byte", |b| *b != b'/' && *b != 0);
    prop_oneof![
        ref_text().prop_map(|s| s.into_bytes()),
        prop::collection::vec(any_byte.clone(), 1..16),
        prop::collection::vec(any_byte.clone(), 200..256),
        prop::collection::vec(any_byte.clone(), 256..1025),
        prop::collection::vec(
            prop::sample::select(&[0x80u8, 0xc3, 0xa9, 0xff, b'a', b'1', b'-', b':'][..]),
            1..8
        ),
    ]
    .prop_map(|mut b| {
        b.retain(|c| *c != b'/' && *c != 0);
        b.truncate(1024);
        if b.is_empty() {
            b.push(b'x');
        }
        b
    })
}

/// Whether `name` under `.agx/at/` may be found: it reads as a REF that needs no
/// checkpoint (now, a time, an event...), or names the checkpoint of this test.
fn may_exist(name: &[u8]) -> bool {
    if name == b"." || name == b".." {
        return true;
    }
    match std::str::from_utf8(name).ok().map(Ref::parse) {
        Some(Ok(Ref::Named(n))) => n == "cp-one",
        Some(Ok(_)) => true,
        _ => false,
    }
}

#[test]
fn arbitrary_names_under_at_are_enoent_and_the_daemon_keeps_serving() {
    let m = Mounted::with(|p| std::fs::write(p.join("f"), "1\n").unwrap());
    ok(m.agx(["checkpoint", "cp-one"]), "agx checkpoint");
    std::fs::write(m.p("f"), "2\n").unwrap();
    let at = m.p(".agx/at");
    let looked = AtomicUsize::new(0);
    let expect = |p: &Path, may: bool| -> Result<(), TestCaseError> {
        match std::fs::symlink_metadata(p) {
            Ok(_) => prop_assert!(may, "{} exists", p.display()),
            Err(e) => {
                let errno = e.raw_os_error();
                prop_assert!(
                    [libc::ENOENT, libc::ENAMETOOLONG, libc::EINVAL]
                        .map(Some)
                        .contains(&errno),
                    "{}: {}",
                    p.display(),
                    e
                );
            }
        }
        Ok(())
    };
    runner(300)
        .run(&name_bytes(), |name| {
            let os = OsStr::from_bytes(&name);
            expect(&at.join(os), may_exist(&name))?;
            // Inside a view that exists, only names of the tree at that point exist.
            expect(
                &at.join("cp-one").join(os),
                name == b"f" || name == b"." || name == b"..",
            )?;
            looked.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    assert!(looked.into_inner() >= hist::prop_cases(300) as usize);
    // The daemon is asked about names of any length below PATH_MAX (views answer ENOENT
    // past 255 bytes, where the live tree's filesystem says ENAMETOOLONG); the kernel
    // refuses longer paths itself.
    for len in [256, 1000, 3900] {
        let long = at.join("a".repeat(len));
        let e = std::fs::symlink_metadata(&long).unwrap_err().raw_os_error();
        assert!(
            [Some(libc::ENOENT), Some(libc::ENAMETOOLONG)].contains(&e),
            "{len}: {e:?}"
        );
    }
    let longest = at.join("a".repeat(4096));
    assert_eq!(
        std::fs::symlink_metadata(&longest)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENAMETOOLONG)
    );
    // Still serving.
    assert_eq!(std::fs::read(at.join("cp-one/f")).unwrap(), b"1\n");
    std::fs::write(m.p("f"), "3\n").unwrap();
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"3\n");
    ok(m.agx(["status"]), "agx status");
}
