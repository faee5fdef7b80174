//! Where each agent keeps its hook settings and agx's template entries for it (the
//! templates in mount-helpers/hooks/ are the source of truth, compiled in).

use std::path::{Path, PathBuf};

use serde_json::Value;
use thiserror::Error;

use super::settings::{self, SettingsError};
use super::Agent;

#[derive(Debug, Error)]
pub enum InstallError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON ({why}); fix or move it first")]
    BadJson { path: String, why: String },
    #[error("{path}: {source}")]
    Shape {
        path: String,
        #[source]
        source: SettingsError,
    },
    #[error("cannot find your home directory (HOME is not set)")]
    NoHome,
}

const CLAUDE: &str = include_str!("../../mount-helpers/hooks/claude-settings.json");
const CODEX: &str = include_str!("../../mount-helpers/hooks/codex-hooks.json");
const GEMINI: &str = include_str!("../../mount-helpers/hooks/gemini-settings.json");

/// agx's hook entries for `agent`, as they are merged into its settings.
pub fn template(agent: Agent) -> Value {
    let text = match agent {
        Agent::Claude => CLAUDE,
        Agent::Codex => CODEX,
        Agent::Gemini => GEMINI,
    };
    serde_json::from_str(text).expect("the compiled-in hook templates are valid JSON")
}

/// The command agx's entries run for `agent` (what identifies them on uninstall).
pub fn command(agent: Agent) -> String {
    format!("agx hook {}", agent.name())
}

/// The settings file holding `agent`'s hooks: in the project, or the user's with `user`.
pub fn settings_path(agent: Agent, project: &Path, user: bool) -> Result<PathBuf, InstallError> {
    let base = if user {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .ok_or(InstallError::NoHome)?
    } else {
        project.to_path_buf()
    };
    Ok(base.join(match agent {
        Agent::Claude => ".claude/settings.json",
        Agent::Codex => ".codex/hooks.json",
        Agent::Gemini => ".gemini/settings.json",
    }))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The settings in `path` (an empty object when the file does not exist).
fn read(path: &Path) -> Result<Value, InstallError> {
    match std::fs::read_to_string(path) {
        Ok(s) if s.trim().is_empty() => Ok(Value::Object(Default::default())),
        Ok(s) => serde_json::from_str(&s).map_err(|e| InstallError::BadJson {
            path: path.display().to_string(),
            why: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Object(Default::default())),
        Err(e) => Err(io(path)(e)),
    }
}

/// Replaces `path` with `v` in one step (a temporary file renamed over it).
fn write(path: &Path, v: &Value) -> Result<(), InstallError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut text = serde_json::to_string_pretty(v).expect("JSON values serialize");
    text.push('\n');
    let tmp = path.with_extension(format!("json.agx-tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    if let Ok(md) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, md.permissions());
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path)(e)
    })
}

fn shape(path: &Path) -> impl FnOnce(SettingsError) -> InstallError + '_ {
    move |source| InstallError::Shape {
        path: path.display().to_string(),
        source,
    }
}

/// Merges agx's entries for `agent` into `path`; how many events got one (0: they were
/// all there already, and the file is untouched).
pub fn install(agent: Agent, path: &Path) -> Result<usize, InstallError> {
    let mut v = read(path)?;
    let n = settings::install(&mut v, &template(agent), &command(agent)).map_err(shape(path))?;
    if n > 0 {
        write(path, &v)?;
    }
    Ok(n)
}

/// Removes agx's entries for `agent` from `path`; how many handlers were removed (0: the
/// file is untouched).
pub fn uninstall(agent: Agent, path: &Path) -> Result<usize, InstallError> {
    if !path.exists() {
        return Ok(0);
    }
    let mut v = read(path)?;
    let n = settings::uninstall(&mut v, &command(agent)).map_err(shape(path))?;
    if n > 0 {
        write(path, &v)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_run_the_agents_hook_command() {
        for a in [Agent::Claude, Agent::Codex, Agent::Gemini] {
            let t = template(a);
            let events = t["hooks"].as_object().unwrap();
            assert!(events.contains_key("SessionStart"));
            for groups in events.values() {
                for g in groups.as_array().unwrap() {
                    for h in g["hooks"].as_array().unwrap() {
                        assert_eq!(h["command"], command(a));
                    }
                }
            }
            // Every event agx hooks into is one it records.
            for ev in events.keys() {
                let input = serde_json::json!({"session_id": "s", "hook_event_name": ev,
                    "tool_name": "t", "prompt": "p"});
                let e = super::super::parse(a, &input.to_string()).unwrap();
                assert!(e.action.is_some(), "{} {ev}", a.name());
            }
        }
    }
}
