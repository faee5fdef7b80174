//! Restore plans: what to change in the live tree so that it (or some paths of it) equals
//! the tree at a point. Only paths some event after the point touched are examined, with
//! the live subtrees below them (and, when hard links are involved, the other names of
//! the files the events recorded: see `links.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;

use serde::Serialize;

use super::links::{self, InodeId};
use super::model::{Entry, Node};
use super::steps::Steps;
use super::RestoreError;
use crate::ids::{ContentHash, Seq};
use crate::timeline::{Event, Kind, Meta, Timeline};
use crate::tree::{self as live, LiveObj};

/// Where a file's content comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    /// A stored version.
    Hash(ContentHash),
    /// The live file now at this path (the object moved since the point).
    #[serde(serialize_with = "ser_path")]
    Live(Vec<u8>),
}

fn ser_path<S: serde::Serializer>(p: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(p))
}

/// One change of a plan.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Step {
    Remove {
        #[serde(serialize_with = "ser_path")]
        path: Vec<u8>,
        dir: bool,
    },
    Mkdir {
        #[serde(serialize_with = "ser_path")]
        path: Vec<u8>,
        #[serde(skip)]
        meta: Option<Meta>,
    },
    Write {
        #[serde(serialize_with = "ser_path")]
        path: Vec<u8>,
        content: Content,
        #[serde(skip)]
        meta: Option<Meta>,
        /// A file is there now and is replaced.
        replace: bool,
    },
    Symlink {
        #[serde(serialize_with = "ser_path")]
        path: Vec<u8>,
        #[serde(serialize_with = "ser_path")]
        target: Vec<u8>,
        #[serde(skip)]
        meta: Option<Meta>,
    },
    Mknod {
        #[serde(serialize_with = "ser_path")]
        path: Vec<u8>,
        #[serde(skip)]
        meta: Meta,
    },
    /// Another name for the file at `from` (written or checked earlier in the plan): the
    /// names were hard links of one file at the point.
    Link {
        #[serde(serialize_with = "ser_path")]
        path: Vec<u8>,
        #[serde(serialize_with = "ser_path")]
        from: Vec<u8>,
        /// A file is there now and is replaced.
        replace: bool,
    },
    /// Mode, owner, times, xattrs.
    #[serde(rename = "meta")]
    SetMeta {
        #[serde(serialize_with = "ser_path")]
        path: Vec<u8>,
        #[serde(skip)]
        meta: Meta,
    },
}

