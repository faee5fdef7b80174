//! Restores run by the engine: the plan for a REF (a whole tree, some paths, or what one
//! session touched), checked before anything changes, then carried out and recorded.

use serde::Serialize;

use super::engine::{Engine, EngineError};
use super::scope::Scope;
use super::undo::{related, OnConflict};
use crate::restore::plan::Content;
use crate::restore::{Plan, Report, Step, Why};
use crate::timeline::Actor;

/// How a restore runs.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct RestoreOpts {
    #[serde(default)]
    pub on_conflict: OnConflict,
    /// Why, in the user's words (recorded in the events' note).
    pub reason: Option<String>,
    /// The whole note, replacing "restore to REF" (oops).
    pub note: Option<String>,
    /// Leave alone the paths the plan cannot restore (`Plan::skipped`) and restore the
    /// rest; without it such a plan is refused.
    #[serde(default)]
    pub skip_missing: bool,
    /// The branch to restore (None: the main tree).
    #[serde(default)]
    pub branch: Option<String>,
}

/// The refusal of a plan with paths it cannot restore: the first one, and how many more.
pub fn unrestorable(path: &str, why: &str, count: usize, at: &str) -> EngineError {
    EngineError::Unrestorable {
        path: path.to_string(),
        at: at.to_string(),
        why: why.to_string(),
        more: match count {
            0 | 1 => String::new(),
            n => format!(" (and {} more path(s))", n - 1),
        },
    }
}

impl Engine {
    /// The plan restoring `paths` (all when empty) to `r`. A `session:ID` restore covers
    /// only what the session touched and lists the paths someone else changed since
    /// (`on_conflict` decides whether they are in the plan). Every stored version it would
    /// write is read and verified first: a plan that cannot be carried out whole (a corrupt
    /// or missing object) is an error before anything changes (invariant 5).
    pub fn plan(
        &self,
        r: &str,
        paths: &[Vec<u8>],
        on_conflict: OnConflict,
        branch: Option<&str>,
    ) -> Result<Plan, EngineError> {
        let scope = self.scope(branch)?;
        self.plan_in(&scope, r, paths, on_conflict)
    }

    /// [`Engine::plan`] in the tree `scope` names. In a branch the plan is made over the
    /// branch's tree and events, once the parts they name are whole (see `scope.rs`).
    pub(crate) fn plan_in(
        &self,
        scope: &Scope,
        r: &str,
        paths: &[Vec<u8>],
        on_conflict: OnConflict,
    ) -> Result<Plan, EngineError> {
        if let Scope::Branch { .. } = scope {
            let point = self.point_in(scope, r, paths)?;
            let events = self.events_in(scope, point)?;
            self.prepare(scope, &events, paths, true)?;
            let max = self.recorder.config().max_size;
            let plan = Plan::from_events(self.scope_root(scope), &events, point, paths, max)?;
            self.verify(&plan, r)?;
            return Ok(plan);
        }
        let point = self.noticed_point(r, paths)?;
        self.refuse_unknown_paths(r, point, paths)?;
        let max = self.recorder.config().max_size;
        let plan = match self.session_scope(r, paths)? {
            Some(mut scope) => {
                let full = if scope.paths.is_empty() {
                    Plan::empty(point)
                } else {
                    Plan::compute(&self.root, &self.tl(), point, &scope.paths, max)?
                };
                // A conflict matters only where the restore would change something.
                scope
                    .conflicts
                    .retain(|c| full.steps.iter().any(|s| related(s.path(), &c.path)));
                let mut plan = if on_conflict == OnConflict::Force || scope.conflicts.is_empty() {
                    full
                } else {
                    let only: Vec<Vec<u8>> = scope
                        .paths
                        .into_iter()
                        .filter(|p| !scope.conflicts.iter().any(|c| &c.path == p))
                        .collect();
                    if only.is_empty() {
                        Plan::empty(point)
                    } else {
                        Plan::compute(&self.root, &self.tl(), point, &only, max)?
                    }
                };
                plan.conflicts = scope.conflicts;
                plan
            }
            None => Plan::compute(&self.root, &self.tl(), point, paths, max)?,
        };
        self.verify(&plan, r)?;
        Ok(plan)
    }

