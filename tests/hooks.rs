//! Agent hooks for real: a stand-in agent process named `claude` (a copy of the system
//! shell under that name) runs `agx hook claude` with Claude Code's hook event JSON
//! (fixtures in tests/fixtures/claude/) in a mounted project, and changes its tools make
//! are linked to the session and the tool call. Malformed events never fail the agent.
//! `agx hooks install|uninstall` round trips on settings files with other content.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{agx, agx_bin, Mounted};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude")
}

/// Fixture `name` with its cwd set to `cwd`, written to `dir`; the path written.
fn fixture(name: &str, cwd: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(fixtures().join(format!("{name}.json"))).unwrap();
    let out = dir.join(format!("{name}.json"));
    std::fs::write(&out, text.replace("@CWD@", &cwd.to_string_lossy())).unwrap();
    out
}

/// A copy of the system shell named `name` in `dir`: a process running it has that
/// name, like a real agent binary.
fn stand_in(dir: &Path, name: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let p = bin.join(name);
    std::fs::copy("/bin/sh", &p).unwrap();
    p
}

/// Runs `script` with the stand-in agent `agent`, in `cwd`; its output.
fn run_agent(agent: &Path, script: &str, cwd: &Path) -> Output {
    let out = common::output_of(
        Command::new(agent)
            .arg("-c")
            .arg(script)
            .current_dir(cwd)
            .env("AGX", agx_bin()),
    );
    assert!(
        out.status.success(),
        "agent script failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sessions(m: &Mounted) -> Vec<Value> {
    json_of(&m.agx(["session", "list", "--json"]))
        .as_array()
        .unwrap()
        .clone()
}

fn event_for<'a>(log: &'a Value, path: &str) -> &'a Value {
    log.as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == path)
        .unwrap_or_else(|| panic!("no event for {path} in {log:#}"))
}

#[test]
fn a_claude_session_links_its_changes_to_the_session_and_tool_call() {
    let m = Mounted::new();
    let tmp = m.tmp.path();
    let claude = stand_in(tmp, "claude");
    let cwd = m.path().canonicalize().unwrap();
    let f: Vec<PathBuf> = [
        "session_start",
        "user_prompt_submit",
        "pre_tool_use",
        "post_tool_use",
        "notification",
        "stop",
        "session_end",
    ]
    .iter()
    .map(|n| fixture(n, &cwd, tmp))
    .collect();
    let out_dir = tmp.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    // The agent runs some hooks directly and some through a shell, as Claude Code does;
    // its tool writes through a child shell. Hook stdout (which Claude would read) is
    // empty without --json.
    let script = format!(
        r#"set -e
echo $$ > {o}/pid
"$AGX" hook claude < {ss} > {o}/ss.out
sh -c '"$AGX" hook claude' < {up} > {o}/up.out
"$AGX" --json hook claude < {pre} > {o}/pre.json
sh -c 'echo hello > notes.txt'
"$AGX" hook claude < {post}
"$AGX" hook claude < {notif}
echo later > later.txt
"$AGX" hook claude < {stop}
sh -c '"$AGX" hook claude' < {end}
"#,
        o = out_dir.display(),
        ss = f[0].display(),
        up = f[1].display(),
        pre = f[2].display(),
        post = f[3].display(),
        notif = f[4].display(),
        stop = f[5].display(),
        end = f[6].display(),
    );
    let out = run_agent(&claude, &script, m.path());
    assert!(
        out.stderr.is_empty(),
        "hooks complained: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(out_dir.join("ss.out")).unwrap(), b"");
    assert_eq!(std::fs::read(out_dir.join("up.out")).unwrap(), b"");
    let pid: u64 = std::fs::read_to_string(out_dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pre: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("pre.json")).unwrap()).unwrap();
    let call = pre["tool_call"].as_i64().expect("PreToolUse starts a call");

    let list = sessions(&m);
    assert_eq!(list.len(), 1, "{list:#?}");
    let id = list[0]["id"].as_str().unwrap().to_string();
    assert_eq!(pre["session"], id.as_str());

    let log = json_of(&m.agx(["log", "--json"]));
    let notes = event_for(&log, "notes.txt");
    assert_eq!(notes["session"], id.as_str());
    assert_eq!(notes["tool_call"], call);
    let later = event_for(&log, "later.txt");
    assert_eq!(later["session"], id.as_str());
    assert!(later["tool_call"].is_null(), "{later:#}");

    let show = json_of(&m.agx(["session", "show", &id, "--json"]));
    assert_eq!(show["agent"], "claude");
    assert_eq!(show["key"], "9f0c4c1e-hooks-test");
    assert_eq!(show["root_pid"], pid);
    assert_eq!(show["tool_calls"], 1);
    assert_eq!(
        show["prompts"][0]["text"],
        "Write hello into notes.txt, please"
    );
    assert!(!show["ended"].is_null(), "SessionEnd ends it: {show:#}");
    // The session can be found by Claude's own id too.
    let by_key = json_of(&m.agx(["session", "show", "9f0c4c1e-hooks-test", "--json"]));
    assert_eq!(by_key["id"], id.as_str());
}

