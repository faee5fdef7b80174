//! The inode table: every backing object the kernel currently knows about.
//!
//! Invariants:
//! - Each node holds an `O_PATH` descriptor of its backing object. The descriptor pins the
//!   backing inode, so its (dev, ino) cannot be reused by a new file while the kernel still
//!   refers to the node: a (dev, ino) found in the table always names the same object.
//! - A node lives while the kernel holds lookups on it (`lookup`, `create`, `mkdir`, ...,
//!   `readdirplus` entries each count one; `forget` drops them). The root never goes.
//! - Node ids equal the backing `st_ino` for objects on the project's filesystem; objects on
//!   other filesystems (mounts inside the project) get ids from the reserved range.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use fuser::{BackingId, FileType};

use crate::ids::{InodeKey, NodeId};

/// The kernel passthrough registration shared by all open handles of one node: the kernel
/// refuses a second, different backing file for the same inode.
#[derive(Default)]
pub struct BackingSlot {
    pub id: Option<BackingId>,
    pub opens: u32,
}

pub struct Node {
    pub id: NodeId,
    pub key: InodeKey,
    /// `O_PATH | O_NOFOLLOW` descriptor of the backing object.
    pub fd: OwnedFd,
    pub kind: FileType,
    lookups: AtomicU64,
    /// The parent and name under which the kernel last reached this node. Needed where an
    /// operation cannot act through the descriptor (xattrs of symlinks). It can go stale
    /// when that name is unlinked while another hard link to the same symlink remains.
    place: Mutex<(NodeId, OsString)>,
    pub backing: Mutex<BackingSlot>,
    /// Open handles that may write to this node.
    writers: std::sync::atomic::AtomicU32,
    /// Open handles of any kind (readers can see a hard link's nlink).
    opens: std::sync::atomic::AtomicU32,
    /// Whether this directory has a default ACL: 0 unknown, 1 no, 2 yes.
    default_acl: std::sync::atomic::AtomicU8,
    /// The process that created this object through the mount, and when.
    created: Mutex<Option<(u32, std::time::Instant)>>,
}

impl Node {
    pub fn writers(&self) -> u32 {
        self.writers.load(Ordering::Relaxed)
    }

    pub fn add_writer(&self) {
        self.writers.fetch_add(1, Ordering::Relaxed);
    }

    pub fn default_acl(&self) -> Option<bool> {
        match self.default_acl.load(Ordering::Relaxed) {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        }
    }

    pub fn set_default_acl(&self, v: Option<bool>) {
        let x = match v {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        };
        self.default_acl.store(x, Ordering::Relaxed);
    }

    /// Notes that process `pid` just created this object.
    pub fn set_created(&self, pid: u32) {
        *self.created.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((pid, std::time::Instant::now()));
    }

    /// Whether process `pid` created this object within `window`.
    pub fn created_by(&self, pid: u32, window: std::time::Duration) -> bool {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|(p, t)| p == pid && t.elapsed() < window)
    }

    /// Open handles of any kind.
    pub fn opens(&self) -> u32 {
        self.opens.load(Ordering::Relaxed)
    }

    pub fn add_open(&self) {
        self.opens.fetch_add(1, Ordering::Relaxed);
    }

    pub fn drop_open(&self) {
        let _ = self
            .opens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| w.checked_sub(1));
    }

    pub fn drop_writer(&self) {
        let _ = self
            .writers
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| w.checked_sub(1));
    }

    pub fn place(&self) -> (NodeId, OsString) {
        self.place.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_place(&self, parent: NodeId, name: &OsStr) {
        let mut p = self.place.lock().unwrap_or_else(|e| e.into_inner());
        if p.0 != parent || p.1 != name {
            *p = (parent, name.to_os_string());
        }
    }
}

#[derive(Default)]
struct Maps {
    by_id: HashMap<NodeId, Arc<Node>>,
    by_key: HashMap<InodeKey, NodeId>,
}

