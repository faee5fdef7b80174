//! Restore plans: what to change in the live tree so that it (or some paths of it) equals
//! the tree at a point. Only paths some event after the point touched are examined, with
//! the live subtrees below them.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;

use serde::Serialize;

use super::live::{self, LiveObj};
use super::model::{Entry, Model};
use super::RestoreError;
use crate::ids::{ContentHash, Seq};
use crate::timeline::{Event, Kind, Meta, Timeline};

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
    /// Paths the plan cannot bring back (content never kept, protected areas).
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
}

fn depth(p: &[u8]) -> usize {
    p.iter().filter(|c| **c == b'/').count()
}

/// Paths restore never touches: agx's state and git's object store.
pub fn protected(p: &[u8]) -> bool {
    p == crate::fs::AGX_DIR_NAME.as_bytes()
        || p.starts_with(b".agx/")
        || p == b".git/objects"
        || p.starts_with(b".git/objects/")
}

fn under_any(p: &[u8], only: &[Vec<u8>]) -> bool {
    only.is_empty()
        || only.iter().any(|o| {
            p == o.as_slice() || (p.starts_with(o) && p.get(o.len()) == Some(&b'/')) || o.is_empty()
        })
}

/// The concrete state behind a model entry (reading the live tree where it mirrors it).
pub fn resolve(root: &OwnedFd, e: Entry) -> Option<Want> {
    let n = match e {
        Entry::Absent => return None,
        Entry::Node(n) => n,
    };
    match &n.src {
        Some(src) => {
            let lx = live::stat(root, src)?;
            let kind = n.kind.unwrap_or(lx.kind);
            let lmeta = lx.meta();
            let content = (kind == Kind::File).then(|| match n.hash {
                Some(h) => Content::Hash(h),
                None => Content::Live(src.clone()),
            });
            let target = if kind == Kind::Symlink {
                n.meta
                    .as_ref()
                    .and_then(|m| m.target.clone())
                    .or(lmeta.target.clone())
            } else {
                None
            };
            Some(Want {
                kind,
                content,
                target,
                meta: Some(n.meta.unwrap_or(lmeta)),
                captured: n.captured,
            })
        }
        None => {
            let kind = n.kind?;
            Some(Want {
                kind,
                content: n.hash.map(Content::Hash),
                target: n.meta.as_ref().and_then(|m| m.target.clone()),
                meta: n.meta,
                captured: n.captured,
            })
        }
    }
}

fn meta_differs(kind: Kind, want: &Meta, have: &Meta) -> bool {
    let perm = |m: &Meta| m.mode & 0o7777;
    let mut xa = want.xattrs.clone();
    let mut xb = have.xattrs.clone();
    xa.sort();
    xb.sort();
    if kind == Kind::Symlink {
        return want.uid != have.uid || want.gid != have.gid;
    }
    perm(want) != perm(have)
        || want.uid != have.uid
        || want.gid != have.gid
        || (want.mtime, want.mtime_nsec) != (have.mtime, have.mtime_nsec)
        || xa != xb
}

impl Plan {
    /// The plan bringing the live tree under `root` (limited to `only`, if given) back to
    /// `point`.
    pub fn compute(
        root: &OwnedFd,
        timeline: &Timeline,
        point: Seq,
        only: &[Vec<u8>],
    ) -> Result<Plan, RestoreError> {
        let events = timeline.events_after(point)?;
        Self::from_events(root, &events, point, only)
    }

