//! Sessions in the engine: starting and ending them, tool calls and prompts from agent
//! hooks, and the listings. The registry the FUSE front attributes with is kept in step
//! with the timeline here.

use serde::Serialize;

use super::engine::{Engine, EngineError};
use crate::attribution::{agent, proc};
use crate::ids::SessionId;
use crate::sys::now_ns;
use crate::timeline::sessions::{NewSession, Session, SessionStats};
use crate::timeline::Actor;

/// A session with what it did, as `session list` and `session show` report it.
#[derive(Clone, Debug, Serialize)]
pub struct SessionInfo {
    #[serde(flatten)]
    pub session: Session,
    #[serde(flatten)]
    pub stats: SessionStats,
    /// Set for `session show`: the files it changed and its prompts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Vec<(i64, String)>>,
}

/// What starts a session.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct StartRequest {
    pub agent: Option<String>,
    pub name: Option<String>,
    /// The agent's own key for the session (hooks).
    pub key: Option<String>,
    /// The root process: it and every descendant belong to the session.
    pub pid: u32,
}

impl Engine {
    /// Fills the attribution registry from the timeline at start: every session is known,
    /// open ones whose root process still lives claim its descendants again, and open ones
    /// whose root is gone are ended now.
    pub(super) fn load_sessions(&self) -> Result<(), EngineError> {
        let reg = self.attrib.sessions();
        let mut tl = self.tl();
        for s in tl.sessions()? {
            let live = match (s.ended_ns, s.root_pid, s.root_start) {
                (None, Some(p), Some(st)) if proc::start_time(p) == Some(st) => Some((p, st)),
                _ => None,
            };
            if s.ended_ns.is_none() && live.is_none() && s.key.is_none() {
                tl.end_session(s.id, now_ns())?;
            }
            reg.add(s.id, live);
            if let (Some(p), Some(st)) = (s.root_pid, s.root_start) {
                reg.remember_root((p, st), s.id);
            }
        }
        Ok(())
    }

    /// Marks `pid` and what it has started as an agent session's (see `attribution::agent`):
    /// from now on they and everything they start are refused the history-destroying
    /// commands, whatever becomes of the session. The daemon can when it runs as root or
    /// as the agent's user, which is whenever the agent could reach its socket.
    pub(super) fn mark_session_root(&self, pid: u32) {
        if let Err(e) = agent::mark_tree(pid) {
            log::warn!("could not mark process {pid} as an agent session's: {e}");
        }
    }

    /// Tells the daemon's record (`.agx/daemon`, see `mount::record`) which sessions are
    /// open, so a daemon killed now is reported with them. Nothing outside the daemon.
    pub fn note_open_sessions(&self) {
        if !crate::mount::record::active() {
            return;
        }
        let open = match self.tl().sessions() {
            Ok(list) => list
                .into_iter()
                .filter(|s| s.ended_ns.is_none())
                .map(|s| crate::mount::record::OpenSession {
                    id: s.id.to_string(),
                    agent: s.agent,
                    name: s.name,
                })
                .collect(),
            Err(e) => {
                log::warn!("listing open sessions for .agx/daemon: {e}");
                return;
            }
        };
        crate::mount::record::set_sessions(open);
    }

    /// Starts a session rooted at `req.pid`. A hook's session (with a key) that exists
    /// already is resumed (its root updated) rather than started twice.
    pub fn session_start(&self, req: &StartRequest) -> Result<Session, EngineError> {
        self.notice_everything()?;
        self.recorder.flush();
        let start = proc::start_time(req.pid).ok_or_else(|| {
            EngineError::Invalid(format!("no process {} to root a session at", req.pid))
        })?;
        let reg = self.attrib.sessions();
        let mut tl = self.tl();
        if let Some(key) = &req.key {
            if let Some(s) = tl.session_by_key(key)? {
                drop(tl);
                self.mark_session_root(req.pid);
                reg.add(s.id, Some((req.pid, start)));
                return Ok(s);
            }
        }
        let at = tl.max_seq()?.max(self.recorder.last_seq());
        let s = tl.start_session(
            &NewSession {
                key: req.key.clone(),
                agent: req.agent.clone(),
                name: req.name.clone(),
                root_pid: Some(req.pid),
                root_start: Some(start),
                command: proc::cmdline(req.pid),
            },
            now_ns(),
            at,
        )?;
        super::keep::auto_checkpoint(&mut tl, at, &format!("session {} started", s.id), s.id)?;
        drop(tl);
        self.mark_session_root(req.pid);
        reg.add(s.id, Some((req.pid, start)));
        self.note_open_sessions();
        Ok(s)
    }

