//! Mounts left behind by a daemon that died (SIGKILL, OOM killer, crash): telling them
//! from live ones and removing them.
//!
//! When the daemon dies the kernel keeps its mount in the mount table until someone
//! unmounts it; from the moment the daemon's last `/dev/fuse` descriptor closes, every
//! request to the mount fails with ENOTCONN, or ECONNABORTED for a request that was already
//! waiting for an answer at that moment. Only the mount table and a real request are
//! trusted here:
//! - `stat` of the mountpoint may be answered from the kernel's attribute cache;
//! - the state file's pid may still look alive for a while after SIGKILL (the process is
//!   tearing down its memory and descriptors) and may later belong to another process.
//!
//! A dead mount is left in place until a command that is about to replace or remove it
//! (`agx mount`, `agx unmount`) detaches it: while it is there, writes to the project fail
//! loudly instead of reaching the bare directory unrecorded.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{is_root, mountinfo, MountError};
use crate::control;

/// What is mounted at a path, as far as agx is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// No agx mount exactly there.
    Absent,
    /// An agx mount whose daemon answered.
    Live,
    /// An agx mount whose daemon is gone.
    Dead,
}

/// Whether an error says the mount's daemon is gone.
pub fn is_disconnected(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN) | Some(libc::ECONNABORTED)
    )
}

/// Whether the agx mount at `mp` (if any) has a daemon. Opening the directory always sends
/// a request (OPENDIR), unlike `stat`. A daemon that is alive but stopped makes this wait
/// until it runs again or dies, as any access to the mount would.
pub fn health(mp: &Path) -> Health {
    if mountinfo::agx_mount_at(mp).is_none() {
        return Health::Absent;
    }
    match std::fs::read_dir(mp) {
        Err(e) if is_disconnected(&e) => Health::Dead,
        // Any other answer (even an error) came from a daemon, or from a permission
        // check that a live mount would make too.
        _ => Health::Live,
    }
}

/// The canonical absolute form of `p`, also when `p` is a dead mount: resolving the last
/// component may need an answer from the mount, so when that fails with ENOTCONN the
/// parent is resolved instead and the name appended.
pub fn locate(p: &Path) -> Result<PathBuf, MountError> {
    let abs = std::path::absolute(p).map_err(|e| MountError::io(p.display().to_string(), e))?;
    match abs.canonicalize() {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(MountError::NotFound(abs)),
        Err(e) if is_disconnected(&e) => match (abs.parent(), abs.file_name()) {
            (Some(parent), Some(name)) => parent
                .canonicalize()
                .map(|d| d.join(name))
                .map_err(|e| MountError::io(parent.display().to_string(), e)),
            _ => Err(MountError::io(abs.display().to_string(), e)),
        },
        Err(e) => Err(MountError::io(abs.display().to_string(), e)),
    }
}

/// The pid a state file recorded for the daemon serving at `mp` (or the project `mp`):
/// for messages, and to wait for a dying daemon. Never signalled: it may be reused.
pub fn recorded_pid(mp: &Path) -> Option<u32> {
    control::all_states()
        .into_iter()
        .map(|(_, s)| s)
        .find(|s| s.mountpoint == mp)
        .or_else(|| {
            control::all_states()
                .into_iter()
                .map(|(_, s)| s)
                .find(|s| s.project == mp)
        })
        .map(|s| s.pid)
}

/// A dead mount that was removed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Recovered {
    pub mountpoint: PathBuf,
    /// The dead daemon's pid, when a state file named it.
    pub pid: Option<u32>,
}

impl Recovered {
    /// "the daemon (pid N)", or "the daemon" when no state file named it.
    pub fn daemon(&self) -> String {
        match self.pid {
            Some(pid) => format!("the daemon (pid {pid})"),
            None => "the daemon".into(),
        }
    }
}

/// How long a dead mount's daemon is waited for after its connection is gone. It only has
/// descriptors and memory left to release, so this is a bound for a pathological case, not
/// a delay anyone sees; past it the next step reports what is still held.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Detaches the dead agx mount at `mp` (processes still inside it keep getting ENOTCONN
/// until they leave it) and waits for its daemon to be gone: until its last descriptor
/// closes it still holds the project's lock.
pub fn remove(mp: &Path) -> Result<Recovered, MountError> {
    let pid = recorded_pid(mp);
    log::info!("removing a dead agx mount at {}", mp.display());
    if is_root() {
        rustix::mount::unmount(mp, rustix::mount::UnmountFlags::DETACH).map_err(|e| {
            MountError::UnmountFailed {
                dir: mp.to_path_buf(),
                reason: std::io::Error::from(e).to_string(),
            }
        })?;
    } else {
        super::fusermount::unmount(mp, true)?;
    }
    if let Some(pid) = pid {
        let deadline = Instant::now() + EXIT_WAIT;
        while control::pid_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(Recovered {
        mountpoint: mp.to_path_buf(),
        pid,
    })
}