#[test]
fn a_tool_event_without_session_start_starts_the_session() {
    let m = Mounted::with(|p| {
        std::fs::create_dir(p.join(".agx")).unwrap();
        std::fs::write(p.join(".agx/config.toml"), "[hooks]\nprompt_max = 5\n").unwrap();
    });
    let tmp = m.tmp.path();
    let claude = stand_in(tmp, "claude");
    let cwd = m.path().canonicalize().unwrap();
    let up = fixture("user_prompt_submit", &cwd, tmp);
    let pre = fixture("pre_tool_use", &cwd, tmp);
    let post = fixture("post_tool_use", &cwd, tmp);
    // The hook runs from the tmp dir: the project comes from the event's cwd.
    let script = format!(
        r#"set -e
cd {tmp}
"$AGX" hook claude < {pre}
echo x > {cwd}/a.txt
"$AGX" hook claude < {post}
"$AGX" hook claude < {up}
"#,
        tmp = tmp.display(),
        pre = pre.display(),
        post = post.display(),
        up = up.display(),
        cwd = cwd.display(),
    );
    run_agent(&claude, &script, m.path());
    let list = sessions(&m);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["agent"], "claude");
    assert!(list[0]["ended"].is_null());
    let id = list[0]["id"].as_str().unwrap();
    let log = json_of(&m.agx(["log", "--json"]));
    let a = event_for(&log, "a.txt");
    assert_eq!(a["session"], id);
    assert!(a["tool_call"].is_i64());
    // The prompt is kept truncated to [hooks] prompt_max bytes.
    let show = json_of(&m.agx(["session", "show", id, "--json"]));
    assert_eq!(show["prompts"][0]["text"], "Write…");
}

