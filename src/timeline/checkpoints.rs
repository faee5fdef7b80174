//! Checkpoints (named points of the timeline) and pins (points gc keeps whole).
//! A checkpoint is one row: creating it copies and scans nothing.

use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use super::{Timeline, TimelineError};
use crate::ids::{Seq, SessionId};

#[derive(Clone, Debug, Serialize)]
pub struct Checkpoint {
    pub id: i64,
    /// None for automatic checkpoints, which are known by id only.
    pub name: Option<String>,
    pub seq: Seq,
    pub time_ns: i64,
    pub message: Option<String>,
    /// Made by agx itself (session start and end, before a tool call).
    pub auto: bool,
    pub session: Option<SessionId>,
}

const COLUMNS: &str = "id, name, seq, time_ns, message, auto, session";

fn row(r: &Row<'_>) -> rusqlite::Result<Checkpoint> {
    Ok(Checkpoint {
        id: r.get(0)?,
        name: r.get(1)?,
        seq: Seq(r.get(2)?),
        time_ns: r.get(3)?,
        message: r.get(4)?,
        auto: r.get(5)?,
        session: r.get::<_, Option<i64>>(6)?.map(SessionId),
    })
}

/// A pinned point.
#[derive(Clone, Debug, Serialize)]
pub struct Pin {
    pub seq: Seq,
    /// The REF it was pinned by.
    pub by: String,
    pub time_ns: i64,
}

impl Timeline {
    /// Records a checkpoint at `seq`. A duplicate name is a constraint error: callers check
    /// first with [`Timeline::checkpoint_by_name`] to say so plainly.
    pub fn add_checkpoint(
        &mut self,
        name: Option<&str>,
        seq: Seq,
        time_ns: i64,
        message: Option<&str>,
        auto: bool,
        session: Option<SessionId>,
    ) -> Result<Checkpoint, TimelineError> {
        self.conn().execute(
            "INSERT INTO checkpoints (name, seq, time_ns, message, auto, session)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![name, seq.0, time_ns, message, auto, session.map(|s| s.0)],
        )?;
        let id = self.conn().last_insert_rowid();
        Ok(self.checkpoint(id)?.expect("the checkpoint just inserted"))
    }

    pub fn checkpoint(&self, id: i64) -> Result<Option<Checkpoint>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM checkpoints WHERE id = ?1"),
                params![id],
                row,
            )
            .optional()?)
    }

    pub fn checkpoint_by_name(&self, name: &str) -> Result<Option<Checkpoint>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM checkpoints WHERE name = ?1"),
                params![name],
                row,
            )
            .optional()?)
    }

    /// Checkpoints oldest first; automatic ones only when `all`.
    pub fn checkpoints(&self, all: bool) -> Result<Vec<Checkpoint>, TimelineError> {
        let mut st = self.conn().prepare_cached(&format!(
            "SELECT {COLUMNS} FROM checkpoints WHERE ?1 OR auto = 0 ORDER BY seq, id"
        ))?;
        let rows = st.query_map(params![all], row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn delete_checkpoint(&mut self, id: i64) -> Result<(), TimelineError> {
        self.conn()
            .execute("DELETE FROM checkpoints WHERE id = ?1", params![id])?;
        Ok(())
    }

    pub fn pin(&mut self, seq: Seq, by: &str, time_ns: i64) -> Result<(), TimelineError> {
        self.conn().execute(
            "INSERT OR REPLACE INTO pins (seq, ref, time_ns) VALUES (?1, ?2, ?3)",
            params![seq.0, by, time_ns],
        )?;
        Ok(())
    }

    /// Removes the pin at `seq`; false when there was none.
    pub fn unpin(&mut self, seq: Seq) -> Result<bool, TimelineError> {
        Ok(self
            .conn()
            .execute("DELETE FROM pins WHERE seq = ?1", params![seq.0])?
            > 0)
    }

    pub fn pins(&self) -> Result<Vec<Pin>, TimelineError> {
        let mut st = self
            .conn()
            .prepare_cached("SELECT seq, ref, time_ns FROM pins ORDER BY seq")?;
        let rows = st.query_map([], |r| {
            Ok(Pin {
                seq: Seq(r.get(0)?),
                by: r.get(1)?,
                time_ns: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
