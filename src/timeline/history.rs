//! Questions about what history a path has: asked by the capture policy (may a path pass
//! uncaptured?) and by the check for changes made outside agx (what state did the
//! timeline leave a path in?).

use rusqlite::params_from_iter;

use super::{Event, Timeline, TimelineError};
use crate::ids::Seq;

/// Operations that change which object a path names (as opposed to changing an object in
/// place): an event of one of these on an ancestor of a path changes what the path is.
const STRUCTURAL: &str =
    "('rename','exchange','rmdir','unlink','mkdir','create','symlink','mknod','link')";

fn marks(n: usize) -> String {
    vec!["?"; n].join(",")
}

/// `dir/` and the byte after '/', bounding the paths below `dir` in an index range.
fn below(dir: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lo = dir.to_vec();
    lo.push(b'/');
    let mut hi = dir.to_vec();
    hi.push(b'/' + 1);
    (lo, hi)
}

impl Timeline {
    /// Whether any event names `path` (as its path or its rename destination).
    pub fn has_history(&self, path: &[u8]) -> Result<bool, TimelineError> {
        let n: i64 = self
            .conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM events WHERE path = ?1)
                     OR EXISTS (SELECT 1 FROM events WHERE to_path = ?1)",
            )?
            .query_row([path], |r| r.get(0))?;
        Ok(n != 0)
    }

    /// Whether any event names a path below `dir` ("" : anything).
    pub fn has_history_below(&self, dir: &[u8]) -> Result<bool, TimelineError> {
        let (lo, hi) = if dir.is_empty() {
            (Vec::new(), vec![0xff; 8])
        } else {
            below(dir)
        };
        let n: i64 = self
            .conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM events WHERE path >= ?1 AND path < ?2)
                     OR EXISTS (SELECT 1 FROM events WHERE to_path >= ?1 AND to_path < ?2)",
            )?
            .query_row(rusqlite::params![lo, hi], |r| r.get(0))?;
        Ok(n != 0)
    }

    /// The newest event before `upto` whose after-state of `path` has a known content
    /// hash (a rename's destination, or any other change of `path`).
    pub fn last_known_content(
        &self,
        path: &[u8],
        upto: Seq,
    ) -> Result<Option<Event>, TimelineError> {
        let got = self.collect(
            "SELECT seq, body FROM (
                 SELECT seq, body FROM events
                     WHERE path = ?1 AND to_path IS NULL AND after_hash IS NOT NULL AND seq < ?2
                 UNION ALL SELECT seq, body FROM events
                     WHERE to_path = ?1 AND after_hash IS NOT NULL AND seq < ?2)
             ORDER BY seq DESC LIMIT 1",
            rusqlite::params![path, upto.0],
        )?;
        Ok(got.into_iter().next())
    }

    /// The newest event after `after` that left the object `id` as a file with several
    /// names (any of them), if any.
    pub fn last_of_linked(
        &self,
        id: crate::timeline::ObjId,
        after: Seq,
    ) -> Result<Option<Event>, TimelineError> {
        // The index's condition is repeated so the query can use it.
        let got = self.collect(
            "SELECT seq, body FROM events
                 WHERE json_extract(body, '$.after.meta.nlink') > 1
                   AND json_extract(body, '$.after.meta.ino') = ?1 AND seq > ?2
                 ORDER BY seq DESC LIMIT 16",
            rusqlite::params![id.ino as i64, after.0],
        )?;
        Ok(got
            .into_iter()
            .find(|e| e.after.meta.as_ref().and_then(|m| m.id()) == Some(id)))
    }

    /// Every path events after `seq` name (as path or destination), in no order.
    pub fn paths_after(&self, seq: Seq) -> Result<Vec<Vec<u8>>, TimelineError> {
        let mut st = self.conn().prepare_cached(
            "SELECT path FROM events WHERE seq > ?1
             UNION SELECT to_path FROM events WHERE seq > ?1 AND to_path IS NOT NULL",
        )?;
        let rows = st.query_map([seq.0], |r| r.get::<_, Vec<u8>>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every path any event names, and (with `under`) only those at or below it.
    pub fn history_paths(&self, under: Option<&[u8]>) -> Result<Vec<Vec<u8>>, TimelineError> {
        let mut out = Vec::new();
        match under {
            None => {
                let mut st = self.conn().prepare_cached(
                    "SELECT path FROM events UNION SELECT to_path FROM events
                     WHERE to_path IS NOT NULL",
                )?;
                let rows = st.query_map([], |r| r.get::<_, Vec<u8>>(0))?;
                for r in rows {
                    out.push(r?);
                }
            }
            Some(dir) => {
                let (lo, hi) = below(dir);
                let mut st = self.conn().prepare_cached(
                    "SELECT path FROM events WHERE path = ?1 OR (path >= ?2 AND path < ?3)
                     UNION SELECT to_path FROM events WHERE to_path = ?1
                        OR (to_path >= ?2 AND to_path < ?3)",
                )?;
                let rows =
                    st.query_map(rusqlite::params![dir, lo, hi], |r| r.get::<_, Vec<u8>>(0))?;
                for r in rows {
                    out.push(r?);
                }
            }
        }
        Ok(out)
    }

    /// Whether something was moved (renamed or exchanged) to one of `paths`.
    pub fn moved_to_any(&self, paths: &[Vec<u8>]) -> Result<bool, TimelineError> {
        if paths.is_empty() {
            return Ok(false);
        }
        let m = marks(paths.len());
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM events WHERE op IN ('rename','exchange') AND to_path IN ({m}))
                 OR EXISTS (SELECT 1 FROM events WHERE op = 'exchange' AND path IN ({m}))"
        );
        let args = paths.iter().chain(paths.iter());
        let n: i64 = self
            .conn()
            .prepare_cached(&sql)?
            .query_row(params_from_iter(args), |r| r.get(0))?;
        Ok(n != 0)
    }

    /// The newest event before `upto` (exclusive; None: any) that names `path` itself, or
    /// changes which object one of `ancestors` names.
    pub fn last_touching(
        &self,
        path: &[u8],
        ancestors: &[Vec<u8>],
        upto: Option<Seq>,
    ) -> Result<Option<Event>, TimelineError> {
        let m = marks(ancestors.len().max(1));
        let sql = format!(
            "SELECT seq, body FROM (
                 SELECT seq, body FROM events WHERE path = ?1 AND seq < ?2
                 UNION ALL SELECT seq, body FROM events WHERE to_path = ?1 AND seq < ?2
                 UNION ALL SELECT seq, body FROM events
                     WHERE path IN ({m}) AND op IN {STRUCTURAL} AND seq < ?2
                 UNION ALL SELECT seq, body FROM events
                     WHERE to_path IN ({m}) AND op IN {STRUCTURAL} AND seq < ?2)
             ORDER BY seq DESC LIMIT 1"
        );
        let upto = upto.map_or(i64::MAX, |s| s.0);
        let none = vec![Vec::new()];
        let anc = if ancestors.is_empty() {
            &none
        } else {
            ancestors
        };
        let mut args: Vec<rusqlite::types::Value> = vec![path.to_vec().into(), upto.into()];
        args.extend(anc.iter().map(|a| a.clone().into()));
        args.extend(anc.iter().map(|a| a.clone().into()));
        // Positional parameters after ?1 and ?2 are numbered in order of appearance.
        let sql = renumber(&sql);
        let got = self.collect(&sql, params_from_iter(args))?;
        Ok(got.into_iter().next())
    }
}

/// Turns the bare `?` marks of `sql` into `?3`, `?4`, ... (after `?1` and `?2`).
fn renumber(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 3;
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'?' && !b.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
            out.push_str(&format!("?{n}"));
            n += 1;
        } else {
            out.push(b[i] as char);
        }
        i += 1;
    }
    out
}
