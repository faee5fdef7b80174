//! `agx branch mount NAME --at DIR`: a branch served at a mountpoint of its own, for
//! agents and tools that need their own absolute path.
//!
//! The project's daemon serves it: a second FUSE front (`AgxFs` rooted at the branch's
//! tree) on a session of its own, sharing the recorder, the attribution and the branch
//! set with the main mount, so every change made there is captured and attributed exactly
//! as through `.agx/branches/NAME/`. While a branch is served by two fronts, neither lets
//! the kernel cache its entries and attributes (each would miss the other's changes; see
//! `Branches::set_shared`). Each mount has a state file in the runtime directory, which
//! the CLI reads to find the project and the branch from a directory inside it.
//!
//! A branch mount ends with `agx branch unmount DIR`, with the project's daemon, or
//! with `fusermount3 -u DIR` (its session then ends by itself).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::MountError;
use crate::attribution::Attributor;
use crate::branches::Branches;
use crate::capture::Recorder;
use crate::control::branches::BranchMounter;
use crate::fs::{AgxFs, FsConfig};
use crate::ids::BranchId;

/// What the runtime directory says of a branch mount (`<key>.branch` there).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BranchMountState {
    pub project: PathBuf,
    pub branch: String,
    pub mountpoint: PathBuf,
    /// The project's daemon, which serves it.
    pub pid: u32,
}

fn state_path(mountpoint: &Path) -> Option<PathBuf> {
    let dir = crate::control::runtime_dir().ok()?;
    Some(dir.join(format!(
        "{}.branch",
        crate::control::project_key(mountpoint)
    )))
}

/// The branch mounted at `dir` (canonical) by a live daemon, if one is.
pub fn at(dir: &Path) -> Option<BranchMountState> {
    let s = std::fs::read_to_string(state_path(dir)?).ok()?;
    let st: BranchMountState = serde_json::from_str(&s).ok()?;
    (crate::control::pid_alive(st.pid) && super::mountinfo::agx_mount_at(dir).is_some())
        .then_some(st)
}

struct Served {
    id: BranchId,
    name: String,
    session: fuser::BackgroundSession,
    notifier: fuser::Notifier,
}

/// The daemon's branch mounts.
pub struct BranchMounts {
    project: PathBuf,
    recorder: Arc<Recorder>,
    attrib: Arc<Attributor>,
    branches: Arc<Branches>,
    allow_other: bool,
    served: Mutex<BTreeMap<PathBuf, Served>>,
}

impl BranchMounts {
    pub fn new(
        project: PathBuf,
        recorder: Arc<Recorder>,
        attrib: Arc<Attributor>,
        branches: Arc<Branches>,
        allow_other: bool,
    ) -> Arc<BranchMounts> {
        Arc::new(BranchMounts {
            project,
            recorder,
            attrib,
            branches,
            allow_other,
            served: Mutex::default(),
        })
    }

