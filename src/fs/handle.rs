//! Open file and directory handles given to the kernel.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crate::capture::Ticket;
use crate::fs::inode::Node;
use crate::ids::HandleId;

pub struct FileHandle {
    pub node: Arc<Node>,
    /// The backing file opened with the caller's access mode (O_CREAT, O_EXCL, O_DIRECT,
    /// O_NOFOLLOW and O_APPEND stripped: every write carries its offset). Serves reads and
    /// writes when passthrough is off, and fsync, fallocate, ftruncate, lseek and
    /// copy_file_range always.
    pub file: OwnedFd,
    /// The kernel reads and writes the backing file directly; this handle holds one count
    /// of the node's backing registration.
    pub passthrough: bool,
    /// Opened for writing (counted in the node's writers).
    pub writable: bool,
    /// A read-only open of a branch's file whose content is still the base's: reads go to
    /// the base until the file is copied up (then `file`, the same inode, has it).
    pub(crate) base: Option<crate::fs::branches::BaseRead>,
    /// The event recording this open (from open or create to release).
    pub ticket: Mutex<Option<Ticket>>,
    /// Opened for writing by an unprivileged caller on a set-id file: the first write
    /// clears the set-id bits (the kernel leaves that to agx, see `kill_setid`).
    pub kill_setid: Mutex<Option<crate::fs::entry::Caller>>,
}

impl FileHandle {
    /// Whether this handle's changes are being recorded as one event.
    pub fn recording(&self) -> bool {
        self.ticket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

pub struct DirHandle {
    pub node: Arc<Node>,
    /// The virtual directory listed (`.agx`, `.agx/branches`), if it is one.
    pub virt: Option<crate::ids::NodeId>,
    /// The backing directory opened for reading; `None` for a virtual directory.
    /// Listings are read from it at the kernel's offset on every request (offsets are the
    /// backing filesystem's own seek cookies), so the handle keeps no listing of its own.
    pub file: Option<OwnedFd>,
    /// Serializes the seek-and-read of one request on `file`.
    pub cursor: Mutex<()>,
}

pub enum Handle {
    File(FileHandle),
    Dir(DirHandle),
}

#[derive(Default)]
pub struct HandleTable {
    next: AtomicU64,
    map: RwLock<HashMap<HandleId, Arc<Handle>>>,
    /// Held shared by each release under way, from before its handle leaves `map` until
    /// its change is handed to the capture worker (see [`HandleTable::wait_releases`]).
    releases: RwLock<()>,
}

impl HandleTable {
    pub fn insert(&self, h: Handle) -> HandleId {
        let id = HandleId(self.next.fetch_add(1, Ordering::Relaxed) + 1);
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::new(h));
        id
    }

    pub fn get(&self, id: HandleId) -> Option<Arc<Handle>> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    pub fn remove(&self, id: HandleId) -> Option<Arc<Handle>> {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
    }

    /// Every handle whose change is still being recorded: its id, and the process and
    /// path its change is attributed to.
    pub fn recorded(&self) -> Vec<(HandleId, u32, Vec<u8>)> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (id, h) in map.iter() {
            if let Handle::File(f) = &**h {
                let t = f.ticket.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(t) = &*t {
                    out.push((*id, t.pid(), t.path().to_vec()));
                }
            }
        }
        out
    }

    /// Marks a release as under way until the guard is dropped: taken before the handle
    /// leaves the table, dropped once its change is committed.
    pub fn start_release(&self) -> RwLockReadGuard<'_, ()> {
        self.releases.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the releases under way now (not for those that start meanwhile: the
    /// lock prefers writers).
    pub fn wait_releases(&self) {
        drop(self.releases.write().unwrap_or_else(|e| e.into_inner()));
    }

    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
