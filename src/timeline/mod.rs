//! The timeline: `.agx/timeline.db`, SQLite in WAL mode. Events (indexed by path and
//! sequence, and by time), mount records, and a schema version with migrations.
//!
//! Each event row keeps its queryable fields as columns and the whole event as JSON
//! (`body`), so adding a field needs no migration.

pub mod branches;
pub mod checkpoints;
pub mod event;
pub mod gc;
mod history;
mod hooks;
pub mod refs;
pub mod sessions;
mod vfs;

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use thiserror::Error;

pub use event::{Actor, Event, Kind, Meta, ObjId, ObjState, Op};

use crate::ids::{ContentHash, Seq};

#[derive(Debug, Error)]
pub enum TimelineError {
    #[error("timeline database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("timeline database has schema version {found}, newer than this agx ({supported}); upgrade agx")]
    TooNew { found: i64, supported: i64 },
    #[error("timeline event {seq} is unreadable: {reason}")]
    BadEvent { seq: i64, reason: String },
    #[error("cannot register the SQLite VFS (code {0})")]
    Vfs(i32),
}

/// Schema migrations; entry `i` moves the database from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: events and mounts.
    "CREATE TABLE events (
        seq INTEGER PRIMARY KEY,
        time_ns INTEGER NOT NULL,
        op TEXT NOT NULL,
        path BLOB NOT NULL,
        to_path BLOB,
        before_hash TEXT,
        after_hash TEXT,
        target_hash TEXT,
        size_before INTEGER,
        size_after INTEGER,
        pid INTEGER,
        process TEXT,
        session TEXT,
        body TEXT NOT NULL
    );
    CREATE INDEX events_path ON events(path, seq);
    CREATE INDEX events_to_path ON events(to_path, seq) WHERE to_path IS NOT NULL;
    CREATE INDEX events_time ON events(time_ns);
    CREATE TABLE mounts (
        id INTEGER PRIMARY KEY,
        started_ns INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        pid INTEGER
    );",
    // 2: agent sessions, their tool calls and prompts; checkpoints; pins.
    "CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        key TEXT UNIQUE,
        agent TEXT,
        name TEXT,
        root_pid INTEGER,
        root_start INTEGER,
        command TEXT,
        started_ns INTEGER NOT NULL,
        ended_ns INTEGER,
        start_seq INTEGER NOT NULL
    );
    CREATE TABLE tool_calls (
        id INTEGER PRIMARY KEY,
        session INTEGER NOT NULL,
        tool TEXT NOT NULL,
        tool_use_id TEXT,
        started_ns INTEGER NOT NULL,
        ended_ns INTEGER,
        start_seq INTEGER NOT NULL
    );
    CREATE INDEX tool_calls_session ON tool_calls(session, tool_use_id);
    CREATE TABLE prompts (
        id INTEGER PRIMARY KEY,
        session INTEGER NOT NULL,
        time_ns INTEGER NOT NULL,
        text TEXT NOT NULL
    );
    CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        name TEXT UNIQUE,
        seq INTEGER NOT NULL,
        time_ns INTEGER NOT NULL,
        message TEXT,
        auto INTEGER NOT NULL DEFAULT 0,
        session INTEGER
    );
    CREATE TABLE pins (
        seq INTEGER PRIMARY KEY,
        ref TEXT NOT NULL,
        time_ns INTEGER NOT NULL
    );
    CREATE INDEX events_session ON events(session, seq) WHERE session IS NOT NULL;",
    // 3: gc runs; the latest one's `seq` is the oldest restorable point.
    "CREATE TABLE gc_runs (
        id INTEGER PRIMARY KEY,
        time_ns INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        seq_time_ns INTEGER NOT NULL,
        keep TEXT NOT NULL,
        events_deleted INTEGER NOT NULL,
        objects_deleted INTEGER NOT NULL DEFAULT 0,
        bytes_freed INTEGER NOT NULL DEFAULT 0
    );",
    // 4: branches, and the events made in them (the same columns as `events`, plus the
    // branch; sequence numbers are shared with the main tree's events).
    "CREATE TABLE branches (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        base_seq INTEGER NOT NULL,
        created_ns INTEGER NOT NULL,
        creator TEXT,
        session INTEGER,
        from_ref TEXT,
        deleted_ns INTEGER,
        note TEXT
    );
    CREATE UNIQUE INDEX branches_live_name ON branches(name) WHERE deleted_ns IS NULL;
    CREATE TABLE branch_events (
        seq INTEGER PRIMARY KEY,
        branch INTEGER NOT NULL,
        time_ns INTEGER NOT NULL,
        op TEXT NOT NULL,
        path BLOB NOT NULL,
        to_path BLOB,
        before_hash TEXT,
        after_hash TEXT,
        target_hash TEXT,
        size_before INTEGER,
        size_after INTEGER,
        pid INTEGER,
        process TEXT,
        session TEXT,
        body TEXT NOT NULL
    );
    CREATE INDEX branch_events_path ON branch_events(branch, path, seq);
    CREATE INDEX branch_events_to_path ON branch_events(branch, to_path, seq)
        WHERE to_path IS NOT NULL;
    CREATE INDEX branch_events_session ON branch_events(session, seq) WHERE session IS NOT NULL;",
    // 5: the states of files with several names, by object: a change through one name
    // leaves the others' last events behind, so whether such a file was changed outside
    // agx is asked of its object's newest state (`capture::outside`). Partial: only those
    // events are indexed.
    "CREATE INDEX events_linked ON events(json_extract(body, '$.after.meta.ino'), seq)
        WHERE json_extract(body, '$.after.meta.nlink') > 1;",
];

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Which events `log` wants, newest first.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Events on this path, or below it when it is a directory.
    pub path: Option<Vec<u8>>,
    /// Only events after this point (sequence numbers greater than it).
    pub after: Option<Seq>,
    pub limit: Option<usize>,
}

