//! Capture: every mutation the mount applies is recorded before it is applied (DESIGN.md
//! section 2, invariant 1). The FUSE front calls [`Recorder::begin`] with what is about to
//! change; an error aborts the mutation with that errno and nothing changes.

pub mod config;
pub mod gate;
pub mod gitindex;
pub mod head;
pub mod ignore;
mod journal;
pub mod linked;
pub mod outside;
mod pending;
pub mod policy;
pub mod recorder;
mod recovery;
pub mod reserve;
mod slots;
mod staging;
mod take;
mod ticket;
mod worker;

use thiserror::Error;

pub use linked::ContentGuard;
pub use recorder::Recorder;
pub use ticket::{After, Before, Ticket};

/// Why capture could not start.
#[derive(Debug, Error)]
pub enum CaptureError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Timeline(#[from] crate::timeline::TimelineError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The timeline ends before events agx recorded (see `head.rs`).
    #[error("the timeline lost recorded history: it ends at event {have} but events up to {recorded} were recorded (was .agx/timeline.db-wal deleted, or timeline.db put back from an older copy?); nothing is recorded until `agx verify --repair` accepts the loss")]
    HistoryLost { have: i64, recorded: i64 },
}

impl CaptureError {
    pub fn io(what: &str) -> impl FnOnce(std::io::Error) -> CaptureError + '_ {
        move |source| CaptureError::Io {
            what: what.to_string(),
            source,
        }
    }
}
