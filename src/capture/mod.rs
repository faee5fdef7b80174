//! The capture seam: every mutation the mount applies is announced here first.
//!
//! The FUSE front calls [`Capture::before`] with a description of what is about to change,
//! before touching the backing directory; an error aborts the mutation with that errno and
//! nothing changes. This is where before-images are taken (see DESIGN.md section 2,
//! invariant 1). The plain mount uses [`PassThrough`], which records nothing.

pub mod config;
pub mod ignore;
mod journal;
pub mod recorder;
mod recovery;
mod staging;
pub mod state;

use std::ffi::OsStr;

use fuser::Errno;
use thiserror::Error;

pub use recorder::{After, Before, Recorder, Ticket};
pub use staging::hash_file as staging_hash;

/// Why capture could not start.
#[derive(Debug, Error)]
pub enum CaptureError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Timeline(#[from] crate::timeline::TimelineError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl CaptureError {
    pub fn io(what: &str) -> impl FnOnce(std::io::Error) -> CaptureError + '_ {
        move |source| CaptureError::Io {
            what: what.to_string(),
            source,
        }
    }
}

use crate::fs::inode::Node;

/// A mutation about to be applied through the mount. Names are relative to their parent
/// node; nodes are the backing objects the kernel refers to.
#[derive(Debug)]
pub enum Mutation<'a> {
    /// A regular file opened for writing (`truncate`: with O_TRUNC).
    OpenWrite { node: &'a Node, truncate: bool },
    /// Size, mode, owner or times change.
    SetAttr { node: &'a Node, size: Option<u64> },
    /// A new name appears: create, mkdir, mknod, symlink, or link.
    NewName { parent: &'a Node, name: &'a OsStr },
    /// A name goes: unlink or rmdir.
    Remove { parent: &'a Node, name: &'a OsStr },
    /// A rename, including the target it may replace.
    Rename {
        parent: &'a Node,
        name: &'a OsStr,
        new_parent: &'a Node,
        new_name: &'a OsStr,
        flags: u32,
    },
    /// Extended attributes change (set or remove).
    Xattr { node: &'a Node, name: &'a OsStr },
    /// Contents change without a write: fallocate, punch hole, copy_file_range into it.
    Content { node: &'a Node },
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Node({})", self.id)
    }
}

pub trait Capture: Send + Sync {
    /// Called before the mutation is applied; an error refuses it.
    fn before(&self, m: &Mutation<'_>) -> Result<(), Errno>;
}

/// Records nothing: the plain mount.
pub struct PassThrough;

impl Capture for PassThrough {
    fn before(&self, _m: &Mutation<'_>) -> Result<(), Errno> {
        Ok(())
    }
}
