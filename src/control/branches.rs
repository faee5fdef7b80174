//! Branch commands in the engine: create, list, show, rename, delete (daemon and local
//! CLI alike). A branch is one timeline row; its layer is made by the daemon the first
//! time the branch is reached (`crate::branches::layer`), so making one copies and scans
//! nothing.

use serde::Serialize;

use super::engine::{Engine, EngineError};
use super::keep::name_rules;
use crate::ids::{BranchId, Seq};
use crate::sys::now_ns;
use crate::timeline::branches::Branch;
use crate::timeline::Actor;

/// Names `agx branch` takes as subcommands, and `main` (the main tree in REFs).
const RESERVED: &[&str] = &[
    "main", "create", "list", "show", "rename", "delete", "mount",
];

/// A branch as `agx branch list` and `show` report it.
#[derive(Clone, Debug, Serialize)]
pub struct BranchInfo {
    #[serde(flatten)]
    pub branch: Branch,
    /// Changes recorded in the branch.
    pub events: i64,
    /// Paths those changes name.
    pub files_changed: i64,
    pub last_change_ns: Option<i64>,
    /// Where the branch is seen in the mount, relative to the project.
    pub path: String,
    /// Where it is also served on its own (`agx branch mount`).
    pub mounted_at: Vec<std::path::PathBuf>,
}

/// Serves branches at mountpoints of their own: set by the daemon (`mount::branchmount`),
/// so the engine, below the mount in the layers, can ask for it.
pub trait BranchMounter: Send + Sync {
    /// Serves branch `id` (`name`, for messages) at `at`; returns the canonical mountpoint.
    fn mount(
        &self,
        id: BranchId,
        name: &str,
        at: &std::path::Path,
    ) -> Result<std::path::PathBuf, String>;
    /// Stops serving the branch mounted at `at`; returns which branch that was.
    fn unmount(&self, at: &std::path::Path) -> Result<BranchId, String>;
    /// Every branch served on its own, with its mountpoint.
    fn mounted(&self) -> Vec<(BranchId, std::path::PathBuf)>;
    /// Tells the kernel of every mount of branch `id` what a restore changed there.
    fn invalidate(&self, id: BranchId, paths: &[Vec<u8>], inodes: &[u64]);
}

/// Why `name` cannot name a branch, if it cannot.
fn name_problem(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!(
            "'{name}' cannot name a branch: it is reserved ({})",
            if name == "main" {
                "the main tree"
            } else {
                "a subcommand of agx branch"
            }
        ));
    }
    name_rules(name, "a branch")
}

impl Engine {
    /// Tells the daemon's branch set (if any) that branches changed.
    pub(super) fn branches_changed(&self) {
        if let Some(b) = self.branches() {
            b.reload();
        }
    }

    /// Makes branch `name` with base `from` (a REF; default: now).
    pub fn branch_create(
        &self,
        name: &str,
        from: Option<&str>,
        caller: &Actor,
    ) -> Result<Branch, EngineError> {
        let b = self.branch_row(name, from, caller)?;
        self.branches_changed();
        Ok(b)
    }

    /// [`Engine::branch_create`] without telling the daemon's branch set (the kernel) yet:
    /// for a caller that holds the tree's gate, where the kernel must not be waited for.
    pub(super) fn branch_row(
        &self,
        name: &str,
        from: Option<&str>,
        caller: &Actor,
    ) -> Result<Branch, EngineError> {
        if let Some(why) = name_problem(name) {
            return Err(EngineError::Invalid(why));
        }
        let base: Seq = match from {
            Some(r) => {
                if self.tl().branch_by_name(r)?.is_some() || r.starts_with("branch:") {
                    return Err(EngineError::Invalid(format!(
                        "--from {r}: a branch cannot be made from another branch yet; make it from a point of the main tree (a checkpoint, a time, event:N)"
                    )));
                }
                self.point(r)?
            }
            None => {
                self.notice_everything()?;
                self.flush_all()?;
                self.tl().max_seq()?
            }
        };
        let mut tl = self.tl();
        if let Some(b) = tl.branch_by_name(name)? {
            return Err(EngineError::Invalid(format!(
                "a branch named '{name}' exists already (made {}); delete it first or choose another name",
                chrono::DateTime::from_timestamp_nanos(b.created_ns)
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )));
        }
        if tl.checkpoint_by_name(name)?.is_some() {
            return Err(EngineError::Invalid(format!(
                "'{name}' names a checkpoint already: a branch of that name would make the REF '{name}' ambiguous; choose another name"
            )));
        }
        let creator = match &caller.session {
            Some(s) => format!("{}[{}] in session {s}", caller.process, caller.pid),
            None => format!("{}[{}]", caller.process, caller.pid),
        };
        let session = caller
            .session
            .as_deref()
            .and_then(|s| s.parse().ok())
            .map(crate::ids::SessionId);
        Ok(tl.add_branch(name, base, now_ns(), Some(&creator), session, from)?)
    }

