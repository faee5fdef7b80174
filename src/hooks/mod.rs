//! Agent hooks: what an agent's hook event (Claude Code, Codex CLI, Gemini CLI) means for
//! agx, which process is the agent, and agx's entries in each agent's hook settings.
//! The engine side (sessions by the agent's key) is `control::hooks`.

pub mod input;
pub mod install;
pub mod root;
pub mod settings;

pub use input::{parse, Agent, HookEvent, InputError};
