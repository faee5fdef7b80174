//! The engine behind the history commands (log, show, diff, restore): the same code runs
//! in the daemon (for a mounted project, asked over the control socket) and in the CLI
//! (for a project that is not mounted, opening `.agx/` directly).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::Serialize;
use thiserror::Error;

use crate::capture::config::Config;
use crate::capture::{CaptureError, Recorder};
use crate::ids::Seq;
use crate::restore::{Report, RestoreError};
use crate::store::Store;
use crate::timeline::refs::{self, RefError};
use crate::timeline::{Kind, Timeline, TimelineError};

pub use super::restore::RestoreOpts;
pub use super::undo::OnConflict;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Ref(#[from] RefError),
    #[error(transparent)]
    Timeline(#[from] TimelineError),
    #[error(transparent)]
    Restore(#[from] RestoreError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{0}: no agx history here (mount it with `agx mount` first)")]
    NoHistory(String),
    #[error("the disk is full: {0} change(s) agx recorded in its journal are not in the timeline yet, so this answer would leave them out; free some space on the disk (agx keeps what is deleted through the mount, so that frees nothing: remove files outside the project, or run `agx gc`) and run the command again")]
    Unsaved(usize),
    #[error(".agx/timeline.db is damaged ({0}); `agx verify` lists the problems. Move .agx/timeline.db and its -wal and -shm files aside to start a new history (the stored objects stay)")]
    Damaged(String),
    #[error("{0} is in use by another agx process (a daemon or a running command)")]
    Locked(String),
    #[error("{path} did not exist at {at}")]
    Absent { path: String, at: String },
    #[error("{path} is a directory at {at}")]
    IsDir { path: String, at: String },
    #[error("{path}: its content at {at} was not kept ({why})")]
    NotKept {
        path: String,
        at: String,
        why: String,
    },
    #[error("{path}: its content at {at} cannot be read: {source}")]
    BadObject {
        path: String,
        at: String,
        #[source]
        source: crate::store::StoreError,
    },
    #[error("{0} path(s) were changed by someone else after the session began; nothing restored (--skip-conflicts restores the rest, --force restores them too)")]
    Conflicts(usize),
    /// A plan with paths it cannot restore, and no leave to skip them.
    #[error("{path} cannot be restored to {at}: {why}{more}; nothing restored (--skip-missing restores the rest)")]
    Unrestorable {
        path: String,
        at: String,
        why: String,
        /// ", and N more path(s)" or "".
        more: String,
    },
    /// A request that names something that does not exist or cannot be done.
    #[error("{0}")]
    Invalid(String),
    #[error(".agx/config.toml: {0}")]
    Config(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EngineError {
    let what = what.into();
    move |source| EngineError::Io { what, source }
}

/// Reads `.agx/config.toml` through the `.agx` descriptor (defaults when absent).
pub fn read_config(agx: impl AsFd) -> Result<Config, EngineError> {
    match rustix::fs::openat(
        agx,
        "config.toml",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s)
                .map_err(io("reading .agx/config.toml"))?;
            Config::parse(&s).map_err(|e| EngineError::Config(e.to_string()))
        }
        Err(rustix::io::Errno::NOENT) => Ok(Config::default()),
        Err(e) => Err(io("opening .agx/config.toml")(e.into())),
    }
}

/// How an engine opens its project.
#[derive(Clone, Copy, Debug, Default)]
pub struct Opening {
    /// Check the timeline database's pages (`PRAGMA quick_check`, about a second per
    /// GiB) and refuse a damaged one. The daemon does, at mount.
    pub check_integrity: bool,
    /// Open a timeline that lost recorded history (see `capture::head`) to report it
    /// (`agx verify`) or accept the loss (`--repair`), rather than refusing.
    pub tolerate_loss: bool,
}

/// Told the paths a restore touched and the inodes whose link count it changed.
/// Told which paths (and inodes) a restore changed, in the main tree (None) or in the
/// branch whose tree's root is given: the daemon drops what the kernel cached of them.
type RestoreHook = Box<dyn Fn(Option<&OwnedFd>, &[Vec<u8>], &[u64]) + Send + Sync>;

pub struct Engine {
    pub root: OwnedFd,
    pub agx: OwnedFd,
    pub store: Store,
    timeline: Mutex<Timeline>,
    pub recorder: Arc<Recorder>,
    on_restore: Mutex<Option<RestoreHook>>,
    /// Attribution of processes to sessions, shared with the FUSE front.
    pub attrib: Arc<crate::attribution::Attributor>,
    /// The branches the daemon serves (set by the mount; unset in a local command).
    branches: std::sync::OnceLock<Arc<crate::branches::Branches>>,
    /// Serves branches at mountpoints of their own (set by the mount).
    mounter: std::sync::OnceLock<Box<dyn super::branches::BranchMounter>>,
    /// Holds the project's lock (`.agx/lock`) for as long as the engine lives.
    _lock: OwnedFd,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub events: i64,
    pub last_event: i64,
    pub store_bytes: u64,
    /// The oldest restorable point (the gc horizon, else 0) and when it was current.
    pub oldest_point: i64,
    pub oldest_time_ns: Option<i64>,
    /// Changes in the journal the timeline could not take yet (a full disk).
    pub unsaved: usize,
    /// agx gave back its reserved room: the disk was full.
    pub disk_full: bool,
}

impl Engine {
    /// Opens capture and history for the project whose root (an `O_PATH` descriptor
    /// taken before any mount) is `root`, creating `.agx/` if needed. Takes the project's
    /// lock: only one engine (daemon or command) at a time.
    pub fn open(root: OwnedFd, label: &str) -> Result<Engine, EngineError> {
        Self::open_with(root, label, Opening::default())
    }

    /// [`Engine::open`] with options (see [`Opening`]).
    pub fn open_with(root: OwnedFd, label: &str, how: Opening) -> Result<Engine, EngineError> {
        match rustix::fs::mkdirat(
            &root,
            crate::sys::path::AGX_DIR_NAME,
            Mode::from_raw_mode(0o700),
        ) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(io(format!("creating {label}/.agx"))(e.into())),
        }
        let agx = rustix::fs::openat(
            &root,
            crate::sys::path::AGX_DIR_NAME,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(format!("opening {label}/.agx"))(e.into()))?;
        let lock = rustix::fs::openat(
            &agx,
            "lock",
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io("opening .agx/lock")(e.into()))?;
        if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(EngineError::Locked(label.to_string()));
        }
        let cfg = read_config(&agx)?;
        let fsync = cfg.capture.fsync == crate::capture::config::Fsync::Always;
        let store = Store::open(&agx, fsync)?;
        let rec_timeline = Timeline::open_in(&agx)?;
        let query = Timeline::open_in(&agx)?;
        let rec_root = rustix::io::dup(&root).map_err(|e| io("dup")(e.into()))?;
        if how.check_integrity {
            if let Some(problem) = query.quick_check()? {
                return Err(EngineError::Damaged(problem));
            }
        }
        let rec_query = Timeline::open_in(&agx)?;
        let recorder = Recorder::open(
            rec_root,
            &agx,
            cfg.capture,
            rec_timeline,
            rec_query,
            how.tolerate_loss,
        )?;
        let engine = Engine {
            root,
            agx,
            store,
            timeline: Mutex::new(query),
            recorder: Arc::new(recorder),
            on_restore: Mutex::new(None),
            attrib: Arc::default(),
            branches: std::sync::OnceLock::new(),
            mounter: std::sync::OnceLock::new(),
            _lock: lock,
        };
        engine.load_sessions()?;
        Ok(engine)
    }

    /// Opens the engine of a project that is not mounted, by its path.
    pub fn open_path(project: &Path) -> Result<Engine, EngineError> {
        Self::open_path_with(project, Opening::default())
    }

    /// [`Engine::open_path`] with options.
    pub fn open_path_with(project: &Path, how: Opening) -> Result<Engine, EngineError> {
        if !project
            .join(crate::sys::path::AGX_DIR_NAME)
            .join("timeline.db")
            .exists()
        {
            return Err(EngineError::NoHistory(project.display().to_string()));
        }
        let root = rustix::fs::open(
            project,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(project.display().to_string())(e.into()))?;
        Self::open_with(root, &project.display().to_string(), how)
    }

    pub(crate) fn tl(&self) -> std::sync::MutexGuard<'_, Timeline> {
        self.timeline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Flushes, and refuses when recorded changes could not reach the timeline (a full
    /// disk): an answer from the timeline would leave them out.
    pub(crate) fn flush_all(&self) -> Result<(), EngineError> {
        self.recorder.flush();
        match self.recorder.unsaved() {
            0 => Ok(()),
            n => Err(EngineError::Unsaved(n)),
        }
    }

    pub fn point(&self, r: &str) -> Result<Seq, EngineError> {
        self.flush_all()?;
        Ok(refs::resolve(r, &self.tl())?)
    }

    /// Records the changes made outside agx to the paths a command is about to look at
    /// (see `capture::outside`): every path with history, or with `paths`, those paths,
    /// the paths with history below them and what lies below those that are live
    /// directories. Returns whether it recorded any (a REF such as `now` then names a
    /// later point). In the daemon a path is checked once per mount (the lookups of the
    /// mount notice the rest); an unmounted command checks every time.
    pub(crate) fn notice_for(&self, paths: &[Vec<u8>]) -> Result<bool, EngineError> {
        let mut all = Vec::new();
        if paths.is_empty() {
            all = self.tl().history_paths(None)?;
        }
        for p in paths {
            all.push(p.clone());
            all.extend(self.tl().history_paths(Some(p))?);
            if crate::tree::stat(&self.root, p).is_some_and(|o| o.kind == Kind::Dir) {
                crate::tree::walk(&self.root, p, &mut all);
            }
        }
        all.sort();
        all.dedup();
        let n = self.recorder.notice_all(all.iter());
        if n > 0 {
            self.recorder.flush();
        }
        Ok(n > 0)
    }

    /// Records every change made outside agx that the mount has not noticed yet, before
    /// a command names the current point (a checkpoint, a branch, a session's start): a
    /// point must come after what the tree already showed, or a restore to it would undo
    /// a change made before it (a file removed while unmounted would come back). See
    /// `Recorder::sweep`: once per mount.
    /// Callers flush after it (the events it records must reach the timeline before the
    /// point is named).
    pub(crate) fn notice_everything(&self) -> Result<(), EngineError> {
        self.recorder.sweep();
        Ok(())
    }

    /// The point `r` names once the changes made outside agx to `paths` (all when empty)
    /// are recorded.
    pub(crate) fn noticed_point(&self, r: &str, paths: &[Vec<u8>]) -> Result<Seq, EngineError> {
        self.recorder.flush();
        // The state at a point mirrors live paths other than `paths` (renamed since):
        // every path with history is checked, once per mount.
        self.recorder.sweep();
        if !paths.is_empty() {
            self.notice_for(paths)?;
        }
        self.point(r)
    }

    pub fn summary(&self) -> Result<Summary, EngineError> {
        self.recorder.flush();
        let unsaved = self.recorder.unsaved();
        let tl = self.tl();
        let (oldest, oldest_time_ns) = tl.oldest_point()?;
        Ok(Summary {
            events: tl.count()?,
            last_event: tl.max_seq()?.0,
            store_bytes: self.store.disk_usage(),
            oldest_point: oldest.0,
            oldest_time_ns,
            unsaved,
            disk_full: self.recorder.disk_full(),
        })
    }

    /// Called after a restore of the main tree: the daemon hooks kernel cache
    /// invalidation here.
    pub fn after_restore(&self, report: &Report) {
        self.after_restore_of(None, report);
    }

    /// Called after a restore of the tree `branch` names (None: the main tree).
    pub fn after_restore_in(&self, branch: Option<&str>, report: &Report) {
        let tree = branch
            .filter(|b| *b != "main")
            .and_then(|b| {
                self.tl()
                    .branch_by_name(b.strip_prefix("branch:").unwrap_or(b))
                    .ok()
            })
            .flatten()
            .map(|b| b.id);
        self.after_restore_of(tree, report);
    }

    fn after_restore_of(&self, tree: Option<crate::ids::BranchId>, report: &Report) {
        let root = match (tree, self.branches()) {
            (None, _) => None,
            (Some(id), Some(set)) => match set.tree(id) {
                Ok(t) => Some(t),
                Err(_) => return,
            },
            (Some(_), None) => return,
        };
        if let Some(hook) = self
            .on_restore
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            hook(
                root.as_ref().map(|t| t.root()),
                &report.touched,
                &report.inodes,
            );
        }
        if let (Some(id), Some(m)) = (tree, self.mounter()) {
            m.invalidate(id, &report.touched, &report.inodes);
        }
    }

    /// The daemon's branch set, told of every change of branches (once, by the mount).
    pub fn set_branches(&self, b: Arc<crate::branches::Branches>) {
        let _ = self.branches.set(b);
    }

    pub(crate) fn branches(&self) -> Option<&Arc<crate::branches::Branches>> {
        self.branches.get()
    }

    /// Sets what serves branches at mountpoints of their own (once, by the mount).
    pub fn set_mounter(&self, m: Box<dyn super::branches::BranchMounter>) {
        let _ = self.mounter.set(m);
    }

    pub(crate) fn mounter(&self) -> Option<&dyn super::branches::BranchMounter> {
        self.mounter.get().map(|b| b.as_ref())
    }

    /// Sets what `after_restore` does with the paths (and inodes) a restore touched.
    pub fn set_restore_hook(&self, hook: RestoreHook) {
        *self.on_restore.lock().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    /// Adds `/.agx/` to `.git/info/exclude` when the project is a git repository that
    /// does not exclude it yet, as a recorded change of agx's own (a change the timeline
    /// did not know would later look like one made outside agx). Called at mount.
    pub fn exclude_from_git(&self) -> Result<(), EngineError> {
        use crate::capture::{After, Before};
        use crate::mount::gitexclude;
        if !gitexclude::wanted(&self.root) {
            return Ok(());
        }
        let path = b".git/info/exclude".to_vec();
        let live = crate::tree::stat(&self.root, &path);
        let before = match &live {
            Some(o) => Before::Content(o.fd.as_fd()),
            None => Before::Absent,
        };
        let op = if live.is_some() {
            crate::timeline::Op::Write
        } else {
            crate::timeline::Op::Create
        };
        let actor = crate::timeline::Actor {
            pid: std::process::id(),
            process: "agx".into(),
            exe: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            ..Default::default()
        };
        let note = Some("agx mount: keeps .agx/ out of git status".to_string());
        let t = self
            .recorder
            .begin(op, path.clone(), None, actor, before, None, note)
            .map_err(|e| {
                io("recording .git/info/exclude")(std::io::Error::from_raw_os_error(e.code()))
            })?;
        let r = gitexclude::ensure(&self.root);
        if let Some(t) = t {
            match (&r, crate::tree::stat(&self.root, &path)) {
                (Ok(_), Some(o)) => self.recorder.commit(t, After::Content(o.fd)),
                _ => self.recorder.cancel(t),
            }
        }
        r.map(drop).map_err(io(".git/info/exclude"))
    }

    /// Records the start of a mount (the default FROM of `diff`).
    pub fn record_mount(&self) -> Result<(), EngineError> {
        self.recorder.flush();
        let mut tl = self.tl();
        let last = tl.max_seq()?;
        tl.record_mount(crate::sys::now_ns(), last, std::process::id())?;
        Ok(())
    }
}
