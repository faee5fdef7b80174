//! Reading the state of a backing object: kind, metadata, symlink target, xattrs.

use std::os::fd::{AsFd, AsRawFd};

use rustix::fs::{FileType, Stat};

use crate::ids::InodeKey;
use crate::timeline::{Kind, Meta};

pub fn kind_of(st: &Stat) -> Kind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

pub fn key_of(st: &Stat) -> InodeKey {
    InodeKey {
        dev: st.st_dev,
        ino: st.st_ino,
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
    }
}

fn read_xattrs(fd: impl AsFd) -> Vec<(Vec<u8>, Vec<u8>)> {
    let path = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
    let mut names = vec![0u8; 4096];
    let n = match rustix::fs::listxattr(&path, &mut names) {
        Ok(0) | Err(_) => return Vec::new(),
        Ok(n) => n,
    };
    names.truncate(n);
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let cname = std::ffi::OsStr::new(std::str::from_utf8(name).unwrap_or(""));
        if cname.is_empty() {
            continue;
        }
        let mut val = vec![0u8; 65536];
        if let Ok(len) = rustix::fs::getxattr(&path, cname, &mut val) {
            val.truncate(len);
            out.push((name.to_vec(), val));
        }
    }
    out
}
