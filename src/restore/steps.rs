//! Turning the state a path should have and the state it has into plan steps, and putting
//! the steps in an order that works: removals deepest first, creations shallowest first,
//! then links (their first name exists by then), then metadata deepest first (so a
//! directory's times are set after its entries changed).

use std::os::fd::OwnedFd;

use super::plan::{Content, Skipped, Step, Want};
use crate::timeline::{Kind, Meta};
use crate::tree::{self as live, LiveObj};

/// What planning did with a path's live object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Left in place (its metadata may be set).
    Kept,
    /// Removed, or replaced by a new object.
    Replaced,
    /// Left alone: the path cannot be restored.
    Skipped,
}

pub struct Steps<'a> {
    root: &'a OwnedFd,
    max_size: u64,
    removes: Vec<Step>,
    creates: Vec<Step>,
    links: Vec<Step>,
    metas: Vec<Step>,
    skipped: Vec<Skipped>,
    /// Skipped paths whose live object stays: the directories above them cannot go.
    stays: Vec<Vec<u8>>,
}

fn depth(p: &[u8]) -> usize {
    p.iter().filter(|c| **c == b'/').count()
}

/// `a` is a directory above `b`.
fn above(a: &[u8], b: &[u8]) -> bool {
    a.is_empty() || (b.len() > a.len() && b.starts_with(a) && b[a.len()] == b'/')
}

/// Whether the flags or project id `want` names (when it names them) differ from `have`'s.
fn attrs_differ(want: &Meta, have: &LiveObj) -> bool {
    if want.flags.is_none() && want.projid.is_none() {
        return false;
    }
    let (flags, projid) = live::attrs(have);
    (want.flags.is_some() && want.flags != flags)
        || (want.projid.is_some() && want.projid != projid)
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

/// Why a file's state at the point cannot be written, if it cannot.
pub fn unrestorable(want: &Want) -> Option<&'static str> {
    if want.kind != Kind::File {
        return None;
    }
    match &want.content {
        None => Some("its content at that point was never recorded"),
        Some(Content::Hash(_)) if !want.captured => {
            Some("larger than the capture limit: only its hash was kept")
        }
        _ => None,
    }
}

const TOO_BIG: &str =
    "larger than the capture limit: its current content could not be kept, so it is left as it is";

