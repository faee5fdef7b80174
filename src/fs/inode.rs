//! The inode table: every backing object the kernel currently knows about.
//!
//! Invariants:
//! - A node reaches its backing object through an `O_PATH` descriptor, held while the
//!   descriptor budget allows and reopened by name otherwise (see `descriptors.rs`). An
//!   object that lost a name through the mount keeps its descriptor while the kernel knows
//!   it, which pins the backing inode: its (dev, ino) cannot be reused by a new file while
//!   the kernel still refers to the node.
//! - A node lives while the kernel holds lookups on it (`lookup`, `create`, `mkdir`, ...,
//!   `readdirplus` entries each count one; `forget` drops them). The root never goes.
//! - Node ids equal the backing `st_ino` for objects on the project's filesystem; objects on
//!   other filesystems (mounts inside the project) get ids from the reserved range.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use fuser::{BackingId, Errno, FileType};
use rustix::fs::{Mode, OFlags};

use super::descriptors::{Budget, FdSlot};
use crate::ids::{BranchId, InodeKey, NodeId};

/// The kernel passthrough registration shared by all open handles of one node: the kernel
/// refuses a second, different backing file for the same inode, and refuses to mix
/// passthrough and non-passthrough opens of one inode (the open fails with EIO).
#[derive(Default)]
pub struct BackingSlot {
    pub id: Option<BackingId>,
    /// Open passthrough handles (all on `id`).
    pub opens: u32,
    /// Open handles served by the daemon.
    pub cached: u32,
}

pub struct Node {
    pub id: NodeId,
    pub key: InodeKey,
    /// The tree the object is in: the main tree (None) or a branch's. Fixed: nothing moves
    /// between trees (a rename or link across them is EXDEV).
    pub tree: Option<BranchId>,
    /// The root of a branch's tree (reached as `.agx/branches/NAME`).
    pub tree_root: bool,
    /// For an object of a branch: whether it still takes something from the base (a
    /// directory not filled yet, a file whose content was not copied up yet; see
    /// `crate::branches::marker`). 0 not known yet, 1 yes, 2 no (for good: nothing makes
    /// an object based again).
    based: std::sync::atomic::AtomicU8,
    /// `O_PATH | O_NOFOLLOW` descriptor of the backing object, when held (reach it
    /// through [`InodeTable::fd`]).
    slot: Mutex<FdSlot>,
    pub kind: FileType,
    lookups: AtomicU64,
    /// The names (parent, name) this object is known by, most recently used first: every
    /// name operation through the mount keeps them exact (a lookup or creation adds one,
    /// an unlink or a rename over it drops it, a rename moves it). A directory has one;
    /// a file with hard links may have several, and names the kernel never looked up are
    /// not here (see `AgxFs::path_of`). Empty once the object has lost every known name.
    places: Mutex<Vec<(NodeId, OsString)>>,
    /// The object has no name left in the project (its last link went through the
    /// mount): changes to it change no path, so they are not recorded.
    nameless: std::sync::atomic::AtomicBool,
    /// The tree epoch (see `Recorder::tree_epoch`) at which `places` were last known to
    /// be right: agx's own restores change the backing tree behind the table, and a name
    /// from before one is checked before it is used.
    confirmed: AtomicU64,
    pub backing: Mutex<BackingSlot>,
    /// Open handles that may write to this node.
    writers: std::sync::atomic::AtomicU32,
    /// Open handles of any kind (readers can see a hard link's nlink).
    opens: std::sync::atomic::AtomicU32,
    /// Whether this directory has a default ACL: 0 unknown, 1 no, 2 yes.
    default_acl: std::sync::atomic::AtomicU8,
    /// The process that created this object through the mount, when, and the creation's
    /// event (if recorded).
    created: Mutex<Option<(u32, std::time::Instant, Option<crate::ids::Seq>)>>,
}

/// How many names of one object a node keeps. An object with more hard links than this
/// that loses every kept one is found again by a search (`AgxFs::path_of`).
const MAX_NAMES: usize = 8;

/// Where a new node belongs: its tree, and whether it is that tree's root.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeOf {
    pub branch: Option<BranchId>,
    pub root: bool,
}

