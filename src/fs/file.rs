//! Opening and creating regular files (with kernel passthrough when granted) and releasing
//! them (a recorded open ends its event). Attributes are in `setattr.rs`, I/O in `io.rs`.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{BackingId, Errno, FileAttr, FopenFlags};
use rustix::fs::{AtFlags, Mode, OFlags};

use super::entry::Caller;
use super::handle::{FileHandle, Handle};
use super::setattr::setid;
use super::{AgxFs, OrErrno};
use crate::capture::{After, Before, Ticket};
use crate::fs::inode::Node;
use crate::ids::{HandleId, NodeId};
use crate::timeline::Op;

/// What a new handle may do.
struct HandleOpts {
    writable: bool,
    /// Reads go to a branch's base (see `FileHandle::base`).
    base: Option<super::branches::BaseRead>,
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
            base: None,
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

impl AgxFs {
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
        if ino.is_virtual_dir() {
            return Err(Errno::EISDIR);
        }
        let node = self.node(ino)?;
        let fd = self.fd(&node)?;
        let oflags = handle_flags(flags);
        // A branch's file still taking its content from the base gets it before it is
        // opened for writing (and truncated).
        if writes(oflags) {
            self.copy_up_node(&node)?;
        }
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
        // A branch's file: written, it was copied up by `record` above; read, it may still
        // be read from the base (never through passthrough: the kernel would read the
        // branch's file, which has no content yet).
        let base = if writes(oflags) {
            None
        } else {
            self.base_reader(&node)?
        };
        let opts = HandleOpts {
            writable: writes(oflags),
            passthrough: !special && base.is_none() && node.based() != Some(true),
            base,
            kill_setid: kill.then_some(caller),
        };
        Ok(self.new_file_handle(node, file, opts, ticket, register))
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
        // An existing file of a branch still taking its content from the base: copied up
        // (this handle reads and writes the branch's file).
        self.copy_up_node(&node)?;
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
            base: opts.base,
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
}
