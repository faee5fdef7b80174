//! The live tree beneath the project's root handle: objects by project-relative path
//! (never following a symlink, not even inside the project, and never leaving the
//! project: every path is resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`),
//! and the state of an object as history records it (`state`). Capture, restore, views and
//! the FUSE front all read the tree through here; it uses only `sys` and the timeline's
//! types.

pub mod state;

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags, ResolveFlags, Stat};

use crate::ids::ContentHash;
use crate::timeline::{Kind, Meta, ObjId};
use state::{kind_of, meta_of};

pub use crate::sys::path::{os, split};

/// Opens `rel` beneath `root` (the root itself for "").
pub fn open_beneath(root: impl AsFd, rel: &[u8], flags: OFlags) -> rustix::io::Result<OwnedFd> {
    open_beneath_fd(root.as_fd(), rel, flags)
}

fn open_beneath_fd(root: BorrowedFd<'_>, rel: &[u8], flags: OFlags) -> rustix::io::Result<OwnedFd> {
    // A path longer than the kernel takes at once (PATH_MAX) is opened a part at a time,
    // each part beneath the directory the one before opened, with the same rules.
    if rel.len() > PART {
        let cut = rel[..PART]
            .iter()
            .rposition(|c| *c == b'/')
            .ok_or(rustix::io::Errno::NAMETOOLONG)?;
        let dir = open_beneath_fd(root, &rel[..cut], OFlags::PATH | OFlags::DIRECTORY)?;
        return open_beneath_fd(dir.as_fd(), &rel[cut + 1..], flags);
    }
    let path: &OsStr = if rel.is_empty() {
        OsStr::new(".")
    } else {
        os(rel)
    };
    let open = |extra: OFlags| {
        // In the daemon, an EMFILE has the mount release idle descriptors first.
        crate::sys::fd::retry(|| {
            rustix::fs::openat2(
                root,
                path,
                flags | extra | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
        })
    };
    let reads_content = !flags.intersects(
        OFlags::WRONLY | OFlags::RDWR | OFlags::PATH | OFlags::DIRECTORY | OFlags::CREATE,
    );
    if reads_content {
        crate::sys::fd::without_atime(open)
    } else {
        open(OFlags::empty())
    }
}

/// The longest part of a path opened at once: well under PATH_MAX (4096).
const PART: usize = 3072;

/// A live object.
#[derive(Debug)]
pub struct LiveObj {
    pub fd: OwnedFd,
    pub stat: Stat,
    pub kind: Kind,
}

impl LiveObj {
    pub fn meta(&self) -> Meta {
        meta_of(&self.fd, &self.stat)
    }

    /// Which object this is (see [`ObjId`]).
    pub fn id(&self) -> ObjId {
        state::id_of(&self.fd, &self.stat)
    }
}

/// The inode flags and project id of a live file or directory (they take an open file:
/// see `Meta::flags`); None each where they cannot be read.
pub fn attrs(obj: &LiveObj) -> (Option<u32>, Option<u32>) {
    let Some(f) = open_attrs(obj) else {
        return (None, None);
    };
    (
        rustix::fs::ioctl_getflags(&f).ok().map(|x| x.bits()),
        crate::sys::fsxattr::get(&f).ok().map(|x| x.projid),
    )
}

/// A file or directory opened to read or set its attributes (never a fifo or device,
/// whose open could block or act).
pub fn open_attrs(obj: &LiveObj) -> Option<OwnedFd> {
    use std::os::fd::AsRawFd;
    let flags = match obj.kind {
        Kind::File => OFlags::RDONLY | OFlags::NONBLOCK,
        Kind::Dir => OFlags::RDONLY | OFlags::DIRECTORY,
        _ => return None,
    };
    let path = format!("/proc/self/fd/{}", obj.fd.as_raw_fd());
    crate::sys::fd::without_atime(|quiet| {
        rustix::fs::open(&path, flags | OFlags::CLOEXEC | quiet, Mode::empty())
    })
    .ok()
}

/// The type and identity of `name` in the directory `dir` (not following a symlink), with
/// one `statx`; None when it cannot be looked at.
pub fn id_at(dir: impl AsFd, name: &OsStr) -> Option<(rustix::fs::FileType, ObjId)> {
    use rustix::fs::{AtFlags, StatxFlags};
    let x = rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::BTIME,
    )
    .ok()?;
    let btime = if x.stx_mask & StatxFlags::BTIME.bits() != 0 {
        x.stx_btime.tv_sec * 1_000_000_000 + x.stx_btime.tv_nsec as i64
    } else {
        0
    };
    let id = ObjId {
        dev: rustix::fs::makedev(x.stx_dev_major, x.stx_dev_minor),
        ino: x.stx_ino,
        btime,
    };
    Some((rustix::fs::FileType::from_raw_mode(x.stx_mode as u32), id))
}

/// The object at `rel`, or None when nothing is there (or the path runs through a
/// symlink or a non-directory), or it cannot be looked at.
pub fn stat(root: impl AsFd, rel: &[u8]) -> Option<LiveObj> {
    stat_checked(root, rel).ok().flatten()
}

/// Like [`stat`], but a failure other than "nothing is there" (no descriptor left, an I/O
/// error) is an error: a plan must not take an object it cannot see for an absent one.
pub fn stat_checked(root: impl AsFd, rel: &[u8]) -> Result<Option<LiveObj>, rustix::io::Errno> {
    use rustix::io::Errno;
    let fd = match open_beneath(root, rel, OFlags::PATH | OFlags::NOFOLLOW) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => return Ok(None),
        Err(e) => return Err(e),
    };
    let stat = rustix::fs::fstat(&fd)?;
    Ok(Some(LiveObj {
        kind: kind_of(&stat),
        fd,
        stat,
    }))
}

/// Names in the live directory `rel` (without "." and "..").
pub fn list(root: impl AsFd, rel: &[u8]) -> Vec<Vec<u8>> {
    let Ok(fd) = open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY) else {
        return Vec::new();
    };
    let Ok(dir) = rustix::fs::Dir::read_from(&fd) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_bytes().to_vec())
        .filter(|n| n != b"." && n != b"..")
        .collect()
}

/// Every path strictly below the live directory `rel`, parents before children.
pub fn walk(root: &OwnedFd, rel: &[u8], out: &mut Vec<Vec<u8>>) {
    for name in list(root, rel) {
        let p = crate::sys::path::join(rel, &name);
        if rel.is_empty() && name == crate::sys::path::AGX_DIR_NAME.as_bytes() {
            continue;
        }
        let is_dir = stat(root, &p).is_some_and(|o| o.kind == Kind::Dir);
        out.push(p.clone());
        if is_dir {
            walk(root, &p, out);
        }
    }
}

/// The content hash of a live regular file.
pub fn hash(obj: &LiveObj) -> Option<ContentHash> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", obj.fd.as_raw_fd());
    let f = crate::sys::fd::without_atime(|quiet| {
        rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::CLOEXEC | quiet,
            Mode::empty(),
        )
    })
    .ok()?;
    crate::sys::read::hash_file(&f).ok().map(|(h, _)| h)
}
