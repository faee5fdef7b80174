//! `agx verify`: every object against its hash, every event's references, the schema.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::engine::{Engine, EngineError};
use crate::ids::ContentHash;
use crate::store::ObjectCheck;
use crate::timeline::{Event, Kind, Op, SCHEMA_VERSION};

/// One problem found. `kind` is one of: `corrupt-object`, `broken-base`,
/// `unreadable-object`, `missing-object`, `schema`, `lost-history`, `layer` (a branch's
/// layer object agx cannot read as it wrote it), `orphan-layer`.
#[derive(Clone, Debug, Serialize)]
pub struct Problem {
    pub kind: &'static str,
    /// The object's hash, when the problem is about an object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Events that need the object (for missing or unreadable objects).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<i64>,
    pub detail: String,
    /// Moved to `.agx/quarantine/` by --repair.
    pub quarantined: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    pub objects: usize,
    pub events: usize,
    pub schema_version: i64,
    pub problems: Vec<Problem>,
}

/// The objects an event needs to bring back the state before it (what the restore model
/// reads). After-images are not among them: they may be hash-only by design, and the
/// content they name is the live file or a later event's before-image.
fn needed(e: &Event, max_size: u64) -> Vec<ContentHash> {
    let mut out = Vec::new();
    let file_hash = |s: &crate::timeline::ObjState| {
        (s.kind == Kind::File)
            .then_some(s.hash)
            .flatten()
            .filter(|_| s.meta.as_ref().is_none_or(|m| m.size <= max_size))
    };
    match e.op {
        Op::Write | Op::Truncate | Op::Fallocate | Op::Unlink if e.captured => {
            if let Some(h) = file_hash(&e.before) {
                out.push(h);
            }
        }
        Op::Rename => {
            // A replaced target's content was kept unless larger than the capture limit.
            if let Some(h) = e.target_before.as_ref().and_then(file_hash) {
                out.push(h);
            }
        }
        _ => {}
    }
    out
}

impl Engine {
    /// Checks the store and the timeline; with `repair`, moves corrupt objects to
    /// `.agx/quarantine/` (and changes nothing else).
    pub fn verify_all(&self, repair: bool) -> Result<VerifyReport, EngineError> {
        self.recorder.flush();
        let mut problems = Vec::new();
        if let Some((have, recorded)) = self.recorder.lost() {
            let accepted = repair && self.recorder.accept_loss().is_ok();
            problems.push(Problem {
                kind: "lost-history",
                object: None,
                events: Vec::new(),
                detail: format!(
                    "the timeline ends at event {have} but events up to {recorded} were recorded (a deleted timeline.db-wal, or a database put back from an older copy); {}",
                    if accepted {
                        "the loss is accepted: agx records again from here"
                    } else {
                        "agx refuses to record until `agx verify --repair` accepts the loss"
                    }
                ),
                quarantined: false,
            });
        }

        let (schema_version, integrity, events) = {
            let tl = self.tl();
            let v = tl.schema_version()?;
            let integrity: Vec<String> = {
                let mut st = tl
                    .conn()
                    .prepare("PRAGMA integrity_check")
                    .map_err(crate::timeline::TimelineError::from)?;
                let rows = st
                    .query_map([], |r| r.get::<_, String>(0))
                    .map_err(crate::timeline::TimelineError::from)?;
                rows.collect::<Result<_, _>>()
                    .map_err(crate::timeline::TimelineError::from)?
            };
            let mut events = tl.events_after(crate::ids::Seq(0))?;
            // The live branches' histories need their objects as the main tree's does.
            for b in tl.branches(false)? {
                events.extend(tl.branch_events_after(b.id, crate::ids::Seq(0))?);
            }
            (v, integrity, events)
        };
        if schema_version != SCHEMA_VERSION {
            problems.push(schema(format!(
                "timeline schema version {schema_version}, expected {SCHEMA_VERSION}"
            )));
        }
        if integrity != ["ok"] {
            for line in integrity {
                problems.push(schema(format!("timeline database: {line}")));
            }
        }

        let objects = self.store.list()?;
        let present: BTreeSet<ContentHash> = objects.iter().copied().collect();
        let mut needed_by: BTreeMap<ContentHash, Vec<i64>> = BTreeMap::new();
        let max_size = self.recorder.config().max_size;
        for e in &events {
            for h in needed(e, max_size) {
                needed_by.entry(h).or_default().push(e.seq.0);
            }
        }
        for h in &objects {
            let (kind, detail) = match self.store.check(h) {
                ObjectCheck::Ok => continue,
                ObjectCheck::Corrupt(d) => ("corrupt-object", d),
                ObjectCheck::BrokenBase(d) => ("broken-base", d),
                ObjectCheck::Unreadable(d) => ("unreadable-object", d),
            };
            let quarantined = repair && kind == "corrupt-object" && {
                match self.store.quarantine(h) {
                    Ok(()) => true,
                    Err(e) => {
                        log::warn!("cannot quarantine {h}: {e}");
                        false
                    }
                }
            };
            problems.push(Problem {
                kind,
                object: Some(h.to_hex()),
                events: needed_by.get(h).cloned().unwrap_or_default(),
                detail,
                quarantined,
            });
        }
        for (h, seqs) in &needed_by {
            // Content waiting in staging for room in the store is kept, not missing.
            if !present.contains(h) && !self.store.has(h) {
                problems.push(Problem {
                    kind: "missing-object",
                    object: Some(h.to_hex()),
                    events: seqs.clone(),
                    detail: "not in the store, but events need it".into(),
                    quarantined: false,
                });
            }
        }
        problems.extend(self.verify_layers()?);
        Ok(VerifyReport {
            objects: objects.len(),
            events: events.len(),
            schema_version,
            problems,
        })
    }

    /// The branches' layers: every object's marker readable (`branches::marker`), and no
    /// layer left of a branch gc forgot (`orphan-layer`: the next gc removes it).
    fn verify_layers(&self) -> Result<Vec<Problem>, EngineError> {
        let mut problems = Vec::new();
        let known = self.tl().branches(true)?;
        for id in crate::branches::layer::orphans(&self.agx, &known) {
            problems.push(Problem {
                kind: "orphan-layer",
                object: None,
                events: Vec::new(),
                detail: format!(
                    ".agx/layers/{}: the layer of a branch that is gone; the next `agx gc` removes it",
                    id.0
                ),
                quarantined: false,
            });
        }
        for b in known.iter().filter(|b| b.deleted_ns.is_none()) {
            for (path, why) in crate::branches::layer::check(&self.agx, b.id) {
                problems.push(Problem {
                    kind: "layer",
                    object: None,
                    events: Vec::new(),
                    detail: format!(
                        "branch {}: {}: {why}",
                        b.name,
                        String::from_utf8_lossy(&path)
                    ),
                    quarantined: false,
                });
            }
        }
        Ok(problems)
    }
}

fn schema(detail: String) -> Problem {
    Problem {
        kind: "schema",
        object: None,
        events: Vec::new(),
        detail,
        quarantined: false,
    }
}
