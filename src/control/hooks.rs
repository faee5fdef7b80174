//! Agent hook events in the engine: one request per event, naming the session by the
//! agent's own key, so a hook needs a single round trip to the daemon. A session event
//! for a key never seen starts that session on the spot (rooted at the agent process
//! the hook found), so a missed SessionStart loses nothing that follows.

use serde::{Deserialize, Serialize};

use super::engine::{read_config, Engine, EngineError};
use super::sessions::StartRequest;
use crate::attribution::proc;
use crate::ids::SessionId;
use crate::sys::now_ns;

/// What happened in the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum HookAction {
    SessionStart,
    Prompt {
        text: String,
    },
    ToolStart {
        tool: String,
        tool_use_id: Option<String>,
    },
    ToolEnd {
        tool_use_id: Option<String>,
    },
    /// The agent finished its turn: tool calls still open will not end otherwise.
    Stop,
    SessionEnd,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HookRequest {
    /// The agent's name (claude, codex, gemini, ...), recorded on a new session.
    pub agent: String,
    /// The agent's own id for the session.
    pub key: String,
    /// The agent process: the session's root when it starts (or resumes).
    pub pid: Option<u32>,
    pub action: HookAction,
}

/// What a hook event did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HookOutcome {
    /// The session's id, None when the event named no known session and did not start one.
    pub session: Option<String>,
    /// Whether this event started the session.
    pub started: bool,
    /// The tool call started or ended.
    pub tool_call: Option<i64>,
}

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
pub fn truncate_prompt(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// At most this many open tool calls are closed by one Stop (a bound, not a real limit).
const MAX_OPEN_CALLS: usize = 10_000;

impl Engine {
    pub fn hook(&self, r: &HookRequest) -> Result<HookOutcome, EngineError> {
        if r.key.is_empty() {
            return Err(EngineError::Invalid(
                "a hook event needs a session key".into(),
            ));
        }
        let existing = self.tl().session_by_key(&r.key)?;
        let mut out = HookOutcome::default();
        let id = match existing {
            Some(s) => {
                if r.action == HookAction::SessionStart && s.ended_ns.is_some() {
                    self.tl().reopen_session(s.id)?;
                }
                self.reroot(s.id, r.pid);
                s.id
            }
            // Nothing to end or stop in a session never seen.
            None if matches!(r.action, HookAction::SessionEnd | HookAction::Stop) => {
                return Ok(out)
            }
            None => {
                let pid = r.pid.ok_or_else(|| {
                    EngineError::Invalid("a new hook session needs its agent's pid".into())
                })?;
                let started = self.session_start(&StartRequest {
                    agent: Some(r.agent.clone()),
                    name: None,
                    key: Some(r.key.clone()),
                    pid,
                });
                match started {
                    Ok(s) => {
                        out.started = true;
                        s.id
                    }
                    // Two first events of one session at once (parallel tool calls with
                    // no SessionStart seen): the other one started it.
                    Err(e) => match self.tl().session_by_key(&r.key)? {
                        Some(s) => s.id,
                        None => return Err(e),
                    },
                }
            }
        };
        out.session = Some(id.to_string());
        match &r.action {
            HookAction::SessionStart => {}
            HookAction::Prompt { text } => {
                let max = read_config(&self.agx)?.hooks.prompt_max;
                self.prompt(id, &truncate_prompt(text, max))?;
            }
            HookAction::ToolStart { tool, tool_use_id } => {
                out.tool_call = Some(self.tool_start(id, tool, tool_use_id.as_deref())?);
            }
            HookAction::ToolEnd { tool_use_id } => {
                out.tool_call = self.tool_end(id, tool_use_id.as_deref())?;
                // Tool calls run in parallel: changes now belong to one still running.
                let open = self.tl().open_tool_call(id)?;
                self.attrib.sessions().set_tool_call(id, open);
            }
            HookAction::Stop => self.end_open_tool_calls(id)?,
            HookAction::SessionEnd => {
                self.end_open_tool_calls(id)?;
                self.session_end(Some(&id.to_string()), &Default::default())?;
            }
        }
        if r.action == HookAction::SessionStart {
            // A resumed session is open again.
            self.note_open_sessions();
        }
        Ok(out)
    }

    /// A known session's agent process is `pid` (resumed in a new process, or the daemon
    /// restarted): it roots the session from now on. A gone pid changes nothing.
    fn reroot(&self, id: SessionId, pid: Option<u32>) {
        let Some(pid) = pid else { return };
        let Some(start) = proc::start_time(pid) else {
            return;
        };
        let reg = self.attrib.sessions();
        if reg.rooted_at((pid, start)) != Some(id) {
            self.mark_session_root(pid);
            reg.add(id, Some((pid, start)));
        }
    }

    fn end_open_tool_calls(&self, id: SessionId) -> Result<(), EngineError> {
        let mut tl = self.tl();
        for _ in 0..MAX_OPEN_CALLS {
            if tl.end_tool_call(id, None, now_ns())?.is_none() {
                break;
            }
        }
        drop(tl);
        self.attrib.sessions().set_tool_call(id, None);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::truncate_prompt;

    #[test]
    fn truncates_on_a_character_boundary() {
        assert_eq!(truncate_prompt("hello", 10), "hello");
        assert_eq!(truncate_prompt("hello", 5), "hello");
        assert_eq!(truncate_prompt("hello", 3), "hel…");
        // "é" is two bytes: a cut inside it moves back before it.
        assert_eq!(truncate_prompt("aé", 2), "a…");
        assert_eq!(truncate_prompt("é", 0), "…");
    }
}
