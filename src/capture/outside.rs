//! Changes made outside agx: while nothing was mounted (an editor, `sed -i`, `git
//! checkout`, a `cp -a` of the project), by a process that bypassed the mount, or under
//! an ignore rule since lifted.
//!
//! The timeline leaves every path it knows in a state: the after-state of the newest event
//! that names it (following directory moves back). A path whose live object differs from
//! that state was changed without agx recording it. Taking the live object for the
//! recorded after-image would be wrong (a restore would say "nothing to do" and `show`
//! would print today's content for yesterday), so the change itself becomes history: an
//! event by "(outside agx)" whose before-state is the last recorded one, made as soon as
//! agx notices (the first lookup of the path through the mount, or a command that needs
//! it). A restore can then undo it too. Nothing is scanned at mount: each path is checked
//! when it is first needed.
//!
//! Compared: existence, kind, and for files size, modification time and identity (a
//! copy with the same size and time is hashed), for symlinks the target, and mode and
//! owner. Not compared: times of directories (their entries move them), access and change
//! times, link counts. A file with several names is compared with its object's newest
//! recorded state, through whichever name that was recorded (a change through one name is
//! recorded under that name, so the others' last events do not show it); it is looked at
//! only while no change is on its way to the database, since that change may be through
//! another name.

use std::os::fd::AsFd;

use super::recorder::Recorder;
use super::ticket::{After, Before};
use super::CaptureError;
use crate::ids::Seq;
use crate::timeline::{Actor, Event, Kind, ObjState, Op};
use crate::tree as live;

/// The process name of events agx records for changes made outside it.
pub const OUTSIDE: &str = "(outside agx)";

const NOTE: &str = "changed while agx did not record it (unmounted, bypassing the mount, or ignored then); noticed now";

/// What the timeline says a path holds now.
enum Expected {
    /// The timeline does not know the path (or cannot tell).
    Unknown,
    /// A change of the path, or of which object a directory above it names, is not in
    /// the database yet (the worker writes in batches): look again later.
    Pending,
    Absent,
    State(ObjState),
}

fn ancestors(p: &[u8]) -> Vec<Vec<u8>> {
    p.iter()
        .enumerate()
        .filter(|(_, c)| **c == b'/')
        .map(|(i, _)| p[..i].to_vec())
        .collect()
}

fn state(s: &ObjState) -> Expected {
    match (s.kind, &s.meta) {
        (Kind::Absent, _) => Expected::Absent,
        (_, Some(_)) => Expected::State(s.clone()),
        (_, None) => Expected::Unknown,
    }
}

/// The state `e` left `p` in, when `e` names `p` itself.
fn left_at(e: &Event, p: &[u8]) -> Expected {
    let to = e.to_path.as_deref();
    match e.op {
        Op::Rename if e.path == p && to != Some(p) => Expected::Absent,
        Op::Exchange if e.path == p => e.target_before.as_ref().map_or(Expected::Unknown, state),
        _ => state(&e.after),
    }
}

/// The ancestor of `p` that `e` names (as its path or destination), and the rest of `p`
/// below it.
fn named_ancestor<'a>(e: &Event, p: &'a [u8]) -> Option<(Vec<u8>, &'a [u8])> {
    ancestors(p)
        .into_iter()
        .rev()
        .find(|a| e.path == *a || e.to_path.as_deref() == Some(a.as_slice()))
        .map(|a| {
            let rest = &p[a.len() + 1..];
            (a, rest)
        })
}

/// Whether two recorded states are of the same object with the same size and modification
/// time (so the same content, as far as agx can tell without reading it).
fn same_stamp(a: &ObjState, b: &ObjState) -> bool {
    let stamp = |m: &crate::timeline::Meta| (m.id(), m.size, m.mtime, m.mtime_nsec);
    a.meta.as_ref().map(stamp).is_some() && a.meta.as_ref().map(stamp) == b.meta.as_ref().map(stamp)
}

