//! `agx run` and `agx session start|end|list|show`.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::history::{rfc3339, Project};
use crate::attribution::ENV_SESSION;
use crate::control::proto::Request;
use crate::control::sessions::StartRequest;

fn no_progress(_: usize, _: usize) {}

/// The JSON form of a session (stable field names).
pub fn session_json(v: &serde_json::Value) -> serde_json::Value {
    let t = |k: &str| v[k].as_i64().map(rfc3339);
    let mut o = serde_json::json!({
        "id": v["id"],
        "agent": v["agent"],
        "name": v["name"],
        "key": v["key"],
        "root_pid": v["root_pid"],
        "command": v["command"],
        "started": t("started_ns"),
        "ended": t("ended_ns"),
        "events": v["events"],
        "files_changed": v["files_changed"],
        "tool_calls": v["tool_calls"],
        "prompts_count": v["prompts"].as_i64(),
    });
    if let Some(files) = v.get("files").filter(|f| f.is_array()) {
        o["files"] = files.clone();
    }
    if let Some(p) = v.get("prompts").filter(|p| p.is_array()) {
        o["prompts"] = p
            .as_array()
            .unwrap()
            .iter()
            .map(|x| serde_json::json!({ "time": x[0].as_i64().map(rfc3339), "text": x[1] }))
            .collect();
        o["prompts_count"] = p.as_array().map(|a| a.len()).into();
    }
    o
}

fn start(p: &Project, agent: Option<String>, name: Option<String>, pid: u32) -> Result<i64> {
    let v = p.request(
        Request::SessionStart(StartRequest {
            agent,
            name,
            key: None,
            pid,
        }),
        &mut no_progress,
    )?;
    v["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .context("the daemon did not return a session id")
}

fn need_mount(p: &Project, what: &str) -> Result<()> {
    if !p.is_mounted() {
        bail!(
            "{} is not mounted: run `agx mount` first ({what} would not be recorded)",
            p.root.display()
        );
    }
    Ok(())
}

/// `agx run`: runs CMD in a new session and returns its exit code.
pub fn run(
    dir: &Path,
    agent: Option<String>,
    name: Option<String>,
    cmd: &[String],
    json: bool,
) -> Result<i32> {
    let Some((prog, args)) = cmd.split_first() else {
        bail!("agx run needs a command: agx run -- CMD [ARGS...]");
    };
    let p = Project::open(dir)?;
    need_mount(&p, "its changes")?;
    // `--branch NAME`: the command works in the branch's view, at the same place
    // relative to the project as the current directory (the view's root from outside).
    let cwd = match &p.branch {
        Some(b) => {
            p.request(Request::BranchShow { name: b.clone() }, &mut no_progress)?;
            Some(branch_cwd(&p, b)?)
        }
        None => None,
    };
    // Orphans of the command (double forks) are reparented to us while we live, so they
    // stay below the session's root; after that, the environment marker names it.
    let me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me)).context("becoming a child subreaper")?;
    // The session's mark, before anything is started: the command and everything it
    // starts inherit it and can never drop it (`attribution::agent`), so history-
    // destroying commands stay refused to them after the session, outside our tree and
    // with a scrubbed environment. The daemon marks the root too.
    crate::attribution::agent::mark(None).context("marking this process as a session's")?;
    let id = start(
        &p,
        agent.or_else(|| Some(base_name(prog))),
        name,
        me.as_raw_nonzero().get() as u32,
    )?;
    // `agx run` keeps SIGPIPE ignored (see main.rs) and never panics on a closed stdout
    // or stderr: whatever becomes of its output, it waits for CMD and ends the session.
    if !json {
        let _ = writeln!(std::io::stderr(), "agx: session {id} started");
    }
    // Interrupts reach the command (same process group); we wait for it to finish.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGQUIT] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let mut command = std::process::Command::new(prog);
    command.args(args).env(ENV_SESSION, id.to_string());
    if let Some(c) = &cwd {
        command.current_dir(c).env("PWD", c);
    }
    let child = command.spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = p.request(
                Request::SessionEnd {
                    id: Some(id.to_string()),
                },
                &mut no_progress,
            );
            bail!("cannot run {prog}: {e}");
        }
    };
    forward_terminations(child.id());
    let code = wait_for(child.id())?;
    p.request(
        Request::SessionEnd {
            id: Some(id.to_string()),
        },
        &mut no_progress,
    )?;
    if json {
        let _ = writeln!(
            std::io::stdout(),
            "{}",
            serde_json::json!({ "session": id.to_string(), "exit_code": code })
        );
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "agx: session {id} ended (exit code {code})"
        );
    }
    Ok(code)
}

/// Where a command run in branch `b` starts: the current directory's place in the
/// project, in the branch's view (its root when that place is outside the project or
/// missing in the branch).
fn branch_cwd(p: &Project, b: &str) -> Result<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mp = p
        .mountpoint
        .clone()
        .ok_or_else(|| anyhow::anyhow!("agx run --branch needs the project mounted"))?;
    let view = mp.join(".agx/branches").join(b);
    let here = std::env::current_dir()?;
    let rel = p.rel(&here).unwrap_or_default();
    let place = view.join(std::ffi::OsStr::from_bytes(&rel));
    Ok(if place.is_dir() { place } else { view })
}

