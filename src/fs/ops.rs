//! The protocol edge: fuser's `Filesystem` trait, translated to the typed operations of
//! this module. Every request gets exactly one reply; failures are errnos, and a panic
//! in a handler is caught (`guard`) and answered EIO, so it never takes a request thread
//! (or, with the last of them, the daemon) down.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, Filesystem, Generation, INodeNo,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

mod guard;

use super::entry::Caller;
use super::setattr::SetAttr;
use super::xattr::XattrReply;
use super::AgxFs;
use crate::ids::{HandleId, NodeId};
use guard::guard;

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        umask: 0,
        pid: req.pid(),
    }
}

/// The caller of a request that carries its umask.
fn caller_with_umask(req: &Request, umask: u32) -> Caller {
    Caller {
        umask,
        ..caller(req)
    }
}

fn id(ino: INodeNo) -> NodeId {
    NodeId(ino.0)
}

fn hid(fh: FileHandle) -> HandleId {
    HandleId(fh.0)
}

impl AgxFs {
    fn reply_entry(&self, reply: ReplyEntry, r: Result<FileAttr, Errno>) {
        match r {
            Ok(attr) => reply.entry(&self.ttl_of(NodeId(attr.ino.0)), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn reply_xattr(reply: ReplyXattr, r: Result<XattrReply, Errno>) {
    match r {
        Ok(XattrReply::Size(n)) => reply.size(n),
        Ok(XattrReply::Data(d)) => reply.data(&d),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for AgxFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        guard("init", || {
            let report = self.negotiate(config);
            self.passthrough
                .store(report.passthrough, Ordering::Relaxed);
            log::info!(
                "kernel FUSE ABI {:?}; granted: {}; passthrough: {}",
                config.kernel_abi(),
                report.granted.join(" "),
                if report.passthrough { "on" } else { "off" }
            );
            let (_, budget) = self.inodes.descriptors();
            log::info!(
                "descriptors: up to {budget} held for cached inodes (limit {}); others reopened by name",
                crate::sys::fd::nofile_limit()
            );
            *self.report.lock().unwrap_or_else(|e| e.into_inner()) = Some(report);
            Ok(())
        })
        .unwrap_or_else(|| Err(std::io::Error::other("INIT panicked")))
    }

    fn destroy(&mut self) {
        guard("destroy", || {
            log::info!(
                "unmounted; {} nodes ({} holding a descriptor) and {} handles were live",
                self.inodes.len(),
                self.inodes.descriptors().0,
                self.handles.len()
            );
        });
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guard("lookup", || {
            // Views: no negative entries, nothing cached (see fs/views.rs).
            if let Some(r) = self.view_lookup(id(parent), name) {
                match r {
                    Ok(attr) => reply.entry(&super::views::VIEW_TTL, &attr, Generation(0)),
                    Err(e) => reply.error(e),
                }
                return;
            }
            let ttl = self.ttl_of(id(parent));
            match self.do_lookup(id(parent), name) {
                Ok(attr) => reply.entry(
                    &self.ttl_of(NodeId(attr.ino.0)).min(ttl),
                    &attr,
                    Generation(0),
                ),
                // A negative entry the kernel may cache: every creation goes through the mount.
                Err(e) if e == Errno::ENOENT => {
                    let mut attr = self.agx_dir_attr();
                    attr.ino = INodeNo(0);
                    reply.entry(&ttl, &attr, Generation(0))
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guard("forget", || {
            self.inodes.forget(id(ino), nlookup);
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        guard("getattr", || {
            if id(ino).is_view() {
                match self.view_getattr(id(ino)) {
                    Ok(attr) => reply.attr(&super::views::VIEW_TTL, &attr),
                    Err(e) => reply.error(e),
                }
                return;
            }
            match self.do_getattr(id(ino), fh.map(hid)) {
                Ok(attr) => reply.attr(&self.attr_ttl(id(ino)), &attr),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        guard("setattr", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            let set = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
            };
            match self.do_setattr(id(ino), fh.map(hid), set, caller(req)) {
                Ok(attr) => reply.attr(&self.ttl_of(id(ino)), &attr),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guard("readlink", || {
            let r = if id(ino).is_view() {
                self.view_readlink(id(ino))
            } else {
                self.do_readlink(id(ino))
            };
            match r {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(e),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        guard("mknod", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            let r = self.do_mknod(id(parent), name, mode, rdev, caller_with_umask(req, umask));
            self.reply_entry(reply, r);
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        guard("mkdir", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            let r = self.do_mkdir(id(parent), name, mode, caller_with_umask(req, umask));
            self.reply_entry(reply, r);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("unlink", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            reply_empty(reply, self.do_remove(id(parent), name, false, caller(req)));
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("rmdir", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            reply_empty(reply, self.do_remove(id(parent), name, true, caller(req)));
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        guard("symlink", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            let r = self.do_symlink(id(parent), link_name, target, caller(req));
            self.reply_entry(reply, r);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        guard("rename", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            reply_empty(
                reply,
                self.do_rename(
                    id(parent),
                    name,
                    id(newparent),
                    newname,
                    flags.bits(),
                    caller(req),
                ),
            );
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        guard("link", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            let r = self.do_link(id(ino), id(newparent), newname, caller(req));
            self.reply_entry(reply, r);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        guard("open", || {
            // An open that can change the file waits while agx rewrites the tree.
            let writes =
                flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
            let _pass = writes.then(|| self.rec.gate.pass());
            if id(ino).is_view() {
                match self.view_open(id(ino), flags.0) {
                    // No FOPEN_KEEP_CACHE: every open reads afresh.
                    Ok(fh) => reply.opened(FileHandle(fh.0), fuser::FopenFlags::empty()),
                    Err(e) => reply.error(e),
                }
                return;
            }
            let r = self.do_open(id(ino), flags.0, caller(req), |fd| reply.open_backing(fd));
            match r {
                Ok(o) => {
                    let fh = FileHandle(o.fh.0);
                    if o.passthrough {
                        let slot = o.node.backing.lock().unwrap_or_else(|e| e.into_inner());
                        match &slot.id {
                            Some(b) => reply.opened_passthrough(fh, o.flags, b),
                            None => reply.opened(fh, o.flags),
                        }
                    } else {
                        reply.opened(fh, o.flags)
                    }
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guard("read", || {
            let r = if hid(fh).is_view() {
                self.view_read(hid(fh), offset, size)
            } else {
                self.do_read(hid(fh), offset, size)
            };
            match r {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        guard("write", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            match self.do_write(
                hid(fh),
                offset,
                data,
                _write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID),
            ) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        guard("flush", || {
            // Nothing to flush: writes reach the backing file before they are acknowledged, and
            // locks are the kernel's. ENOSYS tells the kernel to stop sending FLUSH on close.
            reply.error(Errno::ENOSYS);
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guard("release", || {
            // Answered first: the kernel sends RELEASE after `close` returned and waits for
            // nothing after it, but the thread stays busy until it answers, and the closing
            // process's next requests wake other threads onto the same CPU meanwhile. On 2
            // CPUs a release that answers late adds several times its own time to a loop of
            // creations (`create_10k`). The bookkeeping after the answer races with later
            // requests exactly as it did before it: the kernel never waited for it.
            reply.ok();
            if hid(fh).is_view() {
                self.view_release(hid(fh));
            } else {
                self.do_release(hid(fh));
            }
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        guard("fsync", || {
            if hid(fh).is_view() {
                // Nothing of a view is ever written.
                return reply.ok();
            }
            reply_empty(reply, self.do_fsync(hid(fh), datasync));
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guard("opendir", || {
            if id(ino).is_view() {
                match self.view_opendir(id(ino)) {
                    Ok(fh) => reply.opened(FileHandle(fh.0), fuser::FopenFlags::empty()),
                    Err(e) => reply.error(e),
                }
                return;
            }
            match self.do_opendir(id(ino)) {
                Ok((fh, flags)) => reply.opened(FileHandle(fh.0), flags),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        guard("readdir", || {
            let r = if hid(fh).is_view() {
                self.view_readdir(hid(fh), offset, reply)
            } else {
                self.do_readdir(hid(fh), offset, reply)
            };
            if let Err((e, reply)) = r {
                reply.error(e);
            }
        });
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        guard("readdirplus", || {
            let r = if hid(fh).is_view() {
                self.view_readdirplus(hid(fh), offset, reply)
            } else {
                self.do_readdirplus(hid(fh), offset, reply)
            };
            if let Err((e, reply)) = r {
                reply.error(e);
            }
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        guard("releasedir", || {
            if hid(fh).is_view() {
                self.view_release(hid(fh));
            } else {
                self.do_releasedir(hid(fh));
            }
            reply.ok();
        });
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        guard("fsyncdir", || {
            reply_empty(reply, self.do_fsync(hid(fh), datasync));
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guard("statfs", || match self.do_statfs() {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        guard("setxattr", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            reply_empty(
                reply,
                self.do_setxattr(id(ino), name, value, flags, req.pid()),
            );
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guard("getxattr", || {
            reply_xattr(reply, self.do_getxattr(id(ino), name, size));
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guard("listxattr", || {
            let privileged = req.uid() == 0;
            reply_xattr(reply, self.do_listxattr(id(ino), size, privileged));
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("removexattr", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            reply_empty(reply, self.do_removexattr(id(ino), name, req.pid()));
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        guard("access", || {
            // The mount uses default_permissions: the kernel checks access itself.
            reply.ok();
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        guard("create", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            let r = self.do_create(
                id(parent),
                name,
                mode,
                flags,
                caller_with_umask(req, umask),
                |fd| reply.open_backing(fd),
            );
            match r {
                Ok((o, attr)) => {
                    let fh = FileHandle(o.fh.0);
                    let ttl = self.ttl_of(id(parent));
                    if o.passthrough {
                        let slot = o.node.backing.lock().unwrap_or_else(|e| e.into_inner());
                        match &slot.id {
                            Some(b) => reply.created_passthrough(
                                &ttl,
                                &attr,
                                Generation(0),
                                fh,
                                o.flags,
                                b,
                            ),
                            None => reply.created(&ttl, &attr, Generation(0), fh, o.flags),
                        }
                    } else {
                        reply.created(&ttl, &attr, Generation(0), fh, o.flags)
                    }
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        guard("fallocate", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            reply_empty(
                reply,
                self.do_fallocate(hid(fh), offset, length, mode, caller(req)),
            );
        });
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        guard("lseek", || {
            let r = if hid(fh).is_view() {
                self.view_lseek(hid(fh), offset, whence)
            } else {
                self.do_lseek(hid(fh), offset, whence)
            };
            match r {
                Ok(o) => reply.offset(o),
                Err(e) => reply.error(e),
            }
        });
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        guard("ioctl", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            // The file attribute ioctls (lsattr, chattr) are served (fs/fileattr.rs);
            // every other command is ENOTTY, and quietly: isatty() asks TCGETS of nearly
            // every file a program opens, and the kernel does not remember a refusal.
            match self.do_ioctl(id(ino), hid(fh), cmd, in_data, out_size, caller(req)) {
                Ok(data) => reply.ioctl(0, &data),
                Err(e) => reply.error(e),
            }
        });
    }

    fn copy_file_range(
        &self,
        req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        guard("copy_file_range", || {
            // A change: waits while agx rewrites the tree (see `capture::gate`).
            let _pass = self.rec.gate.pass();
            match self.do_copy_file_range(
                hid(fh_in),
                offset_in,
                hid(fh_out),
                offset_out,
                len,
                caller(req),
            ) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            }
        });
    }
}
