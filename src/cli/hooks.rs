//! `agx hook AGENT` (one agent hook event: recorded through the daemon, never failing the
//! agent) and `agx hooks install|uninstall AGENT` (agx's entries in the agent's settings).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use clap::{Subcommand, ValueEnum};

use crate::control::hooks::{HookAction, HookRequest};
use crate::control::proto::Request;
use crate::hooks::{install, root, Agent};

#[derive(Debug, Subcommand)]
pub enum HookCmd {
    /// Claude Code: one hook event (JSON) on stdin.
    Claude,
    /// Codex CLI: one hook event (JSON) on stdin.
    Codex,
    /// Gemini CLI: one hook event (JSON) on stdin.
    Gemini,
    /// Any other agent or tool: the event on the command line.
    Generic {
        #[arg(long, value_enum)]
        event: GenericEvent,
        /// The tool's own key for its session (a new key starts a session).
        #[arg(long, value_name = "KEY")]
        session: String,
        /// The agent's name, recorded on a new session.
        #[arg(long, default_value = "generic")]
        agent: String,
        /// The tool called (tool-start).
        #[arg(long, required_if_eq("event", "tool-start"))]
        tool: Option<String>,
        /// The tool call's id, matching a tool-end to its tool-start.
        #[arg(long)]
        tool_use_id: Option<String>,
        /// The prompt (prompt).
        #[arg(long, required_if_eq("event", "prompt"))]
        text: Option<String>,
        /// The session's root process (default: the caller, skipping shells).
        #[arg(long)]
        pid: Option<u32>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum GenericEvent {
    SessionStart,
    Prompt,
    ToolStart,
    ToolEnd,
    SessionEnd,
}

#[derive(Debug, Subcommand)]
pub enum HooksCmd {
    /// Add agx's hook entries to the agent's settings (the project's, or yours with
    /// --user), leaving everything else in them alone. Installing twice adds nothing.
    Install {
        #[arg(value_enum)]
        agent: Agent,
        /// The user's settings (~/.claude/settings.json, ...) instead of the project's.
        #[arg(long)]
        user: bool,
    },
    /// Remove exactly agx's hook entries from the agent's settings.
    Uninstall {
        #[arg(value_enum)]
        agent: Agent,
        #[arg(long)]
        user: bool,
    },
}

/// `agx hook ...`: records the event; any failure is one line on stderr and exit 0, so
/// the agent is never held up or failed by agx.
pub fn hook(dir: Option<&Path>, cmd: HookCmd, json: bool) -> Result<()> {
    // Written without `println!`, which panics on a closed pipe (SIGPIPE stays ignored
    // for hooks, see main.rs): a hook's output going nowhere is no reason to fail.
    let _ = match record(dir, cmd) {
        Ok(Some(out)) if json => writeln!(std::io::stdout(), "{out}"),
        Ok(_) => Ok(()),
        Err(e) => writeln!(std::io::stderr(), "agx hook: {e:#}"),
    };
    Ok(())
}

/// The agent process behind this hook (its session's root).
fn caller_agent() -> u32 {
    root::agent_process(std::os::unix::process::parent_id())
}

fn record(dir: Option<&Path>, cmd: HookCmd) -> Result<Option<serde_json::Value>> {
    let agent = match cmd {
        HookCmd::Claude => Agent::Claude,
        HookCmd::Codex => Agent::Codex,
        HookCmd::Gemini => Agent::Gemini,
        HookCmd::Generic {
            event,
            session,
            agent,
            tool,
            tool_use_id,
            text,
            pid,
        } => {
            let action = match event {
                GenericEvent::SessionStart => HookAction::SessionStart,
                GenericEvent::Prompt => HookAction::Prompt {
                    text: text.unwrap_or_default(),
                },
                GenericEvent::ToolStart => HookAction::ToolStart {
                    tool: tool.unwrap_or_default(),
                    tool_use_id,
                },
                GenericEvent::ToolEnd => HookAction::ToolEnd { tool_use_id },
                GenericEvent::SessionEnd => HookAction::SessionEnd,
            };
            let req = HookRequest {
                agent,
                key: session,
                pid: Some(pid.unwrap_or_else(caller_agent)),
                action,
            };
            let dir = dir
                .map(Path::to_path_buf)
                .unwrap_or(std::env::current_dir()?);
            return send(&dir, req).map(Some);
        }
    };
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| anyhow!("reading the hook event on stdin: {e}"))?;
    let ev = crate::hooks::parse(agent, &input)?;
    let Some(action) = ev.action else {
        return Ok(None);
    };
    let dir = match (dir, ev.cwd) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(c)) => c,
        (None, None) => std::env::current_dir()?,
    };
    let req = HookRequest {
        agent: agent.name().into(),
        key: ev.key,
        pid: Some(caller_agent()),
        action,
    };
    send(&dir, req).map(Some)
}

