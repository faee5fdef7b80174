//! Attributes: getattr, setattr (mode, owner, size, times; a change folded into the
//! object's creation amends it), and the set-id bits a write clears (agx negotiates
//! FUSE_HANDLE_KILLPRIV_V2 and clears them itself, as the kernel would).

use std::os::fd::{AsFd, OwnedFd};
use std::time::SystemTime;

use fuser::{Errno, FileAttr, TimeOrNow};
use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps};

use super::entry::Caller;
use super::handle::Handle;
use super::{attr, AgxFs, OrErrno};
use crate::capture::{After, Before};
use crate::fs::inode::Node;
use crate::ids::{HandleId, NodeId};
use crate::timeline::Op;

/// Attribute changes requested by `setattr`.
#[derive(Default, Debug)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
}

impl SetAttr {
    fn owner(&self) -> bool {
        self.uid.is_some() || self.gid.is_some()
    }
}

/// Whether a file with this mode has set-id bits a write may have to clear.
pub(super) fn setid(mode: u32) -> bool {
    mode & (libc::S_ISUID | libc::S_ISGID) != 0
}

/// Whether `caller` is in group `gid` (primary or supplementary, from /proc).
fn in_group(caller: Caller, gid: u32) -> bool {
    if caller.gid == gid {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{}/status", caller.pid))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .map(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
        })
        .unwrap_or(false)
}

/// The set-id bits an unprivileged `caller` writing to a file clears, as the kernel's
/// `should_remove_suid`: set-uid always; set-gid when group-executable or when the caller
/// is not in the file's group. Privileged callers (root) clear nothing.
fn bits_to_clear(mode: u32, file_gid: u32, caller: Caller) -> u32 {
    if caller.uid == 0 {
        return 0;
    }
    let mut clear = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !in_group(caller, file_gid)) {
        clear |= libc::S_ISGID;
    }
    clear
}

fn timespec(t: TimeOrNow) -> Timespec {
    match t {
        TimeOrNow::Now => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        TimeOrNow::SpecificTime(t) => match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => Timespec {
                tv_sec: d.as_secs() as i64,
                tv_nsec: d.subsec_nanos() as _,
            },
            // Before the epoch. fuser 0.18 decodes the kernel's (sec < 0, nsec) as
            // EPOCH - (|sec| s + nsec ns) instead of EPOCH - |sec| s + nsec ns; this is
            // the exact inverse of that decoding, so the kernel's values come back
            // unchanged (the kernel always sends 0 <= nsec < 1e9). Pinned by the test
            // nanosecond_timestamps_round_trip_like_on_disk.
            Err(e) => {
                let d = e.duration();
                Timespec {
                    tv_sec: -(d.as_secs() as i64),
                    tv_nsec: d.subsec_nanos() as _,
                }
            }
        },
    }
}

const OMIT: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: rustix::fs::UTIME_OMIT,
};

impl AgxFs {
    pub(super) fn do_getattr(&self, ino: NodeId, fh: Option<HandleId>) -> Result<FileAttr, Errno> {
        if ino == NodeId::AGX_DIR {
            return Ok(self.agx_dir_attr());
        }
        if ino == NodeId::BRANCHES_DIR {
            return Ok(self.branches_dir_attr());
        }
        if let Some(Handle::File(h)) = fh.and_then(|fh| self.handles.get(fh)).as_deref() {
            let st = rustix::fs::fstat(&h.file).or_errno()?;
            return Ok(attr::from_stat(self.report_id(ino, &st), &st));
        }
        let node = self.node(ino)?;
        let st = rustix::fs::fstat(&*self.fd(&node)?).or_errno()?;
        Ok(attr::from_stat(self.report_id(ino, &st), &st))
    }

    /// How long the kernel may keep the attributes of `ino` it asked for. Not at all while
    /// the file is open for writing through passthrough: writes through a shared mapping
    /// change the backing file's mtime without the FUSE inode seeing them (the release
    /// also drops the cached attributes, but it reaches agx after `close` returns).
    pub(super) fn attr_ttl(&self, ino: NodeId) -> std::time::Duration {
        let node = self.inodes.get(ino);
        let writing = node.as_ref().is_some_and(|n| {
            n.writers() > 0 && n.backing.lock().unwrap_or_else(|e| e.into_inner()).opens > 0
        });
        if writing {
            std::time::Duration::ZERO
        } else {
            self.ttl_in(node.and_then(|n| n.tree))
        }
    }

