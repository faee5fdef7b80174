//! Agent sessions in the timeline: who started them, when, with which root process, and
//! the tool calls and prompts agent hooks report. Events name their session by id.

use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use super::{Event, Timeline, TimelineError};
use crate::ids::{Seq, SessionId};

/// One recorded session.
#[derive(Clone, Debug, Serialize)]
pub struct Session {
    pub id: SessionId,
    /// The agent's own id for it (Claude Code's `session_id`), when a hook started it.
    pub key: Option<String>,
    pub agent: Option<String>,
    pub name: Option<String>,
    pub root_pid: Option<u32>,
    /// The root process's start time (clock ticks since boot), which tells it from a later
    /// process with the same pid.
    #[serde(skip)]
    pub root_start: Option<u64>,
    pub command: Option<String>,
    pub started_ns: i64,
    pub ended_ns: Option<i64>,
    /// The point when the session started.
    pub start_seq: Seq,
}

/// What a new session is.
#[derive(Clone, Debug, Default)]
pub struct NewSession {
    pub key: Option<String>,
    pub agent: Option<String>,
    pub name: Option<String>,
    pub root_pid: Option<u32>,
    pub root_start: Option<u64>,
    pub command: Option<String>,
}

/// A tool call an agent hook reported.
#[derive(Clone, Debug, Serialize)]
pub struct ToolCall {
    pub id: i64,
    pub session: SessionId,
    pub tool: String,
    pub tool_use_id: Option<String>,
    pub started_ns: i64,
    pub ended_ns: Option<i64>,
}

/// Counts of what a session did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SessionStats {
    pub events: i64,
    pub files_changed: i64,
    pub first_seq: Option<i64>,
    pub last_seq: Option<i64>,
    pub tool_calls: i64,
    pub prompts: i64,
}

const COLUMNS: &str =
    "id, key, agent, name, root_pid, root_start, command, started_ns, ended_ns, start_seq";

fn row(r: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: SessionId(r.get(0)?),
        key: r.get(1)?,
        agent: r.get(2)?,
        name: r.get(3)?,
        root_pid: r.get(4)?,
        root_start: r.get::<_, Option<i64>>(5)?.map(|x| x as u64),
        command: r.get(6)?,
        started_ns: r.get(7)?,
        ended_ns: r.get(8)?,
        start_seq: Seq(r.get(9)?),
    })
}