    fn verify(&self, plan: &Plan, r: &str) -> Result<(), EngineError> {
        let mut checked = std::collections::HashSet::new();
        for step in &plan.steps {
            if let Step::Write {
                path,
                content: Content::Hash(h),
                ..
            } = step
            {
                if !checked.insert(*h) {
                    continue;
                }
                self.store.get(h).map_err(|source| EngineError::BadObject {
                    path: String::from_utf8_lossy(path).into_owned(),
                    at: r.to_string(),
                    source,
                })?;
            }
        }
        Ok(())
    }

    /// Restores `paths` (all when empty) to `r`, recording every step (so it can be
    /// undone) with a note saying why.
    pub fn restore(
        &self,
        r: &str,
        paths: &[Vec<u8>],
        opts: &RestoreOpts,
        mut actor: Actor,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<(Plan, Report), EngineError> {
        let scope = self.scope(opts.branch.as_deref())?;
        let plan = self.plan_in(&scope, r, paths, opts.on_conflict)?;
        if opts.on_conflict == OnConflict::Refuse && !plan.conflicts.is_empty() {
            return Err(EngineError::Conflicts(plan.conflicts.len()));
        }
        if let (Some(first), false) = (plan.skipped.first(), opts.skip_missing) {
            let path = String::from_utf8_lossy(&first.path);
            return Err(unrestorable(&path, &first.reason, plan.skipped.len(), r));
        }
        let note = match (&opts.note, &opts.reason) {
            (Some(n), _) => n.clone(),
            (None, Some(x)) => format!("restore to {r}: {x}"),
            (None, None) => format!("restore to {r}"),
        };
        // In a branch, every step is the branch's event.
        actor.branch = scope.branch_id();
        let why = Why { actor, note };
        let report = crate::restore::apply(
            self.scope_root(&scope),
            &self.store,
            &self.recorder,
            &plan,
            &why,
            progress,
        )?;
        Ok((plan, report))
    }
}

impl Engine {
    /// Refuses a restore naming a PATH that is nowhere: absent now, absent at `point`,
    /// and named by no recorded event, neither it nor anything below it (a typo, most
    /// likely; "nothing to do" would hide it). A path that exists at either end, or that
    /// some event touched (created and removed since, say), is a fine request even when
    /// nothing changes. The common case costs one lookup; the state at the point (one
    /// pass over the events after it) is computed only for a path absent now that no
    /// event names, which a moved directory may still have held at the point.
    fn refuse_unknown_paths(
        &self,
        r: &str,
        point: crate::ids::Seq,
        paths: &[Vec<u8>],
    ) -> Result<(), EngineError> {
        use crate::restore::{model::Model, plan::resolve};
        use crate::tree as live;
        let mut model: Option<Model> = None;
        for p in paths.iter().filter(|p| !p.is_empty()) {
            let name = String::from_utf8_lossy(p);
            let live = live::stat_checked(&self.root, p)
                .map_err(|e| EngineError::Invalid(format!("{name}: {e}")))?;
            if live.is_some() {
                continue;
            }
            let touched = self.tl().log(&crate::timeline::Filter {
                path: Some(p.clone()),
                after: None,
                limit: Some(1),
            })?;
            if !touched.is_empty() {
                continue;
            }
            let model = match &mut model {
                Some(m) => m,
                None => {
                    let mut m = Model::new();
                    m.undo_all(self.tl().events_after(point)?.iter());
                    model.insert(m)
                }
            };
            if resolve(&self.root, model.lookup(p)).is_none() {
                return Err(EngineError::Invalid(format!(
                    "{name}: no such path in the project, now or at {r}, and no recorded change touched it; nothing restored"
                )));
            }
        }
        Ok(())
    }
}
