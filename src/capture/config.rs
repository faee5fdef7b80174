//! `.agx/config.toml`: what capture keeps and how durably.
//!
//! ```toml
//! [capture]
//! max_size = 268435456   # bytes; larger files get hashes but no before-image
//! fsync = "never"        # "never" or "always"
//! include = ["node_modules/"]   # gitignore-style patterns to capture even if ignored
//! exclude = ["*.log"]           # extra patterns never captured
//!
//! [hooks]
//! prompt_max = 4096      # bytes of each agent prompt kept (longer ones are truncated)
//!
//! [history]
//! keep = "30d"           # the window `agx gc` keeps by default
//! ```

use ignore::gitignore::GitignoreBuilder;
use thiserror::Error;
use toml::{Table, Value};

/// What is wrong with `.agx/config.toml`, in one line naming the key (the caller names
/// the file). Every value is checked when the file is read, so a bad one stops `agx
/// mount` (and any command that reads the file) before anything is served, instead of
/// failing later where it is used (`agx gc` for `history.keep`) or being ignored (a
/// pattern that is not a glob).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Not TOML.
    #[error("line {line}: not valid TOML: {msg}")]
    Syntax { line: usize, msg: String },
    #[error("{key}: unknown {what} (known: {known})")]
    Unknown {
        key: String,
        what: &'static str,
        known: &'static str,
    },
    #[error("{key} = {got}: {why}")]
    Value {
        key: String,
        got: String,
        why: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// Default. The journal, staged before-images and objects are written but not synced:
    /// a killed daemon loses nothing (the kernel has the data), a power cut may.
    Never,
    /// Sync each journal record and staged before-image before the mutation proceeds:
    /// safe against power loss, much slower for small writes.
    Always,
}

#[derive(Clone, Debug)]
pub struct CaptureConfig {
    /// Files larger than this get an event with hashes but no before-image. Default 256 MiB;
    /// raising it costs store space and copy time on first writes to big files.
    pub max_size: u64,
    pub fsync: Fsync,
    /// Patterns (gitignore syntax) captured even when .gitignore ignores them.
    pub include: Vec<String>,
    /// Patterns (gitignore syntax) never captured.
    pub exclude: Vec<String>,
}

fn default_max_size() -> u64 {
    256 << 20
}

fn default_fsync() -> Fsync {
    Fsync::Never
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            max_size: default_max_size(),
            fsync: default_fsync(),
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

/// What agent hooks record.
#[derive(Clone, Debug)]
pub struct HooksConfig {
    /// Prompts longer than this many bytes are kept truncated (on a character boundary,
    /// marked with a trailing "…"). Default 4 KiB.
    pub prompt_max: usize,
}

fn default_prompt_max() -> usize {
    4096
}

impl Default for HooksConfig {
    fn default() -> Self {
        HooksConfig {
            prompt_max: default_prompt_max(),
        }
    }
}

/// How long history lasts.
#[derive(Clone, Debug)]
pub struct HistoryConfig {
    /// The window `agx gc` keeps when given no `--keep`: a duration such as `30d`, `12h`,
    /// `2w` (default `30d`). Only `agx gc`, run by a person, reads it, so it is safe to
    /// change at any time: lowering it drops nothing until the next gc, and pinned points
    /// and named checkpoints are kept whatever the window.
    pub keep: String,
}

fn default_keep() -> String {
    "30d".into()
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            keep: default_keep(),
        }
    }
}

/// A duration as `--keep` and `history.keep` take it (`30s`, `10m`, `2h`, `30d`, `1w`), in
/// nanoseconds.
pub fn parse_duration(s: &str) -> Option<i64> {
    match crate::timeline::refs::Ref::parse(s) {
        Ok(crate::timeline::refs::Ref::Ago(ns)) => Some(ns),
        _ => None,
    }
}

#[derive(Clone, Debug, Default)]
pub struct Config {
    pub capture: CaptureConfig,
    pub hooks: HooksConfig,
    pub history: HistoryConfig,
}