impl Step {
    pub fn path(&self) -> &[u8] {
        match self {
            Step::Remove { path, .. }
            | Step::Mkdir { path, .. }
            | Step::Write { path, .. }
            | Step::Symlink { path, .. }
            | Step::Mknod { path, .. }
            | Step::Link { path, .. }
            | Step::SetMeta { path, .. } => path,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    #[serde(serialize_with = "ser_path")]
    pub path: Vec<u8>,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// The point restored to.
    pub point: Seq,
    pub steps: Vec<Step>,
    /// Paths the plan leaves alone because their content at the point was never kept, or
    /// because replacing them would lose content that cannot be kept (over the capture
    /// size limit). A restore refuses such a plan unless told to skip them.
    pub skipped: Vec<Skipped>,
    /// Paths a session restore leaves alone, or overwrites only when forced, because
    /// someone else changed them after the session began.
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
}

/// A path a session touched that another actor changed after the session began.
#[derive(Clone, Debug, Serialize)]
pub struct Conflict {
    #[serde(serialize_with = "ser_path")]
    pub path: Vec<u8>,
    /// The other actor's latest event on it.
    pub seq: Seq,
    pub session: Option<String>,
    pub process: String,
}

/// The concrete state a path has at a point.
#[derive(Clone, Debug)]
pub struct Want {
    pub kind: Kind,
    pub content: Option<Content>,
    pub target: Option<Vec<u8>>,
    pub meta: Option<Meta>,
    pub captured: bool,
    /// A file's inode at the point, when known (the live one, or the one its recorded
    /// state was read from).
    pub inode: Option<InodeId>,
    /// For a recorded state: the event that recorded it (the inode is known to be the
    /// point's up to there). None: the live object, the same since the point.
    pub seen: Option<Seq>,
}

pub use crate::sys::path::protected;
use crate::sys::path::{is_agx, is_git_objects};

/// Whether a restore may change `.git/objects/...` this way. Git's object store is passed
/// through without capture (DESIGN.md section 4) and objects are only ever added, so a
/// restore keeps every object (the refs it brings back point to objects that are still
/// there), with two exceptions: an object store that did not exist at the point (a `.git`
/// made since) is removed with everything in it, each object recorded first like any
/// removal, so the restore can be undone; and objects missing now that the timeline knows
/// at the point (such a restore recorded them) are brought back. An object is never
/// rewritten.
fn git_objects_step(want: Option<&Want>, have: Option<&LiveObj>, store_at_point: bool) -> bool {
    match (want, have) {
        (None, Some(_)) => !store_at_point,
        (Some(_), None) => true,
        _ => false,
    }
}

fn under_any(p: &[u8], only: &[Vec<u8>]) -> bool {
    only.is_empty()
        || only.iter().any(|o| {
            p == o.as_slice() || (p.starts_with(o) && p.get(o.len()) == Some(&b'/')) || o.is_empty()
        })
}

/// The concrete state behind a model entry (reading the live tree where it mirrors it).
/// Only the entry's own path is considered; `History::correct` adds what was recorded
/// through the file's other names.
pub fn resolve(root: &OwnedFd, e: Entry) -> Option<Want> {
    resolve_checked(root, e).ok().flatten()
}

/// Like [`resolve`], with a live object that cannot be looked at as an error.
pub fn resolve_checked(root: &OwnedFd, e: Entry) -> Result<Option<Want>, rustix::io::Errno> {
    let n = match e {
        Entry::Absent => return Ok(None),
        Entry::Node(n) => n,
    };
    let Some(src) = n.src.clone() else {
        return Ok(recorded(n));
    };
    let Some(lx) = live::stat_checked(root, &src)? else {
        // A content change recorded over a mirror whose object is gone now (changed
        // outside the mount): the recorded state still stands.
        return Ok(n.hash.is_some().then(|| recorded(n)).flatten());
    };
    // Events are recorded under a name the object has when they begin (`fs::record`)
    // and changes made outside agx become events of their own (`capture::outside`), so
    // the live object at a mirrored path is the one the recorded parts of `n` were read
    // from: its identity is the point's.
    let id = lx.id();
    let kind = n.kind.unwrap_or(lx.kind);
    let lmeta = lx.meta();
    let content = if kind != Kind::File || (n.unknown && n.hash.is_none()) {
        None
    } else {
        Some(match n.hash {
            Some(h) => Content::Hash(h),
            None => Content::Live(src.clone()),
        })
    };
    let target = if kind == Kind::Symlink {
        n.meta
            .as_ref()
            .and_then(|m| m.target.clone())
            .or(lmeta.target.clone())
    } else {
        None
    };
    Ok(Some(Want {
        kind,
        content,
        target,
        meta: Some(n.meta.unwrap_or(lmeta)),
        captured: n.captured,
        inode: (kind == Kind::File).then_some(id),
        seen: None,
    }))
}

/// The state of a node recorded whole (no live object behind it).
fn recorded(n: Node) -> Option<Want> {
    let kind = n.kind?;
    Some(Want {
        kind,
        content: n.hash.map(Content::Hash),
        target: n.meta.as_ref().and_then(|m| m.target.clone()),
        inode: n
            .meta
            .as_ref()
            .and_then(|m| m.id())
            .filter(|_| kind == Kind::File),
        meta: n.meta,
        captured: n.captured,
        seen: n.seen,
    })
}

impl Plan {
    /// The plan bringing the live tree under `root` (limited to `only`, if given) back to
    /// `point`. Live files over `max_size` are never removed or replaced (their content
    /// could not be kept).
    pub fn compute(
        root: &OwnedFd,
        timeline: &Timeline,
        point: Seq,
        only: &[Vec<u8>],
        max_size: u64,
    ) -> Result<Plan, RestoreError> {
        let events = timeline.events_after(point)?;
        Self::from_events(root, &events, point, only, max_size)
    }

    pub fn from_events(
        root: &OwnedFd,
        events: &[Event],
        point: Seq,
        only: &[Vec<u8>],
        max_size: u64,
    ) -> Result<Plan, RestoreError> {
        let state = super::State::before(events);
        let (model, history) = (state.model(), state.links());

        let mut cand: BTreeSet<Vec<u8>> = BTreeSet::new();
        for e in events {
            cand.insert(e.path.clone());
            if let Some(t) = &e.to_path {
                cand.insert(t.clone());
            }
        }
        for o in only {
            cand.insert(o.clone());
        }
        // Subtrees that mirror a live directory elsewhere, and live subtrees of candidates.
        // Every path the model states explicitly is a candidate too: undoing a directory
        // move carries explicit entries below it to paths no event named.
        let mut extra = Vec::new();
        for (k, entry) in model.entries() {
            extra.push(k.clone());
            if let Entry::Node(n) = entry {
                if let Some(src) = &n.src {
                    if src != k && live::stat(root, src).is_some_and(|o| o.kind == Kind::Dir) {
                        let mut below = Vec::new();
                        live::walk(root, src, &mut below);
                        for b in below {
                            extra.push(crate::sys::path::join(k, &b[src.len() + 1..]));
                        }
                    }
                }
            }
        }
        for c in cand.iter() {
            if !c.is_empty() && live::stat(root, c).is_some_and(|o| o.kind == Kind::Dir) {
                live::walk(root, c, &mut extra);
            }
        }
        cand.extend(extra);

        let store_at_point =
            resolve(root, model.lookup(b".git/objects")).is_some_and(|w| w.kind == Kind::Dir);
        // What each path should be. (Not what it is: a descriptor per path would run out
        // on big restores; that is looked at again below.)
        let mut items: Vec<(Vec<u8>, Option<Want>)> = Vec::new();
        let look = |c: Vec<u8>, items: &mut Vec<_>| -> Result<(), RestoreError> {
            if c.is_empty() || !under_any(&c, only) || is_agx(&c) {
                return Ok(());
            }
            let failed = |e| RestoreError::Other(format!("{}: {e}", String::from_utf8_lossy(&c)));
            let want = state.want(root, &c).map_err(failed)?;
            let have = live::stat_checked(root, &c).map_err(failed)?;
            if is_git_objects(&c) && !git_objects_step(want.as_ref(), have.as_ref(), store_at_point)
            {
                return Ok(());
            }
            drop(have);
            items.push((c, want));
            Ok(())
        };
        for c in cand.iter().cloned() {
            look(c, &mut items)?;
        }
        // Names no event touched that were links of a file the plan handles: of a file a
        // recorded state showed with several links, or of a live file (moved since the
        // point) that has several now. Found by one walk of the tree, only when needed.
        let live_linked: std::collections::HashSet<InodeId> = items
            .iter()
            .filter_map(|(_, w)| {
                let w = w.as_ref()?;
                let Some(Content::Live(src)) = &w.content else {
                    return None;
                };
                let id = w.inode?;
                live::stat(root, src)
                    .filter(|o| o.stat.st_nlink > 1)
                    .map(|_| id)
            })
            .collect();
        if history.linked() || !live_linked.is_empty() {
            for c in links::other_names(root, model, history, &live_linked, &cand) {
                look(c, &mut items)?;
            }
        }

        let mut steps = Steps::new(root, max_size);
        // Files by their inode at the point. (Paths only: a descriptor per file would run
        // out on big restores.)
        let mut groups: BTreeMap<InodeId, Vec<(Vec<u8>, Want)>> = BTreeMap::new();
        for (c, want) in items {
            match want {
                Some(w) if w.inode.is_some() => {
                    let id = w.inode.expect("checked");
                    groups.entry(id).or_default().push((c, w));
                }
                w => {
                    let failed =
                        |e| RestoreError::Other(format!("{}: {e}", String::from_utf8_lossy(&c)));
                    let have = live::stat_checked(root, &c).map_err(failed)?;
                    steps.path(&c, w, have, false);
                }
            }
        }
        for (id, members) in groups {
            links::plan_group(&mut steps, root, id, members)?;
        }
        let (steps, skipped) = steps.finish();
        Ok(Plan {
            point,
            steps,
            skipped,
            conflicts: Vec::new(),
        })
    }

    /// The plan making each of `wants`' paths its state (None: absent), the rest of the
    /// tree as it is: what merge and switch carry out. Paths must come parents first.
    pub fn from_wants(
        root: &OwnedFd,
        point: Seq,
        wants: Vec<(Vec<u8>, Option<Want>)>,
        max_size: u64,
    ) -> Result<Plan, RestoreError> {
        let mut steps = Steps::new(root, max_size);
        for (c, want) in wants {
            let have = live::stat_checked(root, &c).map_err(|e| {
                RestoreError::Other(format!("{}: {e}", String::from_utf8_lossy(&c)))
            })?;
            steps.path(&c, want, have, false);
        }
        let (steps, skipped) = steps.finish();
        Ok(Plan {
            point,
            steps,
            skipped,
            conflicts: Vec::new(),
        })
    }

    /// A plan that changes nothing.
    pub fn empty(point: Seq) -> Plan {
        Plan {
            point,
            steps: Vec::new(),
            skipped: Vec::new(),
            conflicts: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}
