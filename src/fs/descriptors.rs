//! Descriptor budget: the inode table holds an `O_PATH` descriptor for only as many nodes
//! as the process limit allows, and reopens the others by name when it needs them.
//!
//! Why: the kernel may cache far more inodes than a process may hold descriptors (an npm
//! install or an untar of 50,000 files, under a hard limit of 20,000 that an unprivileged
//! daemon cannot raise). Holding one descriptor per cached inode made such trees fail with
//! EMFILE.
//!
//! Invariants:
//! - At most `budget` nodes hold a descriptor, give or take the few being warmed at once.
//!   The rest of the limit is kept for open files, directory handles, the capture queue
//!   and the store.
//! - A node that may not be reachable by name holds its descriptor for good ("pinned"):
//!   the root, and objects that lost a name through the mount (unlinked, or replaced by a
//!   rename) while the kernel still knew them. So a node without a descriptor always has a
//!   live name (`Node::place`) the table can reopen it by.
//! - A node with open handles or a passthrough registration is never released.
//! - A reopened descriptor is checked against the node's (dev, ino); a mismatch (the name
//!   now holds another object) is ESTALE, never another object's data.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::inode::InodeTable;
use crate::ids::NodeId;

/// The inode table gives descriptors back when the process runs out (`sys::fd::retry`).
impl crate::sys::fd::Valve for InodeTable {
    fn relieve(&self) -> usize {
        InodeTable::relieve(self)
    }
}

/// Makes `table` the one `sys::fd::retry` releases descriptors from.
pub fn set_valve(table: &Arc<InodeTable>) {
    let weak: std::sync::Weak<dyn crate::sys::fd::Valve> = Arc::downgrade(table) as _;
    crate::sys::fd::set_valve(weak);
}

/// A node's descriptor, when held.
#[derive(Default)]
pub struct FdSlot {
    pub fd: Option<Arc<OwnedFd>>,
    /// Bumped each time the slot is filled: a queue entry of an older fill is stale.
    pub gen: u64,
    /// Never released (see the module invariants).
    pub pinned: bool,
}

/// How many node descriptors may be held, and which were filled first.
pub struct Budget {
    limit: usize,
    held: AtomicUsize,
    /// Filled slots, oldest first, as (node, generation of the fill).
    order: Mutex<VecDeque<(NodeId, u64)>>,
}

impl Budget {
    /// A budget for a process limit of `nofile` descriptors: three quarters of it, less a
    /// fixed reserve, for node descriptors.
    pub fn for_limit(nofile: usize) -> Budget {
        let reserve = (nofile / 4).max(128);
        Budget {
            limit: nofile.saturating_sub(reserve).max(32),
            held: AtomicUsize::new(0),
            order: Mutex::new(VecDeque::new()),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Notes that `id`'s slot was filled (generation `gen`). Returns whether the budget is
    /// now exceeded.
    pub fn filled(&self, id: NodeId, gen: u64) -> bool {
        let n = self.held.fetch_add(1, Ordering::Relaxed) + 1;
        self.queue().push_back((id, gen));
        n > self.limit
    }

    /// Notes that a slot was emptied (released, or its node forgotten).
    pub fn emptied(&self) {
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Takes up to `n` of the oldest fills, for the caller to release or put back.
    pub fn oldest(&self, n: usize) -> Vec<(NodeId, u64)> {
        let mut q = self.queue();
        let n = n.min(q.len());
        q.drain(..n).collect()
    }

    /// Whether the queue holds many stale entries (fills of forgotten or released nodes).
    pub fn needs_compaction(&self) -> bool {
        self.queue().len() > 2 * self.limit + 1024
    }

    /// Keeps only the queue entries `live` accepts.
    pub fn retain(&self, mut live: impl FnMut(NodeId, u64) -> bool) {
        self.queue().retain(|&(id, gen)| live(id, gen));
    }

    /// Puts back a fill that could not be released now (the node is busy).
    pub fn put_back(&self, id: NodeId, gen: u64) {
        self.queue().push_back((id, gen));
    }

    /// How many to release at once when over budget: a sixteenth, so the cost of a sweep
    /// is spread over many fills.
    pub fn batch(&self) -> usize {
        (self.limit / 16).max(8)
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<(NodeId, u64)>> {
        self.order.lock().unwrap_or_else(|e| e.into_inner())
    }
}
