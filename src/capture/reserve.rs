//! `.agx/reserve`: room kept for agx's own records on a full disk.
//!
//! On a full disk a mutation whose before-image cannot be stored fails with ENOSPC
//! (invariant 5). But what agx needs for a change that copies nothing (an unlink keeps the
//! object by a hard link; a creation has no before-image) is a few hundred bytes: a
//! journal line, a directory entry in staging, a few timeline pages. Without them a user
//! could not even delete files to free space, and the timeline would fall behind the
//! journal, so commands would not see changes that were made. So agx keeps a file of
//! allocated room and gives it back to the filesystem when one of those writes fails with
//! ENOSPC, then tries again; it takes the room back once the filesystem has plenty free.
//! Never released for before-image copies: the room is for records, not content.
//!
//! Size: 1% of the filesystem, at least 1 MiB and at most 16 MiB.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{FallocateFlags, Mode, OFlags};

pub const NAME: &str = "reserve";

pub struct Reserve {
    file: Option<OwnedFd>,
    size: u64,
    /// The room is allocated (not given back).
    held: AtomicBool,
}

fn size_for(fs_bytes: u64) -> u64 {
    (fs_bytes / 100).clamp(1 << 20, 16 << 20)
}

impl Reserve {
    /// Opens the reserve in the `.agx` directory `agx`, allocating it if the filesystem
    /// has room. Without a reserve (it could not be made) agx works as before.
    pub fn open(agx: impl AsFd) -> Reserve {
        let fs = rustix::fs::fstatvfs(&agx).ok();
        let size = fs.map_or(1 << 20, |s| size_for(s.f_blocks * s.f_frsize));
        let file = rustix::fs::openat(
            &agx,
            NAME,
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        );
        let r = Reserve {
            file: file.ok(),
            size,
            held: AtomicBool::new(false),
        };
        r.refill_now();
        r
    }

    fn refill_now(&self) {
        let Some(f) = &self.file else { return };
        let full = rustix::fs::fstat(f).is_ok_and(|st| st.st_blocks as u64 * 512 >= self.size);
        if full || rustix::fs::fallocate(f, FallocateFlags::empty(), 0, self.size).is_ok() {
            self.held.store(true, Ordering::SeqCst);
        } else {
            // No room now: let the file hold nothing rather than part.
            let _ = rustix::fs::ftruncate(f, 0);
        }
    }

    /// Gives the room back to the filesystem; true when there was some to give.
    pub fn release(&self) -> bool {
        let Some(f) = &self.file else { return false };
        if !self.held.swap(false, Ordering::SeqCst) {
            return false;
        }
        let freed = rustix::fs::ftruncate(f, 0).is_ok();
        if freed {
            log::error!(
                "the disk is full: agx gave back its reserved {} KiB to keep recording",
                self.size >> 10
            );
        }
        freed
    }

    /// Takes the room back once the filesystem has four times as much free.
    pub fn refill(&self) {
        if self.held.load(Ordering::SeqCst) {
            return;
        }
        let Some(f) = &self.file else { return };
        let free = rustix::fs::fstatvfs(f).map_or(0, |s| s.f_bavail * s.f_frsize);
        if free > 4 * self.size {
            self.refill_now();
            if self.held.load(Ordering::SeqCst) {
                log::info!("room on the disk again: agx reserved it anew");
            }
        }
    }

    /// Whether a copy of `bytes` (a before-image) may go ahead: always while the room is
    /// held (the filesystem itself then says when it is full); once it is given back,
    /// only while the copy leaves the reserve's size free, so the records that the
    /// reserve's room was given back for (journal lines, staging links, timeline pages)
    /// keep it.
    pub fn room_for_copy(&self, bytes: u64) -> bool {
        if !self.released() {
            return true;
        }
        let Some(f) = &self.file else { return true };
        let free = rustix::fs::fstatvfs(f).map_or(0, |s| s.f_bavail * s.f_frsize);
        free >= bytes.saturating_add(self.size)
    }

    /// Whether the room is given back (the disk was full).
    pub fn released(&self) -> bool {
        self.file.is_some() && !self.held.load(Ordering::SeqCst)
    }
}

/// Runs `f`, and once more after releasing `reserve` if it failed for want of room.
pub fn with_room<T>(
    reserve: &Reserve,
    mut f: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    match f() {
        Err(e) if is_full(&e) && reserve.release() => f(),
        r => r,
    }
}

/// Whether an error means the filesystem is full.
pub fn is_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}
