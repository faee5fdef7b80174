//! The tree at a point, as restore, show, diff, blame and the views all see it: the path
//! model of `model.rs` (events undone newest first over the live tree) and what was
//! recorded of each file through its other names (`links.rs`). One rule everywhere, so
//! what a view shows is what a restore would bring back.

use std::os::fd::OwnedFd;

use super::links::History;
use super::model::Model;
use super::plan::{resolve_checked, Want};
use crate::timeline::Event;

#[derive(Default)]
pub struct State {
    model: Model,
    links: History,
}

impl State {
    /// The tree just before `events` (every event after the point, oldest first).
    pub fn before(events: &[Event]) -> State {
        let mut model = Model::new();
        model.undo_all(events.iter());
        State {
            model,
            links: History::from_events(events),
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn links(&self) -> &History {
        &self.links
    }

    /// The names directory `dir` had at the point: the live directory the model mirrors
    /// there (if any, listed by `live_names`) and every path the model states explicitly
    /// below `dir`, each kept when the model says it existed, in name order.
    pub fn list(
        &self,
        root: &OwnedFd,
        dir: &[u8],
        live_names: impl FnOnce(&[u8]) -> Vec<Vec<u8>>,
    ) -> Result<Vec<(Vec<u8>, Want)>, rustix::io::Errno> {
        use crate::restore::model::Entry;
        let mut names: std::collections::BTreeSet<Vec<u8>> = Default::default();
        if let Entry::Node(n) = self.model.lookup(dir) {
            if let Some(src) = &n.src {
                names.extend(live_names(src));
            }
        }
        let mut prefix = dir.to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        for (k, _) in self.model.entries() {
            if let Some(rest) = k.strip_prefix(prefix.as_slice()) {
                let first = rest.split(|c| *c == b'/').next().unwrap_or_default();
                if !first.is_empty() {
                    names.insert(first.to_vec());
                }
            }
        }
        let mut out = Vec::new();
        for name in names {
            if let Some(w) = self.want(root, &crate::sys::path::join(dir, &name))? {
                out.push((name, w));
            }
        }
        Ok(out)
    }

    /// The concrete state of `path` at the point (None: nothing was there). A live object
    /// that cannot be looked at is an error, never taken for an absent one.
    pub fn want(&self, root: &OwnedFd, path: &[u8]) -> Result<Option<Want>, rustix::io::Errno> {
        let mut want = resolve_checked(root, self.model.lookup(path))?;
        if let Some(w) = &mut want {
            self.links.correct(w);
        }
        Ok(want)
    }
}
