//! FUSE glue for the views under `.agx/at/` (served by [`crate::views`]).
//!
//! `.agx/at/` itself lists nothing: any REF opens by name (`.agx/at/before-refactor/`,
//! `.agx/at/event:12/`, `.agx/at/10m/`), so walkers of the project never descend into the
//! past.
//!
//! Node ids of view objects are allocated from [`NodeId::VIEW_START`] per (REF text, path)
//! and kept for the life of the mount (the kernel may ask about any id it was given).
//! Entries and attributes are given with a zero TTL and no negative entries: a view of a
//! moving REF (`10m`, `now`) changes, and a name absent now may be a checkpoint later.
//! Files open without FOPEN_KEEP_CACHE, so every open reads afresh.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use fuser::{Errno, FileAttr, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};

use super::AgxFs;
use crate::ids::{HandleId, NodeId};
use crate::sys::path::join;
use crate::timeline::Kind;
use crate::tree as live;
use crate::views::{Attr, Snapshot, Source, ViewError, Views};

/// Views may change at any moment: the kernel must not cache what it learns of them.
pub(super) const VIEW_TTL: Duration = Duration::ZERO;

type Place = Arc<(String, Vec<u8>)>;

#[derive(Default)]
struct Nodes {
    by_id: HashMap<u64, Place>,
    by_place: HashMap<Place, u64>,
}

struct OpenFile {
    r: String,
    path: Vec<u8>,
    state: Mutex<(Snapshot, Source)>,
}

struct DirEntry {
    name: OsString,
    attr: FileAttr,
}

enum VHandle {
    File(OpenFile),
    /// A listing taken at opendir: one handle lists one state of the directory.
    Dir(Vec<DirEntry>),
}

/// Node ids and open handles of views.
pub(crate) struct ViewTable {
    views: Option<Arc<Views>>,
    nodes: RwLock<Nodes>,
    next_id: AtomicU64,
    handles: RwLock<HashMap<u64, Arc<VHandle>>>,
    next_fh: AtomicU64,
}

impl ViewTable {
    pub(crate) fn new(views: Option<Arc<Views>>) -> ViewTable {
        ViewTable {
            views,
            nodes: RwLock::default(),
            next_id: AtomicU64::new(NodeId::VIEW_START),
            handles: RwLock::default(),
            next_fh: AtomicU64::new(HandleId::VIEW_START),
        }
    }

    fn id_of(&self, r: &str, path: &[u8]) -> NodeId {
        let place: Place = Arc::new((r.to_string(), path.to_vec()));
        if let Some(id) = self
            .nodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_place
            .get(&place)
        {
            return NodeId(*id);
        }
        let mut n = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = n.by_place.get(&place) {
            return NodeId(*id);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        n.by_id.insert(id, place.clone());
        n.by_place.insert(place, id);
        NodeId(id)
    }

    fn place(&self, id: NodeId) -> Result<Place, Errno> {
        self.nodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_id
            .get(&id.0)
            .cloned()
            .ok_or(Errno::ESTALE)
    }

    fn add_handle(&self, h: VHandle) -> HandleId {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, Arc::new(h));
        HandleId(fh)
    }

    fn handle(&self, fh: HandleId) -> Result<Arc<VHandle>, Errno> {
        self.handles
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }
}

fn errno(e: ViewError) -> Errno {
    match e {
        ViewError::NotFound => Errno::ENOENT,
        ViewError::NotDir => Errno::ENOTDIR,
        ViewError::IsDir => Errno::EISDIR,
        ViewError::Io(e) => Errno::from(e),
        other => {
            log::warn!("view: {other}");
            Errno::EIO
        }
    }
}

