//! Newtypes for the identifiers that cross module boundaries.

use std::fmt;

/// A FUSE node id. For objects on the project's own filesystem it equals the backing
/// `st_ino`, so `stat` through the mount reports stable inode numbers (git's index stat
/// cache depends on it). Virtual objects and objects on other filesystems use
/// [`NodeId::RESERVED_START`] and above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u64);

impl NodeId {
    /// The root of the mount (fixed by the FUSE protocol).
    pub const ROOT: NodeId = NodeId(1);
    /// First id of the reserved range: virtual nodes and remapped inode numbers.
    pub const RESERVED_START: u64 = 0xffff_0000_0000_0000;
    /// The virtual, read-only `.agx` directory at the top of the mount.
    pub const AGX_DIR: NodeId = NodeId(Self::RESERVED_START);
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An open file or directory handle given to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandleId(pub u64);

/// Identity of a backing object: (st_dev, st_ino).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InodeKey {
    pub dev: u64,
    pub ino: u64,
}
