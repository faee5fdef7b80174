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
use std::ffi::OsStr;
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
use crate::ids::{ContentHash, InodeKey, Seq};
use crate::store::Store;
use crate::sys::read::hash_file;
use crate::timeline::{Actor, Event, Kind, ObjState, Op, Timeline};
use crate::tree::state::{key_of, kind_of, meta_of, stamp_of, Stamp};

/// What to record of the state a mutation changes.
pub enum Before<'a> {
    /// Nothing is there (a creation).
    Absent,
    /// Kind and metadata only: the content does not change (chmod, rename source, ...).
    Meta(BorrowedFd<'a>),
    /// Content too, by copy (write, truncate, fallocate).
    Content(BorrowedFd<'a>),
    /// The object loses this name (unlink, rename over it): kept by a hard link from
    /// `dir/name` unless `may_change` (other names or open writers), then copied.
    Leaving {
        fd: BorrowedFd<'a>,
        dir: BorrowedFd<'a>,
        name: &'a OsStr,
        may_change: bool,
    },
    /// A state known from the timeline (the last one recorded before a change made
    /// outside agx): its content is kept only if the store has it.
    Recorded(ObjState),
    /// Metadata, with the inode flags and project id read by the caller (a change of
    /// them: `Meta::flags`).
    Attrs {
        fd: BorrowedFd<'a>,
        flags: Option<u32>,
        projid: Option<u32>,
    },
}

/// The state after a mutation.
pub enum After {
    Absent,
    /// Known now (metadata read by the caller; content unchanged or not a file).
    State(ObjState),
    /// A file whose new content the worker reads (an `O_PATH` descriptor of it).
    Content(OwnedFd),
}

/// A begun event. (Kept small: open file handles carry one.)
pub struct Ticket {
    pub(super) event: Box<Event>,
    pub(super) staged: Option<String>,
    pub(super) target_staged: Option<String>,
    /// The before-image of `event.path` itself, when small (see [`INLINE_MAX`]): kept in
    /// the journal's begin record instead of a staging file.
    pub(super) inline: Option<Vec<u8>>,
    pub(super) stamps: Box<Stamps>,
}

/// Before-images copied on the request path up to this size are kept in memory and in the
/// journal's begin record (hex) instead of in a staging file: no file is created, written
/// and later removed per change, which on a busy ext4 costs an inode allocation on the
/// request path. Larger ones are staged. Default 32 KiB (most source files); an open
/// handle carries its before-image until release, so this bounds the memory per open
/// recorded file.
pub const INLINE_MAX: u64 = 32 * 1024;

/// Where a taken before-image's content waits for the worker.
enum Held {
    Nothing,
    Staged(String),
    Inline(Vec<u8>),
}

/// What tells whether a content change changed anything, and which content it left.
#[derive(Default)]
pub(super) struct Stamps {
    /// For a content change: the file's stamp just before its before-image was taken.
    pub(super) begun: Option<Stamp>,
    /// The file's stamp when the event was committed with `After::Content`: the content
    /// the worker reads later is this event's after-image only if the stamp still holds.
    /// None when another content change of the file began before this one ended (its
    /// changes may then be in that stamp too).
    pub(super) committed: Option<Stamp>,
    /// The file's stamp when the event was committed, also when another change overlapped:
    /// equal to `begun`, nobody changed the file during the event.
    pub(super) ended: Option<Stamp>,
    /// For a content change: its place among the open content events of the file.
    pub(super) slot: Option<Slot>,
}

/// A content event's registration in [`Shared::open`]: the file and the generation it
/// began at.
type Slot = (InodeKey, u64);

/// The content events of one file that have begun and not ended.
#[derive(Default)]
struct OpenEvents {
    count: u32,
    /// Bumped by every begin: an event that sees another generation at its end overlapped
    /// with a later change of the same file.
    gen: u64,
}

impl Ticket {
    pub(super) fn from_parts(
        event: Event,
        staged: Option<String>,
        target_staged: Option<String>,
        inline: Option<Vec<u8>>,
        committed: Option<Stamp>,
    ) -> Ticket {
        Ticket {
            event: Box::new(event),
            staged,
            target_staged,
            inline,
            stamps: Box::new(Stamps {
                committed,
                ..Stamps::default()
            }),
        }
    }

    pub fn seq(&self) -> Seq {
        self.event.seq
    }

    pub fn op(&self) -> Op {
        self.event.op
    }

    pub fn before_hash(&self) -> Option<ContentHash> {
        self.event.before.hash
    }

    /// The process the change is attributed to.
    pub fn pid(&self) -> u32 {
        self.event.actor.pid
    }

    /// The project-relative path the change began at.
    pub fn path(&self) -> &[u8] {
        &self.event.path
    }
}

/// The last after-image recorded for an inode: a later before-image with the same size,
/// times and inode is that content, already stored.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Known {
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    hash: ContentHash,
}

