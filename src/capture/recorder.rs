//! The recorder: turns "this is about to change" into a durable before-image and a journal
//! record on the request path, and hands everything else (hashing after-images,
//! compression, indexing) to a background worker.
//!
//! Invariants (DESIGN.md section 2):
//! - `begin` returns only once the before-image is in staging (or known to be in the
//!   store) and the begin record is in the journal; if it cannot, it returns an errno and
//!   the caller must not apply the mutation.
//! - Every begun event is either committed or cancelled; the journal lets recovery finish
//!   the ones a crash interrupted.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};
use fuser::Errno;
use rustix::fs::{Mode, OFlags};

use super::config::CaptureConfig;
use super::ignore::IgnoreRules;
use super::journal::{Journal, Record};
use super::staging::Staging;
use super::ticket::{After, Before, Held, Known, OpenEvents, Ticket};
use crate::ids::{ContentHash, InodeKey, Seq};
use crate::store::Store;
use crate::timeline::{Actor, Event, Kind, ObjState, Op, Timeline};
use crate::tree::state::stamp_of;

pub(super) enum Job {
    Commit(Box<Ticket>, After),
    /// The after-state of event `seq` (a creation) is now this one (see `amend`).
    Amend(Seq, Box<ObjState>),
    Flush(Sender<()>),
    /// Acknowledge once every earlier job is in the timeline, then wait until the second
    /// channel closes (see [`Recorder::pause`]).
    Pause(Sender<()>, Receiver<()>),
    Stop,
}

/// While this lives, the capture worker stores no object and records no event (changes
/// still begin and commit; their jobs wait in the queue). Dropping it resumes the worker.
pub struct Paused {
    _resume: Sender<()>,
}

pub(super) struct Shared {
    pub store: Store,
    pub staging: Staging,
    pub journal: Mutex<Journal>,
    /// Begun events not yet in the timeline (or dropped).
    pub(super) inflight: AtomicI64,
    pub(super) known: Mutex<HashMap<InodeKey, Known>>,
    /// Files with content events in progress (see [`OpenEvents`]).
    pub(super) open: Mutex<HashMap<InodeKey, OpenEvents>>,
    proc_fd: OwnedFd,
    pub root: OwnedFd,
    /// The project's `.agx` directory (branches' trees are in it).
    pub agx: OwnedFd,
    /// Files larger than this are hashed, never stored.
    pub(super) max_size: u64,
    /// Queued jobs that hold a descriptor.
    pub(super) slots: super::slots::Slots,
    /// Before-images kept in staging by a hard link (see `linked.rs`).
    pub(super) linked: super::linked::Linked,
    /// Paths of events not yet in the timeline database.
    pub(super) recent: super::policy::Recent,
    /// The highest event known to be in the database (see `head.rs`).
    pub(super) head: Mutex<super::head::Head>,
    /// Room kept for agx's records on a full disk (see `reserve.rs`).
    pub(super) reserve: super::reserve::Reserve,
    /// Events finished but not in the timeline database (it could not be written: a full
    /// disk); the worker keeps them and tries again.
    pub(super) unsaved: std::sync::atomic::AtomicUsize,
}

impl Shared {
    /// Removes the staged file `name` (its content is stored, or no longer needed).
    pub(super) fn drop_staged(&self, name: &str) {
        self.staging.remove(name);
        self.linked.remove(name);
    }

    pub(super) fn reopen_read(&self, fd: impl AsFd) -> std::io::Result<OwnedFd> {
        use std::os::fd::AsRawFd;
        let name = fd.as_fd().as_raw_fd().to_string();
        Ok(crate::sys::fd::without_atime(|quiet| {
            crate::sys::fd::retry(|| {
                rustix::fs::openat(
                    &self.proc_fd,
                    &name,
                    OFlags::RDONLY | OFlags::CLOEXEC | quiet,
                    Mode::empty(),
                )
            })
        })?)
    }
}

