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

use serde::Deserialize;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error(".agx/config.toml: {0}")]
    Parse(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    /// Default. The journal, staged before-images and objects are written but not synced:
    /// a killed daemon loses nothing (the kernel has the data), a power cut may.
    Never,
    /// Sync each journal record and staged before-image before the mutation proceeds:
    /// safe against power loss, much slower for small writes.
    Always,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureConfig {
    /// Files larger than this get an event with hashes but no before-image. Default 256 MiB;
    /// raising it costs store space and copy time on first writes to big files.
    #[serde(default = "default_max_size")]
    pub max_size: u64,
    #[serde(default = "default_fsync")]
    pub fsync: Fsync,
    /// Patterns (gitignore syntax) captured even when .gitignore ignores them.
    #[serde(default)]
    pub include: Vec<String>,
    /// Patterns (gitignore syntax) never captured.
    #[serde(default)]
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
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    /// Prompts longer than this many bytes are kept truncated (on a character boundary,
    /// marked with a trailing "…"). Default 4 KiB.
    #[serde(default = "default_prompt_max")]
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
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// The window `agx gc` keeps when given no `--keep`: a duration such as `30d`, `12h`,
    /// `2w` (default `30d`). Only `agx gc`, run by a person, reads it, so it is safe to
    /// change at any time: lowering it drops nothing until the next gc, and pinned points
    /// and named checkpoints are kept whatever the window.
    #[serde(default = "default_keep")]
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

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub capture: CaptureConfig,
    #[serde(default)]
    pub hooks: HooksConfig,
    #[serde(default)]
    pub history: HistoryConfig,
}

impl Config {
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string().replace('\n', " ")))
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
}