fn base_name(prog: &str) -> String {
    Path::new(prog)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| prog.to_string())
}

/// SIGTERM and SIGHUP sent to `agx run` are passed on to the command.
fn forward_terminations(child: u32) {
    use signal_hook::consts::{SIGHUP, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGTERM, SIGHUP]) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("agx-run-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if let (Some(pid), Some(s)) = (
                    rustix::process::Pid::from_raw(child as i32),
                    rustix::process::Signal::from_named_raw(sig),
                ) {
                    let _ = rustix::process::kill_process(pid, s);
                }
            }
        });
}

/// Reaps children (the command, and orphans reparented to us) until the command exits;
/// its exit code, or 128 + the signal that ended it.
fn wait_for(child: u32) -> Result<i32> {
    loop {
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(Some((pid, status))) if pid.as_raw_nonzero().get() as u32 == child => {
                if let Some(c) = status.exit_status() {
                    return Ok(c);
                }
                if let Some(s) = status.terminating_signal() {
                    return Ok(128 + s);
                }
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => bail!("waiting for the command: {e}"),
        }
    }
}

pub fn session_start(
    dir: &Path,
    agent: Option<String>,
    name: Option<String>,
    pid: Option<u32>,
    json: bool,
) -> Result<()> {
    let p = Project::open(dir)?;
    need_mount(&p, "the session's changes")?;
    let pid = pid.unwrap_or_else(std::os::unix::process::parent_id);
    let id = start(&p, agent, name, pid)?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "id": id.to_string(), "root_pid": pid })
        );
    } else {
        println!("{id}");
        eprintln!("agx: session {id} started: process {pid} and everything it starts belong to it");
    }
    Ok(())
}

pub fn session_end(dir: &Path, id: Option<String>, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let v = p.request(Request::SessionEnd { id }, &mut no_progress)?;
    if json {
        println!("{}", session_json(&v));
    } else {
        eprintln!("agx: session {} ended", v["id"].as_str().unwrap_or("?"));
    }
    Ok(())
}

fn fmt_time(v: &serde_json::Value) -> String {
    v.as_i64()
        .map(|ns| {
            use chrono::{Local, TimeZone};
            Local
                .timestamp_nanos(ns)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|| "-".into())
}

pub fn session_list(dir: &Path, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let v = p.request(Request::SessionList, &mut no_progress)?;
    let list = v.as_array().cloned().unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if json {
        let a: Vec<_> = list.iter().map(session_json).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&a)?)?;
        return Ok(());
    }
    if list.is_empty() {
        eprintln!("no sessions yet (start one with `agx run -- CMD`)");
    }
    for s in &list {
        writeln!(
            out,
            "{:>4}  {:<10} {:<16} {}  {}  {:>5} events {:>4} files  {}",
            s["id"].as_str().unwrap_or("?"),
            s["agent"].as_str().unwrap_or("-"),
            s["name"].as_str().unwrap_or("-"),
            fmt_time(&s["started_ns"]),
            if s["ended_ns"].is_null() {
                "running            ".to_string()
            } else {
                fmt_time(&s["ended_ns"])
            },
            s["events"],
            s["files_changed"],
            s["command"].as_str().unwrap_or(""),
        )?;
    }
    Ok(())
}

pub fn session_show(dir: &Path, id: &str, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let v = p.request(Request::SessionShow { id: id.into() }, &mut no_progress)?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&session_json(&v))?)?;
        return Ok(());
    }
    let s = |k: &str| v[k].as_str().unwrap_or("-").to_string();
    writeln!(out, "session:  {}", s("id"))?;
    writeln!(out, "agent:    {}", s("agent"))?;
    writeln!(out, "name:     {}", s("name"))?;
    if !v["key"].is_null() {
        writeln!(out, "key:      {}", s("key"))?;
    }
    writeln!(out, "root pid: {}", v["root_pid"])?;
    writeln!(out, "command:  {}", s("command"))?;
    writeln!(out, "started:  {}", fmt_time(&v["started_ns"]))?;
    writeln!(
        out,
        "ended:    {}",
        if v["ended_ns"].is_null() {
            "running".into()
        } else {
            fmt_time(&v["ended_ns"])
        }
    )?;
    writeln!(
        out,
        "events:   {} ({} tool calls)",
        v["events"], v["tool_calls"]
    )?;
    let files = v["files"].as_array().cloned().unwrap_or_default();
    writeln!(out, "files changed: {}", files.len())?;
    for f in &files {
        writeln!(out, "  {}", f.as_str().unwrap_or("?"))?;
    }
    for pr in v["prompts"].as_array().cloned().unwrap_or_default() {
        writeln!(
            out,
            "prompt {}: {}",
            fmt_time(&pr[0]),
            pr[1].as_str().unwrap_or("")
        )?;
    }
    Ok(())
}