pub struct Recorder {
    pub(super) shared: Arc<Shared>,
    pub(super) next_seq: AtomicI64,
    /// The last change of the main tree begun, and how many of them were committed or
    /// cancelled so far (see `changes`). Changes made in branches do not count: nothing
    /// of the main tree's state depends on them.
    main_begun: AtomicI64,
    pub(super) ended: AtomicU64,
    /// See [`Recorder::tree_epoch`].
    pub(super) epoch: AtomicU64,
    /// The last event a command may have named a point after (see `may_fold`).
    fence: AtomicI64,
    /// History the database lost: (its last event, the last one recorded), until a
    /// person accepts the loss (see `head.rs`).
    pub(super) lost: Mutex<Option<(i64, i64)>>,
    /// The main tree's changes begun and not ended (see `pending.rs`).
    pub(super) pending: super::pending::Pending,
    /// Paths checked for changes made outside agx (`outside.rs`): once per mount.
    pub(super) checked: Mutex<std::collections::HashSet<Vec<u8>>>,
    /// Every path with history was checked (`outside.rs`, `sweep`).
    pub(super) swept: Mutex<bool>,
    pub(super) tx: Sender<Job>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(super) ignore: IgnoreRules,
    /// Which changes pass uncaptured (see `policy.rs`).
    pub(super) policy: super::policy::Policy,
    /// A connection of its own for the policy's questions (request threads ask; the
    /// worker's connection is the worker's).
    pub(super) query: Mutex<Timeline>,
    pub(super) cfg: CaptureConfig,
    /// Run before each [`Recorder::flush`]: waits for changes whose end is on its way
    /// (see `fs::settle`). Set once by the mount; unset, a flush does not wait for them.
    settle: std::sync::OnceLock<Settle>,
    /// See [`super::gate`].
    pub gate: super::gate::Gate,
}

/// See [`Recorder::set_settle`].
pub type Settle = Box<dyn Fn() + Send + Sync>;

pub use crate::sys::now_ns;

pub(super) fn enospc_or_eio(e: &std::io::Error) -> Errno {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => Errno::ENOSPC,
        _ => Errno::EIO,
    }
}

impl Recorder {
    /// Opens capture for the project whose root and `.agx/` directories are given, after
    /// recovering whatever a previous run left in the journal and staging.
    pub fn open(
        root: OwnedFd,
        agx: &OwnedFd,
        cfg: CaptureConfig,
        mut timeline: Timeline,
        query: Timeline,
        tolerate_loss: bool,
    ) -> Result<Recorder, super::CaptureError> {
        let fsync = cfg.fsync == super::config::Fsync::Always;
        let store = Store::open(agx, fsync)?;
        let staging = Staging::open(agx, fsync).map_err(super::CaptureError::io("staging"))?;
        let proc_fd = rustix::fs::open(
            "/proc/self/fd",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| super::CaptureError::io("/proc/self/fd")(e.into()))?;
        let journal = Journal::open(agx, fsync).map_err(super::CaptureError::io("journal"))?;
        let head =
            super::head::Head::open(agx, fsync).map_err(super::CaptureError::io(".agx/head"))?;
        let shared = Arc::new(Shared {
            store,
            staging,
            journal: Mutex::new(journal),
            inflight: AtomicI64::new(0),
            known: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
            proc_fd,
            root,
            agx: rustix::io::dup(agx).map_err(|e| super::CaptureError::io(".agx")(e.into()))?,
            max_size: cfg.max_size,
            slots: super::slots::Slots::for_limit(crate::sys::fd::nofile_limit()),
            linked: Default::default(),
            recent: Default::default(),
            head: Mutex::new(head),
            reserve: super::reserve::Reserve::open(agx),
            unsaved: Default::default(),
        });
        let recovered = super::recovery::recover(&shared, agx, &mut timeline)?;
        let last = recovered.last;
        // History the database lost (see `head.rs`): refused unless the caller reports it.
        let (lost, next) = {
            let mut head = shared.head.lock().unwrap_or_else(|e| e.into_inner());
            let have = timeline.max_seq()?.0;
            let lost = (head.at() > have).then_some((have, head.at()));
            if let (Some((have, recorded)), false) = (lost, tolerate_loss) {
                return Err(super::CaptureError::HistoryLost { have, recorded });
            }
            if lost.is_none() {
                head.advance(have)
                    .map_err(super::CaptureError::io("writing .agx/head"))?;
            }
            // Sequence numbers are never handed out twice, lost ones included.
            (lost, last.0.max(head.at()))
        };
        let reader_root = rustix::io::dup(&shared.root)
            .map_err(|e| super::CaptureError::io("project root")(e.into()))?;
        let ignore = IgnoreRules::new(
            Box::new(move |p: &Path| read_rel(&reader_root, p)),
            &cfg.include,
            &cfg.exclude,
        );
        let (tx, rx) = crossbeam_channel::unbounded();
        let w_shared = shared.clone();
        let worker = std::thread::Builder::new()
            .name("agx-capture".into())
            .spawn(move || super::worker::run(w_shared, timeline, rx, recovered))
            .map_err(super::CaptureError::io("starting the capture worker"))?;
        shared.slots.set_worker(worker.thread().clone());
        Ok(Recorder {
            shared,
            next_seq: AtomicI64::new(next + 1),
            lost: Mutex::new(lost),
            main_begun: AtomicI64::new(next),
            ended: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            fence: AtomicI64::new(next),
            checked: Mutex::default(),
            pending: Default::default(),
            tx,
            worker: Mutex::new(Some(worker)),
            ignore,
            policy: Default::default(),
            query: Mutex::new(query),
            cfg,
            settle: std::sync::OnceLock::new(),
            gate: Default::default(),
            swept: Mutex::new(false),
        })
    }