#[test]
fn malformed_events_are_reported_and_never_fail_the_agent() {
    let m = Mounted::new();
    let tmp = m.tmp.path();
    let cwd = m.path().canonicalize().unwrap();
    for name in [
        "malformed_truncated",
        "malformed_array",
        "malformed_no_session",
        "malformed_no_tool_name",
        "malformed_empty",
    ] {
        let f = fixture(name, &cwd, tmp);
        let out = Command::new(agx_bin())
            .args(["hook", "claude"])
            .current_dir(m.path())
            .stdin(std::fs::File::open(&f).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: exit {:?}", out.status);
        assert!(out.stdout.is_empty(), "{name}: stdout {:?}", out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with("agx hook: "), "{name}: {err}");
    }
    assert!(sessions(&m).is_empty());
    assert!(json_of(&m.agx(["log", "--json"]))
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn an_unmounted_project_is_reported_and_never_fails_the_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().canonicalize().unwrap();
    let f = fixture("session_start", &cwd, tmp.path());
    let out = Command::new(agx_bin())
        .args(["hook", "claude"])
        .stdin(std::fs::File::open(&f).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not in a project mounted by agx"), "{err}");
    assert!(!cwd.join(".agx").exists(), "nothing created");
}

#[test]
fn generic_hooks_record_sessions_and_tool_calls() {
    let m = Mounted::new();
    let tmp = m.tmp.path();
    let agent = stand_in(tmp, "myagent");
    let script = r#"set -e
"$AGX" hook generic --event session-start --session run-42 --agent myagent
"$AGX" hook generic --event prompt --session run-42 --text "tidy up"
"$AGX" hook generic --event tool-start --session run-42 --tool edit --tool-use-id e1
sh -c 'echo y > g.txt'
"$AGX" hook generic --event tool-end --session run-42 --tool-use-id e1
"$AGX" hook generic --event session-end --session run-42
"#;
    let out = run_agent(&agent, script, m.path());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = sessions(&m);
    assert_eq!(list.len(), 1);
    let id = list[0]["id"].as_str().unwrap();
    let show = json_of(&m.agx(["session", "show", id, "--json"]));
    assert_eq!(show["agent"], "myagent");
    assert_eq!(show["key"], "run-42");
    assert_eq!(show["prompts"][0]["text"], "tidy up");
    assert!(!show["ended"].is_null());
    let log = json_of(&m.agx(["log", "--json"]));
    let g = event_for(&log, "g.txt");
    assert_eq!(g["session"], id);
    assert!(g["tool_call"].is_i64());
    // The agent resumes the session under the same key: it is open again, not a new one.
    run_agent(
        &agent,
        r#""$AGX" hook generic --event session-start --session run-42"#,
        m.path(),
    );
    let list = sessions(&m);
    assert_eq!(list.len(), 1);
    assert!(list[0]["ended"].is_null(), "{list:#?}");
    // A tool-start without --tool is a usage error, reported in one line; hooks never
    // fail the agent, so the exit code is still 0.
    let out = m.agx([
        "hook",
        "generic",
        "--event",
        "tool-start",
        "--session",
        "run-42",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("agx hook: ") && err.contains("--tool"),
        "{err}"
    );
}

/// Installs and uninstalls agx's hooks for `agent` in `file` (under `base`, which is
/// the project, or HOME with `user`), starting from `original`.
fn round_trip(agent: &str, base: &Path, file: &str, user: bool, original: &Value) {
    let path = base.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_string_pretty(original).unwrap()).unwrap();
    let run = |verb: &str| {
        let mut c = Command::new(agx_bin());
        c.arg("-C").arg(base).args(["hooks", verb, agent]);
        if user {
            c.arg("--user").env("HOME", base).current_dir("/");
        }
        let out = c.stdin(Stdio::null()).output().unwrap();
        assert!(
            out.status.success(),
            "hooks {verb} {agent}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let read = || -> Value { serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap() };
    run("install");
    let installed = read();
    let cmd = format!("agx hook {agent}");
    let ours = |v: &Value| -> usize {
        v["hooks"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|gs| gs.as_array().unwrap())
            .flat_map(|g| g["hooks"].as_array().unwrap())
            .filter(|h| h["command"] == cmd.as_str())
            .count()
    };
    assert!(ours(&installed) >= 5, "{installed:#}");
    // Everything else is still there.
    for (k, v) in original.as_object().unwrap() {
        if k != "hooks" {
            assert_eq!(&installed[k], v);
        }
    }
    let bytes = std::fs::read(&path).unwrap();
    let again = run("install");
    assert!(again.contains("already"), "{again}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "installing twice adds nothing"
    );
    run("uninstall");
    assert_eq!(
        &read(),
        original,
        "{agent}: uninstall restores the original"
    );
    let again = run("uninstall");
    assert!(again.contains("no agx hooks"), "{again}");
}

#[test]
fn hooks_install_and_uninstall_round_trip_with_other_content() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    let other_hook =
        json!([{"matcher": "Bash", "hooks": [{"type": "command", "command": "./lint.sh"}]}]);
    let claude = json!({
        "model": "opus",
        "permissions": {"allow": ["Bash(ls:*)"]},
        "hooks": {"PreToolUse": other_hook, "Notification": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}
    });
    round_trip("claude", p, ".claude/settings.json", false, &claude);
    round_trip("claude", p, ".claude/settings.json", true, &claude);
    let codex =
        json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}});
    round_trip("codex", p, ".codex/hooks.json", false, &codex);
    let gemini = json!({
        "theme": "GitHub",
        "tools": {"enableHooks": true},
        "hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "./check.sh", "name": "check"}]}]}
    });
    round_trip("gemini", p, ".gemini/settings.json", false, &gemini);
    // No settings file at all: install creates one, uninstall leaves an empty object.
    let out = agx([
        "-C",
        p.to_str().unwrap(),
        "hooks",
        "install",
        "gemini",
        "--json",
    ]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["agent"], "gemini");
}

#[test]
fn hooks_install_refuses_a_broken_settings_file_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(".claude/settings.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "{ \"model\": \"opus\", ").unwrap();
    for verb in ["install", "uninstall"] {
        let out = agx(["-C", tmp.path().to_str().unwrap(), "hooks", verb, "claude"]);
        assert_eq!(out.status.code(), Some(1), "{verb}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("not valid JSON"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{ \"model\": \"opus\", "
        );
    }
    // A hooks value of the wrong shape is refused too.
    std::fs::write(&path, r#"{"hooks": {"Stop": "agx"}}"#).unwrap();
    let out = agx([
        "-C",
        tmp.path().to_str().unwrap(),
        "hooks",
        "install",
        "claude",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        r#"{"hooks": {"Stop": "agx"}}"#
    );
}

#[test]
fn parallel_first_events_of_a_session_start_it_once() {
    let m = Mounted::new();
    let tmp = m.tmp.path();
    let claude = stand_in(tmp, "claude");
    let cwd = m.path().canonicalize().unwrap();
    // Eight PreToolUse events of one unseen session at once, as parallel tool calls send.
    let mut script = String::new();
    for i in 0..8 {
        let ev = json!({"session_id": "parallel", "cwd": cwd, "hook_event_name": "PreToolUse",
            "tool_name": "Read", "tool_use_id": format!("t{i}")});
        let f = tmp.join(format!("p{i}.json"));
        std::fs::write(&f, ev.to_string()).unwrap();
        script.push_str(&format!("\"$AGX\" hook claude < {} &\n", f.display()));
    }
    script.push_str("wait\n");
    let out = run_agent(&claude, &script, m.path());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = sessions(&m);
    assert_eq!(list.len(), 1, "{list:#?}");
    assert_eq!(list[0]["tool_calls"], 8);
}
