//! I/O of open files for the non-passthrough fallback (with passthrough the kernel reads
//! and writes the backing file itself), sync, seeking, allocation and copies between
//! files (each a change of content: recorded unless the handle's open already is).

use std::os::fd::AsFd;
use std::sync::Arc;

use fuser::Errno;
use rustix::fs::{FallocateFlags, SeekFrom};

use super::entry::Caller;
use super::handle::{FileHandle, Handle};
use super::{AgxFs, OrErrno};
use crate::capture::{Before, Ticket};
use crate::ids::HandleId;
use crate::timeline::Op;

impl AgxFs {
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
            if let Some(b) = &h.base {
                if let Some(data) = self.read_base(&h.node, b, offset, size)? {
                    return Ok(data);
                }
            }
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
            if let (Some(b), SeekFrom::Data(_) | SeekFrom::Hole(_)) = (&h.base, pos) {
                // Where the data is: the base's, while the file is not copied up.
                if let Some(p) = self.with_base(&h.node, b, |fd| rustix::fs::seek(fd, pos))? {
                    return Ok(p as i64);
                }
            }
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
        let mut copy = |from: &std::os::fd::OwnedFd| {
            rustix::fs::copy_file_range(from, Some(&mut off_in), &o.file, Some(&mut off_out), len)
        };
        // A source whose content is still a branch's base is copied from there.
        let from_base = match &i.base {
            Some(b) => self
                .with_base(&i.node, b, &mut copy)
                .map(|r| r.map(|n| n as u32)),
            None => Ok(None),
        };
        let r = match from_base {
            Ok(Some(n)) => Ok(n),
            Ok(None) => copy(&i.file).map(|n| n as u32).or_errno(),
            Err(e) => Err(e),
        };
        self.finish(t, &r, || self.after_content(&o.node));
        r
    }

    pub(super) fn do_statfs(&self) -> Result<rustix::fs::StatVfs, Errno> {
        rustix::fs::fstatvfs(&*self.root_fd()).or_errno()
    }
}
