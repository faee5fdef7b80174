//! A branch's base: the main tree as it was at the branch's base point, read the way the
//! views read any point (`crate::views`): what the main tree has not changed since is read
//! from the live tree, the rest from the store. Nothing of it is copied when a branch is
//! made; a directory's entries are copied when the branch first reaches it (`fill.rs`), a
//! file's content when the branch first changes it.
//!
//! The main tree keeps moving while a branch reads its base. A change of the main tree is
//! numbered before it reaches the disk and its before-image is kept, so a read of a live
//! file followed by an unchanged change count saw the base's bytes; otherwise the read is
//! done again from a renewed snapshot, which then names the stored before-image.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use crate::ids::Seq;
use crate::restore::plan::Want;
use crate::views::{Attr, Snapshot, Source, ViewError, Views};

/// How often a read or copy is tried again while the main tree changes the live file.
const TRIES: usize = 4;

/// How often a listing is taken again while the main tree changes.
const LIST_TRIES: usize = 100;

pub struct Lower {
    views: Arc<Views>,
    base: Seq,
}

/// The base content of one file opened for reading: the live file of the main tree as long
/// as the main tree has not changed it since the base point.
pub struct Reader {
    path: Vec<u8>,
    state: Mutex<(Snapshot, OwnedFd)>,
}

impl Lower {
    pub fn new(views: Arc<Views>, base: Seq) -> Lower {
        Lower { views, base }
    }

    pub fn base(&self) -> Seq {
        self.base
    }

    fn snapshot(&self) -> Result<Snapshot, ViewError> {
        self.views.at(self.base)
    }

    /// The entries of the base directory `dir`, in name order, each with its size. Taken
    /// again while the main tree changes meanwhile: a change begun during the listing (a
    /// file created now, say) could otherwise pass for part of the base.
    pub fn list(&self, dir: &[u8]) -> Result<Vec<(Vec<u8>, Want, u64)>, ViewError> {
        let mut tries = 0;
        loop {
            let s = self.snapshot()?;
            let list: Vec<(Vec<u8>, Want, u64)> = self
                .views
                .list(&s, dir)?
                .into_iter()
                .map(|(name, w)| {
                    let size = self.views.attr_of(&w).size;
                    (name, w, size)
                })
                .collect();
            tries += 1;
            if self.views.fresh(&s) || tries >= LIST_TRIES {
                if tries >= LIST_TRIES {
                    log::warn!("a branch's base listing kept changing under a busy main tree");
                }
                return Ok(list);
            }
        }
    }

    /// The base state of `path`.
    pub fn want(&self, path: &[u8]) -> Result<Want, ViewError> {
        let s = self.snapshot()?;
        self.views.want(&s, path)
    }

    /// What `stat` shows of a base state (a live file's size is read now).
    pub fn attr_of(&self, w: &Want) -> Attr {
        self.views.attr_of(w)
    }

    /// Writes the base content of the file `path` into `dst` (open for writing) from
    /// offset 0 and cuts `dst` to its length. Returns the length.
    pub fn copy_to(&self, path: &[u8], dst: &OwnedFd) -> Result<u64, ViewError> {
        for _ in 0..TRIES {
            let s = self.snapshot()?;
            let len = match self.views.open(&s, path)? {
                Source::Stored(data) => {
                    write_all(dst, &data)?;
                    data.len() as u64
                }
                Source::Live(src) => {
                    let n = copy_fd(&src, dst)?;
                    if !self.views.fresh(&s) {
                        continue;
                    }
                    n
                }
            };
            rustix::fs::ftruncate(dst, len).map_err(std::io::Error::from)?;
            return Ok(len);
        }
        // Changed on every try: the stored before-image must be named by now.
        let s = self.snapshot()?;
        match self.views.open(&s, path)? {
            Source::Stored(data) => {
                write_all(dst, &data)?;
                rustix::fs::ftruncate(dst, data.len() as u64).map_err(std::io::Error::from)?;
                Ok(data.len() as u64)
            }
            Source::Live(src) => {
                let n = copy_fd(&src, dst)?;
                rustix::fs::ftruncate(dst, n).map_err(std::io::Error::from)?;
                Ok(n)
            }
        }
    }

