//! `agx status`: whether the project is served, by which daemon, or left behind by one
//! that died.

use std::path::{Path, PathBuf};

use super::stale::{self, Health};
use super::{check_dir, MountError};
use crate::control;

/// What `agx status` reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Status {
    pub project: PathBuf,
    pub mounted: bool,
    /// The mount is still there but its daemon died (killed): every access fails with
    /// "transport endpoint is not connected" until `agx mount` replaces it (nothing
    /// recorded is lost) or `agx unmount` removes it. `mounted` is false then.
    pub dead: bool,
    pub mountpoint: Option<PathBuf>,
    pub pid: Option<u32>,
    pub since: Option<String>,
    pub mode: Option<String>,
    pub log: Option<PathBuf>,
    /// The last daemon stopped without `agx unmount` (killed, or unmounted from outside
    /// agx): changes made since were not recorded. Cleared by the next mount.
    pub interrupted: Option<super::record::Interrupted>,
}

/// Reports on the project at `project`. Changes nothing: a dead mount is reported, not
/// removed (see `stale`).
pub fn status(project: &Path) -> Result<Status, MountError> {
    let project = stale::locate(project)?;
    let paths = control::paths(&project)?;
    let recorded = control::read_state(&paths.state);
    // Where the project is (or was last) served: the state file says, else in place.
    let mp = recorded
        .as_ref()
        .map(|s| s.mountpoint.clone())
        .unwrap_or_else(|| project.clone());
    let health = stale::health(&mp);
    if !(health == Health::Dead && mp == project) {
        check_dir(&project)?;
    }
    let none = Status {
        project: project.clone(),
        mounted: false,
        dead: false,
        mountpoint: None,
        pid: None,
        since: None,
        mode: None,
        log: None,
        interrupted: super::record::interrupted(&project),
    };
    Ok(match (health, recorded) {
        // The dead daemon's pid is left out: it may already be another process's.
        (Health::Dead, st) => Status {
            dead: true,
            mountpoint: Some(mp),
            log: st.map(|s| s.log),
            ..none
        },
        (Health::Live, Some(s)) if control::pid_alive(s.pid) => Status {
            mounted: true,
            mountpoint: Some(s.mountpoint),
            pid: Some(s.pid),
            since: Some(s.since),
            mode: Some(s.mode),
            log: Some(s.log),
            ..none
        },
        _ => none,
    })
}