pub(super) fn known_of(st: &rustix::fs::Stat, hash: ContentHash) -> Known {
    Known {
        size: st.st_size,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        hash,
    }
}

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
    open: Mutex<HashMap<InodeKey, OpenEvents>>,
    proc_fd: OwnedFd,
    pub root: OwnedFd,
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
    next_seq: AtomicI64,
    /// Changes committed or cancelled so far (see `changes`).
    ended: AtomicU64,
    /// See [`Recorder::tree_epoch`].
    epoch: AtomicU64,
    /// History the database lost: (its last event, the last one recorded), until a
    /// person accepts the loss (see `head.rs`).
    lost: Mutex<Option<(i64, i64)>>,
    /// Paths checked for changes made outside agx (`outside.rs`): once per mount.
    checked: Mutex<std::collections::HashSet<Vec<u8>>>,
    tx: Sender<Job>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    ignore: IgnoreRules,
    /// Which changes pass uncaptured (see `policy.rs`).
    policy: super::policy::Policy,
    /// A connection of its own for the policy's questions (request threads ask; the
    /// worker's connection is the worker's).
    pub(super) query: Mutex<Timeline>,
    cfg: CaptureConfig,
    /// Run before each [`Recorder::flush`]: waits for changes whose end is on its way
    /// (see `fs::settle`). Set once by the mount; unset, a flush does not wait for them.
    settle: std::sync::OnceLock<Settle>,
}

/// See [`Recorder::set_settle`].
pub type Settle = Box<dyn Fn() + Send + Sync>;

pub use crate::sys::now_ns;

