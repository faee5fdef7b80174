//! Keeping history: checkpoints, pins and gc, in the engine (daemon and local CLI alike).
//!
//! gc's rule: the oldest kept point K is the earliest of the window's start, every pin and
//! every checkpoint a person made. The state at point s needs every event after s (DESIGN.md
//! section 4), so gc keeps every event after K, drops the ones at or before K in one
//! transaction, then deletes the objects no remaining event refers to, except those the
//! recorder may still refer to and the bases of every kept patch object. A crash between the
//! two phases leaves only unreferenced objects, which the next gc deletes.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::engine::{read_config, Engine, EngineError};
use crate::attribution::agent;
use crate::capture::config::parse_duration;
use crate::ids::{ContentHash, Seq, SessionId};
use crate::sys::now_ns;
use crate::timeline::checkpoints::{Checkpoint, Pin};
use crate::timeline::gc::{GcRun, Horizon};
use crate::timeline::refs::{self, Ref};
use crate::timeline::{Actor, Timeline};

/// Names `agx checkpoint` takes as subcommands: never checkpoint names.
const RESERVED: &[&str] = &["list", "delete"];

/// What gc did (or, with dry_run, would do).
#[derive(Clone, Debug, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    /// The window kept, as given.
    pub keep: String,
    /// The oldest restorable point before and after.
    pub horizon_before: i64,
    pub horizon: i64,
    pub horizon_time_ns: Option<i64>,
    /// What held the horizon back from the window's start, if anything did.
    pub held_by: Option<String>,
    pub events_deleted: i64,
    pub checkpoints_deleted: i64,
    pub objects_deleted: u64,
    pub bytes_freed: u64,
    /// Size of the timeline database (`timeline.db` plus its WAL) before and after; gc
    /// compacts it when it freed enough of it (see `Timeline::compact`).
    pub db_bytes_before: u64,
    pub db_bytes_after: u64,
    /// Deleted branches whose history and layer this gc dropped (or would drop).
    pub branches_dropped: Vec<String>,
    /// Bytes their layers took.
    pub layer_bytes_freed: u64,
}

impl Engine {
    /// Whether process `pid` is part of an agent session, and why: its own or an
    /// ancestor's session mark, environment, or being the root of any session ever
    /// recorded (the timeline's and, in the daemon, every root a hook moved a session to).
    pub fn agent_evidence(&self, pid: u32) -> Option<agent::Evidence> {
        let recorded: HashMap<(u32, u64), SessionId> = match self.tl().sessions() {
            Ok(list) => list
                .into_iter()
                .filter_map(|s| Some(((s.root_pid?, s.root_start?), s.id)))
                .collect(),
            Err(e) => {
                log::warn!("reading the sessions' roots: {e}");
                HashMap::new()
            }
        };
        let reg = self.attrib.sessions();
        agent::evidence(pid, &|p, st| {
            recorded
                .get(&(p, st))
                .copied()
                .or_else(|| reg.root_ever((p, st)))
        })
    }

    /// Refuses `what`, a command that destroys history or stops recording (gc, checkpoint
    /// delete, unpin, unmount, branch delete), to a caller in any agent session, ended or
    /// not, whatever its environment (invariant 3). `caller` is the requesting process:
    /// the control socket's peer, or this process for a command on an unmounted project.
    /// Every such command calls this before it changes anything.
    pub fn refuse_to_agents(&self, caller: &Actor, what: &str) -> Result<(), EngineError> {
        let found = match &caller.session {
            Some(s) => Some(agent::Evidence::Attributed { session: s.clone() }),
            None => self.agent_evidence(caller.pid),
        };
        match found {
            Some(e) => Err(EngineError::Invalid(agent::refusal(what, caller.pid, &e))),
            None => Ok(()),
        }
    }
}

fn caller_session(caller: &Actor) -> Option<SessionId> {
    caller
        .session
        .as_deref()
        .and_then(|s| s.parse().ok())
        .map(SessionId)
}

/// Why `name` cannot name a checkpoint, if it cannot.
fn name_problem(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!(
            "'{name}' cannot name a checkpoint: it is a subcommand of agx checkpoint"
        ));
    }
    name_rules(name, "a checkpoint")
}

/// Why `name` cannot name `what` (a checkpoint, a branch) by the rules every name of a
/// point or tree follows, if it cannot: it must not read as any other REF.
pub(super) fn name_rules(name: &str, what: &str) -> Option<String> {
    if refs::valid_name(name) {
        return None;
    }
    let why = if name.is_empty() {
        "it is empty"
    } else if name.contains('/') {
        "it contains '/'"
    } else if name.starts_with('-') {
        "it starts with '-'"
    } else if name.starts_with('.') {
        "it starts with '.'"
    } else if name.contains(':') {
        "it contains ':'"
    } else if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        "it contains white space or control characters"
    } else if name.len() > 200 {
        "it is longer than 200 bytes"
    } else {
        "it reads as another REF (now, a time like 10m or 2026-01-01, event:N, cp:ID, session:ID)"
    };
    Some(format!("'{name}' cannot name {what}: {why}"))
}

