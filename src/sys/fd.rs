//! Descriptors: making them when the process is short of them, and opening files for
//! agx's own reads without moving their access times.

use std::os::fd::OwnedFd;
use std::sync::{RwLock, Weak};

/// What can give descriptors back when the process runs out: the mount's inode table,
/// which holds one per cached node and can reopen released ones by name
/// (`fs::descriptors`).
pub trait Valve: Send + Sync {
    /// Releases idle descriptors; returns how many went.
    fn relieve(&self) -> usize;
}

/// The valve of the mount this process serves, if any.
static VALVE: RwLock<Option<Weak<dyn Valve>>> = RwLock::new(None);

/// Makes `valve` the one [`retry`] asks to release descriptors.
pub fn set_valve(valve: Weak<dyn Valve>) {
    *VALVE.write().unwrap_or_else(|e| e.into_inner()) = Some(valve);
}

/// Runs `open` (which makes a descriptor). When the process is out of descriptors, has
/// the valve release idle ones and tries again, a few times; outside a daemon (no valve)
/// it just runs `open`.
pub fn retry<T>(mut open: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    let mut tries = 0;
    loop {
        match open() {
            Err(e) if out_of_descriptors(e) && tries < 4 => {
                tries += 1;
                let valve = VALVE
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .and_then(Weak::upgrade);
                let released = valve.map_or(0, |v| v.relieve());
                if released == 0 && tries > 1 {
                    return Err(e);
                }
            }
            r => return r,
        }
    }
}

/// Whether an error means the process (or system) is out of descriptors.
pub fn out_of_descriptors(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::MFILE || e == rustix::io::Errno::NFILE
}

/// The process's descriptor limit (soft), as the daemon set it at start.
pub fn nofile_limit() -> usize {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    lim.current.map_or(1 << 20, |n| n.min(1 << 20) as usize)
}

/// Opens with `O_NOATIME` (agx's own reads must not show in a file's access time), or
/// without it where the kernel refuses it (a file the caller does not own, without
/// CAP_FOWNER).
pub fn without_atime(
    mut open: impl FnMut(rustix::fs::OFlags) -> rustix::io::Result<OwnedFd>,
) -> rustix::io::Result<OwnedFd> {
    match open(rustix::fs::OFlags::NOATIME) {
        Err(rustix::io::Errno::PERM) => open(rustix::fs::OFlags::empty()),
        r => r,
    }
}