    fn info(&self, b: Branch) -> Result<BranchInfo, EngineError> {
        let (events, files, last) = self.tl().branch_activity(b.id)?;
        let path = format!(".agx/branches/{}", b.name);
        let mounted_at = self.mounts_of(b.id);
        Ok(BranchInfo {
            branch: b,
            events,
            files_changed: files,
            last_change_ns: last,
            path,
            mounted_at,
        })
    }

    /// Where branch `id` is served on its own.
    fn mounts_of(&self, id: BranchId) -> Vec<std::path::PathBuf> {
        self.mounter()
            .map(|m| {
                m.mounted()
                    .into_iter()
                    .filter(|(b, _)| *b == id)
                    .map(|(_, p)| p)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `agx branch mount NAME --at DIR`: serves the branch at DIR too.
    pub fn branch_mount(
        &self,
        name: &str,
        at: &std::path::Path,
    ) -> Result<BranchInfo, EngineError> {
        let b = self.find_branch(name)?;
        let m = self.mounter().ok_or_else(|| {
            EngineError::Invalid(
                "agx branch mount needs the project mounted: run `agx mount` first".into(),
            )
        })?;
        m.mount(b.id, &b.name, at).map_err(EngineError::Invalid)?;
        self.info(b)
    }

    /// `agx branch unmount DIR`: stops serving the branch mounted at DIR.
    pub fn branch_unmount(&self, at: &std::path::Path) -> Result<Branch, EngineError> {
        let m = self.mounter().ok_or_else(|| {
            EngineError::Invalid(format!("{}: no branch is mounted there", at.display()))
        })?;
        let id = m.unmount(at).map_err(EngineError::Invalid)?;
        self.tl()
            .branch(id)?
            .ok_or_else(|| EngineError::Invalid("the branch is gone".into()))
    }

    /// Branches, oldest first; deleted ones too with `all`.
    pub fn branch_list(&self, all: bool) -> Result<Vec<BranchInfo>, EngineError> {
        self.flush_all()?;
        let list = self.tl().branches(all)?;
        list.into_iter().map(|b| self.info(b)).collect()
    }

    /// The live branch called `name`.
    pub fn find_branch(&self, name: &str) -> Result<Branch, EngineError> {
        let name = name.strip_prefix("branch:").unwrap_or(name);
        self.tl().branch_by_name(name)?.ok_or_else(|| {
            EngineError::Invalid(format!("no branch '{name}' (agx branch list shows them)"))
        })
    }

    pub fn branch_show(&self, name: &str) -> Result<BranchInfo, EngineError> {
        self.flush_all()?;
        let b = self.find_branch(name)?;
        self.info(b)
    }

    pub fn branch_rename(&self, old: &str, new: &str) -> Result<Branch, EngineError> {
        if let Some(why) = name_problem(new) {
            return Err(EngineError::Invalid(why));
        }
        let b = self.find_branch(old)?;
        let mut tl = self.tl();
        if tl.branch_by_name(new)?.is_some() {
            return Err(EngineError::Invalid(format!(
                "a branch named '{new}' exists already"
            )));
        }
        if tl.checkpoint_by_name(new)?.is_some() {
            return Err(EngineError::Invalid(format!(
                "'{new}' names a checkpoint already; choose another name"
            )));
        }
        tl.rename_branch(b.id, new)?;
        let b = tl.branch(b.id)?.expect("renamed just now");
        drop(tl);
        self.branches_changed();
        Ok(b)
    }

    /// Deletes branch `name`: it is no longer listed or reachable; its history and layer
    /// stay until gc. Refused to agent sessions.
    pub fn branch_delete(&self, name: &str, caller: &Actor) -> Result<Branch, EngineError> {
        self.refuse_to_agents(caller, "agx branch delete")?;
        let b = self.find_branch(name)?;
        if let Some(at) = self.mounts_of(b.id).first() {
            return Err(EngineError::Invalid(format!(
                "branch {} is mounted at {}: `agx branch unmount {}` first; nothing deleted",
                b.name,
                at.display(),
                at.display()
            )));
        }
        self.tl().delete_branch(b.id, now_ns())?;
        self.branches_changed();
        let b = self.tl().branch(b.id)?.expect("deleted just now");
        Ok(b)
    }
}
