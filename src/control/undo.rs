//! Undoing one session: which paths a session restore covers, which of them someone else
//! changed since (conflicts), and `oops`, which undoes the latest agent session (or burst of
//! changes) and, run again right after, redoes what it undid.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::engine::{Engine, EngineError};
use super::scope::Scope;
use crate::ids::Seq;
use crate::restore::plan::Conflict;
use crate::timeline::refs::Ref;
use crate::timeline::Event;

/// What a session restore does with paths someone else changed after the session began.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnConflict {
    /// List them and change nothing.
    #[default]
    Refuse,
    /// Restore the other paths, leave those alone.
    Skip,
    /// Restore them too.
    Force,
}

/// The paths a restore covers and the conflicts among them.
pub struct Covered {
    pub paths: Vec<Vec<u8>>,
    pub conflicts: Vec<Conflict>,
}

/// Notes of the events an oops makes start with this.
pub const OOPS_NOTE: &str = "oops: ";

/// Changes more than this apart are separate bursts (for `oops` without sessions).
pub const BURST_GAP_NS: i64 = 60 * 1_000_000_000;

/// `p` is `o` or a path below it.
fn at_or_below(p: &[u8], o: &[u8]) -> bool {
    p == o || (p.len() > o.len() && p.starts_with(o) && p[o.len()] == b'/')
}

/// One of the paths is the other or below it.
pub(crate) fn related(a: &[u8], b: &[u8]) -> bool {
    at_or_below(a, b) || at_or_below(b, a)
}

/// Git's derived state: the index (a cache of the tree plus stat data, rewritten by a mere
/// `git status`) and lock files. A later change to these by someone else is not a conflict:
/// they follow the refs and files a session restore brings back.
fn derived(p: &[u8]) -> bool {
    p == b".git/index" || (p.starts_with(b".git/") && p.ends_with(b".lock"))
}

fn touched(events: &[Event]) -> BTreeSet<Vec<u8>> {
    let mut s = BTreeSet::new();
    for e in events {
        s.insert(e.path.clone());
        if let Some(t) = &e.to_path {
            s.insert(t.clone());
        }
    }
    s
}

/// What `oops` would do.
#[derive(Clone, Debug, Serialize)]
pub struct OopsTarget {
    /// The REF it restores to, limited to `paths`.
    pub at: String,
    /// What it undoes, in words.
    pub what: String,
    pub session: Option<String>,
    pub redo: bool,
    #[serde(skip)]
    pub paths: Vec<Vec<u8>>,
}

impl Engine {
    /// For `session:ID` (and no explicit paths beyond it): the paths the session touched,
    /// limited to `only` when given, and those someone else changed after its first event.
    /// None for every other REF.
    pub fn session_scope(&self, r: &str, only: &[Vec<u8>]) -> Result<Option<Covered>, EngineError> {
        let Ok(Ref::Session(id)) = Ref::parse(r) else {
            return Ok(None);
        };
        self.recorder.flush();
        let tl = self.tl();
        let Some(s) = tl.find_session(&id)? else {
            return Ok(None); // resolving the REF reports it
        };
        let point = tl.session_point(&s)?;
        let mine = tl.session_events(s.id)?;
        let paths: Vec<Vec<u8>> = touched(&mine)
            .into_iter()
            .filter(|p| only.is_empty() || only.iter().any(|o| at_or_below(p, o)))
            .collect();
        let sid = s.id.to_string();
        let mut conflicts: Vec<Conflict> = Vec::new();
        for e in tl.events_after(point)? {
            if e.session.as_deref() == Some(sid.as_str()) {
                continue;
            }
            for q in std::iter::once(&e.path).chain(e.to_path.iter()) {
                for p in paths.iter().filter(|p| related(p, q) && !derived(p)) {
                    conflicts.retain(|c| &c.path != p);
                    conflicts.push(Conflict {
                        path: p.clone(),
                        seq: e.seq,
                        session: e.session.clone(),
                        process: e.actor.process.clone(),
                    });
                }
            }
        }
        conflicts.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Some(Covered { paths, conflicts }))
    }

    /// What `oops` undoes: the latest agent session, or, when an oops came after the last
    /// change any session made, that oops (a redo); with no sessions at all, the latest
    /// burst of changes. Changes outside sessions (the user's, `git status` refreshing the
    /// index) do not count as "after".
    pub fn oops_target(&self, branch: Option<&str>) -> Result<Option<OopsTarget>, EngineError> {
        let scope = self.scope(branch)?;
        if let Scope::Branch { branch, .. } = &scope {
            return self.branch_oops_target(branch);
        }
        self.recorder.flush();
        let tl = self.tl();
        let last = tl.max_seq()?;
        let Some(latest) = tl.get(last)? else {
            return Ok(None);
        };
        let is_oops = |e: &Event| e.note.as_deref().is_some_and(|n| n.starts_with(OOPS_NOTE));
        let anchor = tl.find_back(|e| is_oops(e) || e.session.is_some())?;
        if let Some(o) = anchor.filter(|e| is_oops(e)) {
            let note = o.note.clone();
            // The run of events this oops made: same note, back to its first.
            let mut run = vec![o.clone()];
            let mut seq = o.seq.0 - 1;
            while seq > 0 {
                match tl.get(Seq(seq))? {
                    Some(e) if e.note == note => run.push(e),
                    Some(_) => break,
                    None => {}
                }
                seq -= 1;
            }
            let first = run.iter().map(|e| e.seq).min().unwrap_or(o.seq);
            return Ok(Some(OopsTarget {
                at: format!("event:{}", first.0),
                what: format!(
                    "redo what the last oops undid (events {}..{})",
                    first.0, o.seq.0
                ),
                session: None,
                redo: true,
                paths: touched(&run).into_iter().collect(),
            }));
        }
        if let Some(id) = tl.latest_active_session()? {
            let s = tl.session(id)?;
            let label = s
                .map(|s| {
                    let mut l = format!("session {}", s.id);
                    if let Some(a) = s.agent {
                        l.push_str(&format!(" ({a}"));
                        if let Some(n) = s.name {
                            l.push_str(&format!(", {n}"));
                        }
                        l.push(')');
                    }
                    l
                })
                .unwrap_or_else(|| format!("session {id}"));
            return Ok(Some(OopsTarget {
                at: format!("session:{id}"),
                what: format!("undo {label}"),
                session: Some(id.to_string()),
                redo: false,
                paths: Vec::new(),
            }));
        }
        // No sessions: the latest burst, changes no more than BURST_GAP_NS apart.
        let mut first = latest.clone();
        let mut seq = last.0 - 1;
        while seq > 0 {
            if let Some(e) = tl.get(Seq(seq))? {
                if first.time_ns - e.time_ns > BURST_GAP_NS {
                    break;
                }
                first = e;
            }
            seq -= 1;
        }
        Ok(Some(OopsTarget {
            at: format!("event:{}", first.seq.0),
            what: format!(
                "undo the latest burst of changes (events {}..{})",
                first.seq.0, last.0
            ),
            session: None,
            redo: false,
            paths: Vec::new(),
        }))
    }
}

