//! The capture worker: finishes begun-and-committed events off the request path (staged
//! and inline before-images into the store, after-images read and hashed or stored) and
//! writes them to the timeline in batches. Recovery at start finishes interrupted events
//! with the same functions.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::Receiver;
use rustix::fs::OFlags;

use super::journal::Record;
use super::recorder::{Job, Shared};
use super::ticket::{known_of, After, Ticket};
use crate::ids::{ContentHash, Seq};
use crate::sys::read::{hash_file, hash_sized};
use crate::timeline::{Event, Kind, ObjState, Op, Timeline};
use crate::tree::state::{key_of, kind_of, meta_of, stamp_of, Stamp};

/// Moves a staged before-image into the store; returns its hash.
pub(super) fn ingest_staged(
    shared: &Shared,
    name: &str,
    base: Option<&ContentHash>,
) -> Result<ContentHash, super::CaptureError> {
    let f = shared
        .staging
        .open_read(name)
        .map_err(super::CaptureError::io("staging"))?;
    // On a full disk the room agx gave back is for its records: a before-image the store
    // has no room for waits in staging (see `settle_staged`).
    let size = f.metadata().map_or(0, |m| m.len());
    if !shared.reserve.room_for_copy(size) {
        return Err(super::CaptureError::io("storing a before-image")(
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        ));
    }
    let put = shared.store.put_reader(f, base)?;
    Ok(put.hash)
}

/// Reads, hashes and (with `keep`) stores the current content of a file; remembers it as
/// the inode's last after-image when the file did not change while it was read.
///
/// The content is read some time after the change (by the worker, or at recovery): a later
/// change may already have replaced it. Its hash is reported only when the file's content
/// stamp still is `expect`'s (taken when the event was committed) and did not change
/// while it was read; otherwise the after-image is unknown (`hash: None`), never another
/// change's content.
pub(super) fn ingest_live(
    shared: &Shared,
    fd: &OwnedFd,
    base: Option<&ContentHash>,
    keep: bool,
    expect: Option<Stamp>,
) -> Result<ObjState, super::CaptureError> {
    let st = rustix::fs::fstat(fd).map_err(|e| super::CaptureError::io("stat")(e.into()))?;
    let kind = kind_of(&st);
    if kind != Kind::File {
        return Ok(ObjState {
            kind,
            hash: None,
            meta: Some(meta_of(fd, &st)),
        });
    }
    // A released handle's own descriptor is read as it is; an `O_PATH` one is reopened.
    let reopened;
    let file = if quietly_readable(fd) {
        fd.as_fd()
    } else {
        reopened = shared
            .reopen_read(fd)
            .map_err(super::CaptureError::io("reading an after-image"))?;
        reopened.as_fd()
    };
    // Through the open file: its xattrs are read without a path lookup.
    let meta = meta_of(file, &st);
    // An after-image is kept only where there is room for content (see `reserve`); it is
    // hashed either way.
    let stored = keep
        && st.st_size as u64 <= shared.max_size
        && shared.reserve.room_for_copy(st.st_size as u64);
    let hash = if stored {
        shared
            .store
            .put_reader(crate::sys::read::PositionalReader::new(file), base)?
            .hash
    } else {
        hash_sized(file, st.st_size as u64)
            .map_err(super::CaptureError::io("hashing an after-image"))?
            .0
    };
    let steady = rustix::fs::fstat(fd).is_ok_and(|st2| stamp_of(&st2).same_content(&stamp_of(&st)));
    if steady && stored {
        shared
            .known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key_of(&st), known_of(&st, hash));
    }
    let exact = steady && expect.is_some_and(|x| x.same_content(&stamp_of(&st)));
    Ok(ObjState {
        kind,
        hash: exact.then_some(hash),
        meta: Some(meta),
    })
}