    /// Ends session `id`, or when None the session the caller belongs to.
    pub fn session_end(&self, id: Option<&str>, caller: &Actor) -> Result<Session, EngineError> {
        let s = match id {
            Some(t) => self.find_session(t)?,
            None => {
                let t = caller.session.clone().ok_or_else(|| {
                    EngineError::Invalid(
                        "this process is in no session; name the session to end".into(),
                    )
                })?;
                self.find_session(&t)?
            }
        };
        self.recorder.flush();
        {
            let mut tl = self.tl();
            // Begun events count too: a file the session wrote is committed when the kernel
            // releases it, which can come after the session's last process is gone.
            let at = tl.max_seq()?.max(self.recorder.last_seq());
            tl.end_session(s.id, now_ns())?;
            super::keep::auto_checkpoint(&mut tl, at, &format!("session {} ended", s.id), s.id)?;
        }
        self.attrib.sessions().end(s.id);
        self.note_open_sessions();
        Ok(self
            .tl()
            .session(s.id)?
            .expect("a session is never deleted while ending"))
    }

    pub fn find_session(&self, text: &str) -> Result<Session, EngineError> {
        self.tl()
            .find_session(text)?
            .ok_or_else(|| EngineError::Invalid(format!("no session '{text}'")))
    }

    pub fn session_list(&self) -> Result<Vec<SessionInfo>, EngineError> {
        self.recorder.flush();
        let tl = self.tl();
        tl.sessions()?
            .into_iter()
            .map(|s| {
                let stats = tl.session_stats(s.id)?;
                Ok(SessionInfo {
                    session: s,
                    stats,
                    files: None,
                    prompts: None,
                })
            })
            .collect()
    }

    pub fn session_show(&self, text: &str) -> Result<SessionInfo, EngineError> {
        let s = self.find_session(text)?;
        self.recorder.flush();
        let tl = self.tl();
        let stats = tl.session_stats(s.id)?;
        let mut files: Vec<String> = Vec::new();
        for e in tl.session_events(s.id)? {
            files.push(e.path_str());
            files.extend(e.to_path_str());
        }
        files.sort();
        files.dedup();
        let prompts = tl.prompts(s.id)?;
        Ok(SessionInfo {
            session: s,
            stats,
            files: Some(files),
            prompts: Some(prompts),
        })
    }

    /// A tool call begins in session `id`: changes until it ends link to it.
    pub fn tool_start(
        &self,
        id: SessionId,
        tool: &str,
        tool_use_id: Option<&str>,
    ) -> Result<i64, EngineError> {
        self.recorder.flush();
        let mut tl = self.tl();
        let at = tl.max_seq()?.max(self.recorder.last_seq());
        let call = tl.start_tool_call(id, tool, tool_use_id, now_ns(), at)?;
        super::keep::auto_checkpoint(&mut tl, at, &format!("before {tool} (session {id})"), id)?;
        self.attrib.sessions().set_tool_call(id, Some(call));
        Ok(call)
    }

    pub fn tool_end(
        &self,
        id: SessionId,
        tool_use_id: Option<&str>,
    ) -> Result<Option<i64>, EngineError> {
        let call = self.tl().end_tool_call(id, tool_use_id, now_ns())?;
        self.attrib.sessions().set_tool_call(id, None);
        Ok(call)
    }

    pub fn prompt(&self, id: SessionId, text: &str) -> Result<(), EngineError> {
        Ok(self.tl().add_prompt(id, text, now_ns())?)
    }
}
