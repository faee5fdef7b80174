//! `agx merge`, `agx switch` and `agx diff` with branches, in the engine (daemon only: a
//! branch's tree is served by the daemon).
//!
//! Both merge and switch decide what each changed path of the main tree must become, then
//! hand that to the restore machinery (`restore::steps`, `restore::apply`) as a plan: every
//! state replaced is recorded with its before-image, the whole is one operation with one
//! note ("merge NAME", "switch to NAME"), and `agx restore event:N` (N printed) undoes it.
//! Content a plan writes is put in the store first, so it is verified like a restore's.
//!
//! Only candidate paths are looked at (see `branches::sides`): what the main tree's events
//! after the branch's base and the branch's own events name, and what is below them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::engine::{Engine, EngineError};
use crate::branches::merge3::{self, Action, Choice, Choices, Labels, Side as MSide};
use crate::branches::sides::{self, Item, Read, Side};
use crate::branches::Tree;
use crate::ids::Seq;
use crate::restore::{Plan, Report, Why};
use crate::timeline::branches::Branch;
use crate::timeline::Actor;

/// How a merge runs.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct MergeOpts {
    /// Plan and report; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// How every conflict is settled: "ours", "theirs" or "markers".
    pub all: Option<String>,
    /// Per path: path → "ours" | "theirs" | "markers".
    #[serde(default)]
    pub paths: BTreeMap<String, String>,
    /// Merge (or switch) even while files are held open for writing in the main tree.
    #[serde(default)]
    pub force: bool,
}