impl<'a> Steps<'a> {
    pub fn new(root: &'a OwnedFd, max_size: u64) -> Steps<'a> {
        Steps {
            root,
            max_size,
            removes: Vec::new(),
            creates: Vec::new(),
            links: Vec::new(),
            metas: Vec::new(),
            skipped: Vec::new(),
            stays: Vec::new(),
        }
    }

    /// Leaves `path` alone, saying why.
    pub fn skip(&mut self, path: &[u8], have: Option<&LiveObj>, reason: &str) -> Outcome {
        self.skipped.push(Skipped {
            path: path.to_vec(),
            reason: reason.into(),
        });
        if have.is_some() {
            self.stays.push(path.to_vec());
        }
        Outcome::Skipped
    }

    /// Whether removing or replacing `have` would lose content: a restore records what it
    /// replaces (invariant 2), and a file over the size limit gets only its hash recorded.
    fn too_big(&self, have: &LiveObj) -> bool {
        have.kind == Kind::File && have.stat.st_size as u64 > self.max_size
    }

    /// Whether `path`'s live object may be removed or replaced; if not, it is skipped.
    fn may_replace(&mut self, path: &[u8], have: &LiveObj) -> bool {
        if self.too_big(have) {
            self.skip(path, Some(have), TOO_BIG);
            return false;
        }
        true
    }

    /// Another name for the file at `from`, replacing what `path` holds now.
    pub fn link(&mut self, path: &[u8], from: &[u8], have: Option<LiveObj>) -> Outcome {
        if let Some(h) = &have {
            if !self.may_replace(path, h) {
                return Outcome::Skipped;
            }
            if h.kind != Kind::File {
                self.removes.push(Step::Remove {
                    path: path.to_vec(),
                    dir: h.kind == Kind::Dir,
                });
            }
        }
        self.links.push(Step::Link {
            path: path.to_vec(),
            from: from.to_vec(),
            replace: have.is_some_and(|h| h.kind == Kind::File),
        });
        Outcome::Replaced
    }

    /// The steps that make `path` (`have` now) what `want` says; `force` rewrites a file
    /// even when its content is right (it must become a file of its own).
    pub fn path(
        &mut self,
        c: &[u8],
        want: Option<Want>,
        have: Option<LiveObj>,
        force: bool,
    ) -> Outcome {
        let path = c.to_vec();
        let Some(want) = want else {
            let Some(h) = have else {
                return Outcome::Kept;
            };
            if !self.may_replace(c, &h) {
                return Outcome::Skipped;
            }
            self.removes.push(Step::Remove {
                path,
                dir: h.kind == Kind::Dir,
            });
            return Outcome::Replaced;
        };
        if let Some(why) = unrestorable(&want) {
            return self.skip(c, have.as_ref(), why);
        }
        let same_kind = have.as_ref().is_some_and(|h| h.kind == want.kind);
        if let (Some(h), false) = (&have, same_kind) {
            if !self.may_replace(c, h) {
                return Outcome::Skipped;
            }
            self.removes.push(Step::Remove {
                path: path.clone(),
                dir: h.kind == Kind::Dir,
            });
        }
        let have = have.filter(|_| same_kind);
        let mut outcome = if same_kind {
            Outcome::Kept
        } else {
            Outcome::Replaced
        };
        match want.kind {
            Kind::Dir => match &have {
                None => {
                    self.creates.push(Step::Mkdir {
                        path: path.clone(),
                        meta: want.meta.clone(),
                    });
                    if let Some(m) = want.meta {
                        self.metas.push(Step::SetMeta { path, meta: m });
                    }
                }
                Some(h) => {
                    if let Some(m) = want.meta {
                        if meta_differs(Kind::Dir, &m, &h.meta()) || attrs_differ(&m, h) {
                            self.metas.push(Step::SetMeta { path, meta: m });
                        }
                    }
                }
            },
            Kind::File => {
                let content = want.content.clone().expect("unrestorable() checked it");
                let same_content = !force && self.same_content(c, &want, &content, &have);
                if !same_content {
                    if let Some(h) = &have {
                        if !self.may_replace(c, h) {
                            return Outcome::Skipped;
                        }
                    }
                    self.creates.push(Step::Write {
                        path,
                        content,
                        meta: want.meta,
                        replace: have.is_some(),
                    });
                    outcome = Outcome::Replaced;
                } else if let (Some(h), Some(m)) = (&have, want.meta) {
                    if meta_differs(Kind::File, &m, &h.meta()) || attrs_differ(&m, h) {
                        self.metas.push(Step::SetMeta { path, meta: m });
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
                        self.removes.push(Step::Remove {
                            path: path.clone(),
                            dir: false,
                        });
                    }
                    self.creates.push(Step::Symlink {
                        path,
                        target,
                        meta: want.meta,
                    });
                    outcome = Outcome::Replaced;
                }
            }
            Kind::Other => {
                if have.is_none() {
                    if let Some(m) = want.meta {
                        self.creates.push(Step::Mknod { path, meta: m });
                    }
                }
            }
            Kind::Absent => {}
        }
        outcome
    }

    fn same_content(
        &self,
        c: &[u8],
        want: &Want,
        content: &Content,
        have: &Option<LiveObj>,
    ) -> bool {
        match (have, content) {
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
                    || live::stat(self.root, src).and_then(|s| live::hash(&s)) == live::hash(h)
            }
        }
    }

    /// The steps in the order they run, and the skipped paths. A directory above a path
    /// that stays is not removed or replaced (it cannot be), and nothing is linked to a
    /// name that was skipped.
    pub fn finish(self) -> (Vec<Step>, Vec<Skipped>) {
        let Steps {
            mut removes,
            mut creates,
            mut links,
            mut metas,
            skipped,
            stays,
            ..
        } = self;
        removes.sort_by(|a, b| {
            depth(b.path())
                .cmp(&depth(a.path()))
                .then(b.path().cmp(a.path()))
        });
        creates.sort_by(|a, b| {
            depth(a.path())
                .cmp(&depth(b.path()))
                .then(a.path().cmp(b.path()))
        });
        links.sort_by(|a, b| a.path().cmp(b.path()));
        metas.sort_by(|a, b| {
            depth(b.path())
                .cmp(&depth(a.path()))
                .then(a.path().cmp(b.path()))
        });
        let mut steps = removes;
        steps.append(&mut creates);
        steps.append(&mut links);
        steps.append(&mut metas);
        if !stays.is_empty() {
            steps.retain(|s| {
                let blocked = match s {
                    Step::SetMeta { .. } | Step::Mkdir { .. } => false,
                    Step::Link { from, .. } if stays.iter().any(|k| k == from) => true,
                    _ => stays.iter().any(|k| above(s.path(), k)),
                };
                !blocked
            });
        }
        (steps, skipped)
    }
}