/// The parts of a state compared (see the module comment).
fn same(exp: &ObjState, live: &live::LiveObj) -> Option<bool> {
    let e = exp.meta.as_ref()?;
    if exp.kind != live.kind {
        return Some(false);
    }
    let l = live.meta();
    let owner = (e.mode & 0o7777, e.uid, e.gid) == (l.mode & 0o7777, l.uid, l.gid);
    Some(match exp.kind {
        Kind::File => {
            let stamp = (e.size, e.mtime, e.mtime_nsec) == (l.size, l.mtime, l.mtime_nsec);
            let id = e.id().is_none_or(|i| i == live.id());
            let content = stamp && (id || exp.hash.is_none() || live::hash(live) == exp.hash);
            content && owner
        }
        Kind::Dir => owner,
        Kind::Symlink => e.target == l.target && (e.uid, e.gid) == (l.uid, l.gid),
        Kind::Other => owner && e.rdev == l.rdev,
        Kind::Absent => true,
    })
}

impl Recorder {
    /// What the timeline says `path` holds now.
    fn expected(&self, path: &[u8]) -> Result<Expected, CaptureError> {
        let tl = self.query.lock().unwrap_or_else(|e| e.into_inner());
        let mut p = path.to_vec();
        let mut upto: Option<Seq> = None;
        // Each step follows one directory move back; a chain longer than this is not
        // followed (the path is then not checked).
        for _ in 0..32 {
            let mut anc = ancestors(&p);
            anc.retain(|a| !a.is_empty());
            // The database lags the changes begun (by hundreds of events under load):
            // an answer from it about a path with a change on its way would be stale.
            let recent = &self.shared.recent;
            if recent.contains(&p) || anc.iter().any(|a| recent.contains(a)) {
                return Ok(Expected::Pending);
            }
            let Some(e) = tl.last_touching(&p, &anc, upto)? else {
                return Ok(Expected::Unknown);
            };
            log::debug!(
                "outside check of {}: event {} {:?} {} -> {:?}",
                String::from_utf8_lossy(&p),
                e.seq,
                e.op,
                e.path_str(),
                e.to_path_str()
            );
            if e.path == p || e.to_path.as_deref() == Some(p.as_slice()) {
                let mut left = left_at(&e, &p);
                // A change of metadata read before the content it kept was hashed knows
                // no hash: an earlier event that left the same content (same object, size
                // and modification time) does.
                if let Expected::State(s) = &mut left {
                    // A file with several names: its object's newest state, whatever name
                    // it was recorded under.
                    if let Some(id) = s.meta.as_ref().and_then(|m| m.id()) {
                        if s.kind == Kind::File {
                            if let Some(n) = tl.last_of_linked(id, e.seq)? {
                                let mut newer = n.after;
                                // A link or a change of metadata knows no hash: the one
                                // this name recorded does, for the same content.
                                if newer.hash.is_none() && same_stamp(&newer, s) {
                                    newer.hash = s.hash;
                                }
                                *s = newer;
                            }
                        }
                    }
                    if s.kind == Kind::File && s.hash.is_none() {
                        if let Some(k) = tl.last_known_content(&p, e.seq)? {
                            let stamp =
                                |m: &crate::timeline::Meta| (m.id(), m.size, m.mtime, m.mtime_nsec);
                            if k.after.meta.as_ref().map(stamp) == s.meta.as_ref().map(stamp) {
                                s.hash = k.after.hash;
                            }
                        }
                    }
                }
                return Ok(left);
            }
            let Some((a, rest)) = named_ancestor(&e, &p) else {
                return Ok(Expected::Unknown);
            };
            let from = match e.op {
                Op::Rename | Op::Exchange if e.to_path.as_deref() == Some(a.as_slice()) => {
                    e.path.clone()
                }
                Op::Exchange => e.to_path.clone().unwrap_or_default(),
                // Moved away, removed, or made anew (empty) since.
                _ => return Ok(Expected::Absent),
            };
            p = crate::sys::path::join(&from, rest);
            upto = Some(e.seq);
        }
        Ok(Expected::Unknown)
    }

