//! The branches a daemon serves: each one's base and layer, opened the first time the
//! branch is reached, and the names `.agx/branches/` lists. Shared by the FUSE front and the
//! engine (which tells it when branches are made, renamed or deleted).

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::fill::{self, Names};
use super::layer::{self, Layer};
use super::lower::{Lower, Reader};
use super::marker::{self, Marker};
use crate::ids::BranchId;
use crate::timeline::Timeline;
use crate::views::{ViewError, Views};

/// Told the names under `.agx/branches/` that changed (the kernel forgets what it knew).
pub type OnChange = Box<dyn Fn(&[String]) + Send + Sync>;

pub struct Branches {
    agx: OwnedFd,
    views: Arc<Views>,
    timeline: Mutex<Timeline>,
    /// Live branches by name, as last read from the timeline.
    names: RwLock<BTreeMap<String, BranchId>>,
    open: RwLock<HashMap<BranchId, Arc<Tree>>>,
    /// Copies are on disk before their marker goes (`fsync = "always"`).
    sync: bool,
    on_change: OnceLock<OnChange>,
    /// Branches served by more than one FUSE front (`agx branch mount`): each front's
    /// kernel cache would miss the other's changes, so neither lets the kernel cache
    /// their entries and attributes.
    shared: RwLock<std::collections::HashSet<BranchId>>,
}

/// One branch's tree as the daemon serves it.
pub struct Tree {
    pub id: BranchId,
    lower: Lower,
    layer: Layer,
    names: Names,
    /// Held while a directory is filled (one fill at a time per branch).
    fill: Mutex<()>,
    /// Held while a file's content is copied up.
    copy: Mutex<()>,
    sync: bool,
}

impl Branches {
    pub fn new(agx: &OwnedFd, views: Arc<Views>, sync: bool) -> std::io::Result<Branches> {
        let timeline = Timeline::open_in(agx).map_err(std::io::Error::other)?;
        let b = Branches {
            agx: rustix::io::dup(agx)?,
            views,
            timeline: Mutex::new(timeline),
            names: RwLock::default(),
            open: RwLock::default(),
            sync,
            on_change: OnceLock::new(),
            shared: RwLock::default(),
        };
        b.reload();
        Ok(b)
    }

    /// Sets what is told of changed names (once, by the mount).
    pub fn set_on_change(&self, f: OnChange) {
        let _ = self.on_change.set(f);
    }

    /// Reads the live branches' names again (after the engine changed them), telling the
    /// kernel about names that went or came.
    pub fn reload(&self) {
        let list = match self
            .timeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .branches(false)
        {
            Ok(l) => l,
            Err(e) => {
                log::warn!("reading the branches: {e}");
                return;
            }
        };
        let fresh: BTreeMap<String, BranchId> = list.into_iter().map(|b| (b.name, b.id)).collect();
        let changed: Vec<String> = {
            let mut names = self.names.write().unwrap_or_else(|e| e.into_inner());
            let mut changed: Vec<String> = names
                .iter()
                .filter(|(n, id)| fresh.get(*n) != Some(id))
                .map(|(n, _)| n.clone())
                .collect();
            changed.extend(
                fresh
                    .iter()
                    .filter(|(n, id)| names.get(*n) != Some(id))
                    .map(|(n, _)| n.clone()),
            );
            *names = fresh;
            changed
        };
        if !changed.is_empty() {
            if let Some(f) = self.on_change.get() {
                f(&changed);
            }
        }
    }

    /// The live branches' names, in order.
    pub fn names(&self) -> Vec<(String, BranchId)> {
        self.names
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(n, id)| (n.clone(), *id))
            .collect()
    }

    /// The views of past points the branches read their bases from.
    pub fn views(&self) -> &Arc<Views> {
        &self.views
    }

    pub fn by_name(&self, name: &str) -> Option<BranchId> {
        self.names
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .copied()
    }

    /// Marks branch `id` as served by one more front, or one fewer.
    pub fn set_shared(&self, id: BranchId, shared: bool) {
        let mut s = self.shared.write().unwrap_or_else(|e| e.into_inner());
        if shared {
            s.insert(id);
        } else {
            s.remove(&id);
        }
    }

    /// Whether branch `id` is served by more than one front.
    pub fn is_shared(&self, id: BranchId) -> bool {
        self.shared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
    }

    /// Forgets branch `id`'s open tree (its layer is about to be removed).
    pub fn close(&self, id: BranchId) {
        self.open
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Branch `id`'s tree, its layer opened (and made, the first time).
    pub fn tree(&self, id: BranchId) -> std::io::Result<Arc<Tree>> {
        if let Some(t) = self.open.read().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(t.clone());
        }
        let mut open = self.open.write().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = open.get(&id) {
            return Ok(t.clone());
        }
        let branch = self
            .timeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .branch(id)
            .map_err(std::io::Error::other)?
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))?;
        let lower = Lower::new(self.views.clone(), branch.base);
        let layer = layer::open(&self.agx, id, |work, name| {
            fill::make_root(&lower, work, name)
        })?;
        let t = Arc::new(Tree {
            id,
            lower,
            layer,
            names: Names::default(),
            fill: Mutex::new(()),
            copy: Mutex::new(()),
            sync: self.sync,
        });
        open.insert(id, t.clone());
        Ok(t)
    }
}