/// Records an automatic checkpoint at `at` (session start and end, before a tool call):
/// listed with `--all` only, known as cp:ID, dropped by gc once older than its horizon.
pub(super) fn auto_checkpoint(
    tl: &mut Timeline,
    at: Seq,
    message: &str,
    session: SessionId,
) -> Result<(), EngineError> {
    tl.add_checkpoint(None, at, now_ns(), Some(message), true, Some(session))?;
    Ok(())
}

impl Engine {
    /// Marks the current point: one row, no copy and no scan of the tree.
    pub fn checkpoint_create(
        &self,
        name: Option<&str>,
        message: Option<&str>,
        caller: &Actor,
    ) -> Result<Checkpoint, EngineError> {
        if let Some(n) = name {
            if let Some(why) = name_problem(n) {
                return Err(EngineError::Invalid(why));
            }
        }
        self.notice_everything()?;
        self.recorder.flush();
        let mut tl = self.tl();
        if let Some(n) = name {
            if let Some(c) = tl.checkpoint_by_name(n)? {
                return Err(EngineError::Invalid(format!(
                    "a checkpoint named '{n}' exists already (cp:{}); delete it first or choose another name",
                    c.id
                )));
            }
        }
        let at = tl.max_seq()?;
        Ok(tl.add_checkpoint(name, at, now_ns(), message, false, caller_session(caller))?)
    }

    pub fn checkpoint_list(&self, all: bool) -> Result<Vec<Checkpoint>, EngineError> {
        Ok(self.tl().checkpoints(all)?)
    }

    /// The checkpoint `text` names: `cp:ID` or a name.
    fn find_checkpoint(&self, text: &str) -> Result<Checkpoint, EngineError> {
        let tl = self.tl();
        let found = match Ref::parse(text) {
            Ok(Ref::Checkpoint(id)) => tl.checkpoint(id)?,
            _ => tl.checkpoint_by_name(text)?,
        };
        found.ok_or_else(|| EngineError::Invalid(format!("no checkpoint '{text}'")))
    }

    pub fn checkpoint_delete(&self, text: &str, caller: &Actor) -> Result<Checkpoint, EngineError> {
        self.refuse_to_agents(caller, "agx checkpoint delete")?;
        let c = self.find_checkpoint(text)?;
        self.tl().delete_checkpoint(c.id)?;
        Ok(c)
    }

    /// Pins the point `text` names: gc keeps it restorable in full.
    pub fn pin(&self, text: &str) -> Result<Pin, EngineError> {
        let seq = self.point(text)?;
        let mut tl = self.tl();
        tl.pin(seq, text, now_ns())?;
        Ok(tl
            .pins()?
            .into_iter()
            .find(|p| p.seq == seq)
            .expect("the pin just made"))
    }

    /// Removes the pin made as `text`, or else the pin at the point `text` names.
    pub fn unpin(&self, text: &str, caller: &Actor) -> Result<Pin, EngineError> {
        self.refuse_to_agents(caller, "agx unpin")?;
        let pins = self.tl().pins()?;
        let pin = match pins.iter().find(|p| p.by == text) {
            Some(p) => p.clone(),
            None => {
                let seq = self.point(text)?;
                pins.into_iter().find(|p| p.seq == seq).ok_or_else(|| {
                    EngineError::Invalid(format!("no pin at '{text}' (see agx pin --list)"))
                })?
            }
        };
        self.tl().unpin(pin.seq)?;
        Ok(pin)
    }

    pub fn pins(&self) -> Result<Vec<Pin>, EngineError> {
        Ok(self.tl().pins()?)
    }

