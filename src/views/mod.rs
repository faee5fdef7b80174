//! Read-only views of the project at any point (`.agx/at/<ref>/` in the mount).
//!
//! A view is served by the state-at-a-point rule restore uses ([`crate::restore::model`]):
//! nothing is copied when a view opens. Paths the model says were not changed since the
//! point are read from the live tree, the others from the content store.
//!
//! Staying correct while the live tree changes: a live file changed after the point has its
//! before-image captured, and the model rebuilt from the events after the point then names
//! the stored version. Models are therefore cached per point together with the recorder's
//! last sequence number when they were built, and rebuilt when that moved. The recorder
//! hands out a sequence number before a change reaches the disk, so a read of live content
//! followed by an unchanged sequence number saw content from before any newer change
//! ([`Views::read`] retries otherwise).
//!
//! This module knows nothing of FUSE: `src/fs/views.rs` is the glue.

mod listing;
mod serve;

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use thiserror::Error;

use crate::capture::Recorder;
use crate::ids::Seq;
use crate::restore::State;
use crate::store::Store;
use crate::timeline::{refs, Timeline, TimelineError};

pub use serve::{Attr, Source};

/// Why a view request fails. Each maps to one errno at the FUSE edge.
#[derive(Debug, Error)]
pub enum ViewError {
    #[error("no such object at that point")]
    NotFound,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("the content at that point was not kept")]
    NotKept,
    #[error(transparent)]
    Timeline(#[from] TimelineError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// How long a model waits for changes under way that end within their request.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Adds to `events` (from the timeline, oldest first) the changes still under way that it
/// does not have yet, in sequence order.
fn merge_pending(events: &mut Vec<crate::timeline::Event>, pending: Vec<crate::timeline::Event>) {
    let have: std::collections::HashSet<Seq> = events.iter().map(|e| e.seq).collect();
    let before = events.len();
    events.extend(pending.into_iter().filter(|e| !have.contains(&e.seq)));
    if events.len() != before {
        events.sort_by_key(|e| e.seq);
    }
}

/// How many points keep a cached model.
const CACHED_MODELS: usize = 16;

/// A point's model, valid as long as the recorder's changes are still `key`: the last one
/// begun and how many have ended. A change still under way (a file not yet released, whose
/// release the kernel sends after `close` returns) is not in the timeline yet; the model
/// is rebuilt once it ends, not only when the next change begins.
#[derive(Clone)]
pub struct Snapshot {
    pub point: Seq,
    pub key: (Seq, u64),
    pub state: Arc<State>,
}

pub struct Views {
    /// The project's backing root (never the mount).
    root: OwnedFd,
    store: Store,
    timeline: Mutex<Timeline>,
    recorder: Arc<Recorder>,
    models: Mutex<HashMap<Seq, Snapshot>>,
}

impl Views {
    /// Views over the project whose backing root and `.agx` directory are given.
    pub fn new(root: OwnedFd, agx: &OwnedFd, recorder: Arc<Recorder>) -> Result<Views, ViewError> {
        Ok(Views {
            root,
            store: Store::open(agx, false)?,
            timeline: Mutex::new(Timeline::open_in(agx)?),
            recorder,
            models: Mutex::new(HashMap::new()),
        })
    }

    fn tl(&self) -> std::sync::MutexGuard<'_, Timeline> {
        self.timeline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The point a REF names now; None when it is not a valid REF of this timeline.
    pub fn point(&self, r: &str) -> Option<Seq> {
        refs::resolve(r, &self.tl()).ok()
    }

    /// The model of the tree at the point `r` names, current with every committed event.
    pub fn snapshot(&self, r: &str) -> Option<Result<Snapshot, ViewError>> {
        let point = self.point(r)?;
        Some(self.model_at(point))
    }

    /// The model of the tree at `point`, current with every committed event.
    pub fn at(&self, point: Seq) -> Result<Snapshot, ViewError> {
        self.model_at(point)
    }

    /// Whether a snapshot still describes the tree (no change began since it was built).
    pub fn fresh(&self, s: &Snapshot) -> bool {
        self.recorder.changes() == s.key
    }

    fn model_at(&self, point: Seq) -> Result<Snapshot, ViewError> {
        // A past tree mirrors live paths: changes made outside agx to any of them are
        // history first (once per mount; see `Recorder::sweep`).
        self.recorder.sweep();
        let key = self.recorder.changes();
        if let Some(s) = self.cached(point) {
            if s.key == key {
                return Ok(s);
            }
        }
        // Changes began since the cached model. Those still under way count too (see
        // `capture::pending`): the ones that end within their request are waited for
        // (whether a rename in flight happened yet cannot be told), the lasting ones (opens
        // being written) are taken first, then the capture worker puts every finished one
        // in the timeline. The worker never goes through the mount, so waiting for it from
        // a FUSE request cannot deadlock. Not `flush`: that also waits for releases on
        // their way, which other requests deliver.
        if !self.recorder.settle_names(SETTLE) {
            log::debug!("a view of point {point}: a change of the tree is still under way");
        }
        let pending = self.recorder.pending(point);
        self.recorder.flush_queue();
        let mut events = self.tl().events_after(point)?;
        merge_pending(&mut events, pending);
        let s = Snapshot {
            point,
            key,
            state: Arc::new(State::before(&events)),
        };
        let mut models = self.models.lock().unwrap_or_else(|e| e.into_inner());
        if models.len() >= CACHED_MODELS {
            // Stale models first; otherwise any one (they are cheap to rebuild).
            models.retain(|_, v| v.key == key);
            if models.len() >= CACHED_MODELS {
                models.clear();
            }
        }
        models.insert(point, s.clone());
        Ok(s)
    }

    fn cached(&self, point: Seq) -> Option<Snapshot> {
        self.models
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&point)
            .cloned()
    }
}
