//! `blame`: for each line of a file as it is now, the change that last touched it, found by
//! replaying the file's recorded versions (following renames back to its creation).

use std::collections::HashMap;

use serde::Serialize;

use super::engine::{Engine, EngineError};
use super::scope::Scope;
use crate::ids::{Seq, SessionId};
use crate::timeline::{Event, Kind};

/// Who last changed one line. The origin fields are None for lines older than the
/// history agx recorded.
#[derive(Clone, Debug, Serialize)]
pub struct BlameLine {
    pub line: usize,
    pub text: String,
    pub seq: Option<i64>,
    pub session: Option<String>,
    pub agent: Option<String>,
    pub time_ns: Option<i64>,
    pub process: Option<String>,
    pub pid: Option<u32>,
}

/// One recorded version of a file: the event that made it (None: the version before the
/// first recorded event), the name the file had, and the point at which it existed.
type Version = (Option<Event>, Vec<u8>, Seq);

/// Bytes that make a version binary (blame compares lines of text).
fn is_binary(b: &[u8]) -> bool {
    b[..b.len().min(8192)].contains(&0)
}

impl Engine {
    /// The file's versions oldest first: the name it had and the event that made each
    /// (None for the version before the first recorded event).
    fn versions(&self, scope: &Scope, path: &[u8]) -> Result<Vec<Version>, EngineError> {
        let tl = self.tl();
        let mut name = path.to_vec();
        let mut upper = Seq(tl.max_seq()?.0 + 1);
        let mut chain: Vec<(Event, Vec<u8>)> = Vec::new();
        'names: loop {
            let on = match scope {
                Scope::Main => tl.events_on(&name, upper)?,
                Scope::Branch { branch, .. } => tl.branch_events_on(branch.id, &name, upper)?,
            };
            for e in on {
                let replaced = e
                    .target_before
                    .as_ref()
                    .is_some_and(|t| t.kind != Kind::Absent);
                if e.to_path.as_deref() == Some(name.as_slice()) && replaced {
                    // Written elsewhere and renamed over `name` (an editor's atomic save):
                    // the document's previous version is the one it replaced.
                    chain.push((e.clone(), name.clone()));
                    continue;
                }
                if e.to_path.as_deref() == Some(name.as_slice()) {
                    // Moved (or exchanged) into a free `name`: earlier it was `e.path`.
                    let from = e.path.clone();
                    chain.push((e.clone(), name.clone()));
                    name = from;
                    upper = e.seq;
                    continue 'names;
                }
                let born = e.before.kind == Kind::Absent;
                let gone = e.after.kind == Kind::Absent || e.to_path.is_some();
                if gone {
                    // The file traced was made at `name` after this event.
                    break 'names;
                }
                chain.push((e.clone(), name.clone()));
                if born {
                    break 'names;
                }
            }
            break;
        }
        chain.reverse();
        // The version before the first recorded change, under the name it had then
        // (`name` ends as the oldest name the walk reached).
        let mut out: Vec<Version> = Vec::new();
        match chain.first() {
            Some((first, _)) => {
                let fresh = first.before.kind == Kind::Absent && first.to_path.is_none();
                if !fresh {
                    out.push((None, name, Seq(first.seq.0 - 1)));
                }
            }
            None => out.push((None, path.to_vec(), upper)),
        }
        for (e, n) in chain {
            let s = e.seq;
            out.push((Some(e), n, s));
        }
        Ok(out)
    }

    /// Who last changed each line of `path`, in the main tree or a branch (where lines the
    /// branch did not change have no origin: they are its base's).
    pub fn blame(&self, path: &[u8], branch: Option<&str>) -> Result<Vec<BlameLine>, EngineError> {
        let scope = self.scope(branch)?;
        if let Scope::Main = scope {
            self.recorder.notice(path);
        }
        self.recorder.flush();
        let name = String::from_utf8_lossy(path).into_owned();
        let now = self.tl().max_seq()?;
        let current = self.bytes_in(&scope, now, path, "now")?;
        if is_binary(&current) {
            return Err(EngineError::Invalid(format!(
                "{name} is a binary file: blame works on text"
            )));
        }
        let mut agents: HashMap<String, Option<String>> = HashMap::new();
        let mut agent_of = |s: &Option<String>| -> Option<String> {
            let s = s.as_ref()?;
            agents
                .entry(s.clone())
                .or_insert_with(|| {
                    let id = SessionId(s.parse().ok()?);
                    self.tl().session(id).ok().flatten().and_then(|x| x.agent)
                })
                .clone()
        };
        let mut text: Vec<String> = Vec::new();
        let mut origin: Vec<Option<BlameLine>> = Vec::new();
        for (ev, n, point) in self.versions(&scope, path)? {
            let bytes = match self.bytes_in(&scope, point, &n, &format!("event:{}", point.0 + 1)) {
                Ok(b) => b,
                Err(EngineError::Absent { .. }) => Vec::new(),
                Err(e) => return Err(e),
            };
            if is_binary(&bytes) {
                return Err(EngineError::Invalid(format!(
                    "{name} was a binary file at event {}: blame works on text",
                    point.0
                )));
            }
            let new = String::from_utf8_lossy(&bytes).into_owned();
            let new_lines: Vec<String> = new.split_inclusive('\n').map(String::from).collect();
            let stamp = ev.as_ref().map(|e| BlameLine {
                line: 0,
                text: String::new(),
                seq: Some(e.seq.0),
                session: e.session.clone(),
                agent: agent_of(&e.session),
                time_ns: Some(e.time_ns),
                process: Some(e.actor.process.clone()),
                pid: Some(e.actor.pid),
            });
            let old_refs: Vec<&str> = text.iter().map(String::as_str).collect();
            let new_refs: Vec<&str> = new_lines.iter().map(String::as_str).collect();
            let diff =
                similar::capture_diff_slices(similar::Algorithm::Myers, &old_refs, &new_refs);
            let mut next: Vec<Option<BlameLine>> = vec![None; new_lines.len()];
            for op in diff {
                match op {
                    similar::DiffOp::Equal {
                        old_index,
                        new_index,
                        len,
                    } => {
                        next[new_index..new_index + len]
                            .clone_from_slice(&origin[old_index..old_index + len]);
                    }
                    similar::DiffOp::Insert {
                        new_index, new_len, ..
                    }
                    | similar::DiffOp::Replace {
                        new_index, new_len, ..
                    } => {
                        for slot in next.iter_mut().skip(new_index).take(new_len) {
                            *slot = stamp.clone();
                        }
                    }
                    similar::DiffOp::Delete { .. } => {}
                }
            }
            text = new_lines;
            origin = next;
        }
        // The last recorded version is the live file unless a change is in flight.
        let cur = String::from_utf8_lossy(&current).into_owned();
        let cur_lines: Vec<&str> = cur.split_inclusive('\n').collect();
        Ok(cur_lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let o = text
                    .get(i)
                    .filter(|t| t.as_str() == *l)
                    .and(origin.get(i).cloned().flatten());
                let mut b = o.unwrap_or(BlameLine {
                    line: 0,
                    text: String::new(),
                    seq: None,
                    session: None,
                    agent: None,
                    time_ns: None,
                    process: None,
                    pid: None,
                });
                b.line = i + 1;
                b.text = l.trim_end_matches('\n').to_string();
                b
            })
            .collect())
    }
}
