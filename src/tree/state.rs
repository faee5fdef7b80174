//! Reading the state of a backing object: kind, metadata, symlink target, xattrs.

use std::os::fd::{AsFd, AsRawFd};

use rustix::fs::{FileType, Stat};
use serde::{Deserialize, Serialize};

use crate::timeline::{Kind, Meta, ObjId};

pub fn kind_of(st: &Stat) -> Kind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

pub use crate::sys::key_of;

/// An object's identity and change stamps. Two equal stamps of a file taken at two moments
/// mean it did not change in between (a write or truncate moves ctime; the kernel gives a
/// fresh fine-grained ctime to a change that follows a stat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub size: i64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stamp {
    /// Whether the content can have changed between the two stamps: same object, size and
    /// modification time. (Unlike ctime, these survive a rename, chmod or link, which
    /// leave the content alone.)
    pub fn same_content(&self, other: &Stamp) -> bool {
        (self.dev, self.ino, self.size, self.mtime)
            == (other.dev, other.ino, other.size, other.mtime)
    }
}

pub fn stamp_of(st: &Stat) -> Stamp {
    Stamp {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
    }
}

/// Metadata of the object behind `fd` (an `O_PATH` descriptor will do) whose stat is `st`.
pub fn meta_of(fd: impl AsFd, st: &Stat) -> Meta {
    let kind = kind_of(st);
    let target = if kind == Kind::Symlink {
        rustix::fs::readlinkat(&fd, "", Vec::new())
            .ok()
            .map(|t| t.into_bytes())
    } else {
        None
    };
    let xattrs = if kind == Kind::File || kind == Kind::Dir {
        read_xattrs(&fd)
    } else {
        Vec::new()
    };
    Meta {
        mode: st.st_mode,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        mtime: st.st_mtime,
        mtime_nsec: st.st_mtime_nsec as u32,
        atime: st.st_atime,
        atime_nsec: st.st_atime_nsec as u32,
        target,
        xattrs,
        rdev: st.st_rdev,
        dev: st.st_dev,
        ino: st.st_ino,
        nlink: st.st_nlink,
        btime: btime_of(&fd),
        flags: None,
        projid: None,
    }
}

/// The birth time of the object behind `fd` (an `O_PATH` descriptor will do), in
/// nanoseconds since the epoch; 0 where the filesystem keeps none.
pub fn btime_of(fd: impl AsFd) -> i64 {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    match statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::BTIME) {
        Ok(x) if x.stx_mask & StatxFlags::BTIME.bits() != 0 => {
            x.stx_btime.tv_sec * 1_000_000_000 + x.stx_btime.tv_nsec as i64
        }
        _ => 0,
    }
}

/// The identity of the object behind `fd` whose stat is `st` (see [`ObjId`]).
pub fn id_of(fd: impl AsFd, st: &Stat) -> ObjId {
    ObjId {
        dev: st.st_dev,
        ino: st.st_ino,
        btime: btime_of(fd),
    }
}

/// The xattrs of the object behind `fd`: through the descriptor when it is open for I/O,
/// through its `/proc/self/fd` link when it is an `O_PATH` one (which the xattr calls
/// refuse with EBADF).
fn read_xattrs(fd: impl AsFd) -> Vec<(Vec<u8>, Vec<u8>)> {
    let fd = fd.as_fd();
    let path = std::cell::OnceCell::new();
    let path = || {
        path.get_or_init(|| format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .clone()
    };
    let mut names = vec![0u8; 4096];
    let n = match rustix::fs::flistxattr(fd, &mut names) {
        Err(rustix::io::Errno::BADF) => rustix::fs::listxattr(path(), &mut names),
        r => r,
    };
    let n = match n {
        Ok(0) | Err(_) => return Vec::new(),
        Ok(n) => n,
    };
    names.truncate(n);
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if crate::sys::path::is_agx_xattr(name) {
            continue;
        }
        let cname = std::ffi::OsStr::new(std::str::from_utf8(name).unwrap_or(""));
        if cname.is_empty() {
            continue;
        }
        let mut val = vec![0u8; 65536];
        let got = match rustix::fs::fgetxattr(fd, cname, &mut val) {
            Err(rustix::io::Errno::BADF) => rustix::fs::getxattr(path(), cname, &mut val),
            r => r,
        };
        if let Ok(len) = got {
            val.truncate(len);
            out.push((name.to_vec(), val));
        }
    }
    out
}
