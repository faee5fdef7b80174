//! Waiting for releases on their way before a point is named.
//!
//! The kernel sends RELEASE after `close` has returned to the caller, so a command run
//! right after a write (`echo x > f; agx checkpoint`) can reach the daemon before the
//! write's change has ended, and "now" would name the point before it. Before a flush,
//! the daemon looks at each handle still being recorded: when the process it is
//! attributed to (its opener) has exited or holds no descriptor of the file any more, the
//! close has happened and its release is coming, so the flush waits for it. A handle its
//! opener still holds is open for real and is not waited for.
//!
//! The opener is the only process looked at: a descriptor handed to a child that outlives
//! its opener looks closed. Such a handle is waited for at most [`SETTLE_MAX`] once, then
//! never again.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::handle::HandleTable;
use crate::ids::HandleId;

/// The longest a flush waits for releases. A release on its way arrives within
/// microseconds to a few milliseconds; the bound only matters for a handle that only looks
/// closed (see the module documentation). Default 1 s.
const SETTLE_MAX: Duration = Duration::from_secs(1);

/// How often the handles are looked at again while waiting. Default 1 ms.
const POLL: Duration = Duration::from_millis(1);

pub struct Settler {
    handles: Arc<HandleTable>,
    /// Where callers see the project: their descriptors' paths start with it.
    mountpoint: PathBuf,
    /// Handles waited for until `SETTLE_MAX` once: not waited for again.
    given_up: Mutex<HashSet<HandleId>>,
}

impl Settler {
    pub fn new(handles: Arc<HandleTable>, mountpoint: PathBuf) -> Settler {
        Settler {
            handles,
            mountpoint,
            given_up: Mutex::default(),
        }
    }

    /// Returns once no recorded handle looks closed by its opener and no release is under
    /// way (one whose handle has left the table may not have handed its change to the
    /// worker yet), or after `SETTLE_MAX`.
    pub fn settle(&self) {
        let deadline = Instant::now() + SETTLE_MAX;
        loop {
            let recorded = self.handles.recorded();
            let mut given_up = self.given_up.lock().unwrap_or_else(|e| e.into_inner());
            given_up.retain(|id| recorded.iter().any(|(r, ..)| r == id));
            let closing: Vec<HandleId> = recorded
                .iter()
                .filter(|(id, ..)| !given_up.contains(id))
                .filter(|(_, pid, path)| {
                    closed_by_opener(*pid, &self.mountpoint.join(OsStr::from_bytes(path)))
                })
                .map(|(id, ..)| *id)
                .collect();
            if closing.is_empty() {
                drop(given_up);
                self.handles.wait_releases();
                return;
            }
            if Instant::now() >= deadline {
                log::debug!(
                    "{} recorded handles look closed but were not released within {:?}",
                    closing.len(),
                    SETTLE_MAX
                );
                given_up.extend(closing);
                return;
            }
            drop(given_up);
            std::thread::sleep(POLL);
        }
    }
}

/// Whether process `pid` has exited or has no descriptor of `file` open. A process whose
/// descriptors cannot be read (another user's) and pid 0 (a caller in another pid
/// namespace) count as holding it: nothing is known, so nothing is waited for.
fn closed_by_opener(pid: u32, file: &Path) -> bool {
    if pid == 0 {
        return false;
    }
    match crate::mount::procs::holds(pid, |t| t == file) {
        Ok(held) => !held,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}