    fn served(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, Served>> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mark_shared(&self, id: BranchId) {
        let n = self.served().values().filter(|s| s.id == id).count();
        self.branches.set_shared(id, n > 0);
    }

    /// Ends every branch mount (the daemon is stopping).
    pub fn stop_all(&self) {
        let all: Vec<PathBuf> = self.served().keys().cloned().collect();
        for mp in all {
            if let Err(e) = self.stop(&mp, true) {
                log::warn!("branch mount {}: {e}", mp.display());
            }
        }
    }

    fn stop(&self, mp: &Path, lazy: bool) -> Result<BranchId, String> {
        // Unmounted first: a busy mount stays served, and says who uses it.
        let unmounted = if super::is_root() {
            rustix::mount::unmount(
                mp,
                if lazy {
                    rustix::mount::UnmountFlags::DETACH
                } else {
                    rustix::mount::UnmountFlags::empty()
                },
            )
            .map_err(|e| match e {
                rustix::io::Errno::BUSY => MountError::Busy {
                    dir: mp.to_path_buf(),
                    procs: super::procs::list(&super::procs::using(mp)),
                },
                e => MountError::UnmountFailed {
                    dir: mp.to_path_buf(),
                    reason: e.to_string(),
                },
            })
        } else {
            super::fusermount::unmount(mp, lazy)
        };
        // Already gone (someone ran fusermount3 -u): the session is over either way.
        if let Err(e) = unmounted {
            if super::mountinfo::agx_mount_at(mp).is_some() {
                return Err(e.to_string());
            }
        }
        let Some(s) = self.served().remove(mp) else {
            return Err(format!("{}: no branch is mounted there", mp.display()));
        };
        let id = s.id;
        if let Err(e) = s.session.join() {
            log::warn!("branch mount {}: {e}", mp.display());
        }
        if let Some(p) = state_path(mp) {
            let _ = std::fs::remove_file(p);
        }
        self.mark_shared(id);
        log::info!("branch {} no longer served at {}", s.name, mp.display());
        Ok(id)
    }
}

fn canonical(at: &Path) -> Result<PathBuf, String> {
    let c = std::fs::canonicalize(at).map_err(|e| format!("{}: {e}", at.display()))?;
    if !c.is_dir() {
        return Err(format!("{}: not a directory", c.display()));
    }
    Ok(c)
}

impl BranchMounter for BranchMounts {
    fn mount(&self, id: BranchId, name: &str, at: &Path) -> Result<PathBuf, String> {
        let mp = canonical(at)?;
        if super::mountinfo::mount_at(&mp).is_some() {
            return Err(format!(
                "{} is a mountpoint already; choose an empty directory",
                mp.display()
            ));
        }
        if mp.starts_with(&self.project) || self.project.starts_with(&mp) {
            return Err(format!(
                "{}: a branch cannot be mounted inside its project (or over it); choose a directory outside {}",
                mp.display(),
                self.project.display()
            ));
        }
        if std::fs::read_dir(&mp)
            .map_err(|e| e.to_string())?
            .next()
            .is_some()
        {
            return Err(format!(
                "{} is not empty: a branch is mounted on an empty directory",
                mp.display()
            ));
        }
        let tree = self
            .branches
            .tree(id)
            .map_err(|e| format!("opening branch {name}: {e}"))?;
        // The kernel learns of the root without a lookup: it is filled first.
        tree.fill(tree.root())
            .map_err(|e| format!("filling branch {name}'s root: {e}"))?;
        let root = rustix::io::dup(tree.root()).map_err(|e| e.to_string())?;
        let mut cfg = FsConfig::default();
        if std::env::var("AGX_PASSTHROUGH").is_ok_and(|v| v == "0") {
            cfg.passthrough = false;
        }
        // Shared before it serves: the main mount stops caching the branch from now on.
        self.branches.set_shared(id, true);
        let started = (|| {
            let fs = AgxFs::new(
                root,
                cfg,
                self.recorder.clone(),
                self.attrib.clone(),
                Arc::new(Mutex::new(None)),
                crate::fs::Trees {
                    views: None,
                    branches: Some(self.branches.clone()),
                    root_branch: Some(id),
                },
            )
            .map_err(|e| e.to_string())?;
            let session =
                super::open_session(fs, &mp, self.allow_other).map_err(|e| e.to_string())?;
            let notifier = session.notifier();
            let session = session.spawn().map_err(|e| e.to_string())?;
            Ok::<_, String>((session, notifier))
        })();
        let (session, notifier) = match started {
            Ok(s) => s,
            Err(e) => {
                self.mark_shared(id);
                return Err(e);
            }
        };
        self.served().insert(
            mp.clone(),
            Served {
                id,
                name: name.to_string(),
                session,
                notifier,
            },
        );
        if let Some(p) = state_path(&mp) {
            let st = BranchMountState {
                project: self.project.clone(),
                branch: name.to_string(),
                mountpoint: mp.clone(),
                pid: std::process::id(),
            };
            if let Ok(text) = serde_json::to_string_pretty(&st) {
                let _ = std::fs::write(p, text);
            }
        }
        log::info!("branch {name} served at {}", mp.display());
        Ok(mp)
    }

    fn unmount(&self, at: &Path) -> Result<BranchId, String> {
        let mp = canonical(at).unwrap_or_else(|_| at.to_path_buf());
        self.stop(&mp, false)
    }

    fn mounted(&self) -> Vec<(BranchId, PathBuf)> {
        // A mount someone removed behind agx's back is no longer listed.
        let gone: Vec<PathBuf> = self
            .served()
            .keys()
            .filter(|mp| super::mountinfo::agx_mount_at(mp).is_none())
            .cloned()
            .collect();
        for mp in gone {
            let _ = self.stop(&mp, true);
        }
        self.served()
            .iter()
            .map(|(mp, s)| (s.id, mp.clone()))
            .collect()
    }

    fn invalidate(&self, id: BranchId, paths: &[Vec<u8>], inodes: &[u64]) {
        let notifiers: Vec<fuser::Notifier> = self
            .served()
            .values()
            .filter(|s| s.id == id)
            .map(|s| s.notifier.clone())
            .collect();
        let Ok(tree) = self.branches.tree(id) else {
            return;
        };
        for n in notifiers {
            super::invalidate(&n, tree.root(), 1, paths, inodes);
        }
    }
}

/// The engine's handle on the daemon's branch mounts.
pub struct Handle(pub Arc<BranchMounts>);

impl BranchMounter for Handle {
    fn mount(&self, id: BranchId, name: &str, at: &Path) -> Result<PathBuf, String> {
        self.0.mount(id, name, at)
    }
    fn unmount(&self, at: &Path) -> Result<BranchId, String> {
        self.0.unmount(at)
    }
    fn mounted(&self) -> Vec<(BranchId, PathBuf)> {
        self.0.mounted()
    }
    fn invalidate(&self, id: BranchId, paths: &[Vec<u8>], inodes: &[u64]) {
        self.0.invalidate(id, paths, inodes)
    }
}