pub struct InodeTable {
    root_dev: u64,
    maps: RwLock<Maps>,
    next_reserved: AtomicU64,
}

impl InodeTable {
    pub fn new(root_fd: OwnedFd, root_key: InodeKey) -> InodeTable {
        let root = Arc::new(Node {
            id: NodeId::ROOT,
            key: root_key,
            fd: root_fd,
            kind: FileType::Directory,
            lookups: AtomicU64::new(1),
            place: Mutex::new((NodeId::ROOT, OsString::new())),
            backing: Mutex::new(BackingSlot::default()),
            writers: Default::default(),
            opens: Default::default(),
            default_acl: Default::default(),
            created: Mutex::new(None),
        });
        let mut maps = Maps::default();
        maps.by_id.insert(NodeId::ROOT, root);
        maps.by_key.insert(root_key, NodeId::ROOT);
        InodeTable {
            root_dev: root_key.dev,
            maps: RwLock::new(maps),
            // AGX_DIR and a few more virtual ids come first.
            next_reserved: AtomicU64::new(NodeId::RESERVED_START + 0x1000),
        }
    }

    pub fn get(&self, id: NodeId) -> Option<Arc<Node>> {
        self.read().by_id.get(&id).cloned()
    }

    /// The node for `key`, if the kernel knows it (no lookup is counted).
    pub fn find(&self, key: InodeKey) -> Option<Arc<Node>> {
        let maps = self.read();
        maps.by_key
            .get(&key)
            .and_then(|id| maps.by_id.get(id))
            .cloned()
    }

    /// The node for `key` with one more kernel lookup, if the table has it.
    pub fn lookup_existing(&self, key: InodeKey) -> Option<Arc<Node>> {
        let maps = self.read();
        let id = maps.by_key.get(&key)?;
        let node = maps.by_id.get(id)?.clone();
        node.lookups.fetch_add(1, Ordering::Relaxed);
        Some(node)
    }

    /// The node for `key` with one more kernel lookup, inserting it with `fd` when absent.
    /// When another thread inserted it first, `fd` is dropped.
    pub fn insert(
        &self,
        key: InodeKey,
        kind: FileType,
        fd: OwnedFd,
        parent: NodeId,
        name: &OsStr,
    ) -> Arc<Node> {
        let mut maps = self.write();
        if let Some(id) = maps.by_key.get(&key) {
            if let Some(node) = maps.by_id.get(id) {
                node.lookups.fetch_add(1, Ordering::Relaxed);
                node.set_place(parent, name);
                return node.clone();
            }
        }
        let id = self.id_for(key);
        let node = Arc::new(Node {
            id,
            key,
            fd,
            kind,
            lookups: AtomicU64::new(1),
            place: Mutex::new((parent, name.to_os_string())),
            backing: Mutex::new(BackingSlot::default()),
            writers: Default::default(),
            opens: Default::default(),
            default_acl: Default::default(),
            created: Mutex::new(None),
        });
        maps.by_id.insert(id, node.clone());
        maps.by_key.insert(key, id);
        node
    }

    /// Drops `n` kernel lookups; the node goes when none remain.
    pub fn forget(&self, id: NodeId, n: u64) {
        if id == NodeId::ROOT {
            return;
        }
        let mut maps = self.write();
        let Some(node) = maps.by_id.get(&id) else {
            return;
        };
        let prev = node.lookups.load(Ordering::Relaxed);
        let left = prev.saturating_sub(n);
        node.lookups.store(left, Ordering::Relaxed);
        if left == 0 {
            let key = node.key;
            maps.by_id.remove(&id);
            if maps.by_key.get(&key) == Some(&id) {
                maps.by_key.remove(&key);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.read().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn id_for(&self, key: InodeKey) -> NodeId {
        if key.dev == self.root_dev && key.ino > 1 && key.ino < NodeId::RESERVED_START {
            NodeId(key.ino)
        } else {
            NodeId(self.next_reserved.fetch_add(1, Ordering::Relaxed))
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|e| e.into_inner())
    }
}