    /// How long the kernel may cache entries and attributes of the tree `tree` (None: the
    /// main tree): `FsConfig::ttl`, except for a branch another front also serves (`agx
    /// branch mount`), whose changes through that front this kernel cache would not see.
    pub(super) fn ttl_in(&self, tree: Option<crate::ids::BranchId>) -> std::time::Duration {
        match (tree, &self.branches) {
            (Some(b), Some(set)) if set.is_shared(b) => std::time::Duration::ZERO,
            _ => self.cfg.ttl,
        }
    }

    /// [`AgxFs::ttl_in`] for the tree of node `ino` (virtual nodes: the main tree's).
    pub(super) fn ttl_of(&self, ino: NodeId) -> std::time::Duration {
        self.ttl_in(self.inodes.get(ino).and_then(|n| n.tree))
    }

    /// The inode number `stat` reports: the node id, except for the root, which keeps its
    /// backing number (its node id is fixed at 1 by the protocol).
    fn report_id(&self, ino: NodeId, st: &rustix::fs::Stat) -> NodeId {
        if ino == NodeId::ROOT {
            NodeId(st.st_ino)
        } else {
            ino
        }
    }

    pub(super) fn do_setattr(
        &self,
        ino: NodeId,
        fh: Option<HandleId>,
        set: SetAttr,
        caller: Caller,
    ) -> Result<FileAttr, Errno> {
        if ino.is_virtual_dir() || ino.is_view() {
            return Err(Errno::EROFS);
        }
        let node = self.node(ino)?;
        let fd = self.fd(&node)?;
        let empty = set.mode.is_none()
            && !set.owner()
            && set.size.is_none()
            && set.atime.is_none()
            && set.mtime.is_none();
        if empty {
            // With FUSE_HANDLE_KILLPRIV_V2 the kernel asks agx to clear set-id bits before an
            // unprivileged write, truncate or chown with a SETATTR that changes nothing else
            // (its FATTR_KILL_SUIDGID flag does not reach us); the attributes replied are
            // what the kernel caches. From root, such a request is `chown(f, -1, -1)`: no
            // other call of root's sends an empty SETATTR.
            if caller.uid == 0 {
                self.chown_unchanged(&node, &fd, caller)?;
            } else {
                self.kill_setid(&node, caller)?;
            }
            return self.do_getattr(ino, fh);
        }
        let handle = fh.and_then(|fh| self.handles.get(fh));
        // A change through a handle whose open is being recorded is part of that event
        // (its after-state is taken at release).
        // A truncation is a change of content (see `capture::linked`).
        let _content = if set.size.is_some() {
            Some(self.rec.guard(node.key)?)
        } else {
            None
        };
        let folded = set.size.is_none() && self.part_of_creation(&node, caller.pid);
        let in_event =
            matches!(handle.as_deref(), Some(Handle::File(h)) if h.recording()) || folded;
        let ticket = if in_event {
            None
        } else {
            let before = if set.size.is_some() {
                Before::Content(fd.as_fd())
            } else {
                Before::Meta(fd.as_fd())
            };
            let op = super::record::setattr_op(set.size.is_some(), set.mode.is_some(), set.owner());
            let is_dir = node.kind == fuser::FileType::Directory;
            self.record(
                caller.pid,
                op,
                self.path_of(&node)?,
                is_dir,
                None,
                before,
                None,
            )?
        };
        let sized = set.size.is_some();
        let kill = sized && set.mode.is_none() && caller.uid != 0;
        let r = self.apply_setattr(ino, &fd, handle.as_deref(), set);
        let r = match r {
            Ok(a) if kill && setid(a.perm as u32) => self
                .kill_setid(&node, caller)
                .and_then(|()| self.do_getattr(ino, fh)),
            r => r,
        };
        self.finish(ticket, &r, || {
            if sized {
                self.after_content(&node)
            } else {
                After::State(self.rec.state_of(fd.as_fd()))
            }
        });
        if folded && r.is_ok() {
            self.amend_creation(&node);
        }
        r
    }