    pub fn from_events(
        root: &OwnedFd,
        events: &[Event],
        point: Seq,
        only: &[Vec<u8>],
    ) -> Result<Plan, RestoreError> {
        let mut model = Model::new();
        model.undo_all(events.iter());

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
                            extra.push(super::model_join(k, &b[src.len() + 1..]));
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

        let mut removes = Vec::new();
        let mut creates = Vec::new();
        let mut metas = Vec::new();
        let mut skipped = Vec::new();
        for c in cand {
            if c.is_empty() || !under_any(&c, only) {
                continue;
            }
            if protected(&c) {
                continue;
            }
            let want = resolve(root, model.lookup(&c));
            let have = live::stat(root, &c);
            plan_path(
                &c,
                want,
                have,
                &mut removes,
                &mut creates,
                &mut metas,
                &mut skipped,
                root,
            );
        }
        removes.sort_by(|a: &Step, b: &Step| {
            depth(b.path())
                .cmp(&depth(a.path()))
                .then(b.path().cmp(a.path()))
        });
        creates.sort_by(|a: &Step, b: &Step| {
            depth(a.path())
                .cmp(&depth(b.path()))
                .then(a.path().cmp(b.path()))
        });
        metas.sort_by(|a: &Step, b: &Step| {
            depth(b.path())
                .cmp(&depth(a.path()))
                .then(a.path().cmp(b.path()))
        });
        let mut steps = removes;
        steps.extend(creates);
        steps.extend(metas);
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

#[allow(clippy::too_many_arguments)]
fn plan_path(
    c: &[u8],
    want: Option<Want>,
    have: Option<LiveObj>,
    removes: &mut Vec<Step>,
    creates: &mut Vec<Step>,
    metas: &mut Vec<Step>,
    skipped: &mut Vec<Skipped>,
    root: &OwnedFd,
) {
    let path = c.to_vec();
    let Some(want) = want else {
        if let Some(h) = have {
            removes.push(Step::Remove {
                path,
                dir: h.kind == Kind::Dir,
            });
        }
        return;
    };
    if want.kind == Kind::File && want.content.is_none() {
        skipped.push(Skipped {
            path,
            reason: "its content at that point was never recorded".into(),
        });
        return;
    }
    if want.kind == Kind::File && !want.captured {
        if let Some(Content::Hash(_)) = want.content {
            skipped.push(Skipped {
                path,
                reason: "larger than the capture limit: only its hash was kept".into(),
            });
            return;
        }
    }
    let same_kind = have.as_ref().is_some_and(|h| h.kind == want.kind);
    if let (Some(h), false) = (&have, same_kind) {
        removes.push(Step::Remove {
            path: path.clone(),
            dir: h.kind == Kind::Dir,
        });
    }
    let have = have.filter(|_| same_kind);
    match want.kind {
        Kind::Dir => match &have {
            None => {
                creates.push(Step::Mkdir {
                    path: path.clone(),
                    meta: want.meta.clone(),
                });
                if let Some(m) = want.meta {
                    metas.push(Step::SetMeta { path, meta: m });
                }
            }
            Some(h) => {
                if let Some(m) = want.meta {
                    if meta_differs(Kind::Dir, &m, &h.meta()) {
                        metas.push(Step::SetMeta { path, meta: m });
                    }
                }
            }
        },
        Kind::File => {
            let content = want.content.clone().expect("checked above");
            let same_content = match (&have, &content) {
                (None, _) => false,
                (Some(h), Content::Hash(x)) => {
                    h.stat.st_size as u64
                        == want
                            .meta
                            .as_ref()
                            .map(|m| m.size)
                            .unwrap_or(h.stat.st_size as u64)
                        && live::hash(h) == Some(*x)
                }
                (Some(h), Content::Live(src)) => {
                    src.as_slice() == c
                        || live::stat(root, src).and_then(|s| live::hash(&s)) == live::hash(h)
                }
            };
            if !same_content {
                creates.push(Step::Write {
                    path,
                    content,
                    meta: want.meta,
                    replace: have.is_some(),
                });
            } else if let (Some(h), Some(m)) = (&have, want.meta) {
                if meta_differs(Kind::File, &m, &h.meta()) {
                    metas.push(Step::SetMeta { path, meta: m });
                }
            }
        }
        Kind::Symlink => {
            let target = want.target.clone().unwrap_or_default();
            let same = have
                .as_ref()
                .is_some_and(|h| h.meta().target.as_deref() == Some(target.as_slice()));
            if !same {
                if have.is_some() {
                    removes.push(Step::Remove {
                        path: path.clone(),
                        dir: false,
                    });
                }
                creates.push(Step::Symlink {
                    path,
                    target,
                    meta: want.meta,
                });
            }
        }
        Kind::Other => {
            if have.is_none() {
                if let Some(m) = want.meta {
                    creates.push(Step::Mknod { path, meta: m });
                }
            }
        }
        Kind::Absent => {}
    }
}
