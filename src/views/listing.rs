//! Directory listings of a view: the names a directory had at the point.

use super::{Snapshot, ViewError, Views};
use crate::restore::plan::Want;
use crate::timeline::Kind;
use crate::tree as live;

impl Views {
    /// The entries of directory `dir` at the point, in name order (see
    /// `restore::State::list`); agx's own directory is never one of them.
    pub fn list(&self, s: &Snapshot, dir: &[u8]) -> Result<Vec<(Vec<u8>, Want)>, ViewError> {
        let w = self.want(s, dir)?;
        if w.kind != Kind::Dir {
            return Err(ViewError::NotDir);
        }
        let mut out = s
            .state
            .list(&self.root, dir, |src| live::list(&self.root, src))
            .map_err(std::io::Error::from)?;
        if dir.is_empty() {
            out.retain(|(n, _)| n.as_slice() != crate::sys::path::AGX_DIR_NAME.as_bytes());
        }
        Ok(out)
    }
}
