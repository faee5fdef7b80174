//! The FUSE front: serves the project directory through a descriptor opened before the
//! mount, so the daemon never goes through its own mount.
//!
//! Every request is answered from the backing directory with `*at()` calls relative to
//! per-node `O_PATH` descriptors (or, where a call needs a real file, by reopening through
//! `/proc/self/fd`). The physical `.agx/` at the top of the project is never reachable: the
//! name resolves to a virtual read-only directory instead. Each mutation is announced to
//! [`crate::capture::Recorder`] before it is applied (see `record.rs`).

pub mod attr;
mod branches;
mod descriptors;
mod dir;
pub(crate) mod entry;
mod file;
mod fileattr;
pub mod handle;
pub mod inode;
mod io;
mod ops;
mod record;
mod setattr;
mod settle;
mod views;
mod virt;
mod xattr;

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{Errno, FileAttr, InitFlags, KernelConfig};
use rustix::fs::{Mode, OFlags, Stat};

use crate::attribution::Attributor;
use crate::capture::Recorder;
use crate::fs::handle::HandleTable;
use crate::fs::inode::{InodeTable, Node};
use crate::ids::NodeId;

pub use crate::sys::fd::{nofile_limit, retry as retry_descriptor, without_atime};
pub use views::open_views;

/// The name of agx's state directory at the top of the project.
pub use crate::sys::path::AGX_DIR_NAME;

/// Settings of the FUSE front.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// How long the kernel may cache entries, negative entries and attributes. Default
    /// 1 hour. Safe because every change to the tree goes through the mount (agx is the only
    /// writer and invalidates precisely when it changes files itself); lower it only if
    /// something writes to the backing directory behind agx's back.
    pub ttl: Duration,
    /// Ask the kernel for FUSE passthrough of open regular files. Default: on when running
    /// with CAP_SYS_ADMIN (root), which the kernel requires.
    pub passthrough: bool,
    /// Record changes (before-images and events). Default on; off (`AGX_CAPTURE=0`) gives
    /// the plain mount, for measuring what capture costs. Never turn it off for real work:
    /// changes made meanwhile cannot be restored.
    pub capture: bool,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            ttl: Duration::from_secs(3600),
            passthrough: rustix::process::geteuid().is_root(),
            capture: true,
        }
    }
}

/// What the kernel agreed to at INIT.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct InitReport {
    pub passthrough: bool,
    pub granted: Vec<&'static str>,
    pub refused: Vec<&'static str>,
}

/// What a front serves besides its root: the views of the past and the branches (None
/// where unavailable), and whose tree the root is (None: the project's; a branch's for
/// `agx branch mount`).
#[derive(Default)]
pub struct Trees {
    pub views: Option<Arc<crate::views::Views>>,
    pub branches: Option<Arc<crate::branches::Branches>>,
    pub root_branch: Option<crate::ids::BranchId>,
}

pub struct AgxFs {
    inodes: Arc<InodeTable>,
    handles: Arc<HandleTable>,
    /// `/proc/self/fd`, to reopen `O_PATH` descriptors as real files.
    proc_fd: OwnedFd,
    cfg: FsConfig,
    passthrough: AtomicBool,
    /// Set once a passthrough registration failed, so the fallback is logged once.
    passthrough_warned: AtomicBool,
    rec: Arc<Recorder>,
    attrib: Arc<Attributor>,
    mounted_at: SystemTime,
    report: Arc<Mutex<Option<InitReport>>>,
    /// `.agx/at/`: read-only views of past points.
    vtable: views::ViewTable,
    /// Tells the kernel to drop what it cached; set once the session exists.
    notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    /// `.agx/branches/`: the branches' trees (None where views are unavailable).
    branches: Option<Arc<crate::branches::Branches>>,
}

pub(crate) use crate::sys::errno;

pub(crate) trait OrErrno<T> {
    fn or_errno(self) -> Result<T, Errno>;
}

impl<T> OrErrno<T> for Result<T, rustix::io::Errno> {
    fn or_errno(self) -> Result<T, Errno> {
        self.map_err(errno)
    }
}

impl<T> OrErrno<T> for std::io::Result<T> {
    fn or_errno(self) -> Result<T, Errno> {
        self.map_err(Errno::from)
    }
}