impl Config {
    /// Reads the text of `.agx/config.toml`, checking every key and value.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let table: Table = toml::from_str(text).map_err(|e| syntax(text, &e))?;
        let mut c = Config::default();
        for (section, v) in &table {
            let known = match section.as_str() {
                "capture" => "max_size, fsync, include, exclude",
                "hooks" => "prompt_max",
                "history" => "keep",
                _ => {
                    return Err(ConfigError::Unknown {
                        key: section.clone(),
                        what: "section",
                        known: "[capture], [hooks], [history]",
                    })
                }
            };
            let Value::Table(t) = v else {
                return Err(bad(section, v, format!("must be a section, [{section}]")));
            };
            for (k, v) in t {
                let key = format!("{section}.{k}");
                match (section.as_str(), k.as_str()) {
                    ("capture", "max_size") => c.capture.max_size = count(&key, v)?,
                    ("capture", "fsync") => c.capture.fsync = fsync(&key, v)?,
                    ("capture", "include") => c.capture.include = patterns(&key, v)?,
                    ("capture", "exclude") => c.capture.exclude = patterns(&key, v)?,
                    ("hooks", "prompt_max") => {
                        c.hooks.prompt_max = usize::try_from(count(&key, v)?)
                            .map_err(|_| bad(&key, v, "too large".into()))?
                    }
                    ("history", "keep") => c.history.keep = keep(&key, v)?,
                    _ => {
                        return Err(ConfigError::Unknown {
                            key,
                            what: "key",
                            known,
                        })
                    }
                }
            }
        }
        Ok(c)
    }
}

/// A TOML syntax error as one line: where, and what the parser says.
fn syntax(text: &str, e: &toml::de::Error) -> ConfigError {
    let start = e.span().map(|s| s.start).unwrap_or(0);
    let before = text.as_bytes().get(..start).unwrap_or(text.as_bytes());
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let msg: Vec<&str> = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut msg = msg.join("; ");
    if let Some(l) = text.lines().nth(line - 1).map(str::trim) {
        if !l.is_empty() {
            msg = format!("{msg} (in `{}`)", shorten(l));
        }
    }
    ConfigError::Syntax { line, msg }
}

/// At most 60 characters of `s`, cut on a character boundary.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", s.get(..i).unwrap_or(s)),
        None => s.to_string(),
    }
}

/// A value as the file has it, on one line (strings escaped as Rust does).
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        v => v
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn bad(key: &str, v: &Value, why: String) -> ConfigError {
    ConfigError::Value {
        key: key.to_string(),
        got: shorten(&show(v)),
        why,
    }
}

/// A number of bytes: an integer, 0 or more.
fn count(key: &str, v: &Value) -> Result<u64, ConfigError> {
    v.as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| bad(key, v, "must be a whole number of bytes, 0 or more".into()))
}

fn fsync(key: &str, v: &Value) -> Result<Fsync, ConfigError> {
    match v.as_str() {
        Some("never") => Ok(Fsync::Never),
        Some("always") => Ok(Fsync::Always),
        _ => Err(bad(key, v, "must be \"never\" or \"always\"".into())),
    }
}

/// A list of gitignore-style patterns, each one a valid glob on one line (the rules
/// would otherwise drop it, or the whole list, without a word).
fn patterns(key: &str, v: &Value) -> Result<Vec<String>, ConfigError> {
    let list_of_strings = || bad(key, v, "must be a list of strings, e.g. [\"*.log\"]".into());
    let Some(items) = v.as_array() else {
        return Err(list_of_strings());
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Some(p) = item.as_str() else {
            return Err(list_of_strings());
        };
        if p.contains(['\n', '\r']) {
            return Err(bad(key, item, "a pattern is one line".into()));
        }
        if unclosed_class(p.as_bytes()) {
            let why = r"not a valid pattern: '[' without its ']' (git matches nothing with it; \[ is a literal '[')";
            return Err(bad(key, item, why.into()));
        }
        if let Err(e) = GitignoreBuilder::new("").add_line(None, p) {
            let why = e.to_string().replace('\n', " ");
            return Err(bad(key, item, format!("not a valid pattern: {why}")));
        }
        out.push(p.to_string());
    }
    Ok(out)
}

/// Whether a pattern opens a character class it never closes (`a[b`). The matcher takes
/// the '[' literally, git matches nothing: either way not what was meant.
fn unclosed_class(p: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&c) = p.get(i) {
        match c {
            b'\\' => i += 2,
            b'[' => {
                let mut j = i + 1;
                if matches!(p.get(j), Some(b'!' | b'^')) {
                    j += 1;
                }
                // A ']' first in the class is a member, not its end.
                if p.get(j) == Some(&b']') {
                    j += 1;
                }
                match p
                    .get(j..)
                    .and_then(|rest| rest.iter().position(|&b| b == b']'))
                {
                    Some(k) => i = j + k + 1,
                    None => return true,
                }
            }
            _ => i += 1,
        }
    }
    false
}

