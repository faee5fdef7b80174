use std::path::PathBuf;

use thiserror::Error;

use crate::control::RuntimeError;

/// Why mounting, unmounting or querying a mount failed. Each message is one line that
/// names what was wrong.
#[derive(Debug, Error)]
pub enum MountError {
    #[error("{0}: no such directory")]
    NotFound(PathBuf),
    #[error("{0}: not a directory")]
    NotADirectory(PathBuf),
    #[error("{dir} is already mounted by agx (daemon pid {pid})")]
    AlreadyMounted { dir: PathBuf, pid: u32 },
    #[error("{0} is already mounted by agx")]
    AlreadyMountedNoPid(PathBuf),
    #[error("/dev/fuse is not usable: {0} (load the module with `modprobe fuse`, or run the README's setup)")]
    FuseUnavailable(String),
    #[error("fusermount3 not found: mounting as a non-root user needs fuse3's fusermount3 (apt-get install fuse3)")]
    NoFusermount,
    #[error("--allow-other as a non-root user needs `user_allow_other` in /etc/fuse.conf")]
    AllowOtherNeedsConf,
    #[error("permission denied mounting {dir}: {reason}")]
    Permission { dir: PathBuf, reason: String },
    #[error("{dir}: the agx mount there is dead (its {daemon} died); `agx mount` recovers it, losing nothing recorded, or `agx unmount` removes it")]
    DeadMount { dir: PathBuf, daemon: String },
    #[error("{0} is not mounted by agx")]
    NotMounted(PathBuf),
    #[error(
        "{dir} is busy (in use by {procs}); leave it or close those, or run `agx unmount --lazy`"
    )]
    Busy { dir: PathBuf, procs: String },
    #[error("mounting {dir} failed: {reason}")]
    MountFailed { dir: PathBuf, reason: String },
    /// The detached daemon's own one-line error, passed on verbatim.
    #[error("{0}")]
    Daemon(String),
    #[error("the daemon exited before the mount was ready (see {log})")]
    DaemonDied { log: PathBuf },
    #[error("unmounting {dir} failed: {reason}")]
    UnmountFailed { dir: PathBuf, reason: String },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl MountError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> MountError {
        MountError::Io {
            what: what.into(),
            source,
        }
    }
}