impl Engine {
    /// [`Engine::oops_target`] in a branch, from the branch's own events: the last oops's
    /// run (a redo), else the latest session's changes in the branch (from its first
    /// event there, limited to the paths it touched), else the latest burst.
    fn branch_oops_target(
        &self,
        b: &crate::timeline::branches::Branch,
    ) -> Result<Option<OopsTarget>, EngineError> {
        self.recorder.flush();
        let events = self.tl().branch_log(b.id, b.base, -1)?;
        let Some(latest) = events.first().cloned() else {
            return Ok(None);
        };
        let is_oops = |e: &Event| e.note.as_deref().is_some_and(|n| n.starts_with(OOPS_NOTE));
        let anchor = events.iter().find(|e| is_oops(e) || e.session.is_some());
        let run_of = |pred: &dyn Fn(&Event) -> bool, from: usize| -> Vec<Event> {
            events[from..]
                .iter()
                .take_while(|e| pred(e))
                .cloned()
                .collect()
        };
        if let Some(a) = anchor {
            let at = events.iter().position(|e| e.seq == a.seq).unwrap_or(0);
            let (run, what, session, redo) = if is_oops(a) {
                let note = a.note.clone();
                (
                    run_of(&|e: &Event| e.note == note, at),
                    "redo what the last oops in the branch undid".to_string(),
                    None,
                    true,
                )
            } else {
                let s = a.session.clone();
                let run: Vec<Event> = events.iter().filter(|e| e.session == s).cloned().collect();
                (
                    run,
                    format!(
                        "undo session {} in branch {}",
                        s.clone().unwrap_or_default(),
                        b.name
                    ),
                    s,
                    false,
                )
            };
            let first = run.iter().map(|e| e.seq).min().unwrap_or(a.seq);
            return Ok(Some(OopsTarget {
                at: format!("event:{}", first.0),
                what,
                session,
                redo,
                paths: touched(&run).into_iter().collect(),
            }));
        }
        // No sessions: the latest burst, changes no more than BURST_GAP_NS apart.
        let mut first = latest.clone();
        for e in &events[1..] {
            if first.time_ns - e.time_ns > BURST_GAP_NS {
                break;
            }
            first = e.clone();
        }
        Ok(Some(OopsTarget {
            at: format!("event:{}", first.seq.0),
            what: format!(
                "undo the latest burst of changes in branch {} (events {}..{})",
                b.name, first.seq.0, latest.seq.0
            ),
            session: None,
            redo: false,
            paths: Vec::new(),
        }))
    }
}
