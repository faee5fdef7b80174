//! agx: a FUSE copy-on-write layer that makes what an AI coding agent does to a project
//! undoable, attributable and branchable. See ARCHITECTURE.md for the map.
#![deny(unsafe_code)]

pub mod attribution;
pub mod branches;
pub mod capture;
pub mod cli;
pub mod control;
pub mod fs;
pub mod hooks;
pub mod ids;
pub mod logging;
pub mod mount;
pub mod restore;
pub mod store;
pub mod sys;
pub mod timeline;
pub mod tree;
pub mod views;
