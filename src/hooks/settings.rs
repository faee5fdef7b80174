//! agx's entries in an agent's hook settings. Claude Code, Codex CLI and Gemini CLI share
//! one shape: `{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type": "command",
//! "command": ...}]}]}}`. agx's entries are the handlers whose command is agx's hook
//! command; installing adds the template's groups for events that have none of them,
//! uninstalling removes exactly those handlers (and the groups, event arrays and `hooks`
//! object that held only them). Everything else is left as it was.

use serde_json::{Map, Value};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("{0} is not a JSON object")]
    NotObject(String),
    #[error("\"hooks\".{0} is not an array")]
    NotArray(String),
}

/// Whether `handler` runs `command`.
fn is_ours(handler: &Value, command: &str) -> bool {
    handler
        .get("command")
        .and_then(Value::as_str)
        .is_some_and(|c| c.trim() == command)
}

fn group_has_ours(group: &Value, command: &str) -> bool {
    group
        .get("hooks")
        .and_then(Value::as_array)
        .is_some_and(|hs| hs.iter().any(|h| is_ours(h, command)))
}

fn hooks_object(
    settings: &mut Value,
    create: bool,
) -> Result<Option<&mut Map<String, Value>>, SettingsError> {
    let root = settings
        .as_object_mut()
        .ok_or_else(|| SettingsError::NotObject("the settings file".into()))?;
    if !root.contains_key("hooks") {
        if !create {
            return Ok(None);
        }
        root.insert("hooks".into(), Value::Object(Map::new()));
    }
    root.get_mut("hooks")
        .and_then(Value::as_object_mut)
        .map(Some)
        .ok_or_else(|| SettingsError::NotObject("\"hooks\"".into()))
}

/// Adds the template's hook groups to `settings` for every event that has no handler
/// running `command` yet; returns how many events got one (0: already installed).
pub fn install(
    settings: &mut Value,
    template: &Value,
    command: &str,
) -> Result<usize, SettingsError> {
    let Some(events) = template.get("hooks").and_then(Value::as_object) else {
        return Ok(0);
    };
    // Refuse a shape we do not understand before changing anything.
    if let Some(hooks) = hooks_object(settings, false)? {
        for ev in events.keys() {
            if hooks.get(ev).is_some_and(|v| !v.is_array()) {
                return Err(SettingsError::NotArray(ev.clone()));
            }
        }
    }
    let hooks = hooks_object(settings, true)?.expect("created above");
    let mut added = 0;
    for (ev, groups) in events {
        let list = hooks
            .entry(ev.clone())
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()
            .expect("checked above");
        if list.iter().any(|g| group_has_ours(g, command)) {
            continue;
        }
        list.extend(groups.as_array().into_iter().flatten().cloned());
        added += 1;
    }
    Ok(added)
}

/// Removes every handler running `command`; returns how many were removed.
pub fn uninstall(settings: &mut Value, command: &str) -> Result<usize, SettingsError> {
    let Some(hooks) = hooks_object(settings, false)? else {
        return Ok(0);
    };
    let mut removed = 0;
    let mut emptied = Vec::new();
    for (ev, list) in hooks.iter_mut() {
        let Some(list) = list.as_array_mut() else {
            continue;
        };
        let before_groups = list.len();
        let mut from_here = 0;
        list.retain_mut(|g| {
            let Some(hs) = g.get_mut("hooks").and_then(Value::as_array_mut) else {
                return true;
            };
            let n = hs.len();
            hs.retain(|h| !is_ours(h, command));
            let gone = n - hs.len();
            from_here += gone;
            // A group is dropped only when agx's handlers were all it held.
            !(gone > 0 && hs.is_empty())
        });
        removed += from_here;
        if from_here > 0 && list.is_empty() && before_groups > 0 {
            emptied.push(ev.clone());
        }
    }
    for ev in emptied {
        hooks.remove(&ev);
    }
    if removed > 0 && hooks.is_empty() {
        settings
            .as_object_mut()
            .expect("checked by hooks_object")
            .remove("hooks");
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CMD: &str = "agx hook claude";

    fn template() -> Value {
        json!({"hooks": {
            "PreToolUse": [{"hooks": [{"type": "command", "command": CMD}]}],
            "Stop": [{"hooks": [{"type": "command", "command": CMD}]}],
        }})
    }

    #[test]
    fn round_trip_keeps_other_content() {
        let original = json!({
            "model": "opus",
            "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}]}],
                "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
            }
        });
        let mut s = original.clone();
        assert_eq!(install(&mut s, &template(), CMD), Ok(2));
        assert_eq!(s["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        assert_eq!(s["hooks"]["Stop"].as_array().unwrap().len(), 1);
        let once = s.clone();
        assert_eq!(install(&mut s, &template(), CMD), Ok(0));
        assert_eq!(s, once);
        assert_eq!(uninstall(&mut s, CMD), Ok(2));
        assert_eq!(s, original);
        assert_eq!(uninstall(&mut s, CMD), Ok(0));
    }

    #[test]
    fn empty_settings_come_back_empty() {
        let mut s = json!({});
        install(&mut s, &template(), CMD).unwrap();
        uninstall(&mut s, CMD).unwrap();
        assert_eq!(s, json!({}));
    }

    #[test]
    fn a_shared_group_keeps_the_other_handler() {
        let mut s = json!({"hooks": {"Stop": [{"hooks": [
            {"type": "command", "command": "other"},
            {"type": "command", "command": CMD}
        ]}]}});
        assert_eq!(uninstall(&mut s, CMD), Ok(1));
        assert_eq!(
            s,
            json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "other"}]}]}})
        );
    }

    #[test]
    fn refuses_shapes_it_does_not_know() {
        let mut s = json!([1]);
        assert!(install(&mut s, &template(), CMD).is_err());
        let mut s = json!({"hooks": {"Stop": {"x": 1}}});
        let before = s.clone();
        assert_eq!(
            install(&mut s, &template(), CMD),
            Err(SettingsError::NotArray("Stop".into()))
        );
        assert_eq!(s, before);
    }
}
