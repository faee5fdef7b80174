//! Filling a branch's tree from its base, lazily: a directory gets its entries the first
//! time the branch reaches it, a file its content the first time the branch changes it.
//!
//! Invariants:
//! - An object appears in the tree whole: it is made in the layer's `work/` (metadata,
//!   marker and all) and renamed into its directory.
//! - A directory carries its marker until every entry of its base directory is in it: a
//!   fill interrupted by a crash is finished by the next one (entries already there are
//!   kept: nothing else can have changed a directory the branch never reached).
//! - A file carries its marker until its content is the base's; its content is copied into
//!   the file itself (not a new one), so every name and open descriptor of it sees the
//!   copy. An interrupted copy is done again from the start.
//! - What the fill writes is not a change of the branch: it records no event. The base
//!   state it copies is kept by the main tree's history for as long as the branch lives.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Gid, Mode, OFlags, Timespec, Timestamps, Uid, XattrFlags};

use super::lower::Lower;
use super::marker::{self, Marker};
use crate::restore::plan::Want;
use crate::sys::path::{is_agx_xattr, join};
use crate::timeline::{Kind, Meta};
use crate::views::ViewError;

fn io(e: ViewError) -> std::io::Error {
    match e {
        ViewError::Io(e) => e,
        ViewError::NotFound => std::io::Error::from_raw_os_error(libc::ENOENT),
        ViewError::NotDir => std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ViewError::IsDir => std::io::Error::from_raw_os_error(libc::EISDIR),
        other => {
            log::warn!("branch base: {other}");
            std::io::Error::from_raw_os_error(libc::EIO)
        }
    }
}

fn proc_path(fd: impl AsFd) -> String {
    use std::os::fd::AsRawFd;
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

fn ts(sec: i64, nsec: u32) -> Timespec {
    Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    }
}

/// Temporary names in a layer's `work/`.
#[derive(Default)]
pub struct Names(AtomicU64);

impl Names {
    fn next(&self) -> String {
        format!(
            "f.{}.{}",
            std::process::id(),
            self.0.fetch_add(1, Ordering::Relaxed)
        )
    }
}

