//! Restore: the state of the tree at a point (a reverse replay of the timeline over the
//! live tree), plans that bring the live tree back to it, and their reversible execution.

pub mod apply;
pub mod diff;
pub mod links;
pub mod model;
pub mod plan;
mod sources;
pub mod state;
mod steps;
mod write;

use thiserror::Error;

pub use apply::{apply, Report, Why};
pub use plan::{Content, Plan, Step};
pub use state::State;

#[derive(Debug, Error)]
pub enum RestoreError {
    #[error(transparent)]
    Timeline(#[from] crate::timeline::TimelineError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{0}")]
    Other(String),
}
