//! Hard links at a point.
//!
//! The model (`model.rs`) knows what each name held, not which names were one file. Every
//! recorded state carries the inode it was read from (`Meta::dev`, `Meta::ino`), and a
//! name refers to the same object from the point until the first event on it (changing
//! what a name refers to is always an event on that name). Hence:
//! - a name no event touched since the point had its live inode at the point; a name whose
//!   earliest event recorded inode I had inode I at the point;
//! - names with the same inode at the point were links of one file (each referred to an
//!   object alive at the point, and two live objects never share an inode number);
//! - that file's content and metadata at the point are the ones recorded by the earliest
//!   event, through any name, that recorded its inode while it is known to be the same
//!   object: for a live name until now, for a recorded one until the event recording it
//!   (a write through one name changes what every name shows).
//!
//! A restore writes the content to one of the names and links the others to it. Names no
//! event touched are found by one walk of the live tree, done only when some recorded
//! file had more than one link. Events older than the inode fields carry none: their
//! paths are restored one by one, as before.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::OwnedFd;

use rustix::fs::{FileType, OFlags};

use super::model::{Entry, Model, Node};
use super::plan::{Content, Want};
use super::steps::{unrestorable, Outcome, Steps};
use super::RestoreError;
use crate::ids::{ContentHash, Seq};
use crate::timeline::{Event, Kind, Meta};
use crate::tree::{self as live, LiveObj};

pub use crate::timeline::ObjId as InodeId;

/// One recorded state of an inode.
struct Seen {
    seq: Seq,
    hash: Option<ContentHash>,
    captured: bool,
    meta: Meta,
}

/// The states the events after a point recorded of each file inode, oldest first.
#[derive(Default)]
pub struct History {
    by_inode: HashMap<InodeId, Vec<Seen>>,
    /// Some recorded file had more than one link.
    linked: bool,
}

impl History {
    pub fn from_events(events: &[Event]) -> History {
        let mut h = History::default();
        for e in events {
            let target = e.target_before.iter().map(|t| (t, true));
            for (s, captured) in std::iter::once((&e.before, e.captured)).chain(target) {
                let Some(m) = s.meta.as_ref().filter(|_| s.kind == Kind::File) else {
                    continue;
                };
                let Some(id) = m.id() else {
                    continue;
                };
                h.linked |= m.nlink > 1;
                h.by_inode.entry(id).or_default().push(Seen {
                    seq: e.seq,
                    hash: s.hash,
                    captured,
                    meta: m.clone(),
                });
            }
        }
        for v in h.by_inode.values_mut() {
            v.sort_by_key(|s| s.seq);
        }
        h
    }

    pub fn linked(&self) -> bool {
        self.linked
    }

    /// Gives a file the content and metadata its inode had at the point, as recorded
    /// through any of its names (see the module comment).
    pub fn correct(&self, want: &mut Want) {
        let Some(list) = want.inode.and_then(|id| self.by_inode.get(&id)) else {
            return;
        };
        let until = want.seen;
        let mut within = list
            .iter()
            .filter(|s| until.is_none_or(|u| s.seq <= u))
            .peekable();
        let Some(first) = within.peek() else {
            return;
        };
        want.meta = Some(first.meta.clone());
        if let Some((h, captured)) = within.find_map(|s| s.hash.map(|h| (h, s.captured))) {
            want.content = Some(Content::Hash(h));
            want.captured = captured;
        }
    }
}

/// Live names, not among `cand`, of the files the events recorded (or of the live files
/// `also` names) that no event touched since the point: they were names of those files at
/// the point too. `.agx` and git's
/// object store are not searched.
pub fn other_names(
    root: &OwnedFd,
    model: &Model,
    history: &History,
    also: &std::collections::HashSet<InodeId>,
    cand: &BTreeSet<Vec<u8>>,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut found = |path: &[u8], id: InodeId| {
        if (history.by_inode.contains_key(&id) || also.contains(&id))
            && !cand.contains(path)
            && model.lookup(path) == Entry::Node(Node::live(path))
        {
            out.push(path.to_vec());
        }
    };
    walk(root, Vec::new(), &mut found);
    out
}

/// Calls `found` with every regular file below `rel` and its identity. (Every file is
/// stat'ed: readdir's inode numbers are not st_ino on every filesystem, and the birth
/// time tells a file that reused a recorded file's inode number from that file.) One
/// descriptor per level.
fn walk(root: &OwnedFd, rel: Vec<u8>, found: &mut dyn FnMut(&[u8], InodeId)) {
    let Ok(fd) = live::open_beneath(root, &rel, OFlags::RDONLY | OFlags::DIRECTORY) else {
        return;
    };
    let Ok(dir) = rustix::fs::Dir::read_from(&fd) else {
        return;
    };
    let mut subdirs = Vec::new();
    for entry in dir.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let path = crate::sys::path::join(&rel, name);
        if path == crate::sys::path::AGX_DIR_NAME.as_bytes() || path == b".git/objects" {
            continue;
        }
        let ft = match entry.file_type() {
            FileType::Unknown | FileType::RegularFile => match live::id_at(&fd, live::os(name)) {
                Some((FileType::RegularFile, id)) => {
                    found(&path, id);
                    continue;
                }
                Some((t, _)) => t,
                None => continue,
            },
            t => t,
        };
        if ft == FileType::Directory {
            subdirs.push(path);
        }
    }
    drop(fd);
    for d in subdirs {
        walk(root, d, found);
    }
}

fn live_file(h: &Option<LiveObj>) -> Option<InodeId> {
    h.as_ref().filter(|h| h.kind == Kind::File).map(|h| h.id())
}

/// Plans the names (sorted) that were one file, inode `id`, at the point: the first name
/// gets the content (kept where it is right), the others become links to it.
pub fn plan_group(
    steps: &mut Steps,
    root: &OwnedFd,
    id: InodeId,
    names: Vec<(Vec<u8>, Want)>,
) -> Result<(), RestoreError> {
    let mut names = names
        .into_iter()
        .map(|(p, w)| match live::stat_checked(root, &p) {
            Ok(h) => Ok((p, w, h)),
            Err(e) => Err(RestoreError::Other(format!(
                "{}: {e}",
                String::from_utf8_lossy(&p)
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The first name: one still holding the point's inode, else any file, else the first.
    let first = names
        .iter()
        .position(|n| live_file(&n.2) == Some(id))
        .or_else(|| names.iter().position(|n| live_file(&n.2).is_some()))
        .unwrap_or(0);
    let (p, want, have) = names.remove(first);
    if let Some(why) = unrestorable(&want) {
        steps.skip(&p, have.as_ref(), why);
        for (q, _, h) in names {
            steps.skip(&q, h.as_ref(), why);
        }
        return Ok(());
    }
    let p_live = live_file(&have);
    // A live file that is not the point's one and has links outside this group must not
    // be kept: the point's file had no such links.
    let inside = 1 + names.iter().filter(|n| live_file(&n.2) == p_live).count() as u64;
    let force =
        p_live.is_some_and(|l| l != id) && have.as_ref().is_some_and(|h| h.stat.st_nlink > inside);
    let kept = steps.path(&p, Some(want), have, force);
    if kept == Outcome::Skipped {
        for (q, _, h) in names {
            steps.skip(
                &q,
                h.as_ref(),
                "it is a link of a file that cannot be restored",
            );
        }
        return Ok(());
    }
    for (q, _, h) in names {
        if kept == Outcome::Kept && p_live.is_some() && live_file(&h) == p_live {
            continue; // already a link of that file
        }
        steps.link(&q, &p, h);
    }
    Ok(())
}
