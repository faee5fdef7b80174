//! Content a restore takes from live files elsewhere in the tree (undoing a move writes
//! the moved file back from where it went, and that place may itself be restored first).
//! Such content is secured before anything changes: held open (files are replaced by
//! rename, so an open descriptor keeps the old content), or, beyond a bounded number of
//! descriptors, copied into the store.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use rustix::fs::OFlags;
use rustix::process::{getrlimit, Resource};

use super::plan::{Content, Plan, Step};
use super::RestoreError;
use crate::ids::ContentHash;
use crate::store::Store;
use crate::tree::open_beneath;

/// At most this many descriptors are held, and never more than 1/8 of the process's
/// limit: the rest of the restore (and, in the daemon, the mount) needs descriptors too.
const MAX_HELD: u64 = 1024;

/// Where each live source's content is kept until it is written.
#[derive(Default)]
pub struct Sources {
    held: HashMap<Vec<u8>, OwnedFd>,
    stored: HashMap<Vec<u8>, ContentHash>,
}

/// The secured content of one source.
pub enum Source<'a> {
    Held(&'a OwnedFd),
    Stored(ContentHash),
}

fn held_limit() -> usize {
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    (soft / 8).min(MAX_HELD) as usize
}

impl Sources {
    /// Secures every live source `plan` writes from. A source that is gone already is
    /// left out (its step fails); any other failure is an error before anything changed.
    pub fn secure(root: &OwnedFd, store: &Store, plan: &Plan) -> Result<Sources, RestoreError> {
        let limit = held_limit();
        let mut s = Sources::default();
        for step in &plan.steps {
            let Step::Write {
                content: Content::Live(src),
                ..
            } = step
            else {
                continue;
            };
            if s.held.contains_key(src) || s.stored.contains_key(src) {
                continue;
            }
            let name = || String::from_utf8_lossy(src).into_owned();
            let fd = match open_beneath(root, src, OFlags::RDONLY | OFlags::NOFOLLOW) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => {
                    return Err(RestoreError::Other(format!(
                        "{}: cannot be opened: {}",
                        name(),
                        std::io::Error::from(e)
                    )))
                }
            };
            if s.held.len() < limit {
                s.held.insert(src.clone(), fd);
                continue;
            }
            let put = store
                .put_reader(std::fs::File::from(fd), None)
                .map_err(|e| RestoreError::Other(format!("{}: cannot be kept: {e}", name())))?;
            s.stored.insert(src.clone(), put.hash);
        }
        Ok(s)
    }

    pub fn get(&self, src: &[u8]) -> Option<Source<'_>> {
        if let Some(fd) = self.held.get(src) {
            return Some(Source::Held(fd));
        }
        self.stored.get(src).map(|h| Source::Stored(*h))
    }
}
