//! One hook event as an agent writes it on the hook's stdin, read into what agx records.
//! Claude Code and Codex CLI share event names (SessionStart, UserPromptSubmit,
//! PreToolUse, PostToolUse, Stop, SessionEnd); Gemini CLI names them its own way
//! (BeforeAgent, BeforeTool, AfterTool, AfterAgent). All three send `session_id`, `cwd`
//! and `hook_event_name`; tool events carry `tool_name` (and `tool_use_id` where the agent
//! has one), prompt events `prompt`.

use std::path::PathBuf;

use serde_json::Value;
use thiserror::Error;

use crate::control::hooks::HookAction;

/// An agent agx knows the hooks of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    Claude,
    Codex,
    Gemini,
}

impl Agent {
    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum InputError {
    #[error("the hook event is not JSON: {0}")]
    Json(String),
    #[error("the hook event is not a JSON object")]
    NotObject,
    #[error("the hook event has no {0}")]
    Missing(&'static str),
}

/// What a hook event asks agx to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookEvent {
    /// The agent's session id.
    pub key: String,
    /// The agent's working directory (which project the event is about).
    pub cwd: Option<PathBuf>,
    /// The event's name as the agent sent it.
    pub name: String,
    /// None for an event agx does not record (a notification, a compaction...).
    pub action: Option<HookAction>,
}

fn text(v: &Value, field: &'static str) -> Result<String, InputError> {
    match v.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(InputError::Missing(field)),
    }
}

fn opt_text(v: &Value, field: &str) -> Option<String> {
    v.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(String::from)
}

/// The action of event `name` for `agent`, None when agx does not record it.
fn action(agent: Agent, name: &str, v: &Value) -> Result<Option<HookAction>, InputError> {
    let tool_start = || -> Result<HookAction, InputError> {
        Ok(HookAction::ToolStart {
            tool: text(v, "tool_name")?,
            tool_use_id: opt_text(v, "tool_use_id"),
        })
    };
    let tool_end = || HookAction::ToolEnd {
        tool_use_id: opt_text(v, "tool_use_id"),
    };
    let prompt = || -> Result<HookAction, InputError> {
        Ok(HookAction::Prompt {
            text: text(v, "prompt")?,
        })
    };
    Ok(Some(match (agent, name) {
        (_, "SessionStart") => HookAction::SessionStart,
        (_, "SessionEnd") => HookAction::SessionEnd,
        (Agent::Claude | Agent::Codex, "UserPromptSubmit") => prompt()?,
        (Agent::Claude | Agent::Codex, "PreToolUse") => tool_start()?,
        (Agent::Claude | Agent::Codex, "PostToolUse" | "PostToolUseFailure") => tool_end(),
        (Agent::Claude | Agent::Codex, "Stop") => HookAction::Stop,
        (Agent::Gemini, "BeforeAgent") => prompt()?,
        (Agent::Gemini, "BeforeTool") => tool_start()?,
        (Agent::Gemini, "AfterTool") => tool_end(),
        (Agent::Gemini, "AfterAgent") => HookAction::Stop,
        _ => return Ok(None),
    }))
}

/// Reads one hook event of `agent` from the text on the hook's stdin.
pub fn parse(agent: Agent, input: &str) -> Result<HookEvent, InputError> {
    let v: Value = serde_json::from_str(input)
        .map_err(|e| InputError::Json(e.to_string().replace('\n', " ")))?;
    if !v.is_object() {
        return Err(InputError::NotObject);
    }
    let name = text(&v, "hook_event_name")?;
    let key = text(&v, "session_id")?;
    if key.is_empty() {
        return Err(InputError::Missing("session_id"));
    }
    Ok(HookEvent {
        key,
        cwd: opt_text(&v, "cwd").map(PathBuf::from),
        action: action(agent, &name, &v)?,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_claude_events() {
        let e = parse(
            Agent::Claude,
            r#"{"session_id":"s1","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"t1","tool_input":{"command":"ls"}}"#,
        )
        .unwrap();
        assert_eq!(e.key, "s1");
        assert_eq!(e.cwd, Some(PathBuf::from("/p")));
        assert_eq!(
            e.action,
            Some(HookAction::ToolStart {
                tool: "Bash".into(),
                tool_use_id: Some("t1".into())
            })
        );
        let e = parse(
            Agent::Claude,
            r#"{"session_id":"s1","hook_event_name":"Notification","message":"hi"}"#,
        )
        .unwrap();
        assert_eq!(e.action, None);
    }

    #[test]
    fn gemini_names_its_events_differently() {
        let e = parse(
            Agent::Gemini,
            r#"{"session_id":"g","hook_event_name":"BeforeAgent","prompt":"fix it"}"#,
        )
        .unwrap();
        assert_eq!(
            e.action,
            Some(HookAction::Prompt {
                text: "fix it".into()
            })
        );
        let e = parse(
            Agent::Gemini,
            r#"{"session_id":"g","hook_event_name":"PreToolUse","tool_name":"x"}"#,
        )
        .unwrap();
        assert_eq!(e.action, None);
    }

    #[test]
    fn refuses_malformed_events() {
        assert!(matches!(
            parse(Agent::Claude, "{not json"),
            Err(InputError::Json(_))
        ));
        assert_eq!(parse(Agent::Claude, "[1]"), Err(InputError::NotObject));
        assert_eq!(
            parse(Agent::Claude, r#"{"hook_event_name":"Stop"}"#),
            Err(InputError::Missing("session_id"))
        );
        assert_eq!(
            parse(
                Agent::Claude,
                r#"{"session_id":"s","hook_event_name":"PreToolUse"}"#
            ),
            Err(InputError::Missing("tool_name"))
        );
    }
}