/// Whether `fd` can be read as it is: open for reading (not `O_PATH`, not write-only) and
/// not moving atime, which agx's reads must not. A released handle's descriptor (the
/// worker is its last user) gets `O_NOATIME` here; where that is refused (a file of
/// another owner on a filesystem that does not let root set it) it is reopened instead.
fn quietly_readable(fd: impl AsFd) -> bool {
    let Ok(fl) = rustix::fs::fcntl_getfl(&fd) else {
        return false;
    };
    let write_only = fl.contains(OFlags::WRONLY) && !fl.contains(OFlags::RDWR);
    if fl.contains(OFlags::PATH) || write_only {
        return false;
    }
    fl.contains(OFlags::NOATIME) || rustix::fs::fcntl_setfl(&fd, fl | OFlags::NOATIME).is_ok()
}

/// Whether an event changed nothing (an open for writing that wrote nothing new). Only
/// an exactly known after-image counts (see [`ingest_live`]), and only on the same object
/// with the same owner and mode: a restore that puts equal content in place by a new file
/// changes which object the name is (the names it shares a file with), and that must stay
/// history.
pub(super) fn is_noop(e: &Event) -> bool {
    let same_object = match (&e.before.meta, &e.after.meta) {
        (Some(b), Some(a)) => {
            b.mode == a.mode
                && b.uid == a.uid
                && b.gid == a.gid
                && (a.ino == 0 || b.ino == 0 || b.id() == a.id())
        }
        (None, None) => true,
        _ => false,
    };
    matches!(e.op, Op::Write)
        && e.before.kind == e.after.kind
        && e.before.hash.is_some()
        && e.before.hash == e.after.hash
        && same_object
}

/// Copies the staged before-image `name` of event `seq` into the store and returns its
/// hash, and whether the store has it. The staged file is not removed here: it stays
/// until the event is in the timeline (or known to change nothing), so a crash in between
/// still finds it. When the store cannot take it (a full disk), its hash is still
/// returned, so the event names its before-image either way; the next start stores it.
fn settle_staged(
    shared: &Shared,
    seq: Seq,
    name: &str,
    base: Option<&ContentHash>,
) -> (Option<ContentHash>, bool) {
    // A staging link of the object itself may have been stored already, before a change
    // of the object's content (see `linked.rs`): that version is the before-image.
    let stored = shared
        .linked
        .settle(name, || ingest_staged(shared, name, base))
        .unwrap_or_else(|| ingest_staged(shared, name, base));
    match stored {
        Ok(h) => (Some(h), true),
        Err(err) => {
            log::error!("event {seq}: keeping staged before-image {name}: {err}");
            let hashed = shared
                .staging
                .open_read(name)
                .and_then(|f| hash_file(&f).map(|(h, _)| h));
            match hashed {
                Ok(h) => {
                    // Readable under its hash until the store has room (see
                    // `Store::has`); the next start stores it.
                    let kept = super::reserve::with_room(&shared.reserve, || {
                        shared.staging.keep_by_hash(name, &h)
                    });
                    if let Err(err) = kept {
                        log::error!("event {seq}: cannot keep {name} under its hash: {err}");
                    }
                    (Some(h), false)
                }
                Err(err) => {
                    log::error!("event {seq}: cannot read staged before-image {name}: {err}");
                    (None, false)
                }
            }
        }
    }
}

/// A completed event, and the staged files whose content is now in the store (to remove
/// once the event is in the timeline).
pub(super) struct Finished {
    pub event: Event,
    pub stored: Vec<String>,
    /// A before-image held in the journal record could not be stored (a full disk): the
    /// journal must keep its record for the next start.
    pub unsettled: bool,
}

impl Finished {
    /// Removes the staged files this event no longer needs.
    pub fn clean(&self, shared: &Shared) {
        for name in &self.stored {
            shared.drop_staged(name);
        }
    }
}