    /// A metadata change folded into the object's creation (see `CREATION_WINDOW`): the
    /// creation's recorded after-state takes it, or the timeline would not match the
    /// file (and the change would look like one made outside agx).
    pub(super) fn amend_creation(&self, node: &Node) {
        if let (Some(seq), Ok(fd)) = (node.creation(), self.fd(node)) {
            self.rec.amend(seq, self.rec.state_of(fd.as_fd()));
        }
    }

    /// `chown(f, -1, -1)`: the owner stays, ctime moves, and set-id bits go as the
    /// backing filesystem's chown clears them (set-uid, and set-gid with group execute).
    fn chown_unchanged(&self, node: &Node, fd: &OwnedFd, caller: Caller) -> Result<(), Errno> {
        let st = rustix::fs::fstat(fd).or_errno()?;
        let loses_bits = node.kind != fuser::FileType::Directory
            && (st.st_mode & libc::S_ISUID != 0
                || st.st_mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP);
        let ticket = if loses_bits && !self.part_of_creation(node, caller.pid) {
            let path = self.path_of(node)?;
            self.record(
                caller.pid,
                Op::Chown,
                path,
                false,
                None,
                Before::Meta(fd.as_fd()),
                None,
            )?
        } else {
            None
        };
        let r = rustix::fs::chownat(
            fd,
            "",
            None,
            None,
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        )
        .or_errno();
        let folded = ticket.is_none() && loses_bits;
        self.finish(ticket, &r, || After::State(self.rec.state_of(fd.as_fd())));
        if folded && r.is_ok() {
            self.amend_creation(node);
        }
        r
    }

    /// Applies `set` to the object behind `fd` (its node's descriptor).
    fn apply_setattr(
        &self,
        ino: NodeId,
        fd: &OwnedFd,
        handle: Option<&Handle>,
        set: SetAttr,
    ) -> Result<FileAttr, Errno> {
        // Owner first: chown clears set-id bits, which a mode in the same request restores.
        if set.owner() {
            rustix::fs::chownat(
                fd,
                "",
                set.uid.map(rustix::fs::Uid::from_raw),
                set.gid.map(rustix::fs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )
            .or_errno()?;
        }
        if let Some(mode) = set.mode {
            rustix::fs::chmodat(
                &self.proc_fd,
                super::fd_name(fd.as_fd()),
                Mode::from_raw_mode(mode & 0o7777),
                AtFlags::empty(),
            )
            .or_errno()?;
        }
        if let Some(size) = set.size {
            match handle {
                Some(Handle::File(h)) => rustix::fs::ftruncate(&h.file, size).or_errno()?,
                _ => {
                    let f = self.reopen(fd.as_fd(), OFlags::WRONLY)?;
                    rustix::fs::ftruncate(&f, size).or_errno()?;
                }
            }
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let ts = Timestamps {
                last_access: set.atime.map(timespec).unwrap_or(OMIT),
                last_modification: set.mtime.map(timespec).unwrap_or(OMIT),
            };
            // Through the node's own descriptor, so a symlink's times are set without a
            // name (a name recorded for it may since have been removed, e.g. one of two
            // hard links).
            rustix::fs::utimensat(fd, "", &ts, AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW)
                .or_errno()?;
        }
        let st = match handle {
            Some(Handle::File(h)) => rustix::fs::fstat(&h.file),
            _ => rustix::fs::fstat(fd),
        }
        .or_errno()?;
        Ok(attr::from_stat(self.report_id(ino, &st), &st))
    }

    /// Clears the set-id bits `caller`'s write, truncation or allocation removes from
    /// `node`, as the kernel would have without FUSE_HANDLE_KILLPRIV_V2.
    pub(super) fn kill_setid(&self, node: &Node, caller: Caller) -> Result<(), Errno> {
        let fd = self.fd(node)?;
        let st = rustix::fs::fstat(&*fd).or_errno()?;
        let clear = bits_to_clear(st.st_mode, st.st_gid, caller);
        if clear == 0 {
            return Ok(());
        }
        rustix::fs::chmodat(
            &self.proc_fd,
            super::fd_name(fd.as_fd()),
            Mode::from_raw_mode(st.st_mode & 0o7777 & !clear),
            AtFlags::empty(),
        )
        .or_errno()
    }
}
