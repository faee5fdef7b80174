//! Conversion from backing `stat` results to FUSE attributes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};
use rustix::fs::{FileType as RxType, Stat};

use crate::ids::NodeId;

pub fn file_type(mode: u32) -> FileType {
    match RxType::from_raw_mode(mode) {
        RxType::Directory => FileType::Directory,
        RxType::Symlink => FileType::Symlink,
        RxType::Fifo => FileType::NamedPipe,
        RxType::Socket => FileType::Socket,
        RxType::CharacterDevice => FileType::CharDevice,
        RxType::BlockDevice => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub fn system_time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = nsec.clamp(0, 999_999_999) as u32;
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec)
    } else {
        // sec is negative and nsec counts forward from it.
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

/// FUSE attributes for a backing object reported under node id `id`.
pub fn from_stat(id: NodeId, st: &Stat) -> FileAttr {
    let mode = st.st_mode;
    FileAttr {
        ino: INodeNo(id.0),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: system_time(st.st_atime, st.st_atime_nsec as i64),
        mtime: system_time(st.st_mtime, st.st_mtime_nsec as i64),
        ctime: system_time(st.st_ctime, st.st_ctime_nsec as i64),
        crtime: UNIX_EPOCH,
        kind: file_type(mode),
        perm: (mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}