impl Node {
    fn new(
        id: NodeId,
        key: InodeKey,
        kind: FileType,
        place: (NodeId, OsString),
        tree: TreeOf,
    ) -> Node {
        Node {
            id,
            key,
            tree: tree.branch,
            tree_root: tree.root,
            based: Default::default(),
            slot: Mutex::new(FdSlot::default()),
            kind,
            lookups: AtomicU64::new(1),
            places: Mutex::new(vec![place]),
            nameless: Default::default(),
            confirmed: AtomicU64::new(0),
            backing: Mutex::new(BackingSlot::default()),
            writers: Default::default(),
            opens: Default::default(),
            default_acl: Default::default(),
            created: Mutex::new(None),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, FdSlot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptor, if held now.
    fn held(&self) -> Option<Arc<OwnedFd>> {
        self.slot().fd.clone()
    }

    /// Whether the descriptor may be released now.
    fn idle(&self) -> bool {
        self.opens() == 0
            && self.writers() == 0
            && self
                .backing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .id
                .is_none()
    }

    /// Whether this object of a branch still takes something from the base (None: not
    /// known yet).
    pub fn based(&self) -> Option<bool> {
        match self.based.load(Ordering::Acquire) {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }

    pub fn set_based(&self, v: bool) {
        self.based.store(if v { 1 } else { 2 }, Ordering::Release);
    }

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

    /// Notes that process `pid` just created this object, recorded as event `seq`.
    pub fn set_created(&self, pid: u32, seq: Option<crate::ids::Seq>) {
        *self.created.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((pid, std::time::Instant::now(), seq));
    }

    /// Whether process `pid` created this object within `window`.
    pub fn created_by(&self, pid: u32, window: std::time::Duration) -> bool {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|(p, t, _)| p == pid && t.elapsed() < window)
    }

    /// The event that recorded this object's creation through the mount, if any.
    pub fn creation(&self) -> Option<crate::ids::Seq> {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .and_then(|(_, _, s)| s)
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

    fn places_mut(&self) -> std::sync::MutexGuard<'_, Vec<(NodeId, OsString)>> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently used known name, if any.
    pub fn place(&self) -> Option<(NodeId, OsString)> {
        self.places_mut().first().cloned()
    }

    /// Every known name, most recently used first.
    pub fn places(&self) -> Vec<(NodeId, OsString)> {
        self.places_mut().clone()
    }

    /// The object is (also) `parent/name`: that name becomes the first one.
    pub fn add_place(&self, parent: NodeId, name: &OsStr) {
        let mut p = self.places_mut();
        if p.first().is_some_and(|(d, n)| *d == parent && n == name) {
            return;
        }
        p.retain(|(d, n)| !(*d == parent && n == name));
        p.insert(0, (parent, name.to_os_string()));
        p.truncate(MAX_NAMES);
        self.nameless.store(false, Ordering::Relaxed);
    }

    /// The object lost the name `parent/name`; `gone` says it has no name left in the
    /// project. Returns whether no known name remains.
    pub fn drop_place(&self, parent: NodeId, name: &OsStr, gone: bool) -> bool {
        let mut p = self.places_mut();
        p.retain(|(d, n)| !(*d == parent && n == name));
        if gone {
            self.nameless.store(true, Ordering::Relaxed);
        }
        p.is_empty()
    }

    /// The object moved from `from` to `to` (a rename through the mount).
    pub fn move_place(&self, from: (NodeId, &OsStr), to: (NodeId, &OsStr)) {
        {
            let mut p = self.places_mut();
            p.retain(|(d, n)| !(*d == from.0 && n == from.1));
        }
        self.add_place(to.0, to.1);
    }

    /// Whether the object is known to have no name left in the project.
    pub fn nameless(&self) -> bool {
        self.nameless.load(Ordering::Relaxed)
    }

    /// The tree epoch at which the names were last known right.
    pub fn confirmed(&self) -> u64 {
        self.confirmed.load(Ordering::Relaxed)
    }

    pub fn set_confirmed(&self, epoch: u64) {
        self.confirmed.store(epoch, Ordering::Relaxed);
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
    budget: Budget,
}

impl InodeTable {
    /// A table whose root is `root_fd`, the root of `tree` (the main tree, or a branch's
    /// when a branch is mounted on its own), holding at most `budget` node descriptors.
    pub fn new(
        root_fd: OwnedFd,
        root_key: InodeKey,
        budget: Budget,
        tree: Option<BranchId>,
    ) -> InodeTable {
        let root = Arc::new(Node::new(
            NodeId::ROOT,
            root_key,
            FileType::Directory,
            (NodeId::ROOT, OsString::new()),
            TreeOf {
                branch: tree,
                root: true,
            },
        ));
        {
            let mut slot = root.slot();
            slot.fd = Some(Arc::new(root_fd));
            slot.pinned = true;
        }
        let mut maps = Maps::default();
        maps.by_id.insert(NodeId::ROOT, root);
        maps.by_key.insert(root_key, NodeId::ROOT);
        InodeTable {
            root_dev: root_key.dev,
            maps: RwLock::new(maps),
            // AGX_DIR and a few more virtual ids come first.
            next_reserved: AtomicU64::new(NodeId::RESERVED_START + 0x1000),
            budget,
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

    /// The node for `key` with one more kernel lookup, inserting it when absent. `fd`
    /// (just opened at `parent/name`) becomes its descriptor unless it holds one already.
    pub fn insert(
        &self,
        key: InodeKey,
        kind: FileType,
        fd: OwnedFd,
        parent: NodeId,
        name: &OsStr,
        tree: TreeOf,
    ) -> Arc<Node> {
        self.insert_new(key, kind, fd, parent, name, tree).0
    }

    /// [`InodeTable::insert`], also telling whether the node is new to the table.
    pub fn insert_new(
        &self,
        key: InodeKey,
        kind: FileType,
        fd: OwnedFd,
        parent: NodeId,
        name: &OsStr,
        tree: TreeOf,
    ) -> (Arc<Node>, bool) {
        let mut new = false;
        let node = {
            let mut maps = self.write();
            match maps.by_key.get(&key).and_then(|id| maps.by_id.get(id)) {
                Some(node) => {
                    node.lookups.fetch_add(1, Ordering::Relaxed);
                    node.add_place(parent, name);
                    node.clone()
                }
                None => {
                    let id = self.id_for(key);
                    let node = Arc::new(Node::new(
                        id,
                        key,
                        kind,
                        (parent, name.to_os_string()),
                        tree,
                    ));
                    maps.by_id.insert(id, node.clone());
                    maps.by_key.insert(key, id);
                    new = true;
                    node
                }
            }
        };
        // A branch's root is reached through `.agx/branches/`, a virtual directory with
        // no descriptor to reopen it by name from: it keeps its descriptor for good.
        self.install(&node, fd, tree.root);
        (node, new)
    }

    /// The node's descriptor: the held one, or reopened by its name (then held).
    pub fn fd(&self, node: &Node) -> Result<Arc<OwnedFd>, Errno> {
        match node.held() {
            Some(fd) => Ok(fd),
            None => self.warm(node, 0),
        }
    }

    /// Reopens `node` by one of its names, through the parent's descriptor. A name that
    /// now holds another object is skipped (never another object's data): ESTALE when
    /// none is left.
    fn warm(&self, node: &Node, depth: usize) -> Result<Arc<OwnedFd>, Errno> {
        // Deeper than any path the kernel can hand us: a cycle of stale places.
        if depth > 2048 {
            return Err(Errno::ESTALE);
        }
        let mut last = Errno::ESTALE;
        for (pid, name) in node.places() {
            match self.warm_at(node, pid, &name, depth) {
                Ok(fd) => return Ok(fd),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn warm_at(
        &self,
        node: &Node,
        pid: NodeId,
        name: &OsStr,
        depth: usize,
    ) -> Result<Arc<OwnedFd>, Errno> {
        if pid == node.id {
            return Err(Errno::ESTALE);
        }
        let parent = self.get(pid).ok_or(Errno::ESTALE)?;
        let pfd = match parent.held() {
            Some(fd) => fd,
            None => self.warm(&parent, depth + 1)?,
        };
        let fd = crate::sys::fd::retry(|| {
            rustix::fs::openat(
                &*pfd,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
        .map_err(|e| match e {
            rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR => Errno::ESTALE,
            e => super::errno(e),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(super::errno)?;
        if super::key_of(&st) != node.key {
            log::debug!("node {} is no longer at {name:?} in {pid}: stale", node.id);
            return Err(Errno::ESTALE);
        }
        log::debug!("node {} reopened at {name:?} in {pid}", node.id);
        Ok(self.install(node, fd, false))
    }

    /// Gives `node` the descriptor `fd` unless it holds one; with `pin`, for good.
    fn install(&self, node: &Node, fd: OwnedFd, pin: bool) -> Arc<OwnedFd> {
        let (fd, gen) = {
            let mut slot = node.slot();
            slot.pinned |= pin;
            if let Some(held) = &slot.fd {
                return held.clone();
            }
            let fd = Arc::new(fd);
            slot.gen += 1;
            slot.fd = Some(fd.clone());
            (fd, slot.gen)
        };
        if self.budget.filled(node.id, gen) {
            self.sweep(self.budget.batch());
        } else if self.budget.needs_compaction() {
            self.budget.retain(|id, gen| {
                self.get(id).is_some_and(|n| {
                    let slot = n.slot();
                    slot.gen == gen && slot.fd.is_some()
                })
            });
        }
        fd
    }

    /// Keeps the node of the object behind `fd` (which is losing a name through the mount)
    /// reachable: it holds `fd` for as long as the kernel knows it.
    pub fn pin(&self, key: InodeKey, fd: OwnedFd) {
        if let Some(node) = self.find(key) {
            let mut slot = node.slot();
            if slot.fd.is_none() {
                drop(slot);
                self.install(&node, fd, true);
            } else {
                slot.pinned = true;
            }
        }
    }

    /// Releases the descriptors of up to `n` of the oldest idle nodes.
    fn sweep(&self, n: usize) -> usize {
        let mut released = 0;
        for (id, gen) in self.budget.oldest(n) {
            let Some(node) = self.get(id) else { continue };
            let mut slot = node.slot();
            if slot.gen != gen || slot.fd.is_none() {
                continue;
            }
            if slot.pinned || !node.idle() {
                drop(slot);
                self.budget.put_back(id, gen);
                continue;
            }
            slot.fd = None;
            drop(slot);
            self.budget.emptied();
            released += 1;
        }
        released
    }

    /// Releases half of the held node descriptors that may be released (at least a batch).
    /// Returns how many went.
    pub fn relieve(&self) -> usize {
        let half = self.budget.held() / 2;
        self.sweep(half.max(self.budget.batch()))
    }

    /// Node descriptors held now, and how many may be.
    pub fn descriptors(&self) -> (usize, usize) {
        (self.budget.held(), self.budget.limit())
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
            if node.slot().fd.take().is_some() {
                self.budget.emptied();
            }
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