    /// Drops history older than `keep` (default: `history.keep` of the config) except what
    /// pinned points and checkpoints need.
    pub fn gc(
        &self,
        keep: Option<&str>,
        dry_run: bool,
        caller: &Actor,
    ) -> Result<GcReport, EngineError> {
        // A dry run changes nothing and tells an agent no more than `agx log` does.
        if !dry_run {
            self.refuse_to_agents(caller, "agx gc")?;
        }
        let keep = match keep {
            Some(k) => k.to_string(),
            None => read_config(&self.agx)?.history.keep,
        };
        let keep_ns = parse_duration(&keep).ok_or_else(|| {
            EngineError::Invalid(format!(
                "'{keep}' is not a duration (use e.g. 30s, 10m, 2h, 30d, 1w)"
            ))
        })?;
        // No object is written (nor event recorded) until this is dropped.
        let _paused = self.recorder.pause();
        let now = now_ns();
        let mut tl = self.tl();
        let before = tl.horizon()?;
        let h0 = before.map(|h| h.seq).unwrap_or(Seq(0));
        let mut k = tl.seq_at_time(now - keep_ns)?;
        let mut held_by = None;
        for p in tl.pins()? {
            if p.seq < k {
                k = p.seq;
                held_by = Some(format!("pin {}", p.by));
            }
        }
        for c in tl.checkpoints(false)? {
            if c.seq < k {
                k = c.seq;
                held_by = Some(match &c.name {
                    Some(n) => format!("checkpoint {n}"),
                    None => format!("checkpoint cp:{}", c.id),
                });
            }
        }
        // A live branch reads its base from the main tree's history: it stays restorable.
        let all_branches = tl.branches(true)?;
        for b in all_branches.iter().filter(|b| b.deleted_ns.is_none()) {
            if b.base < k {
                k = b.base;
                held_by = Some(format!("branch {}", b.name));
            }
        }
        let dropped: Vec<&crate::timeline::branches::Branch> = all_branches
            .iter()
            .filter(|b| b.deleted_ns.is_some())
            .collect();
        if k <= h0 {
            k = h0;
            held_by = None;
        }
        let k_time = match tl.point_time(k)? {
            Some(t) => t,
            None => before.map(|h| h.time_ns).unwrap_or(0),
        };
        let horizon = Horizon {
            seq: k,
            time_ns: k_time,
        };
        let mut report = GcReport {
            dry_run,
            keep: keep.clone(),
            horizon_before: h0.0,
            horizon: k.0,
            horizon_time_ns: (k > Seq(0) || before.is_some()).then_some(k_time),
            held_by,
            events_deleted: tl.count_upto(k)?,
            checkpoints_deleted: tl.count_auto_before(k)?,
            objects_deleted: 0,
            bytes_freed: 0,
            db_bytes_before: self.db_bytes(),
            db_bytes_after: 0,
            branches_dropped: dropped.iter().map(|b| b.name.clone()).collect(),
            layer_bytes_freed: dropped
                .iter()
                .map(|b| crate::branches::layer::disk_usage(&self.agx, b.id))
                .sum(),
        };
        let mut live: HashSet<ContentHash> = tl.hashes_after(k)?;
        live.extend(tl.branch_hashes()?);
        live.extend(self.recorder.known_hashes());
        let garbage = self.garbage(&live)?;
        report.objects_deleted = garbage.len() as u64;
        report.bytes_freed = garbage
            .iter()
            .filter_map(|h| self.store.stored_size(h))
            .sum();
        if dry_run {
            report.db_bytes_after = report.db_bytes_before;
            return Ok(report);
        }
        let (events, cps, run) = tl.drop_upto(&GcRun {
            time_ns: now,
            horizon,
            keep: &keep,
        })?;
        report.events_deleted = events;
        report.checkpoints_deleted = cps;
        // Deleted branches: their events, then their layers (a crash in between leaves a
        // layer no branch names, which the next gc removes).
        for b in &dropped {
            tl.drop_branch(b.id)?;
            if let Some(set) = self.branches() {
                set.close(b.id);
            }
        }
        let mut layer_freed = 0;
        for id in crate::branches::layer::orphans(&self.agx, &tl.branches(true)?) {
            match crate::branches::layer::remove(&self.agx, id) {
                Ok(n) => layer_freed += n,
                Err(e) => log::warn!("gc: could not remove the layer of branch {}: {e}", id.0),
            }
        }
        report.layer_bytes_freed = layer_freed;
        let mut freed = 0;
        for h in &garbage {
            freed += self.store.remove(h)?;
        }
        report.bytes_freed = freed;
        tl.gc_objects_done(run, garbage.len() as u64, freed)?;
        // Last, once the history is consistent: compacting only gives space back, and on a
        // full disk (it needs room for a copy) failing leaves the free pages for reuse.
        if let Err(e) = tl.compact() {
            log::warn!("gc: could not compact timeline.db: {e}");
        }
        report.db_bytes_after = self.db_bytes();
        Ok(report)
    }

    /// Bytes of `timeline.db` and its WAL on disk.
    fn db_bytes(&self) -> u64 {
        ["timeline.db", "timeline.db-wal"]
            .iter()
            .filter_map(|n| rustix::fs::statat(&self.agx, *n, rustix::fs::AtFlags::empty()).ok())
            .map(|st| st.st_size as u64)
            .sum()
    }

    /// Objects in the store that neither `live` nor any base chain of a live object needs.
    fn garbage(&self, live: &HashSet<ContentHash>) -> Result<Vec<ContentHash>, EngineError> {
        let all = self.store.list()?;
        let present: HashSet<ContentHash> = all.iter().copied().collect();
        let mut keep: HashSet<ContentHash> = HashSet::new();
        for h in live.iter().filter(|h| present.contains(h)) {
            let mut cur = Some(*h);
            while let Some(c) = cur {
                if !keep.insert(c) {
                    break;
                }
                // An unreadable header keeps the object and ends the chain: gc never
                // deletes what it cannot account for (`agx verify` reports it).
                cur = self.store.base_of(&c).ok().flatten();
            }
        }
        Ok(all.into_iter().filter(|h| !keep.contains(h)).collect())
    }
}
