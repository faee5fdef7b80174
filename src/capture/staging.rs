//! Staging: before-images taken on the request path, in `.agx/staging/`, until the
//! background worker moves them into the store. Same filesystem as the project, so an
//! unlinked or replaced file is kept by a hard link, and a copy can be a reflink.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::ids::ContentHash;
use crate::sys::read::buffer_for;

pub const DIR: &str = "staging";

pub struct Staging {
    pub dir: OwnedFd,
    fsync: bool,
    /// Cleared after the first failed FICLONE: the filesystem cannot reflink.
    reflink: AtomicBool,
}

/// A copied before-image: its hash when it was computed while copying (not for a
/// reflink, which copies no bytes).
pub struct Staged {
    pub hash: Option<ContentHash>,
}

impl Staging {
    pub fn open(agx: impl AsFd, fsync: bool) -> std::io::Result<Staging> {
        match rustix::fs::mkdirat(&agx, DIR, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let dir = rustix::fs::openat(
            &agx,
            DIR,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Staging {
            dir,
            fsync,
            reflink: AtomicBool::new(true),
        })
    }

    /// Keeps the object `name` in directory `dir` by a hard link.
    pub fn link(
        &self,
        dir: impl AsFd,
        name: &std::ffi::OsStr,
        as_name: &str,
    ) -> std::io::Result<()> {
        let _ = rustix::fs::unlinkat(&self.dir, as_name, AtFlags::empty());
        rustix::fs::linkat(dir, name, &self.dir, as_name, AtFlags::empty())?;
        Ok(())
    }

    /// Copies the readable file `src` into staging as `as_name`: a reflink where the
    /// filesystem can, otherwise a copy that hashes as it goes.
    pub fn copy(&self, src: impl AsFd, as_name: &str) -> std::io::Result<Staged> {
        let dst = rustix::fs::openat(
            &self.dir,
            as_name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let result = self.fill(&src, &dst);
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, as_name, AtFlags::empty());
        }
        result
    }

    fn fill(&self, src: &impl AsFd, dst: &OwnedFd) -> std::io::Result<Staged> {
        if self.reflink.load(Ordering::Relaxed) {
            match rustix::fs::ioctl_ficlone(dst, src) {
                Ok(()) => {
                    if self.fsync {
                        rustix::fs::fsync(dst)?;
                    }
                    return Ok(Staged { hash: None });
                }
                Err(_) => self.reflink.store(false, Ordering::Relaxed),
            }
        }
        let mut hasher = blake3::Hasher::new();
        let input = std::fs::File::from(rustix::io::dup(src)?);
        let mut out = std::fs::File::from(rustix::io::dup(dst)?);
        let mut buf = buffer_for(rustix::fs::fstat(src)?.st_size as u64);
        let mut off = 0u64;
        loop {
            let n = rustix::io::pread(&input, &mut buf, off)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            off += n as u64;
        }
        if self.fsync {
            out.sync_data()?;
        }
        Ok(Staged {
            hash: Some(ContentHash(*hasher.finalize().as_bytes())),
        })
    }

    /// Keeps the staged before-image `name` under its hash too (`staging/<hex>`), where
    /// the store reads it while it has no room for it (a full disk). A hard link: no
    /// copy, no data block.
    pub fn keep_by_hash(&self, name: &str, h: &ContentHash) -> std::io::Result<()> {
        match rustix::fs::linkat(&self.dir, name, &self.dir, h.to_hex(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub fn open_read(&self, name: &str) -> std::io::Result<std::fs::File> {
        Ok(std::fs::File::from(rustix::fs::openat(
            &self.dir,
            name,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?))
    }

    pub fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.dir, name, AtFlags::empty());
    }

    /// Names of every staged file (leftovers after a crash).
    pub fn list(&self) -> std::io::Result<Vec<String>> {
        let d = rustix::fs::openat(
            &self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut out = Vec::new();
        for e in rustix::fs::Dir::read_from(&d)? {
            let e = e?;
            let n = e.file_name().to_string_lossy().into_owned();
            if n != "." && n != ".." {
                out.push(n);
            }
        }
        Ok(out)
    }
}
