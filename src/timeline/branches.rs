//! Branches: copy-on-write views of the tree that agents work in aside from the main tree
//! (see `crate::branches`). A branch is one row (creating it copies and scans nothing:
//! its base is a point of the main tree's timeline), and the changes made in it are
//! events of their own (`branch_events`, sharing the main tree's sequence numbers).

use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use super::{Event, Timeline, TimelineError};
use crate::ids::{BranchId, Seq, SessionId};

#[derive(Clone, Debug, Serialize)]
pub struct Branch {
    pub id: BranchId,
    pub name: String,
    /// The point of the main tree the branch started from.
    pub base: Seq,
    pub created_ns: i64,
    /// Who made it: a process description ("agx[1234]" or "sh[77] in session 3").
    pub creator: Option<String>,
    pub session: Option<SessionId>,
    /// The REF it was made from, as given (`--from`), if any.
    pub from_ref: Option<String>,
    /// When it was deleted (its layer and history stay until gc).
    pub deleted_ns: Option<i64>,
    /// What became of it: merged into main, switched in.
    pub note: Option<String>,
}

const COLUMNS: &str =
    "id, name, base_seq, created_ns, creator, session, from_ref, deleted_ns, note";

fn row(r: &Row<'_>) -> rusqlite::Result<Branch> {
    Ok(Branch {
        id: BranchId(r.get(0)?),
        name: r.get(1)?,
        base: Seq(r.get(2)?),
        created_ns: r.get(3)?,
        creator: r.get(4)?,
        session: r.get::<_, Option<i64>>(5)?.map(SessionId),
        from_ref: r.get(6)?,
        deleted_ns: r.get(7)?,
        note: r.get(8)?,
    })
}

