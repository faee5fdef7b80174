//! File attributes of the filesystem, through ioctls: the inode flags `lsattr` and
//! `chattr` read and set (`FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS`) and the xflags and project
//! id of `FS_IOC_FSGETXATTR` / `FS_IOC_FSSETXATTR`. The kernel sends them as FUSE_IOCTL on
//! a handle it opened for the purpose (its fileattr operations) after its own permission
//! checks (owner, CAP_LINUX_IMMUTABLE); they are served from the backing file, and a
//! change is recorded like any other change of metadata (`Op::Chattr`, with the flags and
//! project id before and after). Every other ioctl is ENOTTY: forwarding commands agx does
//! not know would run them with the daemon's privileges.

use std::os::fd::{AsFd, BorrowedFd};

use fuser::Errno;
use rustix::fs::IFlags;

use super::entry::Caller;
use super::handle::Handle;
use super::{AgxFs, OrErrno};
use crate::capture::{After, Before};
use crate::ids::{HandleId, NodeId};
use crate::sys::fsxattr::{self, FsXattr};
use crate::timeline::Op;

const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;

fn word(data: &[u8]) -> Result<u32, Errno> {
    let b: [u8; 4] = data
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(Errno::EINVAL)?;
    Ok(u32::from_ne_bytes(b))
}

fn out(mut v: Vec<u8>, size: u32) -> Vec<u8> {
    v.truncate(size as usize);
    v
}

impl AgxFs {
    /// Answers one ioctl on the handle `fh` of `ino` (see the module comment).
    pub(super) fn do_ioctl(
        &self,
        ino: NodeId,
        fh: HandleId,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        caller: Caller,
    ) -> Result<Vec<u8>, Errno> {
        let known = matches!(
            cmd,
            FS_IOC_GETFLAGS
                | FS_IOC32_GETFLAGS
                | FS_IOC_SETFLAGS
                | FS_IOC32_SETFLAGS
                | fsxattr::FS_IOC_FSGETXATTR
                | fsxattr::FS_IOC_FSSETXATTR
        );
        if !known || ino.is_virtual_dir() || ino.is_view() || fh.is_view() {
            return Err(Errno::ENOTTY);
        }
        let h = self.handles.get(fh).ok_or(Errno::EBADF)?;
        let fd: BorrowedFd<'_> = match &*h {
            Handle::File(f) => f.file.as_fd(),
            Handle::Dir(d) => d.file.as_ref().ok_or(Errno::ENOTTY)?.as_fd(),
        };
        match cmd {
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => {
                let f = rustix::fs::ioctl_getflags(fd).or_errno()?;
                Ok(out(f.bits().to_ne_bytes().to_vec(), out_size))
            }
            fsxattr::FS_IOC_FSGETXATTR => {
                let x = fsxattr::get(fd).or_errno()?;
                Ok(out(x.to_bytes().to_vec(), out_size))
            }
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
                let want = word(in_data)?;
                self.change_attrs(ino, fd, caller, || {
                    rustix::fs::ioctl_setflags(fd, IFlags::from_bits_retain(want)).or_errno()
                })?;
                Ok(Vec::new())
            }
            _ => {
                let want = FsXattr::from_bytes(in_data).ok_or(Errno::EINVAL)?;
                self.change_attrs(ino, fd, caller, || fsxattr::set(fd, want).or_errno())?;
                Ok(Vec::new())
            }
        }
    }

    /// The flags and project id of the open file `fd`.
    fn attrs_of(fd: BorrowedFd<'_>) -> (Option<u32>, Option<u32>) {
        (
            rustix::fs::ioctl_getflags(fd).ok().map(|f| f.bits()),
            fsxattr::get(fd).ok().map(|x| x.projid),
        )
    }

    /// Applies a change of `ino`'s flags or project id (through its open file `fd`),
    /// recorded with them before and after.
    fn change_attrs(
        &self,
        ino: NodeId,
        fd: BorrowedFd<'_>,
        caller: Caller,
        apply: impl FnOnce() -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        let node = self.node(ino)?;
        let pfd = self.fd(&node)?;
        let (flags, projid) = Self::attrs_of(fd);
        let is_dir = node.kind == fuser::FileType::Directory;
        let before = Before::Attrs {
            fd: pfd.as_fd(),
            flags,
            projid,
        };
        let t = self.record(
            caller.pid,
            Op::Chattr,
            self.path_of(&node)?,
            is_dir,
            None,
            before,
            None,
        )?;
        let r = apply();
        self.finish(t, &r, || {
            let mut s = self.rec.state_of(pfd.as_fd());
            if let Some(m) = s.meta.as_mut() {
                (m.flags, m.projid) = Self::attrs_of(fd);
            }
            After::State(s)
        });
        r
    }
}
