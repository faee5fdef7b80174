//! Issue 14, "nothing is lost": one test binary (jj's pattern, one link) for the holes
//! independent testing found in capture and restore. Each module pins one invariant of
//! DESIGN.md section 2 on a real mount.

#[path = "../common/mod.rs"]
mod common;
#[path = "../hist/mod.rs"]
mod hist;
#[path = "../util/mod.rs"]
mod util;

mod concurrent;
mod fileattr;
mod found;
mod fsimage;
mod fulldisk;
mod hardlinks;
mod ignore;
mod lost;
mod model;
mod outside;
mod reuse;
mod special;
