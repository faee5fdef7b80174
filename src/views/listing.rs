//! Directory listings of a view: the names a directory had at the point.

use std::collections::BTreeSet;

use super::{Snapshot, ViewError, Views};
use crate::restore::model::Entry;
use crate::restore::plan::Want;
use crate::sys::path::join;
use crate::timeline::Kind;
use crate::tree as live;

impl Views {
    /// The entries of directory `dir` at the point, in name order. Candidates are the
    /// live directory the model mirrors there (if any) and every path the model states
    /// explicitly below `dir`; each is kept when the model says it existed.
    pub fn list(&self, s: &Snapshot, dir: &[u8]) -> Result<Vec<(Vec<u8>, Want)>, ViewError> {
        let w = self.want(s, dir)?;
        if w.kind != Kind::Dir {
            return Err(ViewError::NotDir);
        }
        let mut names: BTreeSet<Vec<u8>> = BTreeSet::new();
        if let Entry::Node(n) = s.state.model().lookup(dir) {
            if let Some(src) = &n.src {
                names.extend(live::list(&self.root, src));
            }
        }
        let mut prefix = dir.to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        for (k, _) in s.state.model().entries() {
            if let Some(rest) = k.strip_prefix(prefix.as_slice()) {
                let first = rest.split(|c| *c == b'/').next().unwrap_or_default();
                if !first.is_empty() {
                    names.insert(first.to_vec());
                }
            }
        }
        let mut out = Vec::new();
        for name in names {
            let p = join(dir, &name);
            match self.want(s, &p) {
                Ok(w) => out.push((name, w)),
                Err(ViewError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}