    /// The base content of the file `path`, whole.
    pub fn content(&self, path: &[u8]) -> Result<Vec<u8>, ViewError> {
        let mut last = Vec::new();
        for _ in 0..TRIES {
            let s = self.snapshot()?;
            match self.views.open(&s, path)? {
                Source::Stored(data) => return Ok(data.as_ref().clone()),
                Source::Live(src) => {
                    let mut v = Vec::new();
                    std::io::Read::read_to_end(&mut std::fs::File::from(src), &mut v)?;
                    if self.views.fresh(&s) {
                        return Ok(v);
                    }
                    last = v;
                }
            }
        }
        // Changed on every try: the stored before-image must be named by now.
        let s = self.snapshot()?;
        match self.views.open(&s, path)? {
            Source::Stored(data) => Ok(data.as_ref().clone()),
            Source::Live(_) => Ok(last),
        }
    }

    /// A reader of the base content of `path`, when that is a live file of the main tree;
    /// None when it is a stored version (the caller copies it up and reads its copy).
    pub fn reader(&self, path: &[u8]) -> Result<Option<Reader>, ViewError> {
        let s = self.snapshot()?;
        match self.views.open(&s, path)? {
            Source::Live(fd) => Ok(Some(Reader {
                path: path.to_vec(),
                state: Mutex::new((s, fd)),
            })),
            Source::Stored(_) => Ok(None),
        }
    }

    /// Reads up to `size` bytes at `offset` through `r`. None: the main tree changed the
    /// file since the base point, so the base content is a stored version now (copy it up).
    pub fn read(&self, r: &Reader, offset: u64, size: u32) -> Result<Option<Vec<u8>>, ViewError> {
        let mut st = r.state.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..TRIES {
            if !self.views.fresh(&st.0) {
                let s = self.snapshot()?;
                match self.views.open(&s, &r.path)? {
                    Source::Live(fd) => *st = (s, fd),
                    Source::Stored(_) => return Ok(None),
                }
            }
            let data = pread_all(&st.1, offset, size)?;
            if self.views.fresh(&st.0) {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }

    /// Runs `f` on the live file behind `r` (lseek and the like), as long as it is the
    /// base's; None otherwise.
    pub fn with_live<T>(
        &self,
        r: &Reader,
        f: impl FnOnce(&OwnedFd) -> rustix::io::Result<T>,
    ) -> Result<Option<T>, ViewError> {
        let mut st = r.state.lock().unwrap_or_else(|e| e.into_inner());
        if !self.views.fresh(&st.0) {
            let s = self.snapshot()?;
            match self.views.open(&s, &r.path)? {
                Source::Live(fd) => *st = (s, fd),
                Source::Stored(_) => return Ok(None),
            }
        }
        Ok(Some(f(&st.1).map_err(std::io::Error::from)?))
    }
}

fn write_all(dst: &OwnedFd, data: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        let n = rustix::io::pwrite(dst, &data[done..], done as u64)?;
        if n == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        done += n;
    }
    Ok(())
}

fn pread_all(fd: &OwnedFd, offset: u64, size: u32) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; size as usize];
    let mut got = 0;
    while got < buf.len() {
        let n = rustix::io::pread(fd, &mut buf[got..], offset + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(buf)
}

/// Copies all of `src` into `dst` from offset 0, in the kernel where it can.
fn copy_fd(src: &OwnedFd, dst: &OwnedFd) -> std::io::Result<u64> {
    let mut off_in: u64 = 0;
    let mut off_out: u64 = 0;
    loop {
        match rustix::fs::copy_file_range(src, Some(&mut off_in), dst, Some(&mut off_out), 1 << 30)
        {
            Ok(0) => return Ok(off_out),
            Ok(_) => continue,
            Err(
                rustix::io::Errno::XDEV
                | rustix::io::Errno::NOSYS
                | rustix::io::Errno::OPNOTSUPP
                | rustix::io::Errno::INVAL,
            ) => break,
            Err(e) => return Err(e.into()),
        }
    }
    // Where the kernel cannot copy: through a buffer.
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = rustix::io::pread(src, &mut buf, off_in)?;
        if n == 0 {
            return Ok(off_out);
        }
        write_at(dst, &buf[..n], off_out)?;
        off_in += n as u64;
        off_out += n as u64;
    }
}

fn write_at(dst: &OwnedFd, data: &[u8], at: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        let n = rustix::io::pwrite(dst, &data[done..], at + done as u64)?;
        if n == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        done += n;
    }
    Ok(())
}
