//! Attributes and content of one path in a view.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::fs::OFlags;

use super::{Snapshot, ViewError, Views};
use crate::restore::plan::{Content, Want};
use crate::timeline::Kind;
use crate::tree as live;

/// What `stat` shows for an object of a view.
#[derive(Clone, Debug)]
pub struct Attr {
    pub kind: Kind,
    /// Permission bits and, when known, the file type bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: (i64, u32),
    pub atime: (i64, u32),
    pub rdev: u64,
}

/// Where an open view file's bytes come from.
pub enum Source {
    /// A stored version, read and verified whole at open.
    Stored(Arc<Vec<u8>>),
    /// The live file, unchanged since the point (as of the snapshot).
    Live(OwnedFd),
}

/// agx's own state directory is never part of a view.
fn hidden(path: &[u8]) -> bool {
    path == b".agx" || path.starts_with(b".agx/")
}

impl Views {
    /// The concrete state of `path` in a snapshot.
    pub fn want(&self, s: &Snapshot, path: &[u8]) -> Result<Want, ViewError> {
        if hidden(path) {
            return Err(ViewError::NotFound);
        }
        s.state
            .want(&self.root, path)
            .map_err(std::io::Error::from)?
            .ok_or(ViewError::NotFound)
    }

    pub fn attr(&self, s: &Snapshot, path: &[u8]) -> Result<Attr, ViewError> {
        let w = self.want(s, path)?;
        Ok(self.attr_of(&w))
    }

    /// Attributes of a resolved state. A file whose content is the live file's reports the
    /// live size; a stored version reports the size recorded with it.
    pub fn attr_of(&self, w: &Want) -> Attr {
        let m = w.meta.clone().unwrap_or_default();
        let mut size = m.size;
        if w.kind == Kind::File {
            if let Some(Content::Live(src)) = &w.content {
                if let Some(o) = live::stat(&self.root, src) {
                    size = o.stat.st_size as u64;
                }
            }
        }
        if w.kind == Kind::Symlink {
            size = w.target.as_ref().map(|t| t.len() as u64).unwrap_or(0);
        }
        let default_perm = match w.kind {
            Kind::Dir => 0o755,
            Kind::Symlink => 0o777,
            _ => 0o644,
        };
        let mode = if w.meta.is_some() {
            m.mode
        } else {
            default_perm
        };
        Attr {
            kind: w.kind,
            mode,
            uid: m.uid,
            gid: m.gid,
            size,
            mtime: (m.mtime, m.mtime_nsec),
            atime: (m.atime, m.atime_nsec),
            rdev: m.rdev,
        }
    }

    /// A symlink's target at the point.
    pub fn readlink(&self, s: &Snapshot, path: &[u8]) -> Result<Vec<u8>, ViewError> {
        let w = self.want(s, path)?;
        if w.kind != Kind::Symlink {
            return Err(ViewError::NotFound);
        }
        Ok(w.target.unwrap_or_default())
    }

    /// Opens the content `path` has at the point.
    pub fn open(&self, s: &Snapshot, path: &[u8]) -> Result<Source, ViewError> {
        let w = self.want(s, path)?;
        match w.kind {
            Kind::Dir => return Err(ViewError::IsDir),
            Kind::File => {}
            _ => return Err(ViewError::NotKept),
        }
        match w.content {
            Some(Content::Hash(h)) if w.captured => match self.store.get(&h) {
                Ok(data) => Ok(Source::Stored(Arc::new(data))),
                // The before-image of a change still under way (see `capture::pending`), or
                // of one that just ended, which the capture worker is storing.
                Err(crate::store::StoreError::Missing(_)) => {
                    if let Some(d) = self.recorder.pending_content(&h) {
                        return Ok(Source::Stored(Arc::new(d)));
                    }
                    self.recorder.flush_queue();
                    match self.store.get(&h) {
                        Ok(data) => Ok(Source::Stored(Arc::new(data))),
                        Err(crate::store::StoreError::Missing(_)) => Err(ViewError::NotKept),
                        Err(e) => Err(e.into()),
                    }
                }
                Err(e) => Err(e.into()),
            },
            Some(Content::Live(src)) => {
                let fd = live::open_beneath(&self.root, &src, OFlags::RDONLY | OFlags::NOFOLLOW)
                    .map_err(std::io::Error::from)?;
                Ok(Source::Live(fd))
            }
            _ => Err(ViewError::NotKept),
        }
    }

    /// Reads up to `size` bytes at `offset` of `path` in the view named `r`, from `src`
    /// opened under `snap`. When changes began since `snap`, the snapshot and the source are
    /// renewed first; live content is read again if a change began during the read (a
    /// change is numbered before it reaches the disk, so an unchanged number after the read
    /// means the bytes predate every newer change).
    pub fn read(
        &self,
        r: &str,
        path: &[u8],
        snap: &mut Snapshot,
        src: &mut Source,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, ViewError> {
        // Bounded: a file being written continuously is served as last read.
        for _ in 0..4 {
            if !self.fresh(snap) {
                let Some(s) = self.snapshot(r) else {
                    return Err(ViewError::NotFound);
                };
                let s = s?;
                *src = self.open(&s, path)?;
                *snap = s;
            }
            let data = read_at(src, offset, size)?;
            if self.fresh(snap) || matches!(src, Source::Stored(_)) {
                return Ok(data);
            }
        }
        read_at(src, offset, size)
    }
}

fn read_at(src: &Source, offset: u64, size: u32) -> Result<Vec<u8>, ViewError> {
    match src {
        Source::Stored(d) => {
            let start = (offset as usize).min(d.len());
            let end = start.saturating_add(size as usize).min(d.len());
            Ok(d[start..end].to_vec())
        }
        Source::Live(fd) => {
            let mut buf = vec![0u8; size as usize];
            let mut got = 0;
            while got < buf.len() {
                let n = rustix::io::pread(fd, &mut buf[got..], offset + got as u64)
                    .map_err(std::io::Error::from)?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            buf.truncate(got);
            Ok(buf)
        }
    }
}
