//! Which tree a history command is about: the main tree, or a branch (`--branch NAME`, or
//! a command run inside `.agx/branches/NAME/`).
//!
//! A branch's history is its own events (`branch_events`) over its own tree (the layer),
//! read with the same state-at-a-point rule as the main tree's (`restore::State`). Points
//! before the branch's base are the main tree's history, not the branch's: a command
//! that names one in a branch is refused with the way out (a new branch from that point).
//!
//! A branch's tree is made lazily (`branches::fill`): before a state of it is built or a
//! plan is carried out on it, the parts the events name are made whole (directories
//! filled; for a restore, files copied up), so nothing reads a directory not filled yet
//! as empty or a file not copied yet as its placeholder.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::engine::{Engine, EngineError};
use crate::branches::Tree;
use crate::ids::{BranchId, Seq};
use crate::timeline::branches::Branch;
use crate::timeline::{Event, Filter};

/// The tree a command is about.
pub enum Scope {
    Main,
    Branch { branch: Branch, tree: Arc<Tree> },
}

impl Scope {
    pub fn branch_id(&self) -> Option<BranchId> {
        match self {
            Scope::Main => None,
            Scope::Branch { branch, .. } => Some(branch.id),
        }
    }

    /// "main", or "branch NAME", for messages.
    pub fn label(&self) -> String {
        match self {
            Scope::Main => "the main tree".into(),
            Scope::Branch { branch, .. } => format!("branch {}", branch.name),
        }
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> EngineError {
    move |source| EngineError::Io { what, source }
}

impl Engine {
    /// The tree `branch` names: None or `main` is the main tree; a branch needs the daemon
    /// (it serves the branches' trees).
    pub(crate) fn scope(&self, branch: Option<&str>) -> Result<Scope, EngineError> {
        let Some(name) = branch.map(|b| b.strip_prefix("branch:").unwrap_or(b)) else {
            return Ok(Scope::Main);
        };
        if name == "main" {
            return Ok(Scope::Main);
        }
        let set = self.branches().ok_or_else(|| {
            EngineError::Invalid(format!(
                "branch {name}: a branch's history needs the project mounted (its tree is served by the daemon): run `agx mount` first"
            ))
        })?;
        let b = self.find_branch(name)?;
        let tree = set
            .tree(b.id)
            .map_err(io(format!("opening branch '{}'", b.name)))?;
        Ok(Scope::Branch { branch: b, tree })
    }

    /// The root of the scope's tree (`O_PATH`).
    pub(crate) fn scope_root<'a>(&'a self, s: &'a Scope) -> &'a OwnedFd {
        match s {
            Scope::Main => &self.root,
            Scope::Branch { tree, .. } => tree.root(),
        }
    }

    /// The scope's events after `point`, oldest first.
    pub(crate) fn events_in(&self, s: &Scope, point: Seq) -> Result<Vec<Event>, EngineError> {
        Ok(match s {
            Scope::Main => self.tl().events_after(point)?,
            Scope::Branch { branch, .. } => self.tl().branch_events_after(branch.id, point)?,
        })
    }

    /// The scope's events as `log` lists them (newest first).
    pub(crate) fn log_in(&self, s: &Scope, f: &Filter) -> Result<Vec<Event>, EngineError> {
        Ok(match s {
            Scope::Main => self.tl().log(f)?,
            Scope::Branch { branch, .. } => self.tl().branch_log_filtered(branch.id, f)?,
        })
    }

    /// The point `r` names in the scope: in a branch, not before its base (earlier points
    /// are the main tree's history).
    pub(crate) fn point_in(
        &self,
        s: &Scope,
        r: &str,
        paths: &[Vec<u8>],
    ) -> Result<Seq, EngineError> {
        let p = match s {
            Scope::Main => self.noticed_point(r, paths)?,
            Scope::Branch { .. } => self.point(r)?,
        };
        if let Scope::Branch { branch, .. } = s {
            if p < branch.base {
                return Err(EngineError::Invalid(format!(
                    "{r} is before branch {}'s base (event:{}): that point is the main tree's history; see it with --branch main, or make a branch from it (agx branch create NAME --from {r})",
                    branch.name, branch.base.0
                )));
            }
        }
        Ok(p)
    }

    /// Makes whole the parts of a branch's tree that `events` and `only` name: the
    /// directories on their way filled; with `deep` (a restore), everything below them
    /// filled and their files' content copied up, since a restore moves directories back
    /// whole and reads live content by path. Nothing to do for the main tree.
    pub(crate) fn prepare(
        &self,
        s: &Scope,
        events: &[Event],
        only: &[Vec<u8>],
        deep: bool,
    ) -> Result<(), EngineError> {
        let Scope::Branch { tree, .. } = s else {
            return Ok(());
        };
        let mut paths: std::collections::BTreeSet<&[u8]> = std::collections::BTreeSet::new();
        for e in events {
            paths.insert(&e.path);
            if let Some(t) = &e.to_path {
                paths.insert(t);
            }
        }
        paths.extend(only.iter().map(|p| p.as_slice()));
        for p in paths {
            tree.materialize(p, deep)
                .map_err(io(format!("{} in the branch", String::from_utf8_lossy(p))))?;
        }
        Ok(())
    }
}
