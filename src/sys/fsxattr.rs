//! `FS_IOC_FSGETXATTR` / `FS_IOC_FSSETXATTR`: a file's extended attributes of the
//! filesystem (the xflags, extent size hint and project id that `xfs_io -c lsattr`,
//! `chattr -p` and quota tools use). rustix wraps the flag ioctls but not these, whose
//! argument is a struct; building rustix's typed ioctl for it takes `unsafe` (the opcode
//! must match the argument's layout), confined to this module.
#![allow(unsafe_code)]

use std::os::fd::AsFd;

/// `struct fsxattr` of `<linux/fs.h>` (28 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsXattr {
    pub xflags: u32,
    pub extsize: u32,
    pub nextents: u32,
    pub projid: u32,
    pub cowextsize: u32,
    pub pad: [u8; 8],
}

/// `_IOR('X', 31, struct fsxattr)`.
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
/// `_IOW('X', 32, struct fsxattr)`.
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

impl FsXattr {
    pub const SIZE: usize = 28;

    pub fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        for (i, v) in [
            self.xflags,
            self.extsize,
            self.nextents,
            self.projid,
            self.cowextsize,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
        }
        b[20..].copy_from_slice(&self.pad);
        b
    }

    /// None when `b` is not one.
    pub fn from_bytes(b: &[u8]) -> Option<FsXattr> {
        if b.len() < Self::SIZE {
            return None;
        }
        let w = |i: usize| u32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().unwrap_or_default());
        let mut pad = [0u8; 8];
        pad.copy_from_slice(&b[20..28]);
        Some(FsXattr {
            xflags: w(0),
            extsize: w(1),
            nextents: w(2),
            projid: w(3),
            cowextsize: w(4),
            pad,
        })
    }
}

/// `ioctl(fd, FS_IOC_FSGETXATTR)`.
pub fn get(fd: impl AsFd) -> rustix::io::Result<FsXattr> {
    // SAFETY: the opcode's size and direction are those of `FsXattr`, a plain 28-byte
    // C struct the kernel fills.
    unsafe {
        let ctl = rustix::ioctl::Getter::<FS_IOC_FSGETXATTR, FsXattr>::new();
        rustix::ioctl::ioctl(fd, ctl)
    }
}

/// `ioctl(fd, FS_IOC_FSSETXATTR)`.
pub fn set(fd: impl AsFd, x: FsXattr) -> rustix::io::Result<()> {
    // SAFETY: as `get`; the kernel only reads the struct.
    unsafe {
        let ctl = rustix::ioctl::Setter::<FS_IOC_FSSETXATTR, FsXattr>::new(x);
        rustix::ioctl::ioctl(fd, ctl)
    }
}
