//! What agent hooks need from the timeline beyond sessions.rs: reopening a session an
//! agent resumes, and the tool calls still open in a session.

use rusqlite::{params, OptionalExtension};

use super::{Timeline, TimelineError};
use crate::ids::SessionId;

impl Timeline {
    /// An ended session is running again (an agent resumed it under the same key).
    pub fn reopen_session(&mut self, id: SessionId) -> Result<(), TimelineError> {
        self.conn().execute(
            "UPDATE sessions SET ended_ns = NULL WHERE id = ?1",
            params![id.0],
        )?;
        Ok(())
    }

    /// The most recently started tool call of the session that has not ended.
    pub fn open_tool_call(&self, session: SessionId) -> Result<Option<i64>, TimelineError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT id FROM tool_calls WHERE session = ?1 AND ended_ns IS NULL
                 ORDER BY id DESC LIMIT 1",
                params![session.0],
                |r| r.get(0),
            )
            .optional()?)
    }
}
