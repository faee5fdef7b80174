//! Recovery at start: finishes every event the journal shows as begun but not yet in the
//! timeline (a killed daemon), ingests leftover staged before-images, and empties the
//! journal. Runs before the mount exists, so reading the live tree by path is safe.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};

use super::journal::{self, Record};
use super::recorder::{finish, ingest_staged, After, Shared, Ticket};
use super::CaptureError;
use crate::ids::Seq;
use crate::timeline::{Event, Kind, ObjState, Op, Timeline};

/// Whether recovery may drop an event: it left everything as it was (its mutation never
/// ran, or changed nothing).
fn unchanged(e: &Event) -> bool {
    let m = |s: &ObjState| {
        s.meta
            .as_ref()
            .map(|m| (m.mode, m.uid, m.gid, m.size, m.target.clone()))
    };
    e.op != Op::Rename
        && e.op != Op::Exchange
        && e.before.kind == e.after.kind
        && e.before.hash == e.after.hash
        && (e.before.kind == Kind::Absent || m(&e.before) == m(&e.after))
}

fn live_after(shared: &Shared, e: &Event) -> After {
    let path = match e.op {
        Op::Rename => e.to_path.as_deref().unwrap_or(&e.path),
        _ => &e.path,
    };
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::OsStr::from_bytes(path);
    match rustix::fs::openat(
        &shared.root,
        p,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => {
            let fd: OwnedFd = fd;
            match rustix::fs::fstat(&fd) {
                Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() => {
                    After::Content(fd)
                }
                Ok(st) => After::State(ObjState {
                    kind: super::state::kind_of(&st),
                    hash: None,
                    meta: Some(super::state::meta_of(&fd, &st)),
                }),
                Err(_) => After::Absent,
            }
        }
        Err(_) => After::Absent,
    }
}

/// Returns the highest sequence number in use.
pub(super) fn recover(
    shared: &Shared,
    agx: &OwnedFd,
    timeline: &mut Timeline,
) -> Result<Seq, CaptureError> {
    let records = journal::read_all(agx).map_err(CaptureError::io("reading the journal"))?;
    let mut max = timeline.max_seq()?.0;
    let mut begins = BTreeMap::new();
    let mut commits: HashMap<i64, Option<ObjState>> = HashMap::new();
    let mut cancels = HashSet::new();
    for r in records {
        match r {
            Record::Begin {
                event,
                staged,
                target_staged,
            } => {
                max = max.max(event.seq.0);
                begins.insert(event.seq.0, (*event, staged, target_staged));
            }
            Record::Commit { seq, after } => {
                commits.insert(seq, after);
            }
            Record::Cancel { seq } => {
                cancels.insert(seq);
            }
        }
    }
    let mut recovered = Vec::new();
    let mut referenced = HashSet::new();
    for (seq, (event, staged, target_staged)) in begins {
        let drop_staged = |s: &Option<String>| {
            if let Some(s) = s {
                shared.staging.remove(s);
            }
        };
        if cancels.contains(&seq) || timeline.get(Seq(seq))?.is_some() {
            drop_staged(&staged);
            drop_staged(&target_staged);
            continue;
        }
        referenced.extend(staged.clone());
        referenced.extend(target_staged.clone());
        let after = match commits.get(&seq) {
            Some(Some(s)) if s.kind != Kind::File || s.hash.is_some() => After::State(s.clone()),
            _ => live_after(shared, &event),
        };
        let base = timeline.last_hash_of(&event.path)?;
        let e = finish(
            shared,
            Ticket::from_parts(event, staged, target_staged),
            after,
            base,
        );
        if !unchanged(&e) {
            recovered.push(e);
        }
    }
    if !recovered.is_empty() {
        log::warn!(
            "recovered {} event(s) an interrupted run had not recorded",
            recovered.len()
        );
        timeline.insert(&recovered)?;
    }
    // Staged before-images nothing refers to any more are still content someone had:
    // keep them in the store.
    for name in shared.staging.list().unwrap_or_default() {
        if referenced.contains(&name) {
            continue;
        }
        match ingest_staged(shared, &name, None) {
            Ok(_) => shared.staging.remove(&name),
            Err(e) => log::error!("staging: cannot store leftover {name}: {e}"),
        }
    }
    shared
        .journal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .truncate()
        .map_err(CaptureError::io("truncating the journal"))?;
    Ok(Seq(max))
}
