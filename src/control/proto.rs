//! The control protocol between the CLI and a mounted daemon: one request per connection,
//! one JSON line each way (a restore also sends progress lines before its result).
//! Paths travel as hex of their bytes, so any file name survives.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    Flush,
    Summary,
    Log {
        path: Option<String>,
        since: Option<String>,
        limit: Option<usize>,
        /// The branch whose history (None: the main tree's).
        #[serde(default)]
        branch: Option<String>,
    },
    Show {
        at: String,
        path: String,
        #[serde(default)]
        branch: Option<String>,
    },
    Diff {
        from: Option<String>,
        to: Option<String>,
        paths: Vec<String>,
        #[serde(default)]
        branch: Option<String>,
    },
    Plan {
        at: String,
        paths: Vec<String>,
        #[serde(default)]
        on_conflict: crate::control::undo::OnConflict,
        #[serde(default)]
        branch: Option<String>,
    },
    Restore {
        at: String,
        paths: Vec<String>,
        #[serde(flatten)]
        opts: crate::control::engine::RestoreOpts,
    },
    /// What `oops` would undo (or redo).
    #[serde(rename = "oops-target")]
    OopsTarget {
        #[serde(default)]
        branch: Option<String>,
    },
    Blame {
        path: String,
        #[serde(default)]
        branch: Option<String>,
    },
    #[serde(rename = "session-start")]
    SessionStart(crate::control::sessions::StartRequest),
    #[serde(rename = "session-end")]
    SessionEnd {
        id: Option<String>,
    },
    #[serde(rename = "session-list")]
    SessionList,
    #[serde(rename = "session-show")]
    SessionShow {
        id: String,
    },
    /// The caller's process and session, as the daemon attributes it.
    Whoami,
    #[serde(rename = "tool-start")]
    ToolStart {
        session: i64,
        tool: String,
        tool_use_id: Option<String>,
    },
    #[serde(rename = "tool-end")]
    ToolEnd {
        session: i64,
        tool_use_id: Option<String>,
    },
    Prompt {
        session: i64,
        text: String,
    },
    /// Check the store and the timeline; with `repair`, quarantine corrupt objects.
    Verify {
        #[serde(default)]
        repair: bool,
    },
    /// One agent hook event (session by the agent's key).
    Hook(crate::control::hooks::HookRequest),
    /// Marks the current point (agx checkpoint).
    Checkpoint {
        name: Option<String>,
        message: Option<String>,
    },
    #[serde(rename = "checkpoint-list")]
    CheckpointList {
        all: bool,
    },
    #[serde(rename = "checkpoint-delete")]
    CheckpointDelete {
        name: String,
    },
    Pin {
        at: String,
    },
    Unpin {
        at: String,
    },
    Pins,
    Gc {
        keep: Option<String>,
        dry_run: bool,
    },
    #[serde(rename = "branch-create")]
    BranchCreate {
        name: String,
        from: Option<String>,
    },
    #[serde(rename = "branch-list")]
    BranchList {
        all: bool,
    },
    #[serde(rename = "branch-show")]
    BranchShow {
        name: String,
    },
    #[serde(rename = "branch-rename")]
    BranchRename {
        old: String,
        new: String,
    },
    #[serde(rename = "branch-delete")]
    BranchDelete {
        name: String,
    },
    /// Serve a branch at a mountpoint of its own (a path, as hex of its bytes).
    #[serde(rename = "branch-mount")]
    BranchMount {
        name: String,
        at: String,
    },
    #[serde(rename = "branch-unmount")]
    BranchUnmount {
        at: String,
    },
    /// `agx merge NAME`: the branch's changes into the main tree.
    Merge {
        name: String,
        #[serde(flatten)]
        opts: crate::control::merge::MergeOpts,
    },
    /// `agx switch NAME`: the main tree becomes the branch.
    Switch {
        name: String,
        #[serde(default)]
        force: bool,
    },
    /// `agx unmount`: the daemon checks the caller (refused to agent sessions, as gc) and
    /// unmounts itself, so it knows the stop was asked for (`mount::stop`).
    Unmount {
        #[serde(default)]
        lazy: bool,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// (done, total) for long operations; a reply with progress is not the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<(usize, usize)>,
}

pub fn hex(p: &[u8]) -> String {
    crate::timeline::event::to_hex(p)
}

pub fn unhex(s: &str) -> Result<Vec<u8>, String> {
    crate::timeline::event::from_hex(s).ok_or_else(|| format!("bad path encoding: {s}"))
}