/// Owner, mode and xattrs of `m` on the object `name` in `dir` (reached as `fd`, which
/// may be `O_PATH`). Times come last, once the object is complete (see [`set_times`]).
fn set_meta(dir: &OwnedFd, name: &str, fd: &OwnedFd, kind: Kind, m: &Meta) -> std::io::Result<()> {
    rustix::fs::chownat(
        dir,
        name,
        Some(Uid::from_raw(m.uid)),
        Some(Gid::from_raw(m.gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .or_else(|e| {
        // Not root: objects keep the daemon's owner (the branch is the daemon user's).
        if e == rustix::io::Errno::PERM {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    if kind == Kind::Symlink {
        return Ok(());
    }
    rustix::fs::chmodat(
        dir,
        name,
        Mode::from_raw_mode(m.mode & 0o7777),
        AtFlags::empty(),
    )?;
    let path = proc_path(fd);
    for (k, v) in &m.xattrs {
        if is_agx_xattr(k) {
            continue;
        }
        let Ok(key) = std::str::from_utf8(k) else {
            continue;
        };
        if let Err(e) = rustix::fs::setxattr(&path, key, v, XattrFlags::empty()) {
            // Namespaces the daemon may not write (trusted.*, security.* without the
            // privilege) are left out of the branch, said once per object.
            log::debug!("branch fill: xattr {key} not copied: {e}");
        }
    }
    Ok(())
}

fn set_times(dir: &OwnedFd, name: &str, m: &Meta) -> std::io::Result<()> {
    let times = Timestamps {
        last_access: ts(m.atime, m.atime_nsec),
        last_modification: ts(m.mtime, m.mtime_nsec),
    };
    rustix::fs::utimensat(dir, name, &times, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Makes in `work` under `name` the branch's object for the base object at `base` whose
/// state is `w`: a directory still to be filled, a file whose content is still the base's
/// (its length set, no data written), a symlink or a special file whole.
fn make(work: &OwnedFd, name: &str, base: &[u8], w: &Want, size: u64) -> std::io::Result<()> {
    let m = w.meta.clone().unwrap_or_default();
    let open_path = |flags: OFlags| {
        rustix::fs::openat(
            work,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let fd = match w.kind {
        Kind::Dir => {
            rustix::fs::mkdirat(work, name, Mode::from_raw_mode(0o700))?;
            let fd = open_path(OFlags::PATH | OFlags::DIRECTORY)?;
            marker::write(&fd, &Marker::Dir(base.to_vec()))?;
            fd
        }
        Kind::File => {
            let fd = rustix::fs::openat(
                work,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            rustix::fs::ftruncate(&fd, size)?;
            marker::write(&fd, &Marker::File(base.to_vec()))?;
            fd
        }
        Kind::Symlink => {
            let target = w.target.clone().unwrap_or_default();
            rustix::fs::symlinkat(OsStr::from_bytes(&target), work, name)?;
            open_path(OFlags::PATH)?
        }
        Kind::Other => {
            let ft = rustix::fs::FileType::from_raw_mode(m.mode);
            rustix::fs::mknodat(work, name, ft, Mode::from_raw_mode(m.mode & 0o7777), m.rdev)?;
            open_path(OFlags::PATH)?
        }
        Kind::Absent => return Err(std::io::Error::from_raw_os_error(libc::ENOENT)),
    };
    if w.meta.is_some() {
        set_meta(work, name, &fd, w.kind, &m)?;
        set_times(work, name, &m)?;
    }
    Ok(())
}

/// Fills the directory `dir` (a descriptor of it, `O_PATH` will do) with the entries of
/// the base directory `base`, then takes its marker off. The caller holds the branch's fill
/// lock and has seen the marker.
pub fn fill_dir(
    lower: &Lower,
    work: &OwnedFd,
    names: &Names,
    dir: &OwnedFd,
    base: &[u8],
) -> std::io::Result<()> {
    let entries = match lower.list(base) {
        Ok(e) => e,
        // Gone from the base (a marker naming what the model no longer has): empty.
        Err(ViewError::NotFound | ViewError::NotDir) => Vec::new(),
        Err(e) => return Err(io(e)),
    };
    for (name, want, size) in entries {
        let child = OsStr::from_bytes(&name);
        match rustix::fs::statat(dir, child, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => continue,
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        let tmp = names.next();
        let made = make(work, &tmp, &join(base, &name), &want, size).and_then(|()| {
            rustix::fs::renameat_with(
                work,
                tmp.as_str(),
                dir,
                child,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(std::io::Error::from)
        });
        if let Err(e) = made {
            let _ = remove_tree(work, tmp.as_str());
            return Err(e);
        }
    }
    // The directory's own times, which its new entries moved.
    if let Ok(w) = lower.want(base) {
        if let Some(m) = &w.meta {
            let times = Timestamps {
                last_access: ts(m.atime, m.atime_nsec),
                last_modification: ts(m.mtime, m.mtime_nsec),
            };
            rustix::fs::utimensat(dir, "", &times, AtFlags::EMPTY_PATH)?;
        }
    }
    marker::clear(dir)
}

/// Makes the root of a branch's tree in `work` under `name`: the base's root directory,
/// still to be filled.
pub fn make_root(lower: &Lower, work: &OwnedFd, name: &str) -> std::io::Result<()> {
    let w = lower.want(b"").map_err(io)?;
    make(work, name, b"", &w, 0)
}

/// Copies the base content of `base` into the file `file` (a descriptor of it, `O_PATH`
/// will do), keeping its times, then takes its marker off. The caller holds the branch's
/// copy lock and has seen the marker. With `sync`, the content is on disk before the
/// marker goes.
pub fn copy_up(lower: &Lower, file: &OwnedFd, base: &[u8], sync: bool) -> std::io::Result<()> {
    let st = rustix::fs::fstat(file)?;
    let open = || {
        rustix::fs::open(
            proc_path(file),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    // A file without write permission for the daemon (not root): for the copy only.
    let (dst, restore_mode) = match open() {
        Ok(fd) => (fd, None),
        Err(rustix::io::Errno::ACCESS) => {
            rustix::fs::chmod(
                proc_path(file),
                Mode::from_raw_mode((st.st_mode | 0o200) & 0o7777),
            )?;
            (open()?, Some(st.st_mode & 0o7777))
        }
        Err(e) => return Err(e.into()),
    };
    let copied = lower.copy_to(base, &dst).map_err(io);
    if let Some(mode) = restore_mode {
        rustix::fs::fchmod(&dst, Mode::from_raw_mode(mode))?;
    }
    copied?;
    if sync {
        rustix::fs::fdatasync(&dst)?;
    }
    let times = Timestamps {
        last_access: ts(st.st_atime, st.st_atime_nsec as u32),
        last_modification: ts(st.st_mtime, st.st_mtime_nsec as u32),
    };
    rustix::fs::futimens(&dst, &times)?;
    marker::clear(file)
}

/// Removes `name` in `dir` and everything below it (not following symlinks); returns the
/// bytes the removed files took.
pub fn remove_tree(dir: impl AsFd, name: impl AsRef<OsStr>) -> std::io::Result<u64> {
    let name = name.as_ref();
    use rustix::fs::FileType;
    let dir = dir.as_fd();
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
        return Ok(st.st_blocks as u64 * 512);
    }
    let sub = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut freed = 0;
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(&sub)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(n.to_vec());
        }
    }
    for n in names {
        freed += match remove_tree(&sub, OsStr::from_bytes(&n)) {
            Ok(b) => b,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => 0,
            Err(e) => return Err(e),
        };
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    Ok(freed + st.st_blocks as u64 * 512)
}
