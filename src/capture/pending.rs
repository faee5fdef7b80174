//! The main tree's changes begun and not yet ended: what a model of a past point must take
//! into account besides the timeline.
//!
//! A change is in the timeline only once it ended (committed, then written by the worker).
//! A recorded open lasts until its file is released, so a file created or being rewritten
//! now may have been so for minutes: a model built from the timeline alone would take it
//! for a file untouched since the point, and read its new bytes as the old ones. Views and
//! branches build their models from the timeline *and* these changes (`Recorder::pending`):
//! a creation's before-state is "absent", a rewrite's is its before-image, kept in staging
//! or in memory until the change ends ([`Recorder::pending_content`]).
//!
//! Other changes end within their request; a model waits for them to end
//! ([`Recorder::settle_names`]): whether a rename in flight already happened cannot be told.
//!
//! Order: an event is registered once it is begun (before its mutation reaches the disk)
//! and unregistered only after its commit is queued for the worker, so a reader that takes
//! this list first and then waits for the worker's queue sees every change either here or
//! in the timeline.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::recorder::Recorder;
use crate::ids::{ContentHash, Seq};
use crate::timeline::{Event, Op};

pub(super) struct Entry {
    event: Event,
    staged: Option<String>,
    inline: Option<Arc<Vec<u8>>>,
}

#[derive(Default)]
pub(super) struct Pending {
    map: Mutex<BTreeMap<Seq, Entry>>,
    /// Changes of the main tree counted as begun and not yet registered here (or given up).
    registering: AtomicUsize,
}

/// A change being registered; dropped once it is in the map or has failed.
pub(super) struct Registering<'a>(&'a AtomicUsize);

impl Drop for Registering<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pending {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<Seq, Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks a change of the main tree as on its way into the map: taken before the change
    /// counts as begun, held until it is registered or has failed.
    pub(super) fn registering(&self) -> Registering<'_> {
        self.registering.fetch_add(1, Ordering::SeqCst);
        Registering(&self.registering)
    }

    /// Registers a begun change of the main tree (branches' changes are not the main
    /// tree's history).
    pub(super) fn add(&self, event: &Event, staged: Option<&str>, inline: Option<&Vec<u8>>) {
        if event.branch.is_some() {
            return;
        }
        self.map().insert(
            event.seq,
            Entry {
                event: event.clone(),
                staged: staged.map(str::to_string),
                inline: inline.map(|b| Arc::new(b.clone())),
            },
        );
    }

    pub(super) fn remove(&self, seq: Seq) {
        self.map().remove(&seq);
    }
}

/// Changes that last beyond their request: recorded opens.
fn lasting(op: Op) -> bool {
    matches!(op, Op::Create | Op::Write)
}

impl Recorder {
    /// The main tree's changes begun after `point` and not ended yet, oldest first.
    pub fn pending(&self, point: Seq) -> Vec<Event> {
        self.pending
            .map()
            .range(Seq(point.0 + 1)..)
            .map(|(_, e)| e.event.clone())
            .collect()
    }

    /// Waits (at most `limit`) until no change of the main tree that ends within its
    /// request is under way and every begun one is registered. Returns whether so.
    pub fn settle_names(&self, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.pending.registering.load(Ordering::SeqCst) == 0
                && !self.pending.map().values().any(|e| !lasting(e.event.op))
            {
                return true;
            }
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The before-image with hash `h` of a change still under way, if one has it.
    pub fn pending_content(&self, h: &ContentHash) -> Option<Vec<u8>> {
        let (staged, inline) = {
            let map = self.pending.map();
            let e = map
                .values()
                .find(|e| e.event.before.hash.as_ref() == Some(h))?;
            (e.staged.clone(), e.inline.clone())
        };
        let data = match (inline, staged) {
            (Some(b), _) => b.as_ref().clone(),
            (None, Some(name)) => {
                let mut f = self.shared.staging.open_read(&name).ok()?;
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut v).ok()?;
                v
            }
            (None, None) => return None,
        };
        (ContentHash::of(&data) == *h).then_some(data)
    }
}
