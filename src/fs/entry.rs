//! Name operations: lookup, creation of non-regular objects, removal, rename, link.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use fuser::{Errno, FileAttr};
use rustix::fs::{AtFlags, FileType as RxType, Gid, Mode, RenameFlags, Uid};

use super::{AgxFs, OrErrno};
use std::os::fd::{AsFd, OwnedFd};

use crate::capture::{After, Before};
use crate::fs::inode::Node;
use crate::ids::NodeId;
use crate::timeline::Op;

/// Whether the directory `dir` carries a default ACL. Cached on the node: ACLs change only
/// through xattr requests on it, which reset the cache.
fn has_default_acl(dir: &Node, fd: &OwnedFd) -> bool {
    if let Some(known) = dir.default_acl() {
        return known;
    }
    let has = matches!(
        rustix::fs::getxattr_query(super::proc_path(fd), "system.posix_acl_default"),
        Ok(n) if n > 0
    );
    dir.set_default_acl(Some(has));
    has
}

/// Who a request comes from: new objects belong to them.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The caller's umask, sent with create, mkdir and mknod (0 for other requests).
    pub umask: u32,
    /// The calling process (whose change it is).
    pub pid: u32,
}

impl AgxFs {
    /// A parent directory that accepts changes, and the node behind it.
    pub(super) fn writable_parent(&self, parent: NodeId, name: &OsStr) -> Result<Arc<Node>, Errno> {
        if parent.is_virtual_dir() || parent.is_view() || self.is_reserved(parent, name) {
            return Err(Errno::EROFS);
        }
        self.node(parent)
    }

    pub(super) fn do_lookup(&self, parent: NodeId, name: &OsStr) -> Result<FileAttr, Errno> {
        if parent == NodeId::AGX_DIR {
            if name == super::branches::BRANCHES_DIR_NAME && self.branches.is_some() {
                return Ok(self.branches_dir_attr());
            }
            return Err(Errno::ENOENT);
        }
        if parent == NodeId::BRANCHES_DIR {
            let (node, st) = self.lookup_branch_root(name)?;
            return Ok(self.entry_attr(&node, &st));
        }
        if self.is_reserved(parent, name) {
            // A branch's tree has no `.agx` of its own (yet): the name is only reserved,
            // also at the root of a branch mounted on its own.
            if parent != NodeId::ROOT || self.root().tree.is_some() {
                return Err(Errno::ENOENT);
            }
            return Ok(self.agx_dir_attr());
        }
        let p = self.node(parent)?;
        let (node, st) = self.lookup_known(&p, name)?;
        Ok(self.entry_attr(&node, &st))
    }

