//! The gate every change through the mount passes: an agx operation that makes the main
//! tree another tree as a whole (`agx switch`, `agx merge`) closes it while it runs, so no
//! change of anyone else lands between its reading of the trees and its last step (a
//! change would otherwise be overwritten, or mixed into a half-switched tree).
//!
//! Only the start of a change waits: a request that changes the tree holds the gate open
//! (shared) for as long as it runs, and the operation takes it exclusively. Writes through
//! files already open (FUSE passthrough) never reach the daemon and cannot wait; `switch`
//! refuses to run while files are open for writing unless forced. Releases and flushes
//! never wait (the operation itself waits for releases on their way).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

#[derive(Default)]
pub struct Gate(RwLock<()>);

impl Gate {
    /// Held by a request that changes the tree, for as long as it runs.
    pub fn pass(&self) -> RwLockReadGuard<'_, ()> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Held by an operation that rewrites the tree: no change through the mount starts
    /// until it is dropped.
    pub fn close(&self) -> RwLockWriteGuard<'_, ()> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}
