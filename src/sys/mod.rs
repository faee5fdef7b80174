//! The bottom layer: operating-system helpers every other module may use and that use no
//! other module of agx (but `ids`).

pub mod fd;
pub mod fsxattr;
pub mod path;
pub mod read;

use crate::ids::InodeKey;

/// A FUSE errno from a raw OS error (the request path answers with the OS's own).
pub fn errno(e: rustix::io::Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw_os_error())
}

/// Identity of the object a stat describes: (st_dev, st_ino).
pub fn key_of(st: &rustix::fs::Stat) -> InodeKey {
    InodeKey {
        dev: st.st_dev,
        ino: st.st_ino,
    }
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