    /// Gives a new object to the caller. The daemon creates as root (so the kernel's own
    /// permission check, done with the caller's groups, is the one that counts), then hands
    /// ownership over; the group follows a set-gid parent as the filesystem chose it.
    pub(super) fn give_to_caller(
        &self,
        parent: &Node,
        name: &OsStr,
        caller: Caller,
        mode: u32,
    ) -> Result<(), Errno> {
        if caller.uid == 0 && caller.gid == 0 {
            return Ok(());
        }
        let pfd = self.fd(parent)?;
        let pst = rustix::fs::fstat(&*pfd).or_errno()?;
        let gid = if pst.st_mode & libc::S_ISGID != 0 {
            None
        } else {
            Some(Gid::from_raw(caller.gid))
        };
        rustix::fs::chownat(
            &*pfd,
            name,
            Some(Uid::from_raw(caller.uid)),
            gid,
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .or_errno()?;
        // chown clears set-id bits of non-directories; put back what the caller asked for.
        let kind = RxType::from_raw_mode(mode);
        if mode & 0o6000 != 0 && kind != RxType::Directory && kind != RxType::Symlink {
            rustix::fs::chmodat(
                &*pfd,
                name,
                Mode::from_raw_mode(mode & 0o7777),
                AtFlags::empty(),
            )
            .or_errno()?;
        }
        Ok(())
    }

    /// The mode for a new object in `parent`: the caller's umask applies unless the
    /// directory has a default ACL, which then decides (the backing filesystem applies it).
    /// The kernel leaves umask to agx (FUSE_DONT_MASK, and with FUSE_POSIX_ACL it must
    /// not apply it itself), and the daemon runs with umask 0. Applying a umask the
    /// kernel already applied changes nothing.
    pub(super) fn creation_mode(
        &self,
        parent: &Node,
        pfd: &OwnedFd,
        mode: u32,
        caller: Caller,
    ) -> u32 {
        if has_default_acl(parent, pfd) {
            mode
        } else {
            mode & !(caller.umask & 0o777)
        }
    }

    /// Looks up a just-created object (recorded as event `seq`) and gives it to the
    /// caller.
    fn finish_new(
        &self,
        parent: &Node,
        name: &OsStr,
        caller: Caller,
        mode: u32,
        seq: Option<crate::ids::Seq>,
    ) -> Result<FileAttr, Errno> {
        self.give_to_caller(parent, name, caller, mode)?;
        let (node, st) = self.lookup_node(parent, name)?;
        node.set_created(caller.pid, seq);
        Ok(self.entry_attr(&node, &st))
    }

    /// Creates a new non-regular object `name` in `parent` with `make` (given the parent
    /// and the mode after umask), recorded as `op`, then gives it to the caller. `mode`
    /// carries the file type bits.
    fn make_object(
        &self,
        parent: NodeId,
        name: &OsStr,
        caller: Caller,
        op: Op,
        mode: u32,
        make: impl FnOnce(&OwnedFd, u32) -> Result<(), Errno>,
    ) -> Result<FileAttr, Errno> {
        let p = self.writable_parent(parent, name)?;
        let pfd = self.fd(&p)?;
        let path = self.child_path(&p, name)?;
        let is_dir = op == Op::Mkdir;
        let t = self.record(caller.pid, op, path, is_dir, None, Before::Absent, None)?;
        let mode = if op == Op::Symlink {
            mode
        } else {
            self.creation_mode(&p, &pfd, mode, caller)
        };
        let seq = t.as_ref().map(|t| t.seq());
        let r = make(&pfd, mode).and_then(|()| self.finish_new(&p, name, caller, mode, seq));
        self.finish(t, &r, || self.after_at(&p, name));
        r
    }

    pub(super) fn do_mkdir(
        &self,
        parent: NodeId,
        name: &OsStr,
        mode: u32,
        caller: Caller,
    ) -> Result<FileAttr, Errno> {
        let mode = (mode & 0o7777) | libc::S_IFDIR;
        self.make_object(parent, name, caller, Op::Mkdir, mode, |p, m| {
            rustix::fs::mkdirat(p, name, Mode::from_raw_mode(m & 0o7777)).or_errno()
        })
    }

    pub(super) fn do_mknod(
        &self,
        parent: NodeId,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        caller: Caller,
    ) -> Result<FileAttr, Errno> {
        self.make_object(parent, name, caller, Op::Mknod, mode, |p, m| {
            rustix::fs::mknodat(
                p,
                name,
                RxType::from_raw_mode(m),
                Mode::from_raw_mode(m & 0o7777),
                rdev as u64,
            )
            .or_errno()
        })
    }

    pub(super) fn do_symlink(
        &self,
        parent: NodeId,
        name: &OsStr,
        target: &Path,
        caller: Caller,
    ) -> Result<FileAttr, Errno> {
        let mode = libc::S_IFLNK | 0o777;
        self.make_object(parent, name, caller, Op::Symlink, mode, |p, _| {
            rustix::fs::symlinkat(target, p, name).or_errno()
        })
    }

    pub(super) fn do_link(
        &self,
        ino: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
        caller: Caller,
    ) -> Result<FileAttr, Errno> {
        if ino == NodeId::AGX_DIR {
            return Err(Errno::EPERM);
        }
        if ino.is_view() {
            return Err(Errno::EROFS);
        }
        let node = self.node(ino)?;
        let p = self.writable_parent(new_parent, new_name)?;
        if node.tree != p.tree {
            return Err(Errno::EXDEV);
        }
        let (fd, pfd) = (self.fd(&node)?, self.fd(&p)?);
        let path = self.child_path(&p, new_name)?;
        let t = self.record(
            caller.pid,
            Op::Link,
            path,
            false,
            None,
            Before::Absent,
            None,
        )?;
        // Through /proc/self/fd, linkat needs no CAP_DAC_READ_SEARCH (unlike AT_EMPTY_PATH).
        let r = rustix::fs::linkat(
            &self.proc_fd,
            super::fd_name(fd.as_fd()),
            &*pfd,
            new_name,
            AtFlags::SYMLINK_FOLLOW,
        )
        .or_errno()
        .and_then(|()| self.lookup_node(&p, new_name));
        self.finish(t, &r, || self.after_at(&p, new_name));
        let (node, st) = r?;
        Ok(self.entry_attr(&node, &st))
    }

    /// Whether the object behind `fd` is open through the mount. Its before-image is then
    /// copied, not hard-linked: a writer could change a linked copy, and a reader would see
    /// the extra link in its nlink.
    fn may_change(&self, fd: &std::os::fd::OwnedFd) -> bool {
        rustix::fs::fstat(fd)
            .ok()
            .and_then(|st| self.inodes.find(super::key_of(&st)))
            .is_some_and(|n| n.opens() > 0)
    }

    pub(super) fn do_remove(
        &self,
        parent: NodeId,
        name: &OsStr,
        dir: bool,
        caller: Caller,
    ) -> Result<(), Errno> {
        let p = self.writable_parent(parent, name)?;
        let pfd = self.fd(&p)?;
        let obj = self.peek(&p, name)?.ok_or(Errno::ENOENT)?;
        // The object may be kept by a staging link: no change of its content may begin
        // meanwhile (see `capture::linked`).
        let st = rustix::fs::fstat(&obj).or_errno()?;
        let _content = self.rec.lock(super::key_of(&st));
        let path = self.child_path(&p, name)?;
        let (op, before) = if dir {
            (Op::Rmdir, Before::Meta(obj.as_fd()))
        } else {
            (
                Op::Unlink,
                Before::Leaving {
                    fd: obj.as_fd(),
                    dir: pfd.as_fd(),
                    name,
                    may_change: self.may_change(&obj),
                },
            )
        };
        let t = self.record(caller.pid, op, path, dir, None, before, None)?;
        let flags = if dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        let r = rustix::fs::unlinkat(&*pfd, name, flags).or_errno();
        self.finish(t, &r, || After::Absent);
        if r.is_ok() {
            self.note_ignore_file(name);
            self.lost_name(&p, name, obj);
        }
        r
    }

    pub(super) fn do_rename(
        &self,
        parent: NodeId,
        name: &OsStr,
        new_parent: NodeId,
        new_name: &OsStr,
        flags: u32,
        caller: Caller,
    ) -> Result<(), Errno> {
        let p = self.writable_parent(parent, name)?;
        let np = self.writable_parent(new_parent, new_name)?;
        if p.tree != np.tree {
            return Err(Errno::EXDEV);
        }
        let (pfd, npfd) = (self.fd(&p)?, self.fd(&np)?);
        let rflags = RenameFlags::from_bits(flags).ok_or(Errno::EINVAL)?;
        let src = self.peek(&p, name)?.ok_or(Errno::ENOENT)?;
        let dst = self.peek(&np, new_name)?;
        // A replaced target may be kept by a staging link (see `capture::linked`).
        let dst_key = match &dst {
            Some(d) => Some(super::key_of(&rustix::fs::fstat(d).or_errno()?)),
            None => None,
        };
        let _content = dst_key.map(|k| self.rec.lock(k));
        let src_is_dir = rustix::fs::fstat(&src)
            .map(|st| RxType::from_raw_mode(st.st_mode) == RxType::Directory)
            .unwrap_or(false);
        let exchange = rflags.contains(RenameFlags::EXCHANGE);
        let target = match &dst {
            None => Before::Absent,
            Some(d) if exchange => Before::Meta(d.as_fd()),
            Some(d) => Before::Leaving {
                fd: d.as_fd(),
                dir: npfd.as_fd(),
                name: new_name,
                may_change: self.may_change(d),
            },
        };
        let op = if exchange { Op::Exchange } else { Op::Rename };
        let t = self.record(
            caller.pid,
            op,
            self.child_path(&p, name)?,
            src_is_dir,
            self.child_path(&np, new_name)?,
            Before::Meta(src.as_fd()),
            Some(target),
        )?;
        // RENAME_WHITEOUT leaves a whiteout (a 0:0 character device) at the source: a
        // creation of its own, begun with the move (both happen at once).
        let whiteout = if rflags.contains(RenameFlags::WHITEOUT) {
            let begun = self.child_path(&p, name).and_then(|path| {
                self.record(
                    caller.pid,
                    Op::Mknod,
                    path,
                    false,
                    None,
                    Before::Absent,
                    None,
                )
            });
            match begun {
                Ok(w) => w,
                Err(e) => {
                    // Neither is made.
                    self.finish(t, &Err::<(), _>(e), || After::Absent);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let r = rustix::fs::renameat_with(&*pfd, name, &*npfd, new_name, rflags).or_errno();
        self.finish(t, &r, || self.after_at(&np, new_name));
        self.finish(whiteout, &r, || self.after_at(&p, name));
        r?;
        // Keep the names of the moved objects exact.
        if let Some(n) = self.known(&src) {
            n.move_place((p.id, name), (np.id, new_name));
        }
        match (dst, exchange) {
            (Some(d), true) => {
                if let Some(n) = self.known(&d) {
                    n.move_place((np.id, new_name), (p.id, name));
                }
            }
            (Some(d), false) => self.lost_name(&np, new_name, d),
            (None, _) => {}
        }
        self.note_ignore_file(name);
        self.note_ignore_file(new_name);
        Ok(())
    }

    /// The node of the object behind `fd`, if the kernel knows it.
    fn known(&self, fd: &OwnedFd) -> Option<Arc<Node>> {
        let st = rustix::fs::fstat(fd).ok()?;
        self.inodes.find(super::key_of(&st))
    }

    /// The object behind `fd` lost the name `parent/name` through the mount (unlink,
    /// rename over it). Its node forgets that name and, if the kernel knows it, keeps
    /// `fd` for good, since it may have no name left to be reopened by. It has none in
    /// the project when its only links left are agx's own (a before-image kept in
    /// staging by a hard link).
    fn lost_name(&self, parent: &Node, name: &OsStr, fd: OwnedFd) {
        let Ok(st) = rustix::fs::fstat(&fd) else {
            return;
        };
        let key = super::key_of(&st);
        if let Some(n) = self.inodes.find(key) {
            let gone = st.st_nlink <= self.rec.staged_links(key);
            n.drop_place(parent.id, name, gone);
        }
        self.inodes.pin(key, fd);
    }
}
