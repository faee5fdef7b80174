//! What an object of a branch's tree still takes from the base: the xattr
//! `user.agx.lower` names the base path a directory's entries are still to be filled from
//! (`d` + path), or a file's content is still to be copied from (`f` + path). An object
//! without it is the branch's own. The name is in agx's xattr namespace, which the mount
//! neither shows nor lets anyone set (`crate::sys::path::is_agx_xattr`).
//!
//! Only directories and regular files carry markers (`user.*` xattrs are refused on
//! symlinks and special files, which a fill makes whole anyway).

use std::os::fd::{AsFd, AsRawFd};

use rustix::fs::XattrFlags;

pub const NAME: &str = "user.agx.lower";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Marker {
    /// A directory whose entries are those of this base directory, not filled in yet.
    Dir(Vec<u8>),
    /// A file whose content is this base file's, not copied yet.
    File(Vec<u8>),
}

impl Marker {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, path) = match self {
            Marker::Dir(p) => (b'd', p),
            Marker::File(p) => (b'f', p),
        };
        let mut v = Vec::with_capacity(path.len() + 1);
        v.push(tag);
        v.extend_from_slice(path);
        v
    }

    pub fn decode(v: &[u8]) -> Option<Marker> {
        let (tag, path) = v.split_first()?;
        match tag {
            b'd' => Some(Marker::Dir(path.to_vec())),
            b'f' => Some(Marker::File(path.to_vec())),
            _ => None,
        }
    }

    /// The base path.
    pub fn path(&self) -> &[u8] {
        match self {
            Marker::Dir(p) | Marker::File(p) => p,
        }
    }
}

/// The `/proc/self/fd` path of `fd`: xattr calls refuse `O_PATH` descriptors.
fn proc_path(fd: impl AsFd) -> String {
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

/// The marker of the directory or regular file behind `fd` (any descriptor, `O_PATH`
/// included), if it has one.
pub fn read(fd: impl AsFd) -> std::io::Result<Option<Marker>> {
    let mut buf = vec![0u8; 4096 + 1];
    loop {
        match rustix::fs::getxattr(proc_path(&fd), NAME, &mut buf) {
            Ok(n) => return Ok(Marker::decode(&buf[..n])),
            Err(rustix::io::Errno::NODATA) => return Ok(None),
            Err(rustix::io::Errno::RANGE) if buf.len() < 1 << 20 => {
                let len = buf.len() * 4;
                buf.resize(len, 0);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Puts marker `m` on the object behind `fd`.
pub fn write(fd: impl AsFd, m: &Marker) -> std::io::Result<()> {
    rustix::fs::setxattr(proc_path(fd), NAME, &m.encode(), XattrFlags::empty())?;
    Ok(())
}

/// Takes the marker off the object behind `fd` (it is the branch's own from now on).
pub fn clear(fd: impl AsFd) -> std::io::Result<()> {
    match rustix::fs::removexattr(proc_path(fd), NAME) {
        Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for m in [
            Marker::Dir(Vec::new()),
            Marker::Dir(b"a/b".to_vec()),
            Marker::File(b"x\xff/y".to_vec()),
        ] {
            assert_eq!(Marker::decode(&m.encode()), Some(m));
        }
        assert_eq!(Marker::decode(b""), None);
        assert_eq!(Marker::decode(b"zpath"), None);
    }
}
