//! The daemon's runtime presence: where its state, log and (later) control socket live,
//! and the state file that `agx status` and `agx unmount` read.
//!
//! Everything here lives under `$XDG_RUNTIME_DIR/agx/` or a private `/tmp/agx-<uid>/`,
//! keyed by the canonical project path, never inside the project (the daemon must not go
//! through its own mount).

pub mod blame;
pub mod branches;
pub mod client;
pub mod dispatch;
pub mod engine;
pub mod history;
pub mod hooks;
pub mod keep;
pub mod merge;
pub mod proto;
pub mod restore;
pub mod scope;
pub mod server;
pub mod sessions;
pub mod undo;
pub mod verify;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error("runtime directory {0} is not private to this user (owner or mode is wrong)")]
    NotPrivate(PathBuf),
    #[error("cannot use runtime directory {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a running daemon publishes about itself.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MountState {
    /// The project directory (the backing directory).
    pub project: PathBuf,
    /// Where the project is served (equal to `project` for an in-place mount).
    pub mountpoint: PathBuf,
    pub pid: u32,
    /// RFC 3339 time the mount became ready.
    pub since: String,
    /// "passthrough" when the kernel serves open files directly, "fuse" otherwise.
    pub mode: String,
    pub log: PathBuf,
}

/// The per-user runtime directory.
pub fn runtime_dir() -> Result<PathBuf, RuntimeError> {
    let uid = rustix::process::geteuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(x) if !x.is_empty() && Path::new(&x).is_dir() => PathBuf::from(x).join("agx"),
        _ => PathBuf::from(format!("/tmp/agx-{uid}")),
    };
    let io = |source| RuntimeError::Io {
        path: dir.clone(),
        source,
    };
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let md = fs::symlink_metadata(&dir).map_err(io)?;
    if !md.is_dir() || md.uid() != uid || md.permissions().mode() & 0o077 != 0 {
        return Err(RuntimeError::NotPrivate(dir));
    }
    Ok(dir)
}

/// The key of a project in the runtime directory: a hash of its canonical path.
pub fn project_key(project: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let h = blake3::hash(project.as_os_str().as_bytes());
    h.to_hex()[..16].to_string()
}

pub struct RuntimePaths {
    pub state: PathBuf,
    pub log: PathBuf,
    pub socket: PathBuf,
}

pub fn paths(project: &Path) -> Result<RuntimePaths, RuntimeError> {
    let dir = runtime_dir()?;
    let key = project_key(project);
    Ok(RuntimePaths {
        state: dir.join(format!("{key}.json")),
        log: dir.join(format!("{key}.log")),
        socket: dir.join(format!("{key}.sock")),
    })
}

/// Writes the state file atomically (temporary name, then rename).
pub fn write_state(path: &Path, st: &MountState) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(serde_json::to_string_pretty(st)?.as_bytes())?;
        f.write_all(b"\n")?;
    }
    fs::rename(&tmp, path)
}

pub fn read_state(path: &Path) -> Option<MountState> {
    let s = fs::read_to_string(path).ok()?;
    serde_json::from_str(&s).ok()
}

/// Every state file in the runtime directory (for finding a mount by its mountpoint).
pub fn all_states() -> Vec<(PathBuf, MountState)> {
    let Ok(dir) = runtime_dir() else {
        return Vec::new();
    };
    let Ok(rd) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| read_state(&p).map(|s| (p, s)))
        .collect()
}

/// Whether a process with this pid exists.
pub fn pid_alive(pid: u32) -> bool {
    match rustix::process::Pid::from_raw(pid as i32) {
        Some(p) => match rustix::process::test_kill_process(p) {
            Ok(()) => !is_zombie(pid),
            Err(e) => e == rustix::io::Errno::PERM,
        },
        None => false,
    }
}

fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}
