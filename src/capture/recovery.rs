//! Recovery at start: finishes every event the journal shows as begun but not yet in the
//! timeline (a killed daemon), ingests leftover staged before-images, and empties the
//! journal. Runs before the mount exists, so reading the live tree by path is safe.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};

use super::journal::{self, Record};
use super::recorder::Shared;
use super::ticket::{After, Ticket};
use super::worker::{finish, ingest_staged, is_noop};
use super::CaptureError;
use crate::ids::{BranchId, Seq};
use crate::timeline::{Event, Kind, ObjState, Op, Timeline};
use crate::tree::state::{stamp_of, Stamp};

/// The parts of a state that tell whether an object was left as it was: kind, content,
/// mode, owner, size, modification time and symlink target.
fn same_state(a: &ObjState, b: &ObjState) -> bool {
    let m = |s: &ObjState| {
        s.meta.as_ref().map(|m| {
            (
                m.mode,
                m.uid,
                m.gid,
                m.size,
                m.mtime,
                m.mtime_nsec,
                m.target.clone(),
            )
        })
    };
    a.kind == b.kind && a.hash == b.hash && (a.kind == Kind::Absent || m(a) == m(b))
}

/// The object now at `path`, without its content.
fn live_state(shared: &Shared, branch: Option<BranchId>, path: &[u8]) -> ObjState {
    match open_path(shared, branch, path) {
        Some(fd) => match rustix::fs::fstat(&fd) {
            Ok(st) => ObjState {
                kind: crate::tree::state::kind_of(&st),
                hash: None,
                meta: Some(crate::tree::state::meta_of(&fd, &st)),
            },
            Err(_) => ObjState::absent(),
        },
        None => ObjState::absent(),
    }
}

/// Whether the object now at `path` looks like the one `s` describes: kind, mode, owner,
/// and for a file its size and modification time, for a symlink its target. (A
/// directory's own size and times change with its entries, so they do not count.)
fn still_there(shared: &Shared, e: &Event, s: &ObjState) -> bool {
    let live = live_state(shared, e.branch, &e.path);
    let key = |o: &ObjState| {
        o.meta.as_ref().map(|m| {
            let file = o.kind == Kind::File;
            (
                m.mode,
                m.uid,
                m.gid,
                file.then_some((m.size, m.mtime, m.mtime_nsec)),
                m.target.clone(),
            )
        })
    };
    live.kind == s.kind && s.kind != Kind::Absent && key(&live) == key(s)
}

/// Whether an event whose mutation may or may not have been applied (the daemon died
/// between journaling it and recording its end) changed anything. Keeping an event that
/// did not run is harmless for every kind but a move, whose undo would move back what
/// never moved: a rename ran unless its source is still in place.
fn ran(shared: &Shared, e: &Event) -> bool {
    match e.op {
        Op::Rename => {
            e.to_path
                .as_deref()
                .is_some_and(|to| to != e.path.as_slice())
                && !still_there(shared, e, &e.before)
        }
        Op::Exchange => {
            let target = e.target_before.clone().unwrap_or_else(ObjState::absent);
            let unhashed = |s: &ObjState| ObjState {
                hash: None,
                ..s.clone()
            };
            // Two alike objects: whether they swapped cannot be told; assume they did.
            same_state(&unhashed(&e.before), &unhashed(&target))
                || !still_there(shared, e, &e.before)
        }
        _ => !same_state(&e.before, &e.after),
    }
}

/// The object at `path` of the main tree or of a branch's tree.
fn open_path(shared: &Shared, branch: Option<BranchId>, path: &[u8]) -> Option<OwnedFd> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let branch_root;
    let root = match branch {
        None => &shared.root,
        Some(b) => {
            let tree = crate::sys::path::layer_tree(b.0);
            branch_root =
                rustix::fs::openat(&shared.agx, tree.as_str(), flags, Mode::empty()).ok()?;
            &branch_root
        }
    };
    if path.is_empty() {
        return rustix::io::dup(root).ok();
    }
    rustix::fs::openat(root, crate::sys::path::os(path), flags, Mode::empty()).ok()
}

/// The state after `e` read from the live tree, with the stamp of a file found there.
fn live_after(shared: &Shared, e: &Event) -> (After, Option<Stamp>) {
    let path = match e.op {
        Op::Rename => e.to_path.as_deref().unwrap_or(&e.path),
        _ => &e.path,
    };
    let Some(fd) = open_path(shared, e.branch, path) else {
        return (After::Absent, None);
    };
    match rustix::fs::fstat(&fd) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() => {
            (After::Content(fd), Some(stamp_of(&st)))
        }
        Ok(st) => (
            After::State(ObjState {
                kind: crate::tree::state::kind_of(&st),
                hash: None,
                meta: Some(crate::tree::state::meta_of(&fd, &st)),
            }),
            None,
        ),
        Err(_) => (After::Absent, None),
    }
}

/// Whether two events change a common path.
fn overlap(a: &Event, b: &Event) -> bool {
    let paths = |e: &Event| [Some(e.path.clone()), e.to_path.clone()];
    paths(a)
        .iter()
        .flatten()
        .any(|p| paths(b).iter().flatten().any(|q| p == q))
}

/// Returns the highest sequence number in use.
/// What recovery leaves for the worker: on a full disk, events the timeline could not take
/// yet (and whether the journal must be kept for the next start).
pub(super) struct Recovered {
    /// The highest sequence number the journal or the timeline knows.
    pub last: Seq,
    /// Events to insert once there is room (the worker keeps trying).
    pub unsaved: Vec<super::worker::Finished>,
    /// A before-image only the journal holds could not be stored: keep the journal.
    pub keep_journal: bool,
}