    /// Checks whether `path` was changed without agx recording it since the timeline's
    /// last word on it, and if so records that change (see the module comment). Returns
    /// whether it recorded something. Errors are logged: a check that cannot be made
    /// changes nothing.
    pub fn notice(&self, path: &[u8]) -> bool {
        if path.is_empty() || crate::sys::path::protected(path) {
            return false;
        }
        if self.checked(path) {
            return false;
        }
        // A change recorded meanwhile makes one look inconclusive: look again.
        for _ in 0..5 {
            match self.try_notice(path) {
                Ok(Some(recorded)) => {
                    self.mark_checked(path);
                    return recorded;
                }
                Ok(None) => continue,
                Err(e) => {
                    log::warn!(
                        "checking {} for changes made outside agx: {e}",
                        String::from_utf8_lossy(path)
                    );
                    return false;
                }
            }
        }
        false
    }

    /// Checks every path with history, once per recorder (per mount in the daemon): what
    /// a point of the past is built from (a view, `show`, a restore, a branch's base)
    /// mirrors live paths other than the one asked for (a file renamed since is read where
    /// it went), and a point named now (a checkpoint) must come after what the tree
    /// already shows. Concurrent callers wait for the one sweeping. Costs one query and
    /// one `stat` per path with history; the daemon runs it in the background at mount.
    pub fn sweep(&self) {
        let mut done = self.swept.lock().unwrap_or_else(|e| e.into_inner());
        if *done {
            return;
        }
        let paths = {
            let tl = self.query.lock().unwrap_or_else(|e| e.into_inner());
            tl.history_paths(None)
        };
        match paths {
            Ok(paths) => {
                let n = self.notice_all(paths.iter());
                if n > 0 {
                    log::info!("{n} path(s) changed while agx did not record them; recorded");
                }
                *done = true;
            }
            Err(e) => log::warn!("listing the paths with history: {e}"),
        }
    }

    /// [`Recorder::notice`] for the entries of directory `dir` that have history.
    pub fn notice_below(&self, dir: &[u8]) {
        let paths = {
            let tl = self.query.lock().unwrap_or_else(|e| e.into_inner());
            let under = (!dir.is_empty()).then_some(dir);
            tl.history_paths(under).unwrap_or_default()
        };
        let depth = |p: &[u8]| p.iter().filter(|c| **c == b'/').count();
        let want = if dir.is_empty() { 0 } else { depth(dir) + 1 };
        for p in paths
            .iter()
            .filter(|p| depth(p) == want && p.as_slice() != dir)
        {
            self.notice(p);
        }
    }