    pub fn config(&self) -> &CaptureConfig {
        &self.cfg
    }

    /// An ignore file changed: reload the rules.
    /// The last sequence number handed out (its event may not be in the timeline yet).
    pub fn last_seq(&self) -> Seq {
        Seq(self.next_seq.load(Ordering::Relaxed) - 1)
    }

    /// The last change of the main tree begun and how many of them have ended (committed
    /// or cancelled): equal values mean the main tree's timeline has not changed since,
    /// once flushed. A change is counted as begun before it reaches the disk.
    pub fn changes(&self) -> (Seq, u64) {
        let ended = self.ended.load(Ordering::SeqCst);
        (Seq(self.main_begun.load(Ordering::SeqCst)), ended)
    }

    /// Changes recorded in the journal that the timeline database could not take yet (a
    /// full disk). Commands that read history refuse while there are any: their answer
    /// would leave those changes out.
    pub fn unsaved(&self) -> usize {
        self.shared.unsaved.load(Ordering::SeqCst)
    }

    /// Whether agx gave back its reserved room because the disk was full.
    pub fn disk_full(&self) -> bool {
        self.shared.reserve.released()
    }

    /// A number that changes whenever agx itself changes the tree behind the mount (a
    /// restore, a change noticed from outside): names the FUSE front knows from before
    /// are checked before they are used again.
    pub fn tree_epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    pub fn ignore_files_changed(&self) {
        self.ignore.reset();
    }