impl Timeline {
    /// Records a new branch. A live branch of the same name is a constraint error:
    /// callers check first with [`Timeline::branch_by_name`] to say so plainly.
    #[allow(clippy::too_many_arguments)]
    pub fn add_branch(
        &mut self,
        name: &str,
        base: Seq,
        created_ns: i64,
        creator: Option<&str>,
        session: Option<SessionId>,
        from_ref: Option<&str>,
    ) -> Result<Branch, TimelineError> {
        self.conn().execute(
            "INSERT INTO branches (name, base_seq, created_ns, creator, session, from_ref)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                name,
                base.0,
                created_ns,
                creator,
                session.map(|s| s.0),
                from_ref
            ],
        )?;
        let id = BranchId(self.conn().last_insert_rowid());
        Ok(self.branch(id)?.expect("just inserted"))
    }

    pub fn branch(&self, id: BranchId) -> Result<Option<Branch>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM branches WHERE id = ?1"),
                params![id.0],
                row,
            )
            .optional()?)
    }

    /// The live (not deleted) branch called `name`.
    pub fn branch_by_name(&self, name: &str) -> Result<Option<Branch>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM branches WHERE name = ?1 AND deleted_ns IS NULL"),
                params![name],
                row,
            )
            .optional()?)
    }

    /// Branches, oldest first; deleted ones too with `all`.
    pub fn branches(&self, all: bool) -> Result<Vec<Branch>, TimelineError> {
        let sql = if all {
            format!("SELECT {COLUMNS} FROM branches ORDER BY id")
        } else {
            format!("SELECT {COLUMNS} FROM branches WHERE deleted_ns IS NULL ORDER BY id")
        };
        let mut st = self.conn().prepare_cached(&sql)?;
        let rows = st.query_map([], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn rename_branch(&mut self, id: BranchId, name: &str) -> Result<(), TimelineError> {
        self.conn().execute(
            "UPDATE branches SET name = ?2 WHERE id = ?1",
            params![id.0, name],
        )?;
        Ok(())
    }

    /// Marks a branch deleted (its layer and events stay until gc).
    pub fn delete_branch(&mut self, id: BranchId, time_ns: i64) -> Result<(), TimelineError> {
        self.conn().execute(
            "UPDATE branches SET deleted_ns = ?2 WHERE id = ?1",
            params![id.0, time_ns],
        )?;
        Ok(())
    }

    pub fn set_branch_note(&mut self, id: BranchId, note: &str) -> Result<(), TimelineError> {
        self.conn().execute(
            "UPDATE branches SET note = ?2 WHERE id = ?1",
            params![id.0, note],
        )?;
        Ok(())
    }

    /// Events made in `branch` after `seq`, oldest first.
    pub fn branch_events_after(
        &self,
        branch: BranchId,
        seq: Seq,
    ) -> Result<Vec<Event>, TimelineError> {
        self.collect(
            "SELECT seq, body FROM branch_events WHERE branch = ?1 AND seq > ?2 ORDER BY seq",
            params![branch.0, seq.0],
        )
    }

    /// `log` of a branch's events (see [`Timeline::log`]).
    pub fn branch_log_filtered(
        &self,
        branch: BranchId,
        f: &super::Filter,
    ) -> Result<Vec<Event>, TimelineError> {
        let after = f.after.map(|s| s.0).unwrap_or(0);
        let limit = f.limit.map(|l| l as i64).unwrap_or(-1);
        match &f.path {
            None => self.branch_log(branch, Seq(after), limit),
            Some(p) => {
                let mut under = p.clone();
                under.push(b'/');
                let mut upper = p.clone();
                upper.push(b'0'); // the byte after '/'
                self.collect(
                    "SELECT seq, body FROM branch_events WHERE branch = ?6 AND seq > ?1 AND (
                        path = ?2 OR to_path = ?2
                        OR (path >= ?3 AND path < ?4) OR (to_path >= ?3 AND to_path < ?4))
                     ORDER BY seq DESC LIMIT ?5",
                    params![after, p, under, upper, limit, branch.0],
                )
            }
        }
    }

    /// Events of `branch` on exactly `path` (as source or destination) before `before`,
    /// newest first (see [`Timeline::events_on`]).
    pub fn branch_events_on(
        &self,
        branch: BranchId,
        path: &[u8],
        before: Seq,
    ) -> Result<Vec<Event>, TimelineError> {
        self.collect(
            "SELECT seq, body FROM branch_events WHERE branch = ?3 AND seq < ?2
                 AND (path = ?1 OR to_path = ?1)
             ORDER BY seq DESC",
            params![path, before.0, branch.0],
        )
    }

    /// Events made in `branch`, newest first, at most `limit` (all: -1), after `after`.
    pub fn branch_log(
        &self,
        branch: BranchId,
        after: Seq,
        limit: i64,
    ) -> Result<Vec<Event>, TimelineError> {
        self.collect(
            "SELECT seq, body FROM branch_events WHERE branch = ?1 AND seq > ?2
             ORDER BY seq DESC LIMIT ?3",
            params![branch.0, after.0, limit],
        )
    }

    /// Every content hash (before, after, replaced target) the events of the live
    /// branches name: gc keeps them (a branch's history is kept while it lives).
    pub fn branch_hashes(
        &self,
    ) -> Result<std::collections::HashSet<crate::ids::ContentHash>, TimelineError> {
        let mut st = self.conn().prepare(
            "SELECT before_hash FROM branch_events JOIN branches ON branches.id = branch
                 WHERE deleted_ns IS NULL AND before_hash IS NOT NULL
             UNION SELECT after_hash FROM branch_events JOIN branches ON branches.id = branch
                 WHERE deleted_ns IS NULL AND after_hash IS NOT NULL
             UNION SELECT target_hash FROM branch_events JOIN branches ON branches.id = branch
                 WHERE deleted_ns IS NULL AND target_hash IS NOT NULL",
        )?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        let mut out = std::collections::HashSet::new();
        for h in rows {
            if let Some(h) = crate::ids::ContentHash::from_hex(&h?) {
                out.insert(h);
            }
        }
        Ok(out)
    }

    /// Forgets a deleted branch for good (gc): its events and its row, in one transaction.
    /// Returns how many events went.
    pub fn drop_branch(&mut self, id: BranchId) -> Result<i64, TimelineError> {
        let tx = self.conn.transaction()?;
        let n = tx.execute("DELETE FROM branch_events WHERE branch = ?1", params![id.0])? as i64;
        tx.execute(
            "DELETE FROM branches WHERE id = ?1 AND deleted_ns IS NOT NULL",
            params![id.0],
        )?;
        tx.commit()?;
        Ok(n)
    }

    /// How many events the branch has and how many paths they name, and the time of the
    /// last one.
    pub fn branch_activity(
        &self,
        branch: BranchId,
    ) -> Result<(i64, i64, Option<i64>), TimelineError> {
        Ok(self.conn().query_row(
            "SELECT COUNT(*), COUNT(DISTINCT path), MAX(time_ns) FROM branch_events
             WHERE branch = ?1",
            params![branch.0],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?)
    }
}
