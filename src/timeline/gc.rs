//! What gc needs from the timeline: the horizon (the oldest restorable point), dropping
//! every event up to a point in one transaction, and the content the remaining events
//! refer to.
//!
//! Invariant: every point at or after the horizon is restorable in full, because the state
//! at point s needs exactly the events after s (DESIGN.md section 4) and gc only ever drops
//! events at or before the horizon. Points before it are refused by the REF resolver.

use std::collections::HashSet;

use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use super::{Timeline, TimelineError};
use crate::ids::{ContentHash, Seq};

/// The oldest restorable point after a gc, and when it was the current state.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Horizon {
    pub seq: Seq,
    pub time_ns: i64,
}

/// What one gc run did, as recorded in `gc_runs`.
#[derive(Clone, Debug)]
pub struct GcRun<'a> {
    pub time_ns: i64,
    pub horizon: Horizon,
    /// The window it kept, as given (`30d`).
    pub keep: &'a str,
}

impl Timeline {
    /// The horizon of the latest gc, if any ran.
    pub fn horizon(&self) -> Result<Option<Horizon>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT seq, seq_time_ns FROM gc_runs ORDER BY seq DESC, id DESC LIMIT 1",
                [],
                |r| {
                    Ok(Horizon {
                        seq: Seq(r.get(0)?),
                        time_ns: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    /// The oldest restorable point and its time: the gc horizon, else the point before
    /// the first event (with that event's time; None when there is no event).
    pub fn oldest_point(&self) -> Result<(Seq, Option<i64>), TimelineError> {
        if let Some(h) = self.horizon()? {
            return Ok((h.seq, Some(h.time_ns)));
        }
        let t: Option<i64> = self
            .conn()
            .query_row("SELECT MIN(time_ns) FROM events", [], |r| r.get(0))?;
        Ok((Seq(0), t))
    }

    /// When point `k` became the current state: the time of the newest event at or before
    /// it (None when no such event is left).
    pub fn point_time(&self, k: Seq) -> Result<Option<i64>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT time_ns FROM events WHERE seq <= ?1 ORDER BY seq DESC LIMIT 1",
                params![k.0],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// How many events are at or before `k`.
    pub fn count_upto(&self, k: Seq) -> Result<i64, TimelineError> {
        Ok(self.conn().query_row(
            "SELECT COUNT(*) FROM events WHERE seq <= ?1",
            params![k.0],
            |r| r.get(0),
        )?)
    }

    /// Automatic checkpoints before `k` (they would name points no longer restorable).
    pub fn count_auto_before(&self, k: Seq) -> Result<i64, TimelineError> {
        Ok(self.conn().query_row(
            "SELECT COUNT(*) FROM checkpoints WHERE auto = 1 AND seq < ?1",
            params![k.0],
            |r| r.get(0),
        )?)
    }

    /// Drops every event at or before the run's horizon and the automatic checkpoints
    /// before it, and records the run, in one transaction (a crash leaves either all of it
    /// or none). Returns (events, checkpoints) deleted and the run's id.
    pub fn drop_upto(&mut self, run: &GcRun<'_>) -> Result<(i64, i64, i64), TimelineError> {
        let k = run.horizon.seq.0;
        let tx = self.conn.transaction()?;
        let events = tx.execute("DELETE FROM events WHERE seq <= ?1", params![k])? as i64;
        let cps = tx.execute(
            "DELETE FROM checkpoints WHERE auto = 1 AND seq < ?1",
            params![k],
        )? as i64;
        tx.execute(
            "INSERT INTO gc_runs (time_ns, seq, seq_time_ns, keep, events_deleted)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![run.time_ns, k, run.horizon.time_ns, run.keep, events],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok((events, cps, id))
    }

    /// Notes what the object phase of gc run `id` freed.
    /// A person accepted that the events after the timeline's last one up to `recorded`
    /// are lost (see `capture::head`): the points before `recorded` can no longer be
    /// reconstructed, exactly as if gc had dropped them, so `recorded` becomes the oldest
    /// restorable point (and sequence numbers go on after it).
    pub fn accept_loss(&mut self, recorded: Seq, time_ns: i64) -> Result<(), TimelineError> {
        self.conn.execute(
            "INSERT INTO gc_runs (time_ns, seq, seq_time_ns, keep, events_deleted)
             VALUES (?1, ?2, ?1, 'lost history accepted', 0)",
            params![time_ns, recorded.0],
        )?;
        Ok(())
    }

    pub fn gc_objects_done(
        &mut self,
        id: i64,
        objects: u64,
        bytes: u64,
    ) -> Result<(), TimelineError> {
        self.conn().execute(
            "UPDATE gc_runs SET objects_deleted = ?2, bytes_freed = ?3 WHERE id = ?1",
            params![id, objects as i64, bytes as i64],
        )?;
        Ok(())
    }

    /// Every content hash (before, after, replaced target) of the events after `k`.
    pub fn hashes_after(&self, k: Seq) -> Result<HashSet<ContentHash>, TimelineError> {
        let mut st = self.conn().prepare(
            "SELECT before_hash FROM events WHERE seq > ?1 AND before_hash IS NOT NULL
             UNION SELECT after_hash FROM events WHERE seq > ?1 AND after_hash IS NOT NULL
             UNION SELECT target_hash FROM events WHERE seq > ?1 AND target_hash IS NOT NULL",
        )?;
        let rows = st.query_map(params![k.0], |r| r.get::<_, String>(0))?;
        let mut out = HashSet::new();
        for h in rows {
            if let Some(h) = ContentHash::from_hex(&h?) {
                out.insert(h);
            }
        }
        Ok(out)
    }
}

/// A gc compacts the database file when at least this share of its pages is free (1/4)...
const COMPACT_FREE_SHARE: i64 = 4;
/// ...or at least this many bytes are: the rewrite costs time in proportion to what is
/// kept, so a gc that freed little leaves the free pages for SQLite to reuse.
const COMPACT_FREE_BYTES: i64 = 256 << 20;

impl Timeline {
    /// Gives the pages gc freed back to the filesystem, when enough are free: `VACUUM`
    /// rewrites the database without its free pages, then a TRUNCATE checkpoint copies the
    /// WAL (which the VACUUM filled with the whole rewritten database) into the file,
    /// shortens the file and empties the WAL. Returns whether it compacted.
    ///
    /// The caller guarantees that no other connection writes meanwhile (gc holds this
    /// connection and keeps the capture worker paused). Readers on other connections are
    /// safe: in WAL mode the VACUUM is an ordinary write transaction, and they keep their
    /// snapshot. A reader still open when the checkpoint runs only delays it (the busy
    /// timeout) or leaves part of the WAL for a later checkpoint; nothing is lost either
    /// way. Every table has an INTEGER PRIMARY KEY, so VACUUM keeps every row's id.
    pub fn compact(&mut self) -> Result<bool, TimelineError> {
        let conn = self.conn();
        let pages: i64 = conn.pragma_query_value(None, "page_count", |r| r.get(0))?;
        let free: i64 = conn.pragma_query_value(None, "freelist_count", |r| r.get(0))?;
        let page_size: i64 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
        if free == 0 || (free * COMPACT_FREE_SHARE < pages && free * page_size < COMPACT_FREE_BYTES)
        {
            return Ok(false);
        }
        conn.execute_batch("VACUUM")?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(true)
    }
}