/// One change a merge makes (or would make) to the main tree.
#[derive(Clone, Debug, Serialize)]
pub struct MergeChange {
    pub path: String,
    /// "take" (the branch's version), "write" (merged content), "delete", "keep" (ours,
    /// moved or with a mode from the branch).
    pub action: &'static str,
    /// Where the version taken comes from, when not this path (a rename followed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// One conflict, with its text hunks when it has some.
#[derive(Clone, Debug, Serialize)]
pub struct MergeConflict {
    pub path: String,
    pub kind: &'static str,
    /// Each hunk as "ours", "base", "theirs" lines with the 1-based line where it starts
    /// in ours.
    pub hunks: Vec<Hunk>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Hunk {
    pub line: usize,
    pub ours: String,
    pub base: String,
    pub theirs: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct MergeReport {
    pub branch: String,
    pub base: Seq,
    pub dry_run: bool,
    pub changes: Vec<MergeChange>,
    pub conflicts: Vec<MergeConflict>,
    /// Conflicts settled by a choice (path, choice).
    pub settled: Vec<(String, String)>,
    /// Conflicts left without a usable choice (none given, or markers for a conflict that
    /// has no text hunks): while there are any, nothing is merged.
    pub unresolved: Vec<String>,
    /// Whether the merge was carried out (false: a dry run, or conflicts left without a
    /// choice, and nothing changed).
    pub applied: bool,
    /// Steps carried out (0 for a dry run or a refused merge).
    pub done: usize,
    /// The first event recorded: `agx restore event:N` undoes the merge.
    pub first_event: Option<Seq>,
    pub failed: Vec<(String, String)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SwitchReport {
    pub branch: String,
    /// The branch that keeps the main tree as it was before the switch.
    pub kept_as: String,
    pub changed: usize,
    pub first_event: Option<Seq>,
    pub failed: Vec<(String, String)>,
}

fn choice(s: &str) -> Result<Choice, EngineError> {
    match s {
        "ours" => Ok(Choice::Ours),
        "theirs" => Ok(Choice::Theirs),
        "markers" => Ok(Choice::Markers),
        other => Err(EngineError::Invalid(format!(
            "'{other}' is not a way to settle a conflict (ours, theirs or markers)"
        ))),
    }
}

fn side_err(e: sides::SideError) -> EngineError {
    EngineError::Invalid(e.to_string())
}

fn lines(r: &merge3::Region) -> String {
    String::from_utf8_lossy(&r.lines.concat()).into_owned()
}

impl Engine {
    /// The daemon's branch set, or the error a local command gets.
    fn served_branches(&self, what: &str) -> Result<&Arc<crate::branches::Branches>, EngineError> {
        self.branches().ok_or_else(|| {
            EngineError::Invalid(format!(
                "{what} needs the project mounted (branches are served by the daemon): run `agx mount` first"
            ))
        })
    }

    fn live_branch(&self, name: &str) -> Result<Branch, EngineError> {
        let name = name.strip_prefix("branch:").unwrap_or(name);
        // One statement per lock: the guard of `self.tl()` lives to the statement's end.
        let found = self.tl().branch_by_name(name)?;
        found.ok_or_else(|| {
            let known: Vec<String> = self
                .tl()
                .branches(false)
                .map(|l| l.into_iter().map(|b| b.name).collect())
                .unwrap_or_default();
            EngineError::Invalid(if known.is_empty() {
                format!(
                    "no branch named '{name}' (there are none; `agx branch create NAME` makes one)"
                )
            } else {
                format!("no branch named '{name}' (branches: {})", known.join(", "))
            })
        })
    }

    /// Files held open for writing in the main tree (recorded opens not released yet),
    /// as "path (process[pid])".
    fn open_writers(&self) -> Vec<String> {
        self.recorder
            .pending(Seq(0))
            .into_iter()
            .filter(|e| {
                matches!(
                    e.op,
                    crate::timeline::Op::Create | crate::timeline::Op::Write
                )
            })
            .map(|e| {
                format!(
                    "{} ({}[{}])",
                    String::from_utf8_lossy(&e.path),
                    e.actor.process,
                    e.actor.pid
                )
            })
            .collect()
    }

    fn refuse_open_writers(&self, what: &str, force: bool) -> Result<(), EngineError> {
        let w = self.open_writers();
        if w.is_empty() || force {
            return Ok(());
        }
        Err(EngineError::Invalid(format!(
            "{} file(s) are open for writing in the main tree: {}; nothing changed (close them, or pass --force to {what} anyway)",
            w.len(),
            w.join(", ")
        )))
    }

    /// The three trees of a merge of `b`: base, main (ours), branch (theirs).
    fn merge_sides(
        &self,
        b: &Branch,
        tree: Arc<Tree>,
        views: &crate::views::Views,
    ) -> Result<(Read, Read, Read), EngineError> {
        self.notice_everything()?;
        self.flush_all()?;
        let cand = sides::candidates(&self.tl(), Some(b.base), &[b.id])?;
        let snap = views
            .at(b.base)
            .map_err(|e| EngineError::Invalid(format!("the base of '{}': {e}", b.name)))?;
        let base = Side::Point(views, snap).read(&cand).map_err(side_err)?;
        let ours = Side::Main(&self.root).read(&cand).map_err(side_err)?;
        let theirs = Side::Branch(tree).read(&cand).map_err(side_err)?;
        Ok((base, ours, theirs))
    }

    /// Merges branch `name` into the main tree (three-way, base = the branch's base).
    pub fn merge(
        &self,
        name: &str,
        opts: &MergeOpts,
        caller: &Actor,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<(MergeReport, Report), EngineError> {
        let set = self.served_branches("agx merge")?;
        let b = self.live_branch(name)?;
        let tree = set.tree(b.id).map_err(|e| EngineError::Io {
            what: format!("opening branch '{}'", b.name),
            source: e,
        })?;
        let mut choices = Choices {
            all: opts.all.as_deref().map(choice).transpose()?,
            paths: BTreeMap::new(),
            labels: Labels {
                ours: "main".into(),
                base: format!("base (event:{})", b.base.0),
                theirs: b.name.clone(),
            },
        };
        for (p, c) in &opts.paths {
            choices.paths.insert(p.clone(), choice(c)?);
        }
        // Nothing else changes the main tree from the reading of the trees to the last
        // step (see `capture::gate`); the kernel is told after the gate reopens.
        let closed = (!opts.dry_run).then(|| self.recorder.gate.close());
        let (base, ours, theirs) = self.merge_sides(&b, tree.clone(), set.views())?;
        let plan = merge3::plan(&base.tree, &ours.tree, &theirs.tree, &Default::default())
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        let conflicts: Vec<MergeConflict> = plan
            .conflicts()
            .map(|(p, c)| MergeConflict {
                path: p.clone(),
                kind: c.conflict.kind.name(),
                hunks: c
                    .conflict
                    .text
                    .as_ref()
                    .map(|t| {
                        t.hunks()
                            .map(|h| Hunk {
                                line: h.ours.start + 1,
                                ours: lines(&h.ours),
                                base: lines(&h.base),
                                theirs: lines(&h.theirs),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        let settled: Vec<(String, String)> = conflicts
            .iter()
            .filter_map(|c| {
                let ch = choices.paths.get(&c.path).copied().or(choices.all)?;
                Some((c.path.clone(), format!("{ch:?}").to_lowercase()))
            })
            .collect();
        let mut report = MergeReport {
            branch: b.name.clone(),
            base: b.base,
            dry_run: opts.dry_run,
            changes: Vec::new(),
            conflicts,
            settled,
            unresolved: Vec::new(),
            applied: false,
            done: 0,
            first_event: None,
            failed: Vec::new(),
        };
        let resolved = merge3::resolve(&plan, &choices);
        let actions = match &resolved {
            Ok(a) => a.clone(),
            Err(_) => plan.actions.clone(),
        };
        for (p, a) in &actions {
            let (action, from) = match a {
                Action::Take {
                    side: MSide::Theirs,
                    from,
                    ..
                } => ("take", from),
                Action::Take {
                    side: MSide::Ours,
                    from,
                    ..
                } => ("keep", from),
                Action::Write { .. } => ("write", p),
                Action::Delete => ("delete", p),
                Action::Conflict(_) => continue,
            };
            report.changes.push(MergeChange {
                path: p.clone(),
                action,
                from: (from != p).then(|| from.clone()),
            });
        }
        let actions = match resolved {
            Ok(a) if !opts.dry_run => a,
            Ok(_) => return Ok((report, Report::default())),
            // Nothing applied: the report lists the conflicts for a choice.
            Err(u) => {
                report.unresolved = u.paths.into_iter().map(|(p, _)| p).collect();
                return Ok((report, Report::default()));
            }
        };
        self.refuse_open_writers("merge", opts.force)?;
        let restore_plan = self.target_plan(&actions, &ours, &theirs, &tree, b.base)?;
        let why = Why {
            actor: caller.clone(),
            note: format!("merge {}", b.name),
        };
        let r = crate::restore::apply(
            &self.root,
            &self.store,
            &self.recorder,
            &restore_plan,
            &why,
            progress,
        )?;
        drop(closed);
        self.after_restore(&r);
        report.applied = true;
        report.done = r.done;
        report.first_event = r.first_event;
        report.failed = r.failed.clone();
        if r.failed.is_empty() && r.done > 0 {
            let mut tl = self.tl();
            let _ = tl.set_branch_note(
                b.id,
                &format!(
                    "merged into main {}{}",
                    chrono::DateTime::from_timestamp_nanos(crate::sys::now_ns())
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    r.first_event
                        .map(|s| format!(" (event:{})", s.0))
                        .unwrap_or_default()
                ),
            );
        }
        Ok((report, r))
    }

    /// The restore plan making the main tree what `actions` say (each path's want).
    fn target_plan(
        &self,
        actions: &BTreeMap<String, Action>,
        ours: &Read,
        theirs: &Read,
        tree: &Tree,
        point: Seq,
    ) -> Result<Plan, EngineError> {
        let max = self.recorder.config().max_size;
        let mut wants = Vec::new();
        let put = |b: &[u8]| {
            self.store
                .put(b, None)
                .map(|p| p.hash)
                .map_err(std::io::Error::other)
        };
        let now = crate::sys::now_ns();
        for (p, a) in actions {
            let item_of = |r: &Read, from: &str| -> Result<Item, EngineError> {
                r.items.get(from).cloned().ok_or_else(|| {
                    EngineError::Invalid(format!(
                        "{from}: missing from the merge's reading of the trees"
                    ))
                })
            };
            let want = match a {
                Action::Delete => None,
                Action::Conflict(_) => continue,
                Action::Take { side, from, mode } => {
                    let mut item = match side {
                        MSide::Ours => item_of(ours, from)?,
                        MSide::Theirs => item_of(theirs, from)?,
                    };
                    if let Some(m) = mode {
                        item.meta.mode = (item.meta.mode & !0o7777) | (m & 0o7777);
                        if let merge3::Entry::File { mode: fm, .. } = &mut item.entry {
                            *fm = *m;
                        }
                    }
                    let big = matches!(&item.entry, merge3::Entry::File { content, .. } if content.bytes().is_none());
                    let bytes = if big {
                        Some(self.read_big(*side, from, tree)?)
                    } else {
                        None
                    };
                    Some(sides::want_of(&item, put, bytes.as_deref()).map_err(|e| {
                        EngineError::Io {
                            what: format!("storing {from}"),
                            source: e,
                        }
                    })?)
                }
                Action::Write { bytes, mode } => {
                    let base_item = ours.items.get(p).or_else(|| theirs.items.get(p));
                    let mut meta = base_item.map(|i| i.meta.clone()).unwrap_or_default();
                    meta.mode = libc::S_IFREG | (mode & 0o7777);
                    meta.size = bytes.len() as u64;
                    meta.mtime = now / 1_000_000_000;
                    meta.mtime_nsec = (now % 1_000_000_000) as u32;
                    let item = Item {
                        entry: merge3::Entry::File {
                            content: merge3::Content::Bytes(Vec::new()),
                            mode: *mode,
                        },
                        meta,
                    };
                    Some(
                        sides::want_of(&item, put, Some(bytes)).map_err(|e| EngineError::Io {
                            what: format!("storing the merge of {p}"),
                            source: e,
                        })?,
                    )
                }
            };
            wants.push((p.as_bytes().to_vec(), want));
        }
        let plan = Plan::from_wants(&self.root, point, wants, max)?;
        if let Some(s) = plan.skipped.first() {
            return Err(EngineError::Invalid(format!(
                "{}: {}; nothing changed",
                String::from_utf8_lossy(&s.path),
                s.reason
            )));
        }
        Ok(plan)
    }

    /// The bytes of a file over the merge's size limit, read again for writing.
    fn read_big(&self, side: MSide, path: &str, tree: &Tree) -> Result<Vec<u8>, EngineError> {
        let failed = |e: std::io::Error| EngineError::Io {
            what: path.to_string(),
            source: e,
        };
        let gone = || failed(std::io::Error::from_raw_os_error(libc::ENOENT));
        match side {
            MSide::Ours => {
                let o = crate::tree::stat_checked(&self.root, path.as_bytes())
                    .map_err(|e| failed(e.into()))?
                    .ok_or_else(gone)?;
                sides::read_live(&o).map_err(failed)
            }
            MSide::Theirs => {
                let o = tree
                    .stat(path.as_bytes())
                    .map_err(failed)?
                    .ok_or_else(gone)?;
                tree.content(&o).map_err(failed)
            }
        }
    }

    /// Makes the main tree equal to branch `name`: every path where the two differ
    /// becomes the branch's. The main tree as it was is kept as a new branch first.
    pub fn switch(
        &self,
        name: &str,
        force: bool,
        caller: &Actor,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<(SwitchReport, Report), EngineError> {
        let set = self.served_branches("agx switch")?;
        let b = self.live_branch(name)?;
        self.notice_everything()?;
        self.refuse_open_writers("switch", force)?;
        let tree = set.tree(b.id).map_err(|e| EngineError::Io {
            what: format!("opening branch '{}'", b.name),
            source: e,
        })?;
        // Nothing else changes the main tree from here to the last step (see
        // `capture::gate`); the kernel is told after the gate reopens.
        let closed = self.recorder.gate.close();
        self.flush_all()?;
        let cand = sides::candidates(&self.tl(), Some(b.base), &[b.id])?;
        let ours = Side::Main(&self.root).read(&cand).map_err(side_err)?;
        let theirs = Side::Branch(tree.clone()).read(&cand).map_err(side_err)?;
        let mut actions: BTreeMap<String, Action> = BTreeMap::new();
        let paths: BTreeSet<&String> = ours.tree.keys().chain(theirs.tree.keys()).collect();
        for p in paths {
            let a = match (ours.items.get(p), theirs.items.get(p)) {
                (Some(_), None) => Action::Delete,
                (_, Some(t)) => {
                    if ours.items.get(p).is_some_and(|o| same_item(o, t)) {
                        continue;
                    }
                    Action::Take {
                        side: MSide::Theirs,
                        from: p.clone(),
                        mode: None,
                    }
                }
                (None, None) => continue,
            };
            actions.insert(p.clone(), a);
        }
        let kept_as = self.keep_main_as_branch(&b.name, caller)?;
        let plan = self.target_plan(&actions, &ours, &theirs, &tree, b.base)?;
        let why = Why {
            actor: caller.clone(),
            note: format!(
                "switch to {} (the main tree before is branch {kept_as})",
                b.name
            ),
        };
        let r = crate::restore::apply(
            &self.root,
            &self.store,
            &self.recorder,
            &plan,
            &why,
            progress,
        )?;
        drop(closed);
        self.branches_changed();
        self.after_restore(&r);
        if r.failed.is_empty() {
            let _ = self.tl().set_branch_note(
                b.id,
                &format!(
                    "switched into main {}{}",
                    chrono::DateTime::from_timestamp_nanos(crate::sys::now_ns())
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    r.first_event
                        .map(|s| format!(" (event:{})", s.0))
                        .unwrap_or_default()
                ),
            );
        }
        Ok((
            SwitchReport {
                branch: b.name.clone(),
                kept_as,
                changed: r.done,
                first_event: r.first_event,
                failed: r.failed.clone(),
            },
            r,
        ))
    }

    /// Makes a branch holding the main tree as it is now, named after the switch.
    fn keep_main_as_branch(&self, to: &str, caller: &Actor) -> Result<String, EngineError> {
        let mut n = 1;
        loop {
            let name = if n == 1 {
                format!("main-before-{to}")
            } else {
                format!("main-before-{to}-{n}")
            };
            if self.tl().branch_by_name(&name)?.is_none()
                && self.tl().checkpoint_by_name(&name)?.is_none()
            {
                self.branch_row(&name, None, caller)?;
                return Ok(name);
            }
            n += 1;
        }
    }
}

fn same_item(a: &Item, b: &Item) -> bool {
    a.entry.same(&b.entry)
        && a.meta.uid == b.meta.uid
        && a.meta.gid == b.meta.gid
        && (a.meta.mode & 0o7777) == (b.meta.mode & 0o7777)
}
