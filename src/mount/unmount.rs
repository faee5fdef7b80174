//! `agx unmount`: a live mount is unmounted and its daemon waited for; a dead one (its
//! daemon was killed) is detached.

use std::path::Path;
use std::time::{Duration, Instant};

use super::stale::{self, Health};
use super::{check_dir, fusermount, is_root, mountinfo, procs, MountError};
use crate::control::{self, MountState};

/// Unmounts the agx mount of `dir` (a project or a mountpoint) and waits for its daemon
/// to finish. Returns a line describing what happened.
pub fn unmount(dir: &Path, lazy: bool) -> Result<String, MountError> {
    let target = stale::locate(dir)?;
    if let Some(line) = remove_dead(&target, &target)? {
        return Ok(line);
    }
    check_dir(&target)?;
    let canon = target;
    let recorded = control::all_states()
        .into_iter()
        .map(|(_, s)| s)
        .find(|s| s.project == canon || s.mountpoint == canon);
    // A project whose separate mountpoint (`--at`) was left dead by its daemon.
    if let Some(s) = recorded.as_ref().filter(|s| s.mountpoint != canon) {
        if let Some(line) = remove_dead(&s.mountpoint, &canon)? {
            return Ok(line);
        }
    }
    let state = recorded.filter(|s| control::pid_alive(s.pid));
    let mp = state
        .as_ref()
        .map(|s| s.mountpoint.clone())
        .unwrap_or_else(|| canon.clone());
    if mountinfo::agx_mount_at(&mp).is_none() {
        forget_states(|s| s.project == canon || s.mountpoint == canon);
        return Err(MountError::NotMounted(canon));
    }
    // This process must not hold the mount itself.
    let _ = std::env::set_current_dir("/");
    if is_root() {
        let flags = if lazy {
            rustix::mount::UnmountFlags::DETACH
        } else {
            rustix::mount::UnmountFlags::empty()
        };
        match rustix::mount::unmount(&mp, flags) {
            Ok(()) => {}
            Err(rustix::io::Errno::BUSY) => {
                return Err(MountError::Busy {
                    dir: mp.clone(),
                    procs: procs::list(&procs::using(&mp)),
                })
            }
            Err(e) => {
                return Err(MountError::UnmountFailed {
                    dir: mp,
                    reason: std::io::Error::from(e).to_string(),
                })
            }
        }
    } else {
        fusermount::unmount(&mp, lazy)?;
    }
    let Some(state) = state else {
        return Ok(format!("unmounted {}", mp.display()));
    };
    if lazy {
        return Ok(format!(
            "detached {}; the daemon (pid {}) exits when the last user leaves",
            mp.display(),
            state.pid
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while control::pid_alive(state.pid) {
        if Instant::now() > deadline {
            return Ok(format!(
                "unmounted {}; the daemon (pid {}) is still finishing",
                mp.display(),
                state.pid
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(format!("unmounted {}", mp.display()))
}

/// Detaches `mp` if it is a dead agx mount, forgetting the state files of `asked` (the
/// directory named on the command line) whose daemons are gone.
fn remove_dead(mp: &Path, asked: &Path) -> Result<Option<String>, MountError> {
    if stale::health(mp) != Health::Dead {
        return Ok(None);
    }
    let r = stale::remove(mp)?;
    forget_states(|s| s.mountpoint == mp || s.project == asked || s.mountpoint == asked);
    Ok(Some(format!(
        "removed a dead mount at {}: {} had died",
        mp.display(),
        r.daemon()
    )))
}

/// Removes the state files matching `pred` whose daemons are gone.
fn forget_states(pred: impl Fn(&MountState) -> bool) {
    for (path, s) in control::all_states() {
        if pred(&s) && !control::pid_alive(s.pid) {
            let _ = std::fs::remove_file(path);
        }
    }
}