fn view_io(e: ViewError) -> std::io::Error {
    match e {
        ViewError::Io(e) => e,
        ViewError::NotFound => std::io::Error::from_raw_os_error(libc::ENOENT),
        other => {
            log::warn!("branch base: {other}");
            std::io::Error::from_raw_os_error(libc::EIO)
        }
    }
}

impl Tree {
    /// The root of the branch's tree (`O_PATH`).
    pub fn root(&self) -> &OwnedFd {
        &self.layer.tree
    }

    /// The base point.
    pub fn base(&self) -> crate::ids::Seq {
        self.lower.base()
    }

    /// Fills the directory behind `dir` from the base if it is still to be filled.
    pub fn fill(&self, dir: &OwnedFd) -> std::io::Result<()> {
        if !matches!(marker::read(dir)?, Some(Marker::Dir(_))) {
            return Ok(());
        }
        let _held = self.fill.lock().unwrap_or_else(|e| e.into_inner());
        match marker::read(dir)? {
            Some(Marker::Dir(base)) => {
                fill::fill_dir(&self.lower, &self.layer.work, &self.names, dir, &base)
            }
            _ => Ok(()),
        }
    }

    /// The base path whose content the regular file behind `file` still has, if any.
    pub fn based(&self, file: &OwnedFd) -> std::io::Result<Option<Vec<u8>>> {
        Ok(match marker::read(file)? {
            Some(Marker::File(p)) => Some(p),
            _ => None,
        })
    }

    /// Copies the base content into the regular file behind `file` if it still has the
    /// base's. Returns whether it copied.
    pub fn copy_up(&self, file: &OwnedFd) -> std::io::Result<bool> {
        if self.based(file)?.is_none() {
            return Ok(false);
        }
        let _held = self.copy.lock().unwrap_or_else(|e| e.into_inner());
        match self.based(file)? {
            Some(base) => {
                fill::copy_up(&self.lower, file, &base, self.sync)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The object at `path` in the branch, the directories above it filled from the base
    /// on the way (None: absent).
    pub fn stat(&self, path: &[u8]) -> std::io::Result<Option<crate::tree::LiveObj>> {
        let mut dir: Vec<u8> = Vec::new();
        for c in path.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
            match crate::tree::stat_checked(self.root(), &dir)? {
                Some(d) if d.kind == crate::timeline::Kind::Dir => self.fill(&d.fd)?,
                _ => return Ok(None),
            }
            dir = crate::sys::path::join(&dir, c);
        }
        Ok(crate::tree::stat_checked(self.root(), path)?)
    }

    /// Makes `path` of the branch whole: the directories above it and itself filled, and
    /// with `deep`, everything below it filled and every regular file at or below it
    /// copied up (so its live content can be read, moved or copied by path). A path the
    /// branch does not have is nothing to do.
    pub fn materialize(&self, path: &[u8], deep: bool) -> std::io::Result<()> {
        let Some(o) = self.stat(path)? else {
            return Ok(());
        };
        match o.kind {
            crate::timeline::Kind::Dir => {
                self.fill(&o.fd)?;
                if deep {
                    for name in crate::tree::list(self.root(), path) {
                        self.materialize(&crate::sys::path::join(path, &name), true)?;
                    }
                }
            }
            crate::timeline::Kind::File if deep => {
                self.copy_up(&o.fd)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The names in the branch's directory `dir` (filled first).
    pub fn list(&self, dir: &[u8]) -> std::io::Result<Vec<Vec<u8>>> {
        match self.stat(dir)? {
            Some(d) if d.kind == crate::timeline::Kind::Dir => {
                self.fill(&d.fd)?;
                Ok(crate::tree::list(self.root(), dir))
            }
            _ => Ok(Vec::new()),
        }
    }

    /// The content of the branch's regular file `o` (its own, or its base's).
    pub fn content(&self, o: &crate::tree::LiveObj) -> std::io::Result<Vec<u8>> {
        match self.based(&o.fd)? {
            Some(base) => self.lower.content(&base).map_err(view_io),
            None => {
                use std::os::fd::AsRawFd;
                let path = format!("/proc/self/fd/{}", o.fd.as_raw_fd());
                let f = crate::sys::fd::without_atime(|quiet| {
                    rustix::fs::open(
                        &path,
                        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC | quiet,
                        rustix::fs::Mode::empty(),
                    )
                })?;
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut std::fs::File::from(f), &mut v)?;
                Ok(v)
            }
        }
    }

    /// A reader of the base content of `base` (see [`Lower::reader`]).
    pub fn reader(&self, base: &[u8]) -> std::io::Result<Option<Reader>> {
        self.lower.reader(base).map_err(view_io)
    }

    /// Reads through a reader; None once the base content is no longer the live file's.
    pub fn read(&self, r: &Reader, offset: u64, size: u32) -> std::io::Result<Option<Vec<u8>>> {
        self.lower.read(r, offset, size).map_err(view_io)
    }

    /// Runs `f` on the live file a reader reads, while it is the base's.
    pub fn with_live<T>(
        &self,
        r: &Reader,
        f: impl FnOnce(&OwnedFd) -> rustix::io::Result<T>,
    ) -> std::io::Result<Option<T>> {
        self.lower.with_live(r, f).map_err(view_io)
    }
}
