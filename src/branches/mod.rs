//! Branches: writable copy-on-write views of the project that agents work in aside from
//! the main tree.
//!
//! A branch is a base point of the main tree's timeline and a layer of its own,
//! `.agx/layers/<id>/` (`layer.rs`). The layer's `tree/` is the branch's tree, made lazily
//! from the base (`fill.rs`): a directory gets its entries from the base the first time the
//! branch reaches it, each entry made as the base had it (a file with its length and
//! metadata but not its content, marked as still taking its content from the base, see
//! `marker.rs`); a file gets its content the first time the branch changes it. Until then
//! its bytes are read from the base (`lower.rs`): the main tree's live file while the main
//! tree has not changed it since the base point, the stored before-image once it has.
//! Making a branch writes one row: no copy, no scan.
//!
//! Everything after a fill is a real directory tree that the FUSE front serves and records
//! like the main tree (renames, hard links, xattrs, locks: the backing filesystem's own
//! semantics), with events of their own (`Event::branch`).
//!
//! `set.rs` holds the branches a daemon serves; `merge3.rs` is the three-way merge
//! (text, entries, whole trees) that `agx merge` plans with.

pub mod fill;
pub mod layer;
pub mod lower;
pub mod marker;
pub mod merge3;
pub mod set;
pub mod sides;

pub use set::{Branches, Tree};