    /// Starts an event: records the before-state (and `target`, the state of `to_path` a
    /// rename replaces) durably. Callers decide about ignored paths before calling (the
    /// FUSE front skips them; a restore records everything).
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &self,
        op: Op,
        path: Vec<u8>,
        to_path: Option<Vec<u8>>,
        actor: Actor,
        before: Before<'_>,
        target: Option<Before<'_>>,
        note: Option<String>,
    ) -> Result<Option<Ticket>, Errno> {
        if note.is_some() {
            // agx's own change (a restore): names known from before may be stale.
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        let seq = Seq(self.next_seq.fetch_add(1, Ordering::Relaxed));
        let main = actor.branch.is_none();
        // Counted as registering before it counts as begun: a model that read `changes()`
        // then waits in `settle_names` finds it in `pending` (see `capture::pending`).
        let _registering = main.then(|| self.pending.registering());
        if main {
            self.main_begun.fetch_max(seq.0, Ordering::SeqCst);
        }
        self.shared.inflight.fetch_add(1, Ordering::SeqCst);
        let slot = match &before {
            Before::Content(fd) => self.enter(*fd),
            _ => None,
        };
        match self.begin_inner(seq, op, path, to_path, actor, before, target, note) {
            Ok(mut t) => {
                t.stamps.slot = slot;
                Ok(Some(t))
            }
            Err(e) => {
                self.leave(slot);
                self.shared.inflight.fetch_sub(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn begin_inner(
        &self,
        seq: Seq,
        op: Op,
        path: Vec<u8>,
        to_path: Option<Vec<u8>>,
        actor: Actor,
        before: Before<'_>,
        target: Option<Before<'_>>,
        note: Option<String>,
    ) -> Result<Ticket, Errno> {
        // Stamped before the copy: a change racing with it moves the stamp.
        let begun = match &before {
            Before::Content(fd) => rustix::fs::fstat(fd).ok().map(|st| stamp_of(&st)),
            _ => None,
        };
        let (before, held, captured) = self.take(before, &seq.0.to_string(), true)?;
        let (staged, inline) = match held {
            Held::Nothing => (None, None),
            Held::Staged(s) => (Some(s), None),
            Held::Inline(b) => (None, Some(b)),
        };
        let (target_before, target_staged) = match target {
            Some(t) => match self.take(t, &format!("{}.t", seq.0), false) {
                Ok((s, Held::Staged(st), _)) => (Some(s), Some(st)),
                Ok((s, _, _)) => (Some(s), None),
                Err(e) => {
                    if let Some(s) = &staged {
                        self.shared.drop_staged(s);
                    }
                    return Err(e);
                }
            },
            None => (None, None),
        };
        let event = Event {
            seq,
            time_ns: now_ns(),
            op,
            path,
            to_path,
            before,
            after: ObjState::absent(),
            target_before,
            captured,
            session: actor.session.clone(),
            tool_call: actor.tool_call,
            branch: actor.branch,
            actor,
            note,
        };
        // In `recent` before the policy takes note: a cached answer computed meanwhile
        // then sees it (see `policy.rs`).
        self.shared.recent.add(&event);
        if self.policy.note(&event) {
            self.ignore.reset();
        }
        let mut ticket = Ticket::from_parts(event, staged, target_staged, inline, None);
        ticket.stamps.begun = begun;
        let rec = Record::Begin {
            event: ticket.event.clone(),
            staged: ticket.staged.clone(),
            target_staged: ticket.target_staged.clone(),
            inline: ticket.inline.clone(),
        };
        if let Err(e) = self.journal_append(&rec) {
            self.remove_staged(&ticket);
            self.shared.recent.remove(&ticket.event);
            return Err(enospc_or_eio(&e));
        }
        self.pending.add(
            &ticket.event,
            ticket.staged.as_deref(),
            ticket.inline.as_ref(),
        );
        Ok(ticket)
    }

    /// Encodes `r`, then writes it (after any deferred records) under the journal's lock.
    fn journal_append(&self, r: &Record) -> std::io::Result<()> {
        let line = r.encode()?;
        super::reserve::with_room(&self.shared.reserve, || {
            self.shared
                .journal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .append(&line)
        })
    }

    fn remove_staged(&self, t: &Ticket) {
        if let Some(s) = &t.staged {
            self.shared.drop_staged(s);
        }
        if let Some(s) = &t.target_staged {
            self.shared.drop_staged(s);
        }
    }

    /// Drops the ignore rules `e` may change: it changes an ignore file, or moves or
    /// removes a directory (which may hold some). Every way such a change is made (the
    /// mount, a restore or oops, a change noticed from outside) goes through here, at its
    /// beginning and at its end.
    fn note_rules(&self, e: &Event) {
        let dir_change = matches!(e.op, Op::Rename | Op::Exchange | Op::Rmdir)
            && (e.before.kind == Kind::Dir
                || e.target_before
                    .as_ref()
                    .is_some_and(|t| t.kind == Kind::Dir));
        let names_rules = |p: &[u8]| {
            let base = p.rsplit(|c| *c == b'/').next().unwrap_or(p);
            super::ignore::is_ignore_file(base)
        };
        if dir_change || names_rules(&e.path) || e.to_path.as_deref().is_some_and(names_rules) {
            self.ignore.reset();
        }
    }

    /// Finishes an event with the state after the mutation.
    pub fn commit(&self, mut t: Ticket, after: After) {
        if t.event.branch.is_none() {
            self.note_rules(&t.event);
        }
        let known_after = match &after {
            After::State(s) => Some(s.clone()),
            After::Absent => Some(ObjState::absent()),
            After::Content(fd) => {
                // Stamped first, then checked for a later change that began meanwhile
                // (one that begins after the check moves the stamp).
                let stamp = rustix::fs::fstat(fd).ok().map(|st| stamp_of(&st));
                let overlapped = self.leave(t.stamps.slot.take());
                t.stamps.committed = stamp.filter(|_| !overlapped);
                t.stamps.ended = stamp;
                None
            }
        };
        self.leave(t.stamps.slot.take());
        // Every event gets its end record, creations too: without one, recovery may take a
        // creation whose file a later, already recorded change renamed or removed for one
        // that never ran, and its stamp tells the creation's content from a later file's.
        // It is written with the next record (see `Journal::defer`), before any later
        // change begins.
        let end = Record::Commit {
            seq: t.event.seq.0,
            after: known_after,
            stamp: t.stamps.committed,
        };
        let deferred = end.encode().and_then(|line| {
            self.shared
                .journal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .defer(&line)
        });
        if let Err(e) = deferred {
            log::warn!(
                "journal: cannot record the end of event {}: {e}",
                t.event.seq
            );
        }
        let holds_fd = matches!(after, After::Content(_));
        if holds_fd {
            self.shared.slots.acquire();
        }
        let (main, seq) = (t.event.branch.is_none(), t.event.seq);
        if self.tx.send(Job::Commit(Box::new(t), after)).is_err() && holds_fd {
            self.shared.slots.release();
        }
        // Only once the worker has it (see `pending.rs`).
        self.pending.remove(seq);
        if main {
            self.ended.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Abandons an event whose mutation failed.
    pub fn cancel(&self, mut t: Ticket) {
        self.shared.recent.remove(&t.event);
        self.leave(t.stamps.slot.take());
        let _ = self.journal_append(&Record::Cancel { seq: t.event.seq.0 });
        self.pending.remove(t.event.seq);
        self.remove_staged(&t);
        self.shared.inflight.fetch_sub(1, Ordering::SeqCst);
        if t.event.branch.is_none() {
            self.ended.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A metadata change folded into the creation recorded as event `seq` (the creator
    /// set mode, owner, times or xattrs right after creating): the event's after-state
    /// becomes `state` (its content hash is kept). An event not recorded yet reads its
    /// after-state when it ends anyway.
    pub fn amend(&self, seq: Seq, state: ObjState) {
        let _ = self.tx.send(Job::Amend(seq, Box::new(state)));
    }

    /// The state of an object after a change, for `After::State`.
    pub fn state_of(&self, fd: BorrowedFd<'_>) -> ObjState {
        match rustix::fs::fstat(fd) {
            Ok(st) => self.meta_state(fd, &st),
            Err(_) => ObjState::absent(),
        }
    }

    /// What [`Recorder::flush`] runs first. Set once; later calls are ignored.
    pub fn set_settle(&self, f: Settle) {
        let _ = self.settle.set(f);
    }

    /// Waits until every change whose end is known or on its way (see `set_settle`) is in
    /// the timeline: what a command that names "now" must see.
    pub fn flush(&self) {
        if let Some(settle) = self.settle.get() {
            settle();
        }
        self.flush_queue();
        // A command may name this point now: what happened up to it is settled.
        self.fence.fetch_max(self.last_seq().0, Ordering::SeqCst);
    }

    /// Whether a metadata change may still fold into the creation recorded as event
    /// `seq` (see `fs::record::CREATION_WINDOW`): not once a command may have named a
    /// point after it (a checkpoint between the creation and the change must see the
    /// change undone by a restore to it, so it needs an event of its own).
    pub fn may_fold(&self, seq: Seq) -> bool {
        seq.0 > self.fence.load(Ordering::SeqCst)
    }

    /// Waits until every committed event is in the timeline. For the request path, which
    /// must not wait for other requests.
    pub fn flush_queue(&self) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Job::Flush(tx)).is_ok() {
            self.shared.slots.wake_worker();
            let _ = rx.recv();
        }
    }

    /// Flushes, then holds the worker until the returned guard is dropped: gc deletes
    /// objects meanwhile, and no object can be written against a base it deletes.
    pub fn pause(&self) -> Paused {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        let (resume_tx, resume_rx) = crossbeam_channel::bounded(0);
        if self.tx.send(Job::Pause(ack_tx, resume_rx)).is_ok() {
            self.shared.slots.wake_worker();
            let _ = ack_rx.recv();
        }
        Paused { _resume: resume_tx }
    }

    /// Contents of live files the recorder knows to be stored (a later before-image of
    /// such a file refers to the stored object instead of copying it). Only the worker
    /// adds to this set, so while it is paused the set is complete.
    pub fn known_hashes(&self) -> Vec<ContentHash> {
        let known = self.shared.known.lock().unwrap_or_else(|e| e.into_inner());
        known.values().map(|k| k.hash).collect()
    }

    /// Flushes and stops the worker (at unmount). Events begun later are still journaled
    /// and recovered at the next start.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Job::Stop);
        self.shared.slots.wake_worker();
        if let Some(h) = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }
}

fn read_rel(root: &OwnedFd, p: &Path) -> Option<String> {
    let fd = rustix::fs::openat(root, p, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s).ok()?;
    Some(s)
}