/// Whether a store error is a full disk: recovery then leaves the content where it is
/// (the journal record, staging) for the next start instead of failing the mount.
fn store_full(e: &crate::store::StoreError) -> bool {
    matches!(e, crate::store::StoreError::Io { source, .. } if super::reserve::is_full(source))
}

/// Stores a before-image held by a journal record; false when the disk is full (the
/// record must then be kept).
fn store_inline(shared: &Shared, bytes: &[u8]) -> Result<bool, CaptureError> {
    match shared.store.put(bytes, None) {
        Ok(_) => Ok(true),
        Err(e) if store_full(&e) => {
            log::error!("recovery: no room to store a before-image; the journal keeps it for the next start");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

pub(super) fn recover(
    shared: &Shared,
    agx: &OwnedFd,
    timeline: &mut Timeline,
) -> Result<Recovered, CaptureError> {
    let mut keep_journal = false;
    let records = journal::read_all(agx).map_err(CaptureError::io("reading the journal"))?;
    let mut max = timeline.max_seq()?.0;
    let mut begins = BTreeMap::new();
    let mut commits: HashMap<i64, (Option<ObjState>, Option<Stamp>)> = HashMap::new();
    let mut cancels = HashSet::new();
    for r in records {
        match r {
            Record::Begin {
                event,
                staged,
                target_staged,
                inline,
            } => {
                max = max.max(event.seq.0);
                begins.insert(event.seq.0, (*event, staged, target_staged, inline));
            }
            Record::Commit { seq, after, stamp } => {
                commits.insert(seq, (after, stamp));
            }
            Record::Cancel { seq } => {
                cancels.insert(seq);
            }
        }
    }
    let mut pending = Vec::new();
    // Every change the journal says began and was not cancelled, recorded or not, in
    // order: a later one that touched an event's path (already in the timeline, say a
    // rename of a file still open when the daemon died) means the live tree no longer
    // shows that event's result.
    let begun: Vec<(i64, Event)> = begins
        .iter()
        .filter(|(seq, _)| !cancels.contains(seq))
        .map(|(seq, (event, ..))| (*seq, event.clone()))
        .collect();
    for (seq, (event, staged, target_staged, inline)) in begins {
        if cancels.contains(&seq) {
            for s in [&staged, &target_staged].into_iter().flatten() {
                shared.drop_staged(s);
            }
            continue;
        }
        // An event already in the timeline is done; a staged file it left (the store was
        // full) is stored below with the other leftovers, and a before-image it held in
        // its record is stored now.
        if timeline.get(Seq(seq))?.is_some() {
            if let Some(bytes) = &inline {
                keep_journal |= !store_inline(shared, bytes)?;
            }
            continue;
        }
        pending.push((event, staged, target_staged, inline));
    }
    let mut recovered = Vec::new();
    let mut dropped = Vec::new();
    let mut referenced = HashSet::new();
    for (event, staged, target_staged, inline) in pending.iter() {
        let seq = event.seq.0;
        referenced.extend(staged.clone());
        referenced.extend(target_staged.clone());
        let committed = commits.get(&seq);
        // Whether the live tree can still show this event's after-state: not when a later
        // change of the same path began.
        let superseded = begun
            .iter()
            .any(|(s, later)| *s > seq && overlap(event, later));
        let (after, stamp) = match committed {
            Some((Some(s), _)) => (After::State(s.clone()), None),
            Some((None, stamp)) => (live_after(shared, event).0, *stamp),
            None => {
                let (after, stamp) = live_after(shared, event);
                (after, stamp.filter(|_| !superseded))
            }
        };
        let base = timeline.last_hash_of(&event.path)?;
        let done = finish(
            shared,
            Ticket::from_parts(
                event.clone(),
                staged.clone(),
                target_staged.clone(),
                inline.clone(),
                stamp,
            ),
            after,
            base,
        );
        // A before-image held only by the journal record must be in the store before the
        // journal is emptied below.
        if done.unsettled {
            if let Some(bytes) = inline {
                keep_journal |= !store_inline(shared, bytes)?;
            }
        }
        // A committed event ran (drop it only when it provably changed nothing); one
        // without an end record may not have.
        let keep = match committed {
            Some(_) => !is_noop(&done.event),
            None => superseded || ran(shared, &done.event),
        };
        if keep {
            recovered.push(done);
        } else {
            dropped.push(done);
        }
    }
    let mut unsaved = Vec::new();
    if !recovered.is_empty() {
        log::warn!(
            "recovered {} event(s) an interrupted run had not recorded",
            recovered.len()
        );
        match super::worker::insert_with_room(shared, timeline, &recovered) {
            Ok(()) => {}
            // A full disk: the worker keeps them (and the journal) and tries again, as it
            // does for its own batches; the mount goes on.
            Err(e) if super::worker::timeline_full(&e) => {
                log::error!(
                    "timeline: no room for {} recovered event(s) now; they wait in the journal and are tried again",
                    recovered.len()
                );
                unsaved = std::mem::take(&mut recovered);
                keep_journal = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Their before-images are stored and the events recorded: the staged copies can go.
    for f in recovered.iter().chain(&dropped) {
        f.clean(shared);
    }
    // Staged before-images nothing refers to any more are still content someone had:
    // keep them in the store.
    for name in shared.staging.list().unwrap_or_default() {
        if referenced.contains(&name) {
            continue;
        }
        match ingest_staged(shared, &name, None) {
            Ok(_) => shared.drop_staged(&name),
            Err(e) => log::error!("staging: cannot store leftover {name}: {e}"),
        }
    }
    if !keep_journal {
        shared
            .journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .truncate()
            .map_err(CaptureError::io("truncating the journal"))?;
    }
    Ok(Recovered {
        last: Seq(max),
        unsaved,
        keep_journal,
    })
}
