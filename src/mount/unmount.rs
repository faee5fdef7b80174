//! `agx unmount`: a live mount is unmounted by its daemon, asked over the control socket,
//! and the daemon waited for; a dead one (its daemon was killed) is detached. Both are
//! refused to agent sessions (invariant 3): the daemon checks its peer, and this process
//! checks itself first (a dead mount has no daemon to ask).

use std::path::Path;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::stale::{self, Health};
use super::{check_dir, fusermount, is_root, mountinfo, procs, MountError};
use crate::attribution::agent;
use crate::control::proto::Request;
use crate::control::{self, MountState};

#[derive(Debug, Error)]
pub enum UnmountError {
    /// Refused to an agent session (one line naming why).
    #[error("{0}")]
    Refused(String),
    /// The daemon's own one-line answer (a refusal, a busy mount).
    #[error("{0}")]
    Daemon(String),
    #[error(transparent)]
    Mount(#[from] MountError),
}

/// Unmounts the agx mount of `dir` (a project or a mountpoint) and waits for its daemon
/// to finish. Returns a line describing what happened.
pub fn unmount(dir: &Path, lazy: bool) -> Result<String, UnmountError> {
    let me = std::process::id();
    if let Some(e) = agent::evidence(me, &|_, _| None) {
        return Err(UnmountError::Refused(agent::refusal("agx unmount", me, &e)));
    }
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
        return Err(MountError::NotMounted(canon).into());
    }
    // This process must not hold the mount itself.
    let _ = std::env::set_current_dir("/");
    match &state {
        Some(st) => ask_daemon(st, &mp, lazy)?,
        None => unmount_directly(&mp, lazy)?,
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
    // The daemon's thread group leader can show as exited while another of its threads is
    // still closing the shared descriptors: the project is free once its lock is.
    while !lock_free(&state.project) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(format!("unmounted {}", mp.display()))
}

/// Whether nobody holds the project's lock (`.agx/lock`, held by a daemon or a command for
/// as long as its engine lives); true when there is none to hold.
fn lock_free(project: &Path) -> bool {
    use rustix::fs::{flock, FlockOperation, Mode, OFlags};
    let path = project.join(crate::sys::path::AGX_DIR_NAME).join("lock");
    let Ok(fd) = rustix::fs::open(&path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) else {
        return true;
    };
    flock(&fd, FlockOperation::NonBlockingLockShared).is_ok()
}

/// Asks the daemon of `st` to unmount `mp`. A daemon from before the request existed is
/// unmounted directly (and records the stop as not asked for).
fn ask_daemon(st: &MountState, mp: &Path, lazy: bool) -> Result<(), UnmountError> {
    let sock = control::paths(&st.project)
        .map_err(MountError::from)?
        .socket;
    match control::client::call(&sock, &Request::Unmount { lazy }, &mut |_, _| {}) {
        Ok(_) => Ok(()),
        Err(e) if e.starts_with("malformed request") => Ok(unmount_directly(mp, lazy)?),
        // The daemon unmounted and exited before its answer left: the mount is gone.
        Err(_) if mountinfo::agx_mount_at(mp).is_none() => Ok(()),
        Err(e) => Err(UnmountError::Daemon(e)),
    }
}

fn unmount_directly(mp: &Path, lazy: bool) -> Result<(), MountError> {
    if is_root() {
        let flags = if lazy {
            rustix::mount::UnmountFlags::DETACH
        } else {
            rustix::mount::UnmountFlags::empty()
        };
        match rustix::mount::unmount(mp, flags) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::BUSY) => Err(MountError::Busy {
                dir: mp.to_path_buf(),
                procs: procs::list(&procs::using(mp)),
            }),
            Err(e) => Err(MountError::UnmountFailed {
                dir: mp.to_path_buf(),
                reason: std::io::Error::from(e).to_string(),
            }),
        }
    } else {
        fusermount::unmount(mp, lazy)
    }
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
