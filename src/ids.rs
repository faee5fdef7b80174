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
    /// `.agx/at`, the directory of views (see `crate::views`).
    pub const AT_DIR: NodeId = NodeId(Self::RESERVED_START + 1);
    /// `.agx/branches`, the directory of branches (see `crate::branches`).
    pub const BRANCHES_DIR: NodeId = NodeId(Self::RESERVED_START + 2);
    /// First id of the objects inside views. Remapped inode numbers are allocated upward
    /// from just above the virtual ids and would need 2^47 allocations to get here.
    pub const VIEW_START: u64 = Self::RESERVED_START + (1 << 47);

    /// Whether this is `.agx/at` or an object inside a view: read-only, served by
    /// `crate::views`.
    /// `.agx` or `.agx/branches`: virtual, read-only directories of the front itself.
    pub fn is_virtual_dir(self) -> bool {
        self == Self::AGX_DIR || self == Self::BRANCHES_DIR
    }

    pub fn is_view(self) -> bool {
        self == Self::AT_DIR || self.0 >= Self::VIEW_START
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An open file or directory handle given to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandleId(pub u64);

impl HandleId {
    /// Handles of view files and directories are numbered from here (others from 1).
    pub const VIEW_START: u64 = 1 << 63;

    pub fn is_view(self) -> bool {
        self.0 >= Self::VIEW_START
    }
}

/// Identity of a backing object: (st_dev, st_ino).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InodeKey {
    pub dev: u64,
    pub ino: u64,
}

/// BLAKE3 hash of a version of a file's raw content: the key of the content store.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    pub fn of(data: &[u8]) -> ContentHash {
        ContentHash(*blake3::hash(data).as_bytes())
    }

    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// Parses 64 lowercase or uppercase hex digits.
    pub fn from_hex(s: &str) -> Option<ContentHash> {
        blake3::Hash::from_hex(s)
            .ok()
            .map(|h| ContentHash(*h.as_bytes()))
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", &self.to_hex()[..12])
    }
}

/// A position in the event sequence. Event N is the N-th recorded change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Seq(pub i64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An agent session: the rowid of its entry in the timeline. Events name it by its decimal
/// form (`Event::session`, `session:ID` in a REF).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(into = "String")]
pub struct SessionId(pub i64);

impl From<SessionId> for String {
    fn from(s: SessionId) -> String {
        s.0.to_string()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A branch: the rowid of its entry in the timeline's `branches` table. Its layer lives in
/// `.agx/layers/<id>/`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct BranchId(pub i64);

impl fmt::Display for BranchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