fn enospc_or_eio(e: &std::io::Error) -> Errno {
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
            max_size: cfg.max_size,
            slots: super::slots::Slots::for_limit(crate::sys::fd::nofile_limit()),
            linked: Default::default(),
            recent: Default::default(),
            head: Mutex::new(head),
            reserve: super::reserve::Reserve::open(agx),
            unsaved: Default::default(),
        });
        let last = super::recovery::recover(&shared, agx, &mut timeline)?;
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
            .spawn(move || super::worker::run(w_shared, timeline, rx))
            .map_err(super::CaptureError::io("starting the capture worker"))?;
        shared.slots.set_worker(worker.thread().clone());
        Ok(Recorder {
            shared,
            next_seq: AtomicI64::new(next + 1),
            lost: Mutex::new(lost),
            ended: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            checked: Mutex::default(),
            tx,
            worker: Mutex::new(Some(worker)),
            ignore,
            policy: Default::default(),
            query: Mutex::new(query),
            cfg,
            settle: std::sync::OnceLock::new(),
        })
    }

    pub fn config(&self) -> &CaptureConfig {
        &self.cfg
    }

    /// Whether changes to `path` pass through without capture (see `policy.rs`: ignore
    /// rules never exempt what has history, what git tracks, or anything under rules an
    /// agent session wrote).
    pub fn skips(&self, path: &[u8], is_dir: bool) -> bool {
        let env = super::policy::Env {
            root: &self.shared.root,
            timeline: &self.query,
            recent: &self.shared.recent,
        };
        self.policy.skips(&self.ignore, path, is_dir, &env)
    }

    /// An ignore file changed: reload the rules.
    /// The last sequence number handed out (its event may not be in the timeline yet).
    pub fn last_seq(&self) -> Seq {
        Seq(self.next_seq.load(Ordering::Relaxed) - 1)
    }

    /// The last change begun and how many changes have ended (committed or cancelled):
    /// equal values mean the timeline has not changed since, once flushed.
    pub fn changes(&self) -> (Seq, u64) {
        let ended = self.ended.load(Ordering::SeqCst);
        (self.last_seq(), ended)
    }

    /// Links of object `key` that are agx's own (before-images kept in staging by a hard
    /// link), not names in the project.
    pub fn staged_links(&self, key: InodeKey) -> u64 {
        self.shared.linked.links(key)
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

    /// History the timeline database lost, if any: (its last event, the last one
    /// recorded). Only a recorder opened with `tolerate_loss` has one.
    pub fn lost(&self) -> Option<(i64, i64)> {
        *self.lost.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A person accepts the loss of history: the timeline as it is becomes the record.
    pub fn accept_loss(&self) -> Result<(), super::CaptureError> {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, recorded)) = *lost {
            self.query
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .accept_loss(Seq(recorded), now_ns())?;
            *lost = None;
        }
        Ok(())
    }

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

    /// Whether entries of directory `dir` may have history (cheap once asked: cached per
    /// directory). False means none has any.
    pub fn may_have_history(&self, dir: &[u8]) -> bool {
        let env = super::policy::Env {
            root: &self.shared.root,
            timeline: &self.query,
            recent: &self.shared.recent,
        };
        self.policy.may_have_history(dir, &env)
    }

    /// Locks changes of object `key`'s content and makes it safe to change: held from
    /// before the change begins (its before-image) until it has taken effect, by every
    /// change of the object's content, recorded or not (see `linked.rs`). An error (a
    /// before-image kept by a staging link could not be stored) means the change must not
    /// be made.
    pub fn guard(&self, key: InodeKey) -> Result<super::linked::ContentGuard<'_>, Errno> {
        let g = self.shared.linked.lock(key);
        self.secure(key)?;
        Ok(g)
    }

    /// Locks changes of object `key`'s content for a change that keeps the object by a
    /// staging link (it loses a name) rather than changing it.
    pub fn lock(&self, key: InodeKey) -> super::linked::ContentGuard<'_> {
        self.shared.linked.lock(key)
    }

    /// Stores every before-image of object `key` kept in staging by a hard link.
    fn secure(&self, key: InodeKey) -> Result<(), Errno> {
        self.shared
            .linked
            .secure(key, |name| {
                super::worker::ingest_staged(&self.shared, name, None)
            })
            .map_err(|e| {
                log::error!("cannot store a before-image kept in staging: {e}");
                match e {
                    super::CaptureError::Io { source, .. } => enospc_or_eio(&source),
                    super::CaptureError::Store(crate::store::StoreError::Io { source, .. }) => {
                        enospc_or_eio(&source)
                    }
                    _ => Errno::EIO,
                }
            })
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

    /// Registers a content event of the file behind `fd` as begun.
    fn enter(&self, fd: BorrowedFd<'_>) -> Option<Slot> {
        let key = key_of(&rustix::fs::fstat(fd).ok()?);
        let mut open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        let o = open.entry(key).or_default();
        o.count += 1;
        o.gen += 1;
        Some((key, o.gen))
    }

    /// Ends a content event's registration; true when another content event of the same
    /// file began after it.
    fn leave(&self, slot: Option<Slot>) -> bool {
        let Some((key, gen)) = slot else {
            return false;
        };
        let mut open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(o) = open.get_mut(&key) else {
            return false;
        };
        let overlapped = o.gen != gen;
        o.count -= 1;
        if o.count == 0 {
            open.remove(&key);
        }
        overlapped
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
            actor,
            note,
        };
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
            return Err(enospc_or_eio(&e));
        }
        self.shared.recent.add(&ticket.event);
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

    /// Takes a before-state; returns it, where its content waits for the worker (in
    /// memory only when `inline` allows), and whether the content was kept.
    fn take(
        &self,
        b: Before<'_>,
        name: &str,
        inline: bool,
    ) -> Result<(ObjState, Held, bool), Errno> {
        match b {
            Before::Absent => Ok((ObjState::absent(), Held::Nothing, true)),
            Before::Recorded(mut state) => {
                // Content the store does not have was never kept (a creation's content
                // is only hashed): say so rather than name a version nobody can read.
                if state.hash.is_some_and(|h| !self.shared.store.has(&h)) {
                    state.hash = None;
                }
                Ok((state, Held::Nothing, true))
            }
            Before::Meta(fd) => {
                let st = rustix::fs::fstat(fd).map_err(crate::sys::errno)?;
                Ok((self.meta_state(fd, &st), Held::Nothing, true))
            }
            Before::Attrs { fd, flags, projid } => {
                let st = rustix::fs::fstat(fd).map_err(crate::sys::errno)?;
                let mut s = self.meta_state(fd, &st);
                if let Some(m) = s.meta.as_mut() {
                    (m.flags, m.projid) = (flags, projid);
                }
                Ok((s, Held::Nothing, true))
            }
            Before::Content(fd) => self.take_content(fd, None, name, inline),
            Before::Leaving {
                fd,
                dir,
                name: entry,
                may_change,
            } => {
                let st = rustix::fs::fstat(fd).map_err(crate::sys::errno)?;
                if kind_of(&st) != Kind::File {
                    return Ok((self.meta_state(fd, &st), Held::Nothing, true));
                }
                let link = if may_change || st.st_nlink > 1 {
                    None
                } else {
                    Some((dir, entry))
                };
                self.take_content(fd, link, name, inline)
            }
        }
    }

    fn meta_state(&self, fd: BorrowedFd<'_>, st: &rustix::fs::Stat) -> ObjState {
        let kind = kind_of(st);
        // Content does not change; note its hash when it is known for free.
        let hash = if kind == Kind::File {
            self.known_hash(st)
        } else {
            None
        };
        ObjState {
            kind,
            hash,
            meta: Some(meta_of(fd, st)),
        }
    }

    fn known_hash(&self, st: &rustix::fs::Stat) -> Option<ContentHash> {
        let known = self.shared.known.lock().unwrap_or_else(|e| e.into_inner());
        known
            .get(&key_of(st))
            .filter(|k| **k == known_of(st, k.hash))
            .map(|k| k.hash)
    }

    fn take_content(
        &self,
        fd: BorrowedFd<'_>,
        link: Option<(BorrowedFd<'_>, &OsStr)>,
        name: &str,
        inline: bool,
    ) -> Result<(ObjState, Held, bool), Errno> {
        let st = rustix::fs::fstat(fd).map_err(crate::sys::errno)?;
        let mut state = self.meta_state(fd, &st);
        if state.kind != Kind::File {
            return Ok((state, Held::Nothing, true));
        }
        if let Some(h) = state.hash {
            if self.shared.store.has(&h) {
                return Ok((state, Held::Nothing, true));
            }
        }
        let file = self.shared.reopen_read(fd).map_err(|e| enospc_or_eio(&e))?;
        if st.st_size as u64 > self.cfg.max_size {
            let (h, _) = hash_file(&file).map_err(|e| enospc_or_eio(&e))?;
            state.hash = Some(h);
            return Ok((state, Held::Nothing, false));
        }
        if let Some((dir, entry)) = link {
            let linked = super::reserve::with_room(&self.shared.reserve, || {
                self.shared.staging.link(dir, entry, name)
            });
            if linked.is_ok() {
                self.shared.linked.add(key_of(&st), name);
                return Ok((state, Held::Staged(name.to_string()), true));
            }
        }
        if inline && st.st_size as u64 <= INLINE_MAX {
            let mut bytes = Vec::with_capacity(st.st_size as usize);
            // One byte past the bound tells a file that grew meanwhile.
            std::io::Read::read_to_end(
                &mut std::io::Read::take(
                    crate::sys::read::PositionalReader::new(&file),
                    INLINE_MAX + 1,
                ),
                &mut bytes,
            )
            .map_err(|e| enospc_or_eio(&e))?;
            // Grown past the bound while read: staged like any large file.
            if bytes.len() as u64 <= INLINE_MAX {
                state.hash = Some(ContentHash::of(&bytes));
                return Ok((state, Held::Inline(bytes), true));
            }
        }
        let staged = self
            .shared
            .staging
            .copy(&file, name)
            .map_err(|e| enospc_or_eio(&e))?;
        state.hash = staged.hash;
        Ok((state, Held::Staged(name.to_string()), true))
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
        self.note_rules(&t.event);
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
        if self.tx.send(Job::Commit(Box::new(t), after)).is_err() && holds_fd {
            self.shared.slots.release();
        }
        self.ended.fetch_add(1, Ordering::SeqCst);
    }

    /// Abandons an event whose mutation failed.
    pub fn cancel(&self, mut t: Ticket) {
        self.shared.recent.remove(&t.event);
        self.leave(t.stamps.slot.take());
        let _ = self.journal_append(&Record::Cancel { seq: t.event.seq.0 });
        self.remove_staged(&t);
        self.shared.inflight.fetch_sub(1, Ordering::SeqCst);
        self.ended.fetch_add(1, Ordering::SeqCst);
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