pub use crate::sys::key_of;

impl AgxFs {
    /// A front over the directory `root` (an `O_PATH` or real directory descriptor taken
    /// before the mount): the project, or with `tree`, the root of that branch's tree
    /// (`agx branch mount`), whose `.agx` is reserved and shows nothing.
    pub fn new(
        root: OwnedFd,
        cfg: FsConfig,
        rec: Arc<Recorder>,
        attrib: Arc<Attributor>,
        report: Arc<Mutex<Option<InitReport>>>,
        trees: Trees,
    ) -> std::io::Result<AgxFs> {
        let Trees {
            views,
            branches,
            root_branch: tree,
        } = trees;
        let st = rustix::fs::fstat(&root)?;
        if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        let proc_fd = rustix::fs::open(
            "/proc/self/fd",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let inodes = Arc::new(InodeTable::new(
            root,
            key_of(&st),
            descriptors::Budget::for_limit(crate::sys::fd::nofile_limit()),
            tree,
        ));
        descriptors::set_valve(&inodes);
        Ok(AgxFs {
            inodes,
            handles: Arc::default(),
            proc_fd,
            passthrough: AtomicBool::new(false),
            passthrough_warned: AtomicBool::new(false),
            cfg,
            rec,
            attrib,
            mounted_at: SystemTime::now(),
            report,
            vtable: views::ViewTable::new(views),
            notifier: Arc::default(),
            branches,
        })
    }

    /// Waits for releases on their way (see [`settle`]), for `Recorder::set_settle`.
    /// `mountpoint` is where the callers see the project.
    pub fn settler(&self, mountpoint: std::path::PathBuf) -> crate::capture::recorder::Settle {
        let s = settle::Settler::new(self.handles.clone(), mountpoint);
        Box::new(move || s.settle())
    }

    /// Where the session's notifier goes once the session exists (the daemon sets it).
    pub fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fuser::Notifier>> {
        self.notifier.clone()
    }

    fn node(&self, id: NodeId) -> Result<Arc<Node>, Errno> {
        self.inodes.get(id).ok_or(Errno::ESTALE)
    }

    fn root(&self) -> Arc<Node> {
        self.inodes
            .get(NodeId::ROOT)
            .expect("the root node is never forgotten")
    }

    /// The root's descriptor (held for good).
    fn root_fd(&self) -> Arc<OwnedFd> {
        self.fd(&self.root())
            .expect("the root holds its descriptor for good")
    }

    /// The node's `O_PATH` descriptor (reopened by name if it was released).
    fn fd(&self, node: &Node) -> Result<Arc<OwnedFd>, Errno> {
        self.inodes.fd(node)
    }

    /// Makes a descriptor with `open`, releasing idle node descriptors and trying again
    /// when the process is out of them.
    fn retry<T>(&self, open: impl FnMut() -> rustix::io::Result<T>) -> Result<T, Errno> {
        crate::sys::fd::retry(open).or_errno()
    }

    /// Reopens a node's `O_PATH` descriptor as a real file with `flags`.
    fn reopen(&self, fd: BorrowedFd<'_>, flags: OFlags) -> Result<OwnedFd, Errno> {
        self.retry(|| {
            rustix::fs::openat(
                &self.proc_fd,
                fd_name(fd),
                flags | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
    }

    /// Reopens a node as a real file with `flags`.
    fn reopen_node(&self, node: &Node, flags: OFlags) -> Result<OwnedFd, Errno> {
        let fd = self.fd(node)?;
        self.reopen(fd.as_fd(), flags)
    }

    /// [`AgxFs::lookup_node`] for a name the kernel asks about (a lookup, a listing with
    /// attributes): the first time the kernel reaches an object, a change made to it
    /// outside agx is recorded before anything else can happen to it (see
    /// `capture::outside`).
    fn lookup_known(&self, parent: &Node, name: &OsStr) -> Result<(Arc<Node>, Stat), Errno> {
        let (node, st, new) = self.lookup_node_new(parent, name)?;
        if new && self.cfg.capture && parent.tree.is_none() {
            if let Ok(Some(dir)) = self.path_of(parent) {
                if self.rec.may_have_history(&dir.path) {
                    let mut path = dir.path;
                    if !path.is_empty() {
                        path.push(b'/');
                    }
                    path.extend_from_slice(std::os::unix::ffi::OsStrExt::as_bytes(name));
                    self.rec.notice(&path);
                }
            }
        }
        Ok((node, st))
    }

    /// Resolves `name` in `parent` to a node with one more kernel lookup.
    fn lookup_node(&self, parent: &Node, name: &OsStr) -> Result<(Arc<Node>, Stat), Errno> {
        self.lookup_node_new(parent, name).map(|(n, st, _)| (n, st))
    }

    fn lookup_node_new(
        &self,
        parent: &Node,
        name: &OsStr,
    ) -> Result<(Arc<Node>, Stat, bool), Errno> {
        let pfd = self.fd(parent)?;
        let fd = self.retry(|| {
            rustix::fs::openat(
                &*pfd,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })?;
        let st = rustix::fs::fstat(&fd).or_errno()?;
        let kind = attr::file_type(st.st_mode);
        let tree = inode::TreeOf {
            branch: parent.tree,
            root: false,
        };
        let (node, new) = self
            .inodes
            .insert_new(key_of(&st), kind, fd, parent.id, name, tree);
        // A branch's directory is filled before the kernel learns of it.
        let st = match self.settle_dir(&node, st) {
            Ok(st) => st,
            Err(e) => {
                self.inodes.forget(node.id, 1);
                return Err(e);
            }
        };
        Ok((node, st, new))
    }

    fn entry_attr(&self, node: &Node, st: &Stat) -> FileAttr {
        attr::from_stat(node.id, st)
    }

    fn negotiate(&self, config: &mut KernelConfig) -> InitReport {
        let mut report = InitReport::default();
        let mut wanted: Vec<(InitFlags, &'static str)> = vec![
            (InitFlags::FUSE_DO_READDIRPLUS, "readdirplus"),
            (InitFlags::FUSE_READDIRPLUS_AUTO, "readdirplus_auto"),
            (InitFlags::FUSE_PARALLEL_DIROPS, "parallel_dirops"),
            (InitFlags::FUSE_CACHE_SYMLINKS, "cache_symlinks"),
            (InitFlags::FUSE_ATOMIC_O_TRUNC, "atomic_o_trunc"),
            (InitFlags::FUSE_ASYNC_DIO, "async_dio"),
            (InitFlags::FUSE_MAX_PAGES, "max_pages"),
            // agx clears set-id bits itself (file.rs, `kill_setid`); in return the kernel
            // marks the superblock SB_NOSEC and stops asking for security.capability
            // before every write().
            (InitFlags::FUSE_HANDLE_KILLPRIV_V2, "handle_killpriv_v2"),
            // The kernel enforces POSIX ACLs (read through getxattr) and leaves umask to
            // agx, which applies it unless a default ACL decides (see creation_mode).
            (InitFlags::FUSE_POSIX_ACL, "posix_acl"),
            (InitFlags::FUSE_DONT_MASK, "dont_mask"),
        ];
        if self.cfg.passthrough {
            wanted.insert(0, (InitFlags::FUSE_PASSTHROUGH, "passthrough"));
        } else {
            log::info!("passthrough not requested (needs CAP_SYS_ADMIN): reads and writes go through the daemon");
        }
        // One capability per call: a refusal must not take the others with it.
        for (flag, name) in wanted {
            match config.add_capabilities(flag) {
                Ok(()) => report.granted.push(name),
                Err(_) => {
                    log::info!("kernel refused capability {name}");
                    report.refused.push(name);
                }
            }
        }
        if report.granted.contains(&"passthrough") {
            if config.set_max_stack_depth(1).is_ok() {
                report.passthrough = true;
            } else {
                log::warn!("kernel refused stacking depth 1: passthrough off");
            }
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        if let Err(n) = config.set_max_write(1 << 20) {
            let _ = config.set_max_write(n);
        }
        report
    }
}

/// The name of a descriptor's entry in `/proc/self/fd`.
fn fd_name(fd: BorrowedFd<'_>) -> String {
    fd.as_raw_fd().to_string()
}

/// A path through `/proc/self/fd` that resolves to the object behind `fd`.
fn proc_path(fd: impl AsFd) -> String {
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}
