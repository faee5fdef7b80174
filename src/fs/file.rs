//! Regular-file operations: open/create (with kernel passthrough when granted), I/O for
//! the non-passthrough fallback, attributes, sync, allocation.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{BackingId, Errno, FileAttr, FopenFlags, TimeOrNow};
use rustix::fs::{AtFlags, FallocateFlags, Mode, OFlags, SeekFrom, Timespec, Timestamps};

use super::entry::Caller;
use super::handle::{FileHandle, Handle};
use super::{attr, AgxFs, OrErrno};
use crate::capture::{After, Before, Ticket};
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

/// What a new handle may do.
struct HandleOpts {
    writable: bool,
    /// May be served by kernel passthrough (not for set-id files).
    passthrough: bool,
    /// Clear set-id bits at the first write, as this caller's write would.
    kill_setid: Option<Caller>,
}

impl HandleOpts {
    /// A file just created (never set-id yet).
    fn created() -> HandleOpts {
        HandleOpts {
            writable: true,
            passthrough: true,
            kill_setid: None,
        }
    }
}

/// How an open was answered.
pub struct Opened {
    pub fh: HandleId,
    pub flags: FopenFlags,
    pub node: Arc<Node>,
    pub passthrough: bool,
}

/// Whether a file with this mode has set-id bits a write may have to clear.
fn setid(mode: u32) -> bool {
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

fn writes(flags: OFlags) -> bool {
    flags.intersects(OFlags::WRONLY | OFlags::RDWR) || flags.contains(OFlags::TRUNC)
}

/// Flags for the daemon's own descriptor of an open file. O_NOFOLLOW goes: the kernel has
/// already resolved the name, and the descriptor is reopened through a `/proc/self/fd`
/// magic link, which O_NOFOLLOW would refuse with ELOOP. O_APPEND goes too: the kernel
/// turns appends into writes at its own end of file (under the inode lock), and it also
/// writes back pages of shared mappings through whichever handle it picks, at their own
/// offsets; an O_APPEND descriptor would move those writes to the end of the file.
fn handle_flags(flags: i32) -> OFlags {
    let f = OFlags::from_bits_retain(flags as u32);
    let dropped = OFlags::CREATE
        | OFlags::EXCL
        | OFlags::NOCTTY
        | OFlags::DIRECT
        | OFlags::NOFOLLOW
        | OFlags::APPEND;
    (f & !dropped) | OFlags::CLOEXEC
}

/// Flags for the daemon's descriptor of a recorded write-only open: read-write, so that at
/// release the capture worker reads the after-image through it (see `released_content`)
/// instead of reopening the file through its `/proc/self/fd` link, a path walk per file.
/// The kernel still enforces the caller's access mode on its own file, and a passthrough
/// open gets a backing file of its own, opened with the caller's flags.
fn readable_flags(oflags: OFlags) -> Option<OFlags> {
    let wronly = oflags.contains(OFlags::WRONLY) && !oflags.contains(OFlags::RDWR);
    wronly.then(|| (oflags & !OFlags::WRONLY) | OFlags::RDWR)
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
        let writing = self.inodes.get(ino).is_some_and(|n| {
            n.writers() > 0 && n.backing.lock().unwrap_or_else(|e| e.into_inner()).opens > 0
        });
        if writing {
            std::time::Duration::ZERO
        } else {
            self.cfg.ttl
        }
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
        if ino == NodeId::AGX_DIR || ino.is_view() {
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

    pub(super) fn do_readlink(&self, ino: NodeId) -> Result<Vec<u8>, Errno> {
        let node = self.node(ino)?;
        let target = rustix::fs::readlinkat(&*self.fd(&node)?, "", Vec::new()).or_errno()?;
        Ok(target.into_bytes())
    }

    /// Opens an existing regular file. `register` turns a descriptor into the kernel's
    /// passthrough registration (the reply object does that).
    pub(super) fn do_open(
        &self,
        ino: NodeId,
        flags: i32,
        caller: Caller,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> std::io::Result<BackingId>,
    ) -> Result<Opened, Errno> {
        if ino == NodeId::AGX_DIR {
            return Err(Errno::EISDIR);
        }
        let node = self.node(ino)?;
        let fd = self.fd(&node)?;
        let oflags = handle_flags(flags);
        // From the before-image to the truncation of an O_TRUNC open (see
        // `capture::linked`).
        let _content = if writes(oflags) {
            Some(self.rec.guard(node.key)?)
        } else {
            None
        };
        let ticket = if writes(oflags) {
            let before = Before::Content(fd.as_fd());
            self.record(
                caller.pid,
                Op::Write,
                self.path_of(&node)?,
                false,
                None,
                before,
                None,
            )?
        } else {
            None
        };
        // A regular file is opened read-write where agx may (see `readable_flags`; the
        // kernel opens FIFOs and devices itself, and read-write would change their
        // semantics were one ever to reach here); otherwise the caller's flags give the
        // open its own result.
        // O_NOATIME too (the caller cannot read through its write-only file, and agx's
        // reads must not move atime); without the permission for it, the caller's flags.
        let upgraded = readable_flags(oflags)
            .filter(|_| ticket.is_some() && node.kind == fuser::FileType::RegularFile)
            .and_then(|rw| self.reopen(fd.as_fd(), rw | OFlags::NOATIME).ok());
        let file = match upgraded.map_or_else(|| self.reopen(fd.as_fd(), oflags), Ok) {
            Ok(f) => f,
            Err(e) => {
                self.finish(ticket, &Err::<(), _>(e), || After::Absent);
                return Err(e);
            }
        };
        let special = rustix::fs::fstat(&file).is_ok_and(|st| setid(st.st_mode));
        let kill = special && writes(oflags) && caller.uid != 0;
        if kill && oflags.contains(OFlags::TRUNC) {
            self.kill_setid(&node, caller)?;
        }
        let opts = HandleOpts {
            writable: writes(oflags),
            passthrough: !special,
            kill_setid: kill.then_some(caller),
        };
        Ok(self.new_file_handle(node, file, opts, ticket, register))
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

    pub(super) fn do_create(
        &self,
        parent: NodeId,
        name: &OsStr,
        mode: u32,
        flags: i32,
        caller: Caller,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> std::io::Result<BackingId>,
    ) -> Result<(Opened, FileAttr), Errno> {
        let p = self.writable_parent(parent, name)?;
        let pfd = self.fd(&p)?;
        let mode = self.creation_mode(&p, &pfd, mode, caller);
        let oflags = handle_flags(flags);
        let user_excl = OFlags::from_bits_retain(flags as u32).contains(OFlags::EXCL);
        let path = self.child_path(&p, name)?;
        let perm = Mode::from_raw_mode(mode & 0o7777);
        // A name that exists is opened, not created (and recorded as a write): a create
        // event is begun only for a name that was free a moment ago, so a crash can never
        // leave a "create" of a file that was already there.
        let record_create = || {
            let create_path = path.clone();
            self.record(
                caller.pid,
                Op::Create,
                create_path,
                false,
                None,
                Before::Absent,
                None,
            )
        };
        let created = if !user_excl && self.peek(&p, name)?.is_some() {
            None
        } else {
            record_create()?
        };
        // Exclusive first, so an existing file is known (and recorded) before O_TRUNC.
        // A new file is opened read-write when recorded (see `readable_flags`): creating
        // it checks no permission on the new file. Not O_NOATIME: the kernel checks that
        // after creating the file, and where the creator does not own it (some network
        // and FAT mounts) the open would fail with the file left behind; release sets it.
        let create_flags = match readable_flags(oflags) {
            Some(rw) if created.is_some() => rw,
            _ => oflags,
        };
        let (file, ticket) = match crate::sys::fd::retry(|| {
            rustix::fs::openat(
                &*pfd,
                name,
                create_flags | OFlags::CREATE | OFlags::EXCL,
                perm,
            )
        }) {
            Ok(f) => {
                if let Err(e) = self.give_to_caller(&p, name, caller, mode) {
                    self.finish(created, &Err::<(), _>(e), || After::Absent);
                    let _ = rustix::fs::unlinkat(&*pfd, name, AtFlags::empty());
                    return Err(e);
                }
                // The name was taken when looked at and freed since: still a creation.
                let created = match created {
                    Some(t) => Some(t),
                    None => record_create()?,
                };
                (f, created)
            }
            Err(rustix::io::Errno::EXIST) if !user_excl => {
                self.finish(created, &Err::<(), _>(Errno::EEXIST), || After::Absent);
                let existing = self.peek(&p, name)?.ok_or(Errno::ENOENT)?;
                let _content = if writes(oflags) {
                    let st = rustix::fs::fstat(&existing).or_errno()?;
                    Some(self.rec.guard(super::key_of(&st))?)
                } else {
                    None
                };
                let ticket = if writes(oflags) {
                    let before = Before::Content(existing.as_fd());
                    self.record(caller.pid, Op::Write, path, false, None, before, None)?
                } else {
                    None
                };
                // The object recorded (and locked) is the one opened: through its own
                // descriptor when it is a file, never by a name that may have moved on.
                let is_file = rustix::fs::fstat(&existing)
                    .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_file());
                let reopened = if is_file {
                    self.reopen(existing.as_fd(), oflags)
                        .map_err(|e| rustix::io::Errno::from_raw_os_error(e.code()))
                } else {
                    crate::sys::fd::retry(|| {
                        rustix::fs::openat(&*pfd, name, oflags | OFlags::NOFOLLOW, perm)
                    })
                };
                match reopened {
                    Ok(f) => (f, ticket),
                    Err(e) => {
                        self.finish(ticket, &Err::<(), _>(super::errno(e)), || After::Absent);
                        return Err(super::errno(e));
                    }
                }
            }
            Err(e) => {
                self.finish(created, &Err::<(), _>(super::errno(e)), || After::Absent);
                return Err(super::errno(e));
            }
        };
        let (node, st) = self.lookup_node(&p, name)?;
        if let Some(t) = ticket.as_ref().filter(|t| t.op() == Op::Create) {
            node.set_created(caller.pid, Some(t.seq()));
        }
        let attr = self.entry_attr(&node, &st);
        Ok((
            self.new_file_handle(node, file, HandleOpts::created(), ticket, register),
            attr,
        ))
    }

    fn new_file_handle(
        &self,
        node: Arc<Node>,
        file: std::os::fd::OwnedFd,
        opts: HandleOpts,
        ticket: Option<Ticket>,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> std::io::Result<BackingId>,
    ) -> Opened {
        let writable = opts.writable;
        node.add_open();
        if writable {
            node.add_writer();
        }
        // An inode's opens must all be passthrough or none: a new open follows the ones
        // already there. Otherwise set-id files are not passed through: writes must reach
        // agx, which clears the bits.
        let mut slot = node.backing.lock().unwrap_or_else(|e| e.into_inner());
        let passthrough = if slot.opens > 0 {
            true
        } else if slot.cached > 0 || !opts.passthrough || !self.passthrough.load(Ordering::Relaxed)
        {
            false
        } else {
            match register(&file) {
                Ok(id) => {
                    slot.id = Some(id);
                    true
                }
                Err(e) => {
                    if !self.passthrough_warned.swap(true, Ordering::Relaxed) {
                        log::warn!("passthrough registration failed ({e}); this open and later failures go through the daemon");
                    }
                    false
                }
            }
        };
        if passthrough {
            slot.opens += 1;
        } else {
            slot.cached += 1;
        }
        drop(slot);
        // A set-id file passed through because it was already open that way: its writes
        // will not reach agx, so the bits this caller's write would clear go now.
        let mut kill_setid = opts.kill_setid;
        if passthrough && !opts.passthrough {
            if let Some(caller) = kill_setid.take() {
                if let Err(e) = self.kill_setid(&node, caller) {
                    log::warn!("could not clear set-id bits of node {}: {e:?}", node.id);
                }
            }
        }
        let fh = self.handles.insert(Handle::File(FileHandle {
            node: node.clone(),
            file,
            passthrough,
            writable,
            ticket: std::sync::Mutex::new(ticket),
            kill_setid: std::sync::Mutex::new(kill_setid),
        }));
        // The kernel refuses page-cache flags on passthrough opens (the backing file's
        // cache is the one used); without passthrough the cache stays valid across opens
        // because every write goes through this mount.
        let flags = if passthrough {
            FopenFlags::empty()
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        };
        Opened {
            fh,
            flags,
            node,
            passthrough,
        }
    }

    pub(super) fn do_release(&self, fh: HandleId) {
        // Until the change is committed, a flush waits for this release (`fs::settle`).
        let _releasing = self.handles.start_release();
        let Some(h) = self.handles.remove(fh) else {
            return;
        };
        let Handle::File(f) = &*h else {
            return;
        };
        f.node.drop_open();
        if f.writable {
            f.node.drop_writer();
        }
        let ticket = f.ticket.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut slot = f.node.backing.lock().unwrap_or_else(|e| e.into_inner());
        if f.passthrough {
            slot.opens = slot.opens.saturating_sub(1);
            if slot.opens == 0 {
                // Dropping the id unregisters it; the kernel keeps its own reference
                // for as long as it needs the backing file.
                slot.id = None;
            }
        } else {
            slot.cached = slot.cached.saturating_sub(1);
        }
        drop(slot);
        if f.passthrough && f.writable {
            // Writes through a shared mapping of a passthrough file reach the backing
            // file without the kernel's FUSE inode seeing them: drop its cached
            // attributes (only those: offset -1), so stat shows the new mtime.
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(fuser::INodeNo(f.node.id.0), -1, 0);
            }
        }
        if let Some(t) = ticket {
            self.rec.commit(t, self.released_content(h));
        }
    }

    /// The new content of a file whose recorded handle is being released: the handle's own
    /// descriptor, which the capture worker reads (no reopen by path). It is moved there
    /// when no request still uses the handle, else duplicated. The worker makes it stop
    /// moving atime before it reads (see `capture::worker`); nothing else uses it any more.
    fn released_content(&self, h: Arc<Handle>) -> After {
        match Arc::try_unwrap(h) {
            Ok(Handle::File(f)) => After::Content(f.file),
            Ok(Handle::Dir(_)) => After::Absent,
            Err(h) => match &*h {
                Handle::File(f) => match self.retry(|| rustix::io::dup(&f.file)) {
                    Ok(dup) => After::Content(dup),
                    Err(_) => self.after_content(&f.node),
                },
                Handle::Dir(_) => After::Absent,
            },
        }
    }

    fn file_handle(&self, fh: HandleId) -> Result<Arc<Handle>, Errno> {
        match self.handles.get(fh) {
            Some(h) if matches!(*h, Handle::File(_)) => Ok(h),
            _ => Err(Errno::EBADF),
        }
    }

    pub(super) fn with_file<T>(
        &self,
        fh: HandleId,
        f: impl FnOnce(&FileHandle) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let h = self.file_handle(fh)?;
        match &*h {
            Handle::File(fh) => f(fh),
            Handle::Dir(_) => Err(Errno::EBADF),
        }
    }

    pub(super) fn do_read(&self, fh: HandleId, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        self.with_file(fh, |h| {
            let mut buf = vec![0u8; size as usize];
            let mut done = 0;
            while done < buf.len() {
                let n = rustix::io::pread(&h.file, &mut buf[done..], offset + done as u64)
                    .or_errno()?;
                if n == 0 {
                    break;
                }
                done += n;
            }
            buf.truncate(done);
            Ok(buf)
        })
    }

    pub(super) fn do_write(
        &self,
        fh: HandleId,
        offset: u64,
        data: &[u8],
        kill: bool,
    ) -> Result<u32, Errno> {
        self.with_file(fh, |h| {
            let pending = h
                .kill_setid
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(c) = pending {
                self.kill_setid(&h.node, c)?;
            } else if kill {
                // The kernel asked (FUSE_WRITE_KILL_SUIDGID): it judged the writer
                // unprivileged; clear both bits as its should_remove_suid does.
                let any = Caller {
                    uid: u32::MAX,
                    gid: u32::MAX,
                    umask: 0,
                    pid: 0,
                };
                self.kill_setid(&h.node, any)?;
            }
            let mut done = 0;
            while done < data.len() {
                let n =
                    rustix::io::pwrite(&h.file, &data[done..], offset + done as u64).or_errno()?;
                if n == 0 {
                    break;
                }
                done += n;
            }
            Ok(done as u32)
        })
    }

    pub(super) fn do_fsync(&self, fh: HandleId, datasync: bool) -> Result<(), Errno> {
        let h = self.handles.get(fh).ok_or(Errno::EBADF)?;
        let fd = match &*h {
            Handle::File(f) => f.file.as_fd(),
            Handle::Dir(d) => match &d.file {
                Some(f) => f.as_fd(),
                None => return Ok(()),
            },
        };
        if datasync {
            rustix::fs::fdatasync(fd).or_errno()
        } else {
            rustix::fs::fsync(fd).or_errno()
        }
    }

    /// A separate event for a content change through `h`, unless `h`'s open is already
    /// being recorded (then the change is part of that event).
    fn content_event(&self, h: &FileHandle, op: Op, pid: u32) -> Result<Option<Ticket>, Errno> {
        if h.recording() {
            return Ok(None);
        }
        let fd = self.fd(&h.node)?;
        let before = Before::Content(fd.as_fd());
        self.record(pid, op, self.path_of(&h.node)?, false, None, before, None)
    }

    pub(super) fn do_fallocate(
        &self,
        fh: HandleId,
        offset: u64,
        length: u64,
        mode: i32,
        caller: Caller,
    ) -> Result<(), Errno> {
        self.with_file(fh, |h| {
            let _content = self.rec.guard(h.node.key)?;
            let t = self.content_event(h, Op::Fallocate, caller.pid)?;
            self.kill_setid(&h.node, caller)?;
            let r = rustix::fs::fallocate(
                &h.file,
                FallocateFlags::from_bits_retain(mode as u32),
                offset,
                length,
            )
            .or_errno();
            self.finish(t, &r, || self.after_content(&h.node));
            r
        })
    }

    pub(super) fn do_lseek(&self, fh: HandleId, offset: i64, whence: i32) -> Result<i64, Errno> {
        self.with_file(fh, |h| {
            let pos = match whence {
                libc::SEEK_DATA => SeekFrom::Data(offset as u64),
                libc::SEEK_HOLE => SeekFrom::Hole(offset as u64),
                libc::SEEK_SET => SeekFrom::Start(offset as u64),
                libc::SEEK_END => SeekFrom::End(offset),
                _ => return Err(Errno::EINVAL),
            };
            rustix::fs::seek(&h.file, pos).map(|p| p as i64).or_errno()
        })
    }

    pub(super) fn do_copy_file_range(
        &self,
        fh_in: HandleId,
        offset_in: u64,
        fh_out: HandleId,
        offset_out: u64,
        len: u64,
        caller: Caller,
    ) -> Result<u32, Errno> {
        let hin = self.file_handle(fh_in)?;
        let hout = self.file_handle(fh_out)?;
        let (Handle::File(i), Handle::File(o)) = (&*hin, &*hout) else {
            return Err(Errno::EBADF);
        };
        let _content = self.rec.guard(o.node.key)?;
        let t = self.content_event(o, Op::Write, caller.pid)?;
        self.kill_setid(&o.node, caller)?;
        let mut off_in = offset_in;
        let mut off_out = offset_out;
        let len = len.min(u32::MAX as u64 & !0xfff) as usize;
        let r = rustix::fs::copy_file_range(
            &i.file,
            Some(&mut off_in),
            &o.file,
            Some(&mut off_out),
            len,
        )
        .map(|n| n as u32)
        .or_errno();
        self.finish(t, &r, || self.after_content(&o.node));
        r
    }

    pub(super) fn do_statfs(&self) -> Result<rustix::fs::StatVfs, Errno> {
        rustix::fs::fstatvfs(&*self.root_fd()).or_errno()
    }
}