/// The control socket of the agx mount serving `dir` (the project itself, a directory
/// inside it, or inside a separate mountpoint). Reads only the runtime state files: the
/// hook never opens the timeline.
fn socket_for(dir: &Path) -> Result<PathBuf> {
    let dir = dir
        .canonicalize()
        .map_err(|e| anyhow!("{}: {e}; nothing recorded", dir.display()))?;
    for a in dir.ancestors() {
        if let Some(st) = crate::mount::live_state(a) {
            return Ok(crate::control::paths(&st.project)?.socket);
        }
    }
    for (_, st) in crate::control::all_states() {
        if dir.starts_with(&st.mountpoint) && crate::control::pid_alive(st.pid) {
            return Ok(crate::control::paths(&st.project)?.socket);
        }
    }
    bail!(
        "{} is not in a project mounted by agx; nothing recorded",
        dir.display()
    )
}

fn send(dir: &Path, req: HookRequest) -> Result<serde_json::Value> {
    let sock = socket_for(dir)?;
    crate::control::client::call(&sock, &Request::Hook(req), &mut |_, _| {}).map_err(|e| anyhow!(e))
}

/// `agx hooks install|uninstall AGENT [--user]`.
pub fn hooks(project: &Path, cmd: HooksCmd, json: bool) -> Result<()> {
    let (agent, user, installing) = match cmd {
        HooksCmd::Install { agent, user } => (agent, user, true),
        HooksCmd::Uninstall { agent, user } => (agent, user, false),
    };
    let path = install::settings_path(agent, project, user)?;
    let n = if installing {
        install::install(agent, &path)?
    } else {
        install::uninstall(agent, &path)?
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "agent": agent.name(),
                "file": path.display().to_string(),
                "changed": n,
                "action": if installing { "install" } else { "uninstall" },
            })
        );
    } else if installing && n > 0 {
        println!(
            "installed agx hooks for {} in {} ({n} events)",
            agent.name(),
            path.display()
        );
    } else if installing {
        println!(
            "agx hooks for {} are already in {}",
            agent.name(),
            path.display()
        );
    } else if n > 0 {
        println!(
            "removed agx hooks for {} from {} ({n} entries)",
            agent.name(),
            path.display()
        );
    } else {
        println!("no agx hooks for {} in {}", agent.name(), path.display());
    }
    if installing && agent == Agent::Codex && !codex_hooks_enabled() {
        eprintln!(
            "agx: note: Codex runs hooks only with `[features] codex_hooks = true` in ~/.codex/config.toml"
        );
    }
    Ok(())
}

/// Whether ~/.codex/config.toml turns Codex's hooks feature on.
fn codex_hooks_enabled() -> bool {
    let Some(home) = std::env::var_os("HOME") else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(Path::new(&home).join(".codex/config.toml")) else {
        return false;
    };
    toml::from_str::<toml::Value>(&text)
        .ok()
        .and_then(|v| v.get("features")?.get("codex_hooks")?.as_bool())
        .unwrap_or(false)
}