fn fuse_kind(a: &Attr) -> FileType {
    if a.mode & libc::S_IFMT != 0 {
        return super::attr::file_type(a.mode);
    }
    match a.kind {
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

fn file_attr(id: NodeId, a: &Attr) -> FileAttr {
    let kind = fuse_kind(a);
    let t = |(s, n): (i64, u32)| super::attr::system_time(s, n as i64);
    FileAttr {
        ino: INodeNo(id.0),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: t(a.atime),
        mtime: t(a.mtime),
        ctime: t(a.mtime),
        crtime: std::time::UNIX_EPOCH,
        kind,
        perm: (a.mode & 0o7777) as u16,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// Whether open flags ask for any change.
fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl AgxFs {
    fn views(&self) -> Result<&Arc<Views>, Errno> {
        self.vtable.views.as_ref().ok_or(Errno::ENOENT)
    }

    /// `.agx/at`: lists no subdirectory (see `view_opendir`), hence two links.
    pub(super) fn at_dir_attr(&self) -> FileAttr {
        let mut a = self.agx_dir_attr();
        a.ino = INodeNo(NodeId::AT_DIR.0);
        a.nlink = 2;
        a
    }

    /// The snapshot of the view `r` and the attributes of `path` in it.
    fn view_attr(&self, r: &str, path: &[u8]) -> Result<FileAttr, Errno> {
        let v = self.views()?;
        // A change made to the live path outside agx becomes history first, so the view
        // shows what a restore would bring back (see `capture::outside`).
        if !path.is_empty() && self.cfg.capture {
            self.rec.notice(path);
        }
        let s = v.snapshot(r).ok_or(Errno::ENOENT)?.map_err(errno)?;
        let a = v.attr(&s, path).map_err(errno)?;
        Ok(file_attr(self.vtable.id_of(r, path), &a))
    }

    /// Lookups that views answer: `at` in `.agx`, a REF in `.agx/at`, and names inside
    /// views. None for every other lookup.
    pub(super) fn view_lookup(
        &self,
        parent: NodeId,
        name: &OsStr,
    ) -> Option<Result<FileAttr, Errno>> {
        if parent == NodeId::AGX_DIR && name == "at" {
            return Some(Ok(self.at_dir_attr()));
        }
        if parent == NodeId::AT_DIR {
            let Some(r) = name.to_str() else {
                return Some(Err(Errno::ENOENT));
            };
            return Some(self.view_attr(r, b""));
        }
        if !parent.is_view() {
            return None;
        }
        Some(self.vtable.place(parent).and_then(|p| {
            let path = join(&p.1, name.as_bytes());
            self.view_attr(&p.0, &path)
        }))
    }

    pub(super) fn view_getattr(&self, ino: NodeId) -> Result<FileAttr, Errno> {
        if ino == NodeId::AT_DIR {
            return Ok(self.at_dir_attr());
        }
        let p = self.vtable.place(ino)?;
        self.view_attr(&p.0, &p.1)
    }

    pub(super) fn view_readlink(&self, ino: NodeId) -> Result<Vec<u8>, Errno> {
        let p = self.vtable.place(ino)?;
        let v = self.views()?;
        let s = v.snapshot(&p.0).ok_or(Errno::ENOENT)?.map_err(errno)?;
        v.readlink(&s, &p.1).map_err(errno)
    }

    pub(super) fn view_open(&self, ino: NodeId, flags: i32) -> Result<HandleId, Errno> {
        if writes(flags) {
            return Err(Errno::EROFS);
        }
        if ino == NodeId::AT_DIR {
            return Err(Errno::EISDIR);
        }
        let p = self.vtable.place(ino)?;
        let v = self.views()?;
        if self.cfg.capture {
            self.rec.notice(&p.1);
        }
        let s = v.snapshot(&p.0).ok_or(Errno::ENOENT)?.map_err(errno)?;
        let src = v.open(&s, &p.1).map_err(errno)?;
        Ok(self.vtable.add_handle(VHandle::File(OpenFile {
            r: p.0.clone(),
            path: p.1.clone(),
            state: Mutex::new((s, src)),
        })))
    }

    pub(super) fn view_read(&self, fh: HandleId, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let h = self.vtable.handle(fh)?;
        let VHandle::File(f) = &*h else {
            return Err(Errno::EISDIR);
        };
        let v = self.views()?;
        let mut st = f.state.lock().unwrap_or_else(|e| e.into_inner());
        let (snap, src) = &mut *st;
        v.read(&f.r, &f.path, snap, src, offset, size)
            .map_err(errno)
    }

    pub(super) fn view_release(&self, fh: HandleId) {
        self.vtable
            .handles
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
    }

    pub(super) fn view_opendir(&self, ino: NodeId) -> Result<HandleId, Errno> {
        let v = self.views()?;
        let mut entries = Vec::new();
        let dot = |name: &str, attr: FileAttr| DirEntry {
            name: name.into(),
            attr,
        };
        if ino == NodeId::AT_DIR {
            // Views are reachable by name only, never listed (like a hidden .snapshot or
            // .zfs directory): a listed view is a whole tree per checkpoint for every tool
            // that walks the project (find, grep -r, tar, du, rsync, cp -r, editors'
            // indexers), and it would show them the past as if it were the present.
            entries.push(dot(".", self.at_dir_attr()));
            entries.push(dot("..", self.agx_dir_attr()));
        } else {
            let p = self.vtable.place(ino)?;
            // Entries changed outside agx since their last recorded change (removed ones
            // included, which no lookup would reach) become history first.
            if self.cfg.capture {
                self.rec.notice_below(&p.1);
            }
            let s = v.snapshot(&p.0).ok_or(Errno::ENOENT)?.map_err(errno)?;
            let list = v.list(&s, &p.1).map_err(errno)?;
            entries.push(dot(".", self.view_attr(&p.0, &p.1)?));
            let parent = if p.1.is_empty() {
                self.at_dir_attr()
            } else {
                self.view_attr(&p.0, live::split(&p.1).0)?
            };
            entries.push(dot("..", parent));
            for (name, want) in list {
                let path = join(&p.1, &name);
                let id = self.vtable.id_of(&p.0, &path);
                entries.push(DirEntry {
                    name: OsStr::from_bytes(&name).to_os_string(),
                    attr: file_attr(id, &v.attr_of(&want)),
                });
            }
        }
        Ok(self.vtable.add_handle(VHandle::Dir(entries)))
    }

    fn view_entries(&self, fh: HandleId) -> Result<Arc<VHandle>, Errno> {
        let h = self.vtable.handle(fh)?;
        match &*h {
            VHandle::Dir(_) => Ok(h),
            VHandle::File(_) => Err(Errno::ENOTDIR),
        }
    }

    pub(super) fn view_readdir(
        &self,
        fh: HandleId,
        offset: u64,
        mut reply: ReplyDirectory,
    ) -> Result<(), (Errno, ReplyDirectory)> {
        let h = match self.view_entries(fh) {
            Ok(h) => h,
            Err(e) => return Err((e, reply)),
        };
        if let VHandle::Dir(entries) = &*h {
            for (i, e) in entries.iter().enumerate().skip(offset as usize) {
                if reply.add(e.attr.ino, i as u64 + 1, e.attr.kind, &e.name) {
                    break;
                }
            }
        }
        reply.ok();
        Ok(())
    }

    pub(super) fn view_readdirplus(
        &self,
        fh: HandleId,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) -> Result<(), (Errno, ReplyDirectoryPlus)> {
        let h = match self.view_entries(fh) {
            Ok(h) => h,
            Err(e) => return Err((e, reply)),
        };
        if let VHandle::Dir(entries) = &*h {
            for (i, e) in entries.iter().enumerate().skip(offset as usize) {
                let off = i as u64 + 1;
                if reply.add(e.attr.ino, off, &e.name, &VIEW_TTL, &e.attr, Generation(0)) {
                    break;
                }
            }
        }
        reply.ok();
        Ok(())
    }
}

/// Builds the views of a project for its mount.
pub fn open_views(
    root: &std::os::fd::OwnedFd,
    agx: &std::os::fd::OwnedFd,
    recorder: Arc<crate::capture::Recorder>,
) -> Option<Arc<Views>> {
    let root = match rustix::io::dup(root) {
        Ok(r) => r,
        Err(e) => {
            log::warn!("views unavailable: {e}");
            return None;
        }
    };
    match Views::new(root, agx, recorder) {
        Ok(v) => Some(Arc::new(v)),
        Err(e) => {
            log::warn!("views unavailable: {e}");
            None
        }
    }
}

impl AgxFs {
    /// SEEK_DATA and SEEK_HOLE (the only seeks the kernel forwards): a view file is all
    /// data.
    pub(super) fn view_lseek(&self, fh: HandleId, offset: i64, whence: i32) -> Result<i64, Errno> {
        let h = self.vtable.handle(fh)?;
        let VHandle::File(f) = &*h else {
            return Err(Errno::EISDIR);
        };
        let size = {
            let st = f.state.lock().unwrap_or_else(|e| e.into_inner());
            match &st.1 {
                Source::Stored(d) => d.len() as i64,
                Source::Live(fd) => rustix::fs::fstat(fd).map_err(super::errno)?.st_size,
            }
        };
        match whence {
            libc::SEEK_DATA if offset < size => Ok(offset),
            libc::SEEK_HOLE if offset < size => Ok(size),
            libc::SEEK_DATA | libc::SEEK_HOLE => Err(Errno::ENXIO),
            _ => Err(Errno::EINVAL),
        }
    }
}