/// Completes an event: content into the store, the after-state resolved.
pub(super) fn finish(
    shared: &Shared,
    t: Ticket,
    after: After,
    base: Option<ContentHash>,
) -> Finished {
    let mut e = *t.event;
    let mut stored = Vec::new();
    let mut unsettled = false;
    if let Some(bytes) = &t.inline {
        // The hash was taken with the copy; the event names it either way.
        if let Err(err) = shared.store.put(bytes, base.as_ref()) {
            log::error!(
                "event {}: keeping the before-image in the journal: {err}",
                e.seq
            );
            unsettled = true;
        }
    }
    if let Some(name) = &t.staged {
        let (h, kept) = settle_staged(shared, e.seq, name, base.as_ref());
        if h.is_some() {
            e.before.hash = h;
        }
        if kept {
            stored.push(name.clone());
        }
    }
    if let Some(name) = &t.target_staged {
        let (h, kept) = settle_staged(shared, e.seq, name, None);
        if let (Some(h), Some(tb)) = (h, e.target_before.as_mut()) {
            tb.hash = Some(h);
        }
        if kept {
            stored.push(name.clone());
        }
    }
    e.after = match after {
        After::Absent => ObjState::absent(),
        After::State(mut s) => {
            if s.kind == Kind::File && s.hash.is_none() && e.before.kind == Kind::File {
                // Metadata-only change: the content is the before content.
                if matches!(
                    e.op,
                    Op::Chmod
                        | Op::Chown
                        | Op::Utimens
                        | Op::Setxattr
                        | Op::Removexattr
                        | Op::Chattr
                        | Op::Rename
                ) {
                    s.hash = e.before.hash;
                }
            }
            s
        }
        // The file kept its stamp from before its before-image was taken to the end of the
        // event: nothing changed (the same test that lets a known version skip its copy).
        After::Content(_) if t.stamps.begun.is_some() && t.stamps.begun == t.stamps.ended => {
            e.before.clone()
        }
        After::Content(fd) => {
            let b = e.before.hash;
            let keep = stores_after_image(e.op);
            match ingest_live(shared, &fd, b.as_ref(), keep, t.stamps.committed) {
                Ok(s) => s,
                Err(err) => {
                    log::error!("event {}: cannot read the after-image: {err}", e.seq);
                    ObjState::absent()
                }
            }
        }
    };
    Finished {
        event: e,
        stored,
        unsettled,
    }
}

/// How long the worker gathers finished events before it writes them to the timeline in
/// one transaction. Each job is still finished (after-images read and stored) as soon as it
/// arrives; only the database write waits. The journal holds the events meanwhile, and a
/// flush, pause or stop writes at once. A transaction per event cost the worker most of its
/// time (statement setup, WAL frames, locks). Default 20 ms; a longer window saves little
/// more and delays what a reader of the database that does not flush sees.
const BATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(20);

/// Events per transaction at most (bounds the memory a burst takes).
const BATCH_MAX: usize = 512;

/// While jobs keep coming, the worker looks for more every NAP instead of waiting to be
/// woken: a sender then only queues its job. Waking a blocked worker for every change cost
/// a cross-CPU wakeup per file, on the request path and in the worker, which was most of
/// what capture added to an untar. An after-image is read at most NAP late (a change made
/// meanwhile leaves it unknown, never wrong); flush, pause, stop and a sender short of
/// queue slots wake the worker at once. Default 2 ms.
const NAP: std::time::Duration = std::time::Duration::from_millis(2);

/// After this long without a job, the worker blocks until a sender wakes it. Default 50 ms.
const IDLE: std::time::Duration = std::time::Duration::from_millis(50);

/// The next job. `Ok(None)`: the open batch's window has ended with no job queued, so the
/// batch is due. `Err`: every sender is gone.
fn next_job(
    rx: &Receiver<Job>,
    opened: Option<std::time::Instant>,
    last_job: std::time::Instant,
) -> Result<Option<Job>, ()> {
    use crossbeam_channel::{RecvTimeoutError, TryRecvError};
    loop {
        match rx.try_recv() {
            Ok(j) => return Ok(Some(j)),
            Err(TryRecvError::Disconnected) => return Err(()),
            Err(TryRecvError::Empty) => {}
        }
        let now = std::time::Instant::now();
        let due = opened.map(|t| t + BATCH_WINDOW);
        if due.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        if now < last_job + IDLE {
            let nap = due.map_or(NAP, |d| NAP.min(d - now));
            std::thread::park_timeout(nap);
            continue;
        }
        return match due {
            None => rx.recv().map(Some).map_err(|_| ()),
            Some(d) => match rx.recv_deadline(d) {
                Ok(j) => Ok(Some(j)),
                Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => Err(()),
            },
        };
    }
}