/// `history.keep`: a duration longer than zero. A window of 0 would make every plain
/// `agx gc` drop all unpinned history up to the last second; whoever wants that says so
/// once, with `agx gc --keep 0s`.
fn keep(key: &str, v: &Value) -> Result<String, ConfigError> {
    let s = v.as_str().ok_or_else(|| {
        bad(
            key,
            v,
            "must be a duration in quotes, e.g. \"30d\", \"12h\", \"2w\"".into(),
        )
    })?;
    match parse_duration(s) {
        Some(ns) if ns > 0 => Ok(s.to_string()),
        Some(_) => Err(bad(key, v, "must be longer than 0 (e.g. \"30d\")".into())),
        None => Err(bad(
            key,
            v,
            "not a duration (use s, m, h, d or w after a whole number: \"30d\", \"12h\", \"2w\")"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.capture.max_size, 256 << 20);
        assert_eq!(c.capture.fsync, Fsync::Never);
        let c = Config::parse(
            "[capture]\nmax_size = 10\nfsync = \"always\"\ninclude = [\"node_modules/\"]\n",
        )
        .unwrap();
        assert_eq!(c.capture.max_size, 10);
        assert_eq!(c.capture.fsync, Fsync::Always);
        assert_eq!(c.capture.include, vec!["node_modules/"]);
        assert!(Config::parse("[capture]\nbogus = 1\n").is_err());
        assert_eq!(Config::parse("").unwrap().hooks.prompt_max, 4096);
        assert_eq!(
            Config::parse("[hooks]\nprompt_max = 10\n")
                .unwrap()
                .hooks
                .prompt_max,
            10
        );
        assert_eq!(c.history.keep, "30d");
        let c = Config::parse("[history]\nkeep = \"2w\"\n").unwrap();
        assert_eq!(
            parse_duration(&c.history.keep),
            Some(14 * 86400 * 1_000_000_000)
        );
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn every_bad_value_is_refused_naming_its_key() {
        for (text, key) in [
            ("[history]\nkeep = \"forever\"\n", "history.keep"),
            ("[history]\nkeep = \"-1d\"\n", "history.keep"),
            ("[history]\nkeep = \"0s\"\n", "history.keep"),
            ("[history]\nkeep = \"10y\"\n", "history.keep"),
            ("[history]\nkeep = 30\n", "history.keep"),
            ("[history]\nkeep = \"99999999999999d\"\n", "history.keep"),
            ("[capture]\nmax_size = -1\n", "capture.max_size"),
            ("[capture]\nmax_size = 1.5\n", "capture.max_size"),
            ("[capture]\nmax_size = \"1M\"\n", "capture.max_size"),
            ("[capture]\nfsync = \"sometimes\"\n", "capture.fsync"),
            ("[capture]\nfsync = true\n", "capture.fsync"),
            ("[capture]\nexclude = [\"a[b\"]\n", "capture.exclude"),
            ("[capture]\nexclude = [\"a{b\"]\n", "capture.exclude"),
            ("[capture]\nexclude = [\"a[z-a]\"]\n", "capture.exclude"),
            ("[capture]\nexclude = ['a\\']\n", "capture.exclude"),
            ("[capture]\nexclude = [\"[!]\"]\n", "capture.exclude"),
            (
                "[capture]\ninclude = [\"ok/\", \"a[b\"]\n",
                "capture.include",
            ),
            ("[capture]\nexclude = \"*.log\"\n", "capture.exclude"),
            ("[capture]\nexclude = [1]\n", "capture.exclude"),
            ("[capture]\nexclude = [\"a\\nb\"]\n", "capture.exclude"),
            ("[hooks]\nprompt_max = -5\n", "hooks.prompt_max"),
            ("[capture]\nbogus = 1\n", "capture.bogus"),
            ("[bogus]\n", "bogus"),
            ("capture = 3\n", "capture"),
            ("top = 1\n", "top"),
        ] {
            let e = Config::parse(text).expect_err(text).to_string();
            assert!(e.starts_with(key), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{text:?}: {e}");
        }
        for text in [
            "[history]\nkeep = forever\n",
            "[capture\n",
            "x = \n",
            "a = 1\na = 2\n",
        ] {
            let e = Config::parse(text).expect_err(text);
            assert!(matches!(e, ConfigError::Syntax { .. }), "{text:?}: {e}");
            assert!(!e.to_string().contains('\n'), "{text:?}: {e}");
        }
        let e = Config::parse("[history]\n\nkeep = forever\n").unwrap_err();
        assert!(e.to_string().starts_with("line 3: "), "{e}");
        assert!(e.to_string().contains("keep = forever"), "{e}");
        // Good values, including the edges.
        let c = Config::parse(
            "[capture]\nmax_size = 0\nexclude = [\"*.log\", \"!keep.log\", \"# c\", \"\", \"[]]\", 'a\\[b', \"[[:alpha:]]x\"]\n[hooks]\nprompt_max = 0\n[history]\nkeep = \"1s\"\n",
        )
        .unwrap();
        assert_eq!(c.capture.max_size, 0);
        assert_eq!(c.capture.exclude.len(), 7);
        assert_eq!(c.history.keep, "1s");
    }
}