    /// [`Recorder::notice`] for every path of `paths`; returns how many were changed.
    pub fn notice_all<'a>(&self, paths: impl IntoIterator<Item = &'a Vec<u8>>) -> usize {
        paths.into_iter().filter(|p| self.notice(p)).count()
    }

    /// One look; None: inconclusive (an event on the path began or reached the database
    /// meanwhile).
    fn try_notice(&self, path: &[u8]) -> Result<Option<bool>, CaptureError> {
        let recent = &self.shared.recent;
        let left = recent.left();
        if recent.contains(path) {
            return Ok(Some(false));
        }
        let expected = self.expected(path)?;
        match expected {
            Expected::Unknown => return Ok(Some(false)),
            Expected::Pending => return Ok(None),
            _ => {}
        }
        let live = live::stat_checked(&self.shared.root, path)
            .map_err(|e| CaptureError::io("looking at the tree")(e.into()))?;
        if recent.contains(path) || recent.left() != left {
            return Ok(None);
        }
        // A file with several names may be changing through another one right now.
        let linked = |s: &ObjState| s.meta.as_ref().is_some_and(|m| m.nlink > 1);
        let shared_now = live
            .as_ref()
            .is_some_and(|l| l.kind == Kind::File && l.stat.st_nlink > 1);
        if (shared_now || matches!(&expected, Expected::State(s) if linked(s)))
            && recent.any_below(b"")
        {
            return Ok(None);
        }
        let (before, removed, made) = match (&expected, &live) {
            (Expected::Absent, None) | (Expected::Unknown | Expected::Pending, _) => {
                return Ok(Some(false))
            }
            (Expected::Absent, Some(_)) => (None, false, true),
            (Expected::State(s), None) => (Some(s.clone()), true, false),
            (Expected::State(s), Some(l)) => match same(s, l) {
                Some(true) | None => return Ok(Some(false)),
                // Another kind, or a symlink's or device's identity: removed and made.
                Some(false) if s.kind != l.kind || matches!(l.kind, Kind::Symlink) => {
                    (Some(s.clone()), true, true)
                }
                Some(false)
                    if l.kind == Kind::Other
                        && s.meta.as_ref().is_some_and(|m| m.rdev != l.stat.st_rdev) =>
                {
                    (Some(s.clone()), true, true)
                }
                Some(false) => (Some(s.clone()), false, false),
            },
        };
        let is_dir = live
            .as_ref()
            .map_or(before.as_ref().is_some_and(|b| b.kind == Kind::Dir), |l| {
                l.kind == Kind::Dir
            });
        // A path the rules pass uncaptured changes unrecorded by design.
        if self.skips(path, is_dir) {
            return Ok(Some(false));
        }
        let actor = Actor {
            pid: 0,
            process: OUTSIDE.into(),
            exe: String::new(),
            ..Default::default()
        };
        let record = |op: Op, b: Before<'_>, after: After| -> Result<(), CaptureError> {
            let t = self
                .begin(
                    op,
                    path.to_vec(),
                    None,
                    actor.clone(),
                    b,
                    None,
                    Some(NOTE.into()),
                )
                .map_err(|e| {
                    CaptureError::io("recording a change made outside agx")(
                        std::io::Error::from_raw_os_error(e.code()),
                    )
                })?;
            if let Some(t) = t {
                self.commit(t, after);
            }
            Ok(())
        };
        let after_of = |l: &live::LiveObj| -> Result<After, CaptureError> {
            Ok(if l.kind == Kind::File {
                After::Content(
                    rustix::io::dup(&l.fd).map_err(|e| CaptureError::io("dup")(e.into()))?,
                )
            } else {
                After::State(self.state_of(l.fd.as_fd()))
            })
        };
        let before_kind = before.as_ref().map(|b| b.kind);
        let live_kind = live.as_ref().map(|l| l.kind);
        match (before, live) {
            (Some(b), Some(l)) if !removed && !made => {
                let op = if l.kind == Kind::File {
                    Op::Write
                } else {
                    Op::Chmod
                };
                record(op, Before::Recorded(b), after_of(&l)?)?;
            }
            (b, l) => {
                if let (Some(b), true) = (b, removed) {
                    let op = if before_kind == Some(Kind::Dir) {
                        Op::Rmdir
                    } else {
                        Op::Unlink
                    };
                    record(op, Before::Recorded(b), After::Absent)?;
                }
                if let (Some(l), true) = (l, made) {
                    let op = match l.kind {
                        Kind::Dir => Op::Mkdir,
                        Kind::Symlink => Op::Symlink,
                        Kind::Other => Op::Mknod,
                        _ => Op::Create,
                    };
                    record(op, Before::Absent, after_of(&l)?)?;
                }
            }
        }
        log::info!(
            "{}: changed outside agx; recorded (expected {}, live {})",
            String::from_utf8_lossy(path),
            match &expected {
                Expected::Absent => "absent".to_string(),
                Expected::Unknown | Expected::Pending => "unknown".to_string(),
                Expected::State(s) => format!("{:?}", s.kind),
            },
            live_kind.map_or("absent".to_string(), |k| format!("{k:?}"))
        );
        Ok(Some(true))
    }
}

impl super::recorder::Recorder {
    /// Whether `path` was checked for changes made outside agx (see `outside.rs`).
    pub(super) fn checked(&self, path: &[u8]) -> bool {
        self.checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(path)
    }
    pub(super) fn mark_checked(&self, path: &[u8]) {
        self.checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_vec());
    }
}
