//! Extended attributes, through `/proc/self/fd` paths (an `O_PATH` descriptor cannot carry
//! xattr calls). Symlinks are reached as `parent/name` without following.

use std::ffi::OsStr;

use fuser::Errno;
use rustix::fs::XattrFlags;

use super::{proc_path, AgxFs, OrErrno};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use crate::capture::{Before, Ticket};
use crate::fs::inode::Node;
use crate::ids::NodeId;
use crate::timeline::Op;

/// Where xattr calls for a node go, and whether they must not follow a final symlink.
struct Target {
    path: std::ffi::OsString,
    nofollow: bool,
    /// The descriptor `path` goes through: open while the path is used.
    _fd: Arc<OwnedFd>,
}

/// A size for the kernel, which takes 32 bits.
fn reply_size(n: usize) -> Result<u32, Errno> {
    u32::try_from(n).map_err(|_| Errno::E2BIG)
}

/// Outcome of a size-probing xattr read.
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

impl AgxFs {
    fn xattr_target(&self, node: &Node) -> Result<Target, Errno> {
        if node.kind == fuser::FileType::Symlink {
            let (parent, name) = node.place().ok_or(Errno::ESTALE)?;
            let p = self.node(parent)?;
            let fd = self.fd(&p)?;
            let mut path = proc_path(&*fd);
            path.push('/');
            let mut path = std::ffi::OsString::from(path);
            path.push(&name);
            Ok(Target {
                path,
                nofollow: true,
                _fd: fd,
            })
        } else {
            let fd = self.fd(node)?;
            Ok(Target {
                path: proc_path(&*fd).into(),
                nofollow: false,
                _fd: fd,
            })
        }
    }

    fn xattr_node(&self, ino: NodeId) -> Result<Arc<Node>, Errno> {
        if ino.is_virtual_dir() || ino.is_view() {
            return Err(Errno::ENODATA);
        }
        self.node(ino)
    }

    pub(super) fn do_getxattr(
        &self,
        ino: NodeId,
        name: &OsStr,
        size: u32,
    ) -> Result<XattrReply, Errno> {
        let node = self.xattr_node(ino)?;
        if crate::sys::path::is_agx_xattr(name.as_encoded_bytes()) {
            return Err(Errno::ENODATA);
        }
        let t = self.xattr_target(&node)?;
        // Size 0 asks for the value's size. rustix answers a zero-length buffer with 0,
        // not the size, so the query has its own call.
        if size == 0 {
            let n = if t.nofollow {
                rustix::fs::lgetxattr_query(&t.path, name)
            } else {
                rustix::fs::getxattr_query(&t.path, name)
            }
            .or_errno()?;
            return Ok(XattrReply::Size(reply_size(n)?));
        }
        let mut buf = vec![0u8; size as usize];
        let n = if t.nofollow {
            rustix::fs::lgetxattr(&t.path, name, &mut buf)
        } else {
            rustix::fs::getxattr(&t.path, name, &mut buf)
        }
        .or_errno()?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    /// Lists the names of a node's xattrs. As the kernel does for its own filesystems,
    /// `trusted.*` names are shown only to a `privileged` caller (root: the daemon cannot
    /// see the caller's CAP_SYS_ADMIN), since the daemon itself, as root, sees them all.
    pub(super) fn do_listxattr(
        &self,
        ino: NodeId,
        size: u32,
        privileged: bool,
    ) -> Result<XattrReply, Errno> {
        if ino.is_virtual_dir() || ino.is_view() {
            return Ok(if size == 0 {
                XattrReply::Size(0)
            } else {
                XattrReply::Data(Vec::new())
            });
        }
        let node = self.node(ino)?;
        let t = self.xattr_target(&node)?;
        let query = || {
            if t.nofollow {
                rustix::fs::llistxattr_query(&t.path)
            } else {
                rustix::fs::listxattr_query(&t.path)
            }
            .or_errno()
        };
        // The whole list, filtered, then measured against the caller's buffer. The list can
        // grow between the size query and the read: try again then.
        let mut list = Vec::new();
        for _ in 0..8 {
            let mut buf = vec![0u8; query()?.max(1)];
            let r = if t.nofollow {
                rustix::fs::llistxattr(&t.path, &mut buf)
            } else {
                rustix::fs::listxattr(&t.path, &mut buf)
            };
            match r {
                Ok(n) => {
                    buf.truncate(n);
                    list = buf;
                    break;
                }
                Err(rustix::io::Errno::RANGE) => continue,
                Err(e) => return Err(super::errno(e)),
            }
        }
        // agx's own names never show; neither do `trusted.*` ones to the unprivileged.
        list = list
            .split_inclusive(|b| *b == 0)
            .filter(|name| privileged || !name.starts_with(b"trusted."))
            .filter(|name| !crate::sys::path::is_agx_xattr(name))
            .flatten()
            .copied()
            .collect();
        if size == 0 {
            Ok(XattrReply::Size(reply_size(list.len())?))
        } else if list.len() > size as usize {
            Err(Errno::ERANGE)
        } else {
            Ok(XattrReply::Data(list))
        }
    }

    pub(super) fn do_setxattr(
        &self,
        ino: NodeId,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        pid: u32,
    ) -> Result<(), Errno> {
        if ino.is_virtual_dir() || ino.is_view() {
            return Err(Errno::EROFS);
        }
        if crate::sys::path::is_agx_xattr(name.as_encoded_bytes()) {
            return Err(Errno::EPERM);
        }
        let node = self.node(ino)?;
        let ticket = self.xattr_event(&node, Op::Setxattr, pid)?;
        node.set_default_acl(None);
        let t = self.xattr_target(&node)?;
        let flags = XattrFlags::from_bits_retain(flags as u32);
        let r = if t.nofollow {
            rustix::fs::lsetxattr(&t.path, name, value, flags)
        } else {
            rustix::fs::setxattr(&t.path, name, value, flags)
        }
        .or_errno();
        let folded = ticket.is_none() && self.part_of_creation(&node, pid);
        self.finish(ticket, &r, || self.after_meta(&node));
        if folded && r.is_ok() {
            self.amend_creation(&node);
        }
        r
    }

    fn xattr_event(&self, node: &Node, op: Op, pid: u32) -> Result<Option<Ticket>, Errno> {
        if self.part_of_creation(node, pid) {
            return Ok(None);
        }
        let is_dir = node.kind == fuser::FileType::Directory;
        let fd = self.fd(node)?;
        let before = Before::Meta(fd.as_fd());
        self.record(pid, op, self.path_of(node)?, is_dir, None, before, None)
    }

    pub(super) fn do_removexattr(&self, ino: NodeId, name: &OsStr, pid: u32) -> Result<(), Errno> {
        if ino.is_virtual_dir() || ino.is_view() {
            return Err(Errno::EROFS);
        }
        if crate::sys::path::is_agx_xattr(name.as_encoded_bytes()) {
            return Err(Errno::EPERM);
        }
        let node = self.node(ino)?;
        let ticket = self.xattr_event(&node, Op::Removexattr, pid)?;
        node.set_default_acl(None);
        let t = self.xattr_target(&node)?;
        let r = if t.nofollow {
            rustix::fs::lremovexattr(&t.path, name)
        } else {
            rustix::fs::removexattr(&t.path, name)
        }
        .or_errno();
        let folded = ticket.is_none() && self.part_of_creation(&node, pid);
        self.finish(ticket, &r, || self.after_meta(&node));
        if folded && r.is_ok() {
            self.amend_creation(&node);
        }
        r
    }
}