/// How long the worker waits before it tries again to write events the timeline could not
/// take (a full disk); a flush tries at once.
const RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether the timeline failed for want of room on the disk.
pub(super) fn timeline_full(e: &crate::timeline::TimelineError) -> bool {
    matches!(
        e,
        crate::timeline::TimelineError::Sql(rusqlite::Error::SqliteFailure(f, _))
            if matches!(f.code, rusqlite::ErrorCode::DiskFull | rusqlite::ErrorCode::SystemIoFailure)
                && f.extended_code != rusqlite::ffi::SQLITE_IOERR_CORRUPTFS
    )
}

/// Inserts `batch`; on a full disk gives back agx's reserved room and tries once more.
pub(super) fn insert_with_room(
    shared: &Shared,
    timeline: &mut Timeline,
    batch: &[Finished],
) -> Result<(), crate::timeline::TimelineError> {
    match timeline.insert(batch.iter().map(|f| &f.event)) {
        Err(e) if timeline_full(&e) && shared.reserve.release() => {
            timeline.insert(batch.iter().map(|f| &f.event))
        }
        r => r,
    }
}

/// Whether an event's after-image is stored, not only hashed. A modified file is likely
/// to be modified again: its stored after-image is the next before-image for free. A new
/// file is only hashed (its first change will copy it), which keeps bulk creation (untar,
/// builds) cheap.
fn stores_after_image(op: Op) -> bool {
    op != Op::Create
}

/// Whether finishing `t` needs the newest recorded content of its path (the patch-from base
/// for content it stores): only when it stores a before-image or an after-image.
fn needs_base(t: &Ticket, after: &After) -> bool {
    t.staged.is_some()
        || t.inline.is_some()
        || (matches!(after, After::Content(_)) && stores_after_image(t.event.op))
}

/// The worker thread's loop, until a stop job or the last sender goes.
/// The worker's nice value. Default 10: it yields the CPU to the processes making changes
/// and to the request threads answering them, whose every delay is the caller's; its own
/// work is behind them anyway and it catches up when they wait. On two cores a worker at
/// their priority preempted them and made creating many small files up to a third slower
/// and erratic. It cannot starve: senders wait for a queue slot once it falls that far
/// behind, and then it has the CPU. Safe to change between 0 and 19.
const NICE: i32 = 10;