pub struct Timeline {
    conn: Connection,
}

impl Timeline {
    /// Opens the database of a project that is not mounted, by path.
    pub fn open_path(db: &Path) -> Result<Timeline, TimelineError> {
        let conn = Connection::open_with_flags(
            db,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        Self::setup(conn)
    }

    /// Opens `timeline.db` in the directory `agx_dir` through the descriptor, never by a
    /// path into the mount (see `vfs`). The descriptor must stay open while the timeline
    /// is used.
    pub fn open_in(agx_dir: impl AsFd) -> Result<Timeline, TimelineError> {
        vfs::register().map_err(TimelineError::Vfs)?;
        let path = format!("/proc/self/fd/{}/timeline.db", agx_dir.as_fd().as_raw_fd());
        let conn = Connection::open_with_flags_and_vfs(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            vfs::NAME,
        )?;
        Self::setup(conn)
    }

    fn setup(conn: Connection) -> Result<Timeline, TimelineError> {
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // Events are made durable by the capture journal; the database may lag behind it.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let mut t = Timeline { conn };
        t.migrate()?;
        Ok(t)
    }

    fn migrate(&mut self) -> Result<(), TimelineError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(TimelineError::TooNew {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = self.conn.transaction()?;
            tx.execute_batch(m)?;
            tx.pragma_update(None, "user_version", i as i64 + 1)?;
            tx.commit()?;
        }
        Ok(())
    }

    /// SQLite's quick check of every page; None when the database is sound, else the
    /// first problems it reports, on one line.
    pub fn quick_check(&self) -> Result<Option<String>, TimelineError> {
        let mut st = self.conn.prepare("PRAGMA quick_check(5)")?;
        let rows: Vec<String> = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<_, _>>()?;
        Ok((rows != ["ok"]).then(|| rows.join("; ").replace('\n', " ")))
    }

    pub fn schema_version(&self) -> Result<i64, TimelineError> {
        Ok(self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Inserts events (replacing any with the same sequence number) in one transaction.
    /// The capture worker calls this for every batch: the statements, BEGIN and COMMIT
    /// included, are prepared once per connection.
    pub fn insert<'a>(
        &mut self,
        events: impl IntoIterator<Item = &'a Event>,
    ) -> Result<(), TimelineError> {
        self.conn.prepare_cached("BEGIN")?.execute([])?;
        let done = self
            .insert_rows(events)
            .and_then(|()| Ok(self.conn.prepare_cached("COMMIT")?.execute([]).map(drop)?));
        if done.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        done
    }

    fn insert_rows<'a>(
        &self,
        events: impl IntoIterator<Item = &'a Event>,
    ) -> Result<(), TimelineError> {
        let mut st = self.conn.prepare_cached(
            "INSERT OR REPLACE INTO events
             (seq, time_ns, op, path, to_path, before_hash, after_hash, target_hash,
              size_before, size_after, pid, process, session, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )?;
        let mut bst = self.conn.prepare_cached(
            "INSERT OR REPLACE INTO branch_events
             (seq, time_ns, op, path, to_path, before_hash, after_hash, target_hash,
              size_before, size_after, pid, process, session, body, branch)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )?;
        for e in events {
            let body = serde_json::to_string(e).expect("events serialize");
            if let Some(b) = e.branch {
                bst.execute(params![
                    e.seq.0,
                    e.time_ns,
                    e.op.as_str(),
                    e.path,
                    e.to_path,
                    e.before.hash.map(|h| h.to_hex()),
                    e.after.hash.map(|h| h.to_hex()),
                    e.target_before
                        .as_ref()
                        .and_then(|t| t.hash)
                        .map(|h| h.to_hex()),
                    e.before.size().map(|s| s as i64),
                    e.after.size().map(|s| s as i64),
                    e.actor.pid,
                    e.actor.process,
                    e.session,
                    body,
                    b.0,
                ])?;
                continue;
            }
            st.execute(params![
                e.seq.0,
                e.time_ns,
                e.op.as_str(),
                e.path,
                e.to_path,
                e.before.hash.map(|h| h.to_hex()),
                e.after.hash.map(|h| h.to_hex()),
                e.target_before
                    .as_ref()
                    .and_then(|t| t.hash)
                    .map(|h| h.to_hex()),
                e.before.size().map(|s| s as i64),
                e.after.size().map(|s| s as i64),
                e.actor.pid,
                e.actor.process,
                e.session,
                body,
            ])?;
        }
        Ok(())
    }

    /// Changes the after-state of event `seq`, if it is recorded.
    pub fn amend_after(
        &mut self,
        seq: Seq,
        change: impl FnOnce(&mut ObjState),
    ) -> Result<(), TimelineError> {
        let Some(mut e) = self.get(seq)? else {
            return Ok(());
        };
        change(&mut e.after);
        let body = serde_json::to_string(&e).expect("events serialize");
        self.conn.execute(
            "UPDATE events SET body = ?2, size_after = ?3, after_hash = ?4 WHERE seq = ?1",
            params![
                seq.0,
                body,
                e.after.size().map(|s| s as i64),
                e.after.hash.map(|h| h.to_hex())
            ],
        )?;
        Ok(())
    }

    pub fn delete(&mut self, seq: Seq) -> Result<(), TimelineError> {
        self.conn
            .execute("DELETE FROM events WHERE seq = ?1", params![seq.0])?;
        Ok(())
    }

    /// The connection, for the query modules of this crate (sessions, checkpoints).
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    fn decode(seq: i64, body: String) -> Result<Event, TimelineError> {
        serde_json::from_str(&body).map_err(|e| TimelineError::BadEvent {
            seq,
            reason: e.to_string(),
        })
    }

    pub(crate) fn collect(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Vec<Event>, TimelineError> {
        let mut st = self.conn.prepare_cached(sql)?;
        let rows = st.query_map(p, |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, body) = row?;
            out.push(Self::decode(seq, body)?);
        }
        Ok(out)
    }

    /// Event `seq`, of the main tree or of a branch.
    pub fn get(&self, seq: Seq) -> Result<Option<Event>, TimelineError> {
        let row: Option<(i64, String)> = self
            .conn
            .query_row(
                "SELECT seq, body FROM events WHERE seq = ?1
                 UNION ALL SELECT seq, body FROM branch_events WHERE seq = ?1",
                params![seq.0],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        row.map(|(s, b)| Self::decode(s, b)).transpose()
    }

    /// The highest recorded sequence number (0 when empty). gc may have dropped every
    /// event up to its horizon: the horizon still counts, so sequence numbers are never
    /// reused.
    pub fn max_seq(&self) -> Result<Seq, TimelineError> {
        let m: Option<i64> = self.conn.query_row(
            "SELECT MAX(m) FROM (SELECT MAX(seq) AS m FROM events
                                 UNION ALL SELECT MAX(seq) FROM branch_events
                                 UNION ALL SELECT MAX(seq) FROM gc_runs)",
            [],
            |r| r.get(0),
        )?;
        Ok(Seq(m.unwrap_or(0)))
    }

    /// Events newest first, filtered.
    pub fn log(&self, f: &Filter) -> Result<Vec<Event>, TimelineError> {
        let after = f.after.map(|s| s.0).unwrap_or(0);
        let limit = f.limit.map(|l| l as i64).unwrap_or(-1);
        match &f.path {
            None => self.collect(
                "SELECT seq, body FROM events WHERE seq > ?1 ORDER BY seq DESC LIMIT ?2",
                params![after, limit],
            ),
            Some(p) => {
                let mut under = p.clone();
                under.push(b'/');
                let mut upper = p.clone();
                upper.push(b'0'); // the byte after '/'
                self.collect(
                    "SELECT seq, body FROM events WHERE seq > ?1 AND (
                        path = ?2 OR to_path = ?2
                        OR (path >= ?3 AND path < ?4) OR (to_path >= ?3 AND to_path < ?4))
                     ORDER BY seq DESC LIMIT ?5",
                    params![after, p, under, upper, limit],
                )
            }
        }
    }

    /// Events on exactly `path` (as source or destination) before `before`, newest first.
    pub fn events_on(&self, path: &[u8], before: Seq) -> Result<Vec<Event>, TimelineError> {
        self.collect(
            "SELECT seq, body FROM events WHERE seq < ?2 AND (path = ?1 OR to_path = ?1)
             ORDER BY seq DESC",
            params![path, before.0],
        )
    }

    /// The newest event for which `pred` holds, reading newest first and stopping there.
    pub fn find_back(
        &self,
        mut pred: impl FnMut(&Event) -> bool,
    ) -> Result<Option<Event>, TimelineError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT seq, body FROM events ORDER BY seq DESC")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let e = Self::decode(r.get(0)?, r.get(1)?)?;
            if pred(&e) {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// Every event after `seq`, oldest first.
    pub fn events_after(&self, seq: Seq) -> Result<Vec<Event>, TimelineError> {
        self.collect(
            "SELECT seq, body FROM events WHERE seq > ?1 ORDER BY seq",
            params![seq.0],
        )
    }

    /// Events after `from` up to and including `to`, oldest first.
    pub fn events_between(&self, from: Seq, to: Seq) -> Result<Vec<Event>, TimelineError> {
        self.collect(
            "SELECT seq, body FROM events WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
            params![from.0, to.0],
        )
    }

    /// The last point at or before `time_ns`: the highest sequence number recorded then.
    pub fn seq_at_time(&self, time_ns: i64) -> Result<Seq, TimelineError> {
        let m: Option<i64> = self.conn.query_row(
            "SELECT MAX(seq) FROM events WHERE time_ns <= ?1",
            params![time_ns],
            |r| r.get(0),
        )?;
        Ok(Seq(m.unwrap_or(0)))
    }

    /// The newest recorded content of `path` (its last after-image), for patch-from bases.
    pub fn last_hash_of(&self, path: &[u8]) -> Result<Option<ContentHash>, TimelineError> {
        let h: Option<String> = self
            .conn
            .prepare_cached(
                "SELECT after_hash FROM events WHERE path = ?1 AND after_hash IS NOT NULL
                 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![path], |r| r.get(0))
            .optional()?;
        Ok(h.and_then(|h| ContentHash::from_hex(&h)))
    }

    /// Records a mount start; returns its id.
    pub fn record_mount(
        &mut self,
        started_ns: i64,
        first_seq: Seq,
        pid: u32,
    ) -> Result<i64, TimelineError> {
        self.conn.execute(
            "INSERT INTO mounts (started_ns, first_seq, pid) VALUES (?1, ?2, ?3)",
            params![started_ns, first_seq.0, pid],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The point at which the latest mount started (the default FROM of `diff`).
    pub fn last_mount_point(&self) -> Result<Option<Seq>, TimelineError> {
        Ok(self
            .conn
            .query_row(
                "SELECT first_seq FROM mounts ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .map(Seq))
    }

    pub fn count(&self) -> Result<i64, TimelineError> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))?)
    }

    /// Every content hash the events refer to.
    pub fn referenced_hashes(&self) -> Result<Vec<(i64, ContentHash)>, TimelineError> {
        let mut st = self.conn.prepare(
            "SELECT seq, before_hash FROM events WHERE before_hash IS NOT NULL
             UNION ALL SELECT seq, target_hash FROM events WHERE target_hash IS NOT NULL",
        )?;
        let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for r in rows {
            let (seq, h) = r?;
            if let Some(h) = ContentHash::from_hex(&h) {
                out.push((seq, h));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