impl Timeline {
    /// Records a new session starting now, at point `at`.
    pub fn start_session(
        &mut self,
        s: &NewSession,
        now_ns: i64,
        at: Seq,
    ) -> Result<Session, TimelineError> {
        self.conn().execute(
            "INSERT INTO sessions (key, agent, name, root_pid, root_start, command, started_ns, start_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                s.key,
                s.agent,
                s.name,
                s.root_pid,
                s.root_start.map(|x| x as i64),
                s.command,
                now_ns,
                at.0
            ],
        )?;
        let id = SessionId(self.conn().last_insert_rowid());
        Ok(self.session(id)?.expect("the session just inserted"))
    }

    pub fn end_session(&mut self, id: SessionId, now_ns: i64) -> Result<(), TimelineError> {
        self.conn().execute(
            "UPDATE sessions SET ended_ns = ?2 WHERE id = ?1 AND ended_ns IS NULL",
            params![id.0, now_ns],
        )?;
        Ok(())
    }

    pub fn session(&self, id: SessionId) -> Result<Option<Session>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"),
                params![id.0],
                row,
            )
            .optional()?)
    }

    /// The session an agent knows by `key`.
    pub fn session_by_key(&self, key: &str) -> Result<Option<Session>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM sessions WHERE key = ?1"),
                params![key],
                row,
            )
            .optional()?)
    }

    /// The session named by `text`: its id, or the agent's key for it.
    pub fn find_session(&self, text: &str) -> Result<Option<Session>, TimelineError> {
        if let Ok(n) = text.parse::<i64>() {
            if let Some(s) = self.session(SessionId(n))? {
                return Ok(Some(s));
            }
        }
        self.session_by_key(text)
    }

    /// Every session, oldest first.
    pub fn sessions(&self) -> Result<Vec<Session>, TimelineError> {
        let mut st = self
            .conn()
            .prepare_cached(&format!("SELECT {COLUMNS} FROM sessions ORDER BY id"))?;
        let rows = st.query_map([], row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Sessions not yet ended.
    pub fn open_sessions(&self) -> Result<Vec<Session>, TimelineError> {
        Ok(self
            .sessions()?
            .into_iter()
            .filter(|s| s.ended_ns.is_none())
            .collect())
    }

    pub fn session_stats(&self, id: SessionId) -> Result<SessionStats, TimelineError> {
        let key = id.to_string();
        let (events, first, last): (i64, Option<i64>, Option<i64>) = self.conn().query_row(
            "SELECT COUNT(*), MIN(seq), MAX(seq) FROM events WHERE session = ?1",
            params![key],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let files: i64 = self.conn().query_row(
            "SELECT COUNT(*) FROM (SELECT path FROM events WHERE session = ?1
             UNION SELECT to_path FROM events WHERE session = ?1 AND to_path IS NOT NULL)",
            params![key],
            |r| r.get(0),
        )?;
        let tool_calls: i64 = self.conn().query_row(
            "SELECT COUNT(*) FROM tool_calls WHERE session = ?1",
            params![id.0],
            |r| r.get(0),
        )?;
        let prompts: i64 = self.conn().query_row(
            "SELECT COUNT(*) FROM prompts WHERE session = ?1",
            params![id.0],
            |r| r.get(0),
        )?;
        Ok(SessionStats {
            events,
            files_changed: files,
            first_seq: first,
            last_seq: last,
            tool_calls,
            prompts,
        })
    }

    /// The events of a session, oldest first.
    pub fn session_events(&self, id: SessionId) -> Result<Vec<Event>, TimelineError> {
        self.collect(
            "SELECT seq, body FROM events WHERE session = ?1 ORDER BY seq",
            params![id.to_string()],
        )
    }

    /// The point just before the session's first event (its start point when it made none).
    pub fn session_point(&self, s: &Session) -> Result<Seq, TimelineError> {
        let first: Option<i64> = self.conn().query_row(
            "SELECT MIN(seq) FROM events WHERE session = ?1",
            params![s.id.to_string()],
            |r| r.get(0),
        )?;
        Ok(match first {
            Some(f) => Seq(f - 1),
            None => s.start_seq,
        })
    }

    /// The latest session that recorded events, with its last event.
    pub fn latest_active_session(&self) -> Result<Option<SessionId>, TimelineError> {
        let s: Option<String> = self
            .conn()
            .query_row(
                "SELECT session FROM events WHERE session IS NOT NULL ORDER BY seq DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?;
        Ok(s.and_then(|s| s.parse().ok()).map(SessionId))
    }

    pub fn start_tool_call(
        &mut self,
        session: SessionId,
        tool: &str,
        tool_use_id: Option<&str>,
        now_ns: i64,
        at: Seq,
    ) -> Result<i64, TimelineError> {
        self.conn().execute(
            "INSERT INTO tool_calls (session, tool, tool_use_id, started_ns, start_seq)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![session.0, tool, tool_use_id, now_ns, at.0],
        )?;
        Ok(self.conn().last_insert_rowid())
    }

    /// Ends the session's open tool call with `tool_use_id` (the latest open one when
    /// None); returns its id.
    pub fn end_tool_call(
        &mut self,
        session: SessionId,
        tool_use_id: Option<&str>,
        now_ns: i64,
    ) -> Result<Option<i64>, TimelineError> {
        let id: Option<i64> = self
            .conn()
            .query_row(
                "SELECT id FROM tool_calls WHERE session = ?1 AND ended_ns IS NULL
                 AND (?2 IS NULL OR tool_use_id = ?2) ORDER BY id DESC LIMIT 1",
                params![session.0, tool_use_id],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = id {
            self.conn().execute(
                "UPDATE tool_calls SET ended_ns = ?2 WHERE id = ?1",
                params![id, now_ns],
            )?;
        }
        Ok(id)
    }

    pub fn tool_call(&self, id: i64) -> Result<Option<ToolCall>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT id, session, tool, tool_use_id, started_ns, ended_ns FROM tool_calls WHERE id = ?1",
                params![id],
                |r| {
                    Ok(ToolCall {
                        id: r.get(0)?,
                        session: SessionId(r.get(1)?),
                        tool: r.get(2)?,
                        tool_use_id: r.get(3)?,
                        started_ns: r.get(4)?,
                        ended_ns: r.get(5)?,
                    })
                },
            )
            .optional()?)
    }

    pub fn add_prompt(
        &mut self,
        session: SessionId,
        text: &str,
        now_ns: i64,
    ) -> Result<(), TimelineError> {
        self.conn().execute(
            "INSERT INTO prompts (session, time_ns, text) VALUES (?1, ?2, ?3)",
            params![session.0, now_ns, text],
        )?;
        Ok(())
    }

    /// The session's prompts, oldest first: (time, text).
    pub fn prompts(&self, session: SessionId) -> Result<Vec<(i64, String)>, TimelineError> {
        let mut st = self
            .conn()
            .prepare_cached("SELECT time_ns, text FROM prompts WHERE session = ?1 ORDER BY id")?;
        let rows = st.query_map(params![session.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