pub(super) fn run(
    shared: Arc<Shared>,
    mut timeline: Timeline,
    rx: Receiver<Job>,
    recovered: super::recovery::Recovered,
) {
    // This thread only (Linux keeps a nice value per thread).
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICE) {
        log::debug!("capture worker: cannot lower its priority: {e}");
    }
    // Events to insert, with the staged files to remove once they are in the timeline
    // (recovery's, when the disk had no room for them at the start).
    let mut batch: Vec<Finished> = recovered.unsaved;
    let mut settled = 0i64;
    // When the oldest job of the open batch was finished.
    let mut opened: Option<std::time::Instant> = None;
    let mut last_job = std::time::Instant::now();
    let mut stop = false;
    // Set once events could not be written to the timeline: the journal then keeps every
    // record until the next start recovers them.
    let mut keep_journal = recovered.keep_journal;
    // Set while the batch could not be written: when to try again.
    let mut retry_at: Option<std::time::Instant> = None;
    if !batch.is_empty() {
        shared.unsaved.store(batch.len(), Ordering::SeqCst);
        batch.iter().for_each(|f| shared.recent.add(&f.event));
        retry_at = Some(std::time::Instant::now() + RETRY);
    }
    while !stop {
        let job = match next_job(&rx, opened, last_job) {
            Ok(j) => j,
            Err(()) if opened.is_none() => break,
            Err(()) => {
                stop = true;
                None
            }
        };
        if job.is_some() {
            last_job = std::time::Instant::now();
        }
        let mut waiter = None;
        let mut pause = None;
        match job {
            Some(Job::Commit(t, after)) => {
                let base = if needs_base(&t, &after) {
                    // The batch is newer than the timeline.
                    batch
                        .iter()
                        .rev()
                        .find(|f| f.event.path == t.event.path && f.event.after.hash.is_some())
                        .and_then(|f| f.event.after.hash)
                        .or_else(|| timeline.last_hash_of(&t.event.path).ok().flatten())
                } else {
                    None
                };
                let held_fd = matches!(after, After::Content(_));
                let done = finish(&shared, *t, after, base);
                keep_journal |= done.unsettled;
                if held_fd {
                    shared.slots.release();
                }
                settled += 1;
                if is_noop(&done.event) {
                    // Nothing to record; the journal says so before the staged copy goes,
                    // so recovery never redoes it without its before-image.
                    let seq = done.event.seq.0;
                    let dropped = Record::Cancel { seq }.encode().and_then(|line| {
                        shared
                            .journal
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .append(&line)
                    });
                    if dropped.is_ok() {
                        done.clean(&shared);
                    }
                    shared.recent.remove(&done.event);
                } else {
                    batch.push(done);
                }
                let t0 = *opened.get_or_insert_with(std::time::Instant::now);
                if batch.len() < BATCH_MAX && t0.elapsed() < BATCH_WINDOW {
                    continue;
                }
            }
            Some(Job::Amend(seq, state)) => {
                let amended = |after: &mut ObjState| {
                    after.meta = state.meta.clone();
                    if after.kind == Kind::Absent {
                        after.kind = state.kind;
                    }
                };
                match batch.iter_mut().find(|f| f.event.seq == seq) {
                    Some(f) => amended(&mut f.event.after),
                    None => {
                        if let Err(e) = timeline.amend_after(seq, |a| amended(a)) {
                            log::warn!("event {seq}: cannot amend its after-state: {e}");
                        }
                    }
                }
                continue;
            }
            Some(Job::Flush(w)) => waiter = Some(w),
            Some(Job::Pause(ack, resume)) => pause = Some((ack, resume)),
            Some(Job::Stop) => stop = true,
            None => {}
        }
        opened = None;
        let retry_due = retry_at.is_none_or(|t| std::time::Instant::now() >= t) || waiter.is_some();
        if !batch.is_empty() && retry_due {
            match insert_with_room(&shared, &mut timeline, &batch) {
                Ok(()) => {
                    if retry_at.take().is_some() {
                        log::warn!(
                            "timeline: the {} events the disk had no room for are recorded",
                            batch.len()
                        );
                    }
                    shared.unsaved.store(0, Ordering::SeqCst);
                    let top = batch.iter().map(|f| f.event.seq.0).max().unwrap_or(0);
                    if let Err(e) = shared
                        .head
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .advance(top)
                    {
                        log::warn!("cannot write .agx/head: {e}");
                    }
                    batch.iter().for_each(|f| {
                        f.clean(&shared);
                        shared.recent.remove(&f.event);
                    });
                    batch.clear();
                }
                Err(e) => {
                    // Kept (with the journal) and tried again: commands refuse meanwhile
                    // rather than answer without these events.
                    if retry_at.is_none() {
                        log::error!(
                            "timeline: cannot record {} events now ({e}); they wait in the journal and are tried again",
                            batch.len()
                        );
                    }
                    shared.unsaved.store(batch.len(), Ordering::SeqCst);
                    retry_at = Some(std::time::Instant::now() + RETRY);
                }
            }
        }
        shared.reserve.refill();
        if settled > 0 {
            shared.inflight.fetch_sub(settled, Ordering::SeqCst);
            settled = 0;
        }
        {
            let mut j = shared.journal.lock().unwrap_or_else(|e| e.into_inner());
            let all_in = !keep_journal && batch.is_empty();
            if all_in && shared.inflight.load(Ordering::SeqCst) == 0 && !j.is_empty() {
                if let Err(e) = j.truncate() {
                    log::warn!("journal: cannot truncate: {e}");
                }
            } else if let Err(e) = j.write_deferred() {
                // They stay deferred: written with the next record or batch.
                log::warn!("journal: cannot record the end of changes now: {e}");
            }
        }
        if let Some(w) = waiter {
            let _ = w.send(());
        }
        if let Some((ack, resume)) = pause {
            let _ = ack.send(());
            // Returns when the guard is dropped (the sender closes).
            let _ = resume.recv();
        }
    }
}
