//! FUSE sessions of the daemon: mounting a front (the project's, or a branch's for
//! `agx branch mount`), its request threads, and telling a session's kernel to drop
//! what it cached after agx changed files itself.

use std::path::Path;

use fuser::{Config, MountOption, SessionACL};

use super::{fusermount, is_root, MountError};
use crate::fs::AgxFs;

/// Request threads. Default 4 (each blocks in the kernel waiting for a request, so more
/// threads than cores is normal); `AGX_THREADS` overrides it, 1 to 64.
pub(super) fn threads() -> usize {
    std::env::var("AGX_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(4)
}

/// Mounts `fs` at `mountpoint` (as root directly, else through `fusermount3`) and returns
/// the session, not yet serving.
pub(crate) fn open_session(
    fs: AgxFs,
    mountpoint: &Path,
    allow_other: bool,
) -> Result<fuser::Session<AgxFs>, MountError> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("agx".into()),
        MountOption::CUSTOM("subtype=agx".into()),
        MountOption::DefaultPermissions,
    ];
    config.acl = if allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(threads());
    config.clone_fd = true;
    if is_root() {
        fuser::Session::new(fs, mountpoint, &config).map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                MountError::Permission {
                    dir: mountpoint.to_path_buf(),
                    reason: e.to_string(),
                }
            } else {
                MountError::MountFailed {
                    dir: mountpoint.to_path_buf(),
                    reason: e.to_string(),
                }
            }
        })
    } else {
        let mut opts = String::from("fsname=agx,subtype=agx,default_permissions");
        if allow_other {
            opts.push_str(",allow_other");
        }
        let dev = fusermount::mount(mountpoint, &opts)?;
        fuser::Session::from_fd(fs, dev, config.acl, config.clone()).map_err(|e| {
            let _ = fusermount::unmount(mountpoint, true);
            MountError::MountFailed {
                dir: mountpoint.to_path_buf(),
                reason: e.to_string(),
            }
        })
    }
}

/// Makes the kernel forget what it cached about paths agx changed itself (a restore):
/// their directory entries and the attributes of what is there now, and of `inodes`
/// (files that lost a name, whose other names show a changed link count).
///
/// Tells the kernel to drop what it cached of `paths` (relative to `root`, whose node id
/// is `root_node`) and of `inodes`.
pub(crate) fn invalidate(
    notifier: &fuser::Notifier,
    root: &std::os::fd::OwnedFd,
    root_node: u64,
    paths: &[Vec<u8>],
    inodes: &[u64],
) {
    use crate::tree as live;
    let node_of = |rel: &[u8]| -> Option<u64> {
        if rel.is_empty() {
            return Some(root_node);
        }
        live::stat(root, rel).map(|o| o.stat.st_ino)
    };
    for p in paths {
        let (parent, name) = live::split(p);
        if let Some(pino) = node_of(parent) {
            let _ = notifier.inval_entry(fuser::INodeNo(pino), live::os(name));
            let _ = notifier.inval_inode(fuser::INodeNo(pino), 0, 0);
        }
        if let Some(ino) = node_of(p) {
            let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
        }
    }
    for ino in inodes {
        let _ = notifier.inval_inode(fuser::INodeNo(*ino), 0, 0);
    }
}
