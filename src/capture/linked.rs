//! Changes of one object's content: their order, and before-images kept in staging by a
//! hard link to the object itself until the worker has stored them.
//!
//! Order. Invariant 1 asks that the before-image of the first change after a point be the
//! content at that point. A change takes its sequence number and reads its before-image
//! when it begins, then takes effect (an `O_TRUNC` open truncates, a truncate, an
//! allocation, an unlink that keeps the object by a staging link). Two such changes of one
//! object on two request threads must not interleave, or the later-numbered one could read
//! the content before the earlier one took effect while the earlier one read it after the
//! later one's truncation (four writers truncating one file at once did that: the first
//! event recorded an empty before-image). A lock per object, striped by inode, holds from
//! the beginning of such a change to its effect ([`Linked::lock`]). Writes through an open
//! handle take none: they belong to the event their open began, and with passthrough they
//! never reach the daemon.
//!
//! Staging links.
//! An object that loses a name (unlink, rename over it) is kept by linking it into staging:
//! no copy on the request path. But it can still be reached: through an `O_PATH`
//! descriptor reopened by `/proc/PID/fd`, or through a hard link the kernel never looked
//! up. A content change of it then changes the staged before-image too. Invariant: before
//! any content change of an object begins, every before-image of it kept this way is in
//! the store ([`Linked::secure`]), and the worker takes that stored version instead of
//! reading the staged file, whatever the file shows by then.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::ids::{ContentHash, InodeKey};
use fuser::Errno;

use super::recorder::enospc_or_eio;

struct Entry {
    key: InodeKey,
    /// The stored version, once stored.
    stored: Mutex<Option<ContentHash>>,
}

#[derive(Default)]
struct Maps {
    by_key: HashMap<InodeKey, Vec<String>>,
    by_name: HashMap<String, Arc<Entry>>,
}

/// Stripes of the content locks. Two objects sharing a stripe only wait for each other's
/// (short) beginnings; 256 keeps that rare at the concurrency a request pool has.
const STRIPES: usize = 256;

pub(super) struct Linked {
    /// Entries registered: zero (nearly always) spares a content change the lock.
    count: AtomicUsize,
    maps: Mutex<Maps>,
    stripes: Box<[Mutex<()>]>,
}

impl Default for Linked {
    fn default() -> Self {
        Linked {
            count: AtomicUsize::new(0),
            maps: Mutex::default(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

/// Held from the beginning of a change of an object's content to its effect.
pub struct ContentGuard<'a>(#[allow(dead_code)] std::sync::MutexGuard<'a, ()>);

impl Linked {
    /// Locks changes of object `key`'s content (see the module comment).
    pub fn lock(&self, key: InodeKey) -> ContentGuard<'_> {
        let i = (key.ino ^ key.dev.rotate_left(32)) as usize % STRIPES;
        ContentGuard(self.stripes[i].lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn maps(&self) -> std::sync::MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object `key` is kept in staging as `name`.
    pub fn add(&self, key: InodeKey, name: &str) {
        let mut m = self.maps();
        let entry = Arc::new(Entry {
            key,
            stored: Mutex::new(None),
        });
        if m.by_name.insert(name.to_string(), entry).is_none() {
            m.by_key.entry(key).or_default().push(name.to_string());
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// How many staging links of object `key` are registered: links of the object that
    /// are agx's own, not names in the project.
    pub fn links(&self, key: InodeKey) -> u64 {
        if self.count.load(Ordering::SeqCst) == 0 {
            return 0;
        }
        self.maps().by_key.get(&key).map_or(0, |v| v.len() as u64)
    }

    /// Stores every before-image of object `key` still kept only by a staging link, with
    /// `store` (which reads the staged file by name): called before the object's content
    /// changes. An error (a full disk) means the change must not be made.
    pub fn secure<E>(
        &self,
        key: InodeKey,
        store: impl Fn(&str) -> Result<ContentHash, E>,
    ) -> Result<(), E> {
        if self.count.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        let entries: Vec<(String, Arc<Entry>)> = {
            let m = self.maps();
            let Some(names) = m.by_key.get(&key) else {
                return Ok(());
            };
            names
                .iter()
                .filter_map(|n| m.by_name.get(n).map(|e| (n.clone(), e.clone())))
                .collect()
        };
        for (name, e) in entries {
            let mut stored = e.stored.lock().unwrap_or_else(|e| e.into_inner());
            if stored.is_none() {
                *stored = Some(store(&name)?);
            }
        }
        Ok(())
    }

    /// The stored version of staged `name` if it is a registered link: stored now with
    /// `store` unless [`Linked::secure`] stored it already. None for other staged files.
    pub fn settle<E>(
        &self,
        name: &str,
        store: impl FnOnce() -> Result<ContentHash, E>,
    ) -> Option<Result<ContentHash, E>> {
        let e = self.maps().by_name.get(name).cloned()?;
        let mut stored = e.stored.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = *stored {
            return Some(Ok(h));
        }
        Some(store().inspect(|h| *stored = Some(*h)))
    }

    /// The staged file `name` is gone.
    pub fn remove(&self, name: &str) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut m = self.maps();
        if let Some(e) = m.by_name.remove(name) {
            if let Some(v) = m.by_key.get_mut(&e.key) {
                v.retain(|n| n != name);
                if v.is_empty() {
                    m.by_key.remove(&e.key);
                }
            }
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl super::recorder::Recorder {
    /// Links of object `key` that are agx's own (before-images kept in staging by a hard
    /// link), not names in the project.
    pub fn staged_links(&self, key: InodeKey) -> u64 {
        self.shared.linked.links(key)
    }
    /// Locks changes of object `key`'s content and makes it safe to change: held from
    /// before the change begins (its before-image) until it has taken effect, by every
    /// change of the object's content, recorded or not (see `linked.rs`). An error (a
    /// before-image kept by a staging link could not be stored) means the change must not
    /// be made.
    pub fn guard(&self, key: InodeKey) -> Result<super::linked::ContentGuard<'_>, Errno> {
        let g = self.shared.linked.lock(key);
        self.secure(key)?;
        Ok(g)
    }
    /// Locks changes of object `key`'s content for a change that keeps the object by a
    /// staging link (it loses a name) rather than changing it.
    pub fn lock(&self, key: InodeKey) -> super::linked::ContentGuard<'_> {
        self.shared.linked.lock(key)
    }
    /// Stores every before-image of object `key` kept in staging by a hard link.
    fn secure(&self, key: InodeKey) -> Result<(), Errno> {
        self.shared
            .linked
            .secure(key, |name| {
                super::worker::ingest_staged(&self.shared, name, None)
            })
            .map_err(|e| {
                log::error!("cannot store a before-image kept in staging: {e}");
                match e {
                    super::CaptureError::Io { source, .. } => enospc_or_eio(&source),
                    super::CaptureError::Store(crate::store::StoreError::Io { source, .. }) => {
                        enospc_or_eio(&source)
                    }
                    _ => Errno::EIO,
                }
            })
    }
}
