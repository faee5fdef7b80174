//! Whole-tree merge: renames, per-path actions, and settling conflicts by choice.
//!
//! Renames are found per side (base → that side) among paths deleted and paths added on
//! that side: identical content first, then (for text files) line similarity of at least
//! `Options::similarity` percent. A file renamed on one side is merged at its new name
//! with the other side's version of the old name, so a rename on one side and an edit
//! on the other both land. Renamed to different names on both sides: `RenameRename` at
//! both names. Renamed on one side, deleted on the other: `DeleteModify` at the new name
//! (as git: losing a file the other side still wanted is the user's call). A rename onto
//! a path the other side also created is not followed; the two are compared as they are.
//!
//! Applying a plan: `Take { from }` reads the side's entry at `from`, which may be a path
//! the plan also deletes (a rename in the main tree): read every source before deleting.

use std::collections::{BTreeMap, BTreeSet};

use super::entry::{
    merge_entry, Conflict, ConflictKind, Content, Entry, MergeError, Merged, Outcome,
};
use super::text::{similarity, Labels};
use super::{is_binary, Side};

/// One side's tree: path (relative, '/'-separated, no trailing slash) → entry. Absent
/// paths are not in the map.
pub type Tree = BTreeMap<String, Entry>;

#[derive(Clone, Debug)]
pub struct Options {
    /// Follow renames.
    pub renames: bool,
    /// Pair text files by similarity at least this many percent (None: identical only).
    pub similarity: Option<u32>,
    /// Skip similarity pairing when there are more (deleted × added) pairs than this:
    /// each pair costs a line diff.
    pub max_similarity_pairs: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            renames: true,
            similarity: Some(50),
            max_similarity_pairs: 10_000,
        }
    }
}

/// What to do to the main tree at one path. Paths not in a plan stay as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Make the path `side`'s entry found at `from` (a file, symlink, directory...); when
    /// `from` is another path, a rename is being followed. `mode`, when set, replaces the
    /// file's mode (a mode change merged from the other side).
    Take {
        side: Side,
        from: String,
        mode: Option<u32>,
    },
    /// A regular file with merged content.
    Write {
        bytes: Vec<u8>,
        mode: u32,
    },
    Delete,
    Conflict(Box<PathConflict>),
}

/// A conflict at a path, with where each side's version comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathConflict {
    pub conflict: Conflict,
    /// The path of base's, ours' and theirs' version (None: none); not this path when a
    /// rename was followed.
    pub base: Option<String>,
    pub ours: Option<String>,
    pub theirs: Option<String>,
    /// The main tree has something at this path now.
    pub ours_here: bool,
    /// For `DirectoryFile`: the paths below this one in ours and in theirs.
    pub ours_below: Vec<String>,
    pub theirs_below: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub actions: BTreeMap<String, Action>,
    /// Renames followed: base path → new path, per side.
    pub renamed_ours: BTreeMap<String, String>,
    pub renamed_theirs: BTreeMap<String, String>,
}

impl Plan {
    pub fn conflicts(&self) -> impl Iterator<Item = (&String, &PathConflict)> {
        self.actions.iter().filter_map(|(p, a)| match a {
            Action::Conflict(c) => Some((p, &**c)),
            _ => None,
        })
    }

    pub fn is_clean(&self) -> bool {
        self.conflicts().next().is_none()
    }
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Identity of an entry for exact rename pairing (empty files pair with nothing: any
/// two would match).
fn exact_key(e: &Entry) -> Option<(u8, Vec<u8>)> {
    match e {
        Entry::File { content, .. } if !content.is_empty() => Some((0, content.hash().0.to_vec())),
        Entry::Symlink { target } => Some((1, target.clone())),
        _ => None,
    }
}

/// Files renamed from base to `side`: base path → side path.
pub fn find_renames(base: &Tree, side: &Tree, opts: &Options) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if !opts.renames {
        return out;
    }
    let deleted: Vec<(&String, &Entry)> = base
        .iter()
        .filter(|(p, _)| !side.contains_key(*p))
        .collect();
    let added: Vec<(&String, &Entry)> = side
        .iter()
        .filter(|(p, _)| !base.contains_key(*p))
        .collect();
    let mut by_key: BTreeMap<(u8, Vec<u8>), Vec<&String>> = BTreeMap::new();
    for (p, e) in &added {
        if let Some(k) = exact_key(e) {
            by_key.entry(k).or_default().push(p);
        }
    }
    let mut used: BTreeSet<&String> = BTreeSet::new();
    for (p, e) in &deleted {
        let Some(k) = exact_key(e) else { continue };
        let Some(cands) = by_key.get(&k) else {
            continue;
        };
        // Same file name first (a move to another directory), then path order.
        let free = || cands.iter().filter(|c| !used.contains(**c));
        let pick = free()
            .find(|c| basename(c) == basename(p))
            .or_else(|| free().next())
            .copied();
        if let Some(c) = pick {
            used.insert(c);
            out.insert((*p).clone(), c.clone());
        }
    }

    let Some(min) = opts.similarity else {
        return out;
    };
    let text = |e: &Entry| -> Option<Vec<u8>> {
        match e {
            Entry::File {
                content: Content::Bytes(b),
                ..
            } if !b.is_empty() && !is_binary(b) => Some(b.clone()),
            _ => None,
        }
    };
    let dels: Vec<(&String, Vec<u8>)> = deleted
        .iter()
        .filter(|(p, _)| !out.contains_key(*p))
        .filter_map(|(p, e)| Some((*p, text(e)?)))
        .collect();
    let adds: Vec<(&String, Vec<u8>)> = added
        .iter()
        .filter(|(p, _)| !used.contains(p))
        .filter_map(|(p, e)| Some((*p, text(e)?)))
        .collect();
    if dels.len().saturating_mul(adds.len()) > opts.max_similarity_pairs {
        return out;
    }
    let mut scored = Vec::new();
    for (d, db) in &dels {
        for (a, ab) in &adds {
            // The score is shared bytes over the larger size, so a size ratio below the
            // threshold cannot reach it.
            let (lo, hi) = (db.len().min(ab.len()), db.len().max(ab.len()));
            if (lo as u128) * 100 < (hi as u128) * min as u128 {
                continue;
            }
            let s = similarity(db, ab);
            if s >= min {
                scored.push((std::cmp::Reverse(s), *d, *a));
            }
        }
    }
    scored.sort();
    let mut took: BTreeSet<&String> = BTreeSet::new();
    for (_, d, a) in scored {
        if !out.contains_key(d) && !took.contains(a) {
            took.insert(a);
            out.insert(d.clone(), a.clone());
        }
    }
    out
}

/// Where the three versions merged at one path come from.
#[derive(Default, Clone)]
struct Slot {
    base: Option<String>,
    ours: Option<String>,
    theirs: Option<String>,
    /// The path's file was renamed away: nothing stays here.
    vacated: bool,
    /// Renamed on one side, deleted on the other (the deleting side).
    rename_delete: Option<Side>,
    /// Renamed differently on both sides: (base, ours, theirs) paths.
    rename_rename: Option<(String, String, String)>,
}

/// The three-way merge of trees `base`, `ours` and `theirs`.
pub fn plan(base: &Tree, ours: &Tree, theirs: &Tree, opts: &Options) -> Result<Plan, MergeError> {
    let mut ro = find_renames(base, ours, opts);
    let mut rt = find_renames(base, theirs, opts);
    // Not followed: a rename onto a path the other side has too, unless it renamed the
    // same file there.
    let (ro0, rt0) = (ro.clone(), rt.clone());
    ro.retain(|b, o| !theirs.contains_key(o) || rt0.get(b) == Some(o));
    rt.retain(|b, t| !ours.contains_key(t) || ro0.get(b) == Some(t));

    let mut slots: BTreeMap<String, Slot> = BTreeMap::new();
    for p in base.keys().chain(ours.keys()).chain(theirs.keys()) {
        slots.entry(p.clone()).or_insert_with(|| Slot {
            base: base.contains_key(p).then(|| p.clone()),
            ours: ours.contains_key(p).then(|| p.clone()),
            theirs: theirs.contains_key(p).then(|| p.clone()),
            ..Slot::default()
        });
    }
    let renamed: BTreeSet<&String> = ro.keys().chain(rt.keys()).collect();
    for b in renamed {
        let at = |slots: &mut BTreeMap<String, Slot>, p: &String| -> Slot {
            slots.get(p).cloned().unwrap_or_default()
        };
        match (ro.get(b), rt.get(b)) {
            (Some(o), Some(t)) if o == t => {
                let mut s = at(&mut slots, o);
                s.base = Some(b.clone());
                slots.insert(o.clone(), s);
            }
            (Some(o), Some(t)) => {
                let rr = Some((b.clone(), o.clone(), t.clone()));
                for p in [o, t] {
                    let mut s = at(&mut slots, p);
                    s.base = Some(b.clone());
                    s.rename_rename = rr.clone();
                    slots.insert(p.clone(), s);
                }
            }
            (Some(o), None) => {
                let mut s = at(&mut slots, o);
                s.base = Some(b.clone());
                s.theirs = theirs.contains_key(b).then(|| b.clone());
                if s.theirs.is_none() {
                    s.rename_delete = Some(Side::Theirs);
                }
                slots.insert(o.clone(), s);
            }
            (None, Some(t)) => {
                let mut s = at(&mut slots, t);
                s.base = Some(b.clone());
                s.ours = ours.contains_key(b).then(|| b.clone());
                if s.ours.is_none() {
                    s.rename_delete = Some(Side::Ours);
                }
                slots.insert(t.clone(), s);
            }
            (None, None) => continue,
        }
        let v = slots.entry(b.clone()).or_default();
        v.vacated = true;
    }

    let mut actions = BTreeMap::new();
    for (p, s) in &slots {
        let ours_here = ours.contains_key(p);
        if s.vacated {
            if ours_here {
                actions.insert(p.clone(), Action::Delete);
            }
            continue;
        }
        let (be, oe, te) = (
            lookup(base, &s.base),
            lookup(ours, &s.ours),
            lookup(theirs, &s.theirs),
        );
        let modes = [be, oe, te].map(|e| e.and_then(Entry::file_mode));
        let bare = |kind| {
            Outcome::Conflict(Conflict {
                kind,
                text: None,
                modes,
                mode: None,
                content: None,
            })
        };
        let outcome = if let Some((b, o, t)) = &s.rename_rename {
            bare(ConflictKind::RenameRename {
                base: b.clone(),
                ours: o.clone(),
                theirs: t.clone(),
            })
        } else if let Some(by) = s.rename_delete {
            bare(ConflictKind::DeleteModify { deleted_by: by })
        } else {
            merge_entry(p, be, oe, te)?
        };
        let source = |side| match side {
            Side::Ours => s.ours.clone(),
            Side::Theirs => s.theirs.clone(),
        };
        let action = match outcome {
            Outcome::Ours => take(p, Side::Ours, source(Side::Ours), None, ours_here),
            Outcome::Theirs => take(p, Side::Theirs, source(Side::Theirs), None, ours_here),
            Outcome::WithMode { content, mode } => {
                take(p, content, source(content), Some(mode), ours_here)
            }
            Outcome::Merged { bytes, mode } => Some(Action::Write { bytes, mode }),
            Outcome::Conflict(conflict) => Some(Action::Conflict(Box::new(PathConflict {
                conflict,
                base: s.base.clone(),
                ours: s.ours.clone(),
                theirs: s.theirs.clone(),
                ours_here,
                ours_below: Vec::new(),
                theirs_below: Vec::new(),
            }))),
        };
        if let Some(a) = action {
            actions.insert(p.clone(), a);
        }
    }
    directories(ours, theirs, &mut actions);
    Ok(Plan {
        actions,
        renamed_ours: ro,
        renamed_theirs: rt,
    })
}

fn lookup<'a>(t: &'a Tree, src: &Option<String>) -> Option<&'a Entry> {
    src.as_ref().and_then(|q| t.get(q))
}

/// The action that makes `path` hold `side`'s entry from `from` (None: nothing), or None
/// when the main tree already has it.
fn take(
    path: &str,
    side: Side,
    from: Option<String>,
    mode: Option<u32>,
    ours_here: bool,
) -> Option<Action> {
    match from {
        None if ours_here => Some(Action::Delete),
        None => None,
        Some(f) if side == Side::Ours && f == path && mode.is_none() => None,
        Some(from) => Some(Action::Take { side, from, mode }),
    }
}

/// What a path holds after the plan, as far as directories are concerned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holds {
    Nothing,
    Dir,
    NonDir,
    /// In conflict: present on a side.
    Undecided,
}

fn entry_holds(e: Option<&Entry>) -> Holds {
    match e {
        None => Holds::Nothing,
        Some(Entry::Dir) => Holds::Dir,
        Some(_) => Holds::NonDir,
    }
}

/// The paths strictly below `p` among `keys`.
fn below<'a, V>(map: &'a BTreeMap<String, V>, p: &str) -> impl Iterator<Item = &'a String> {
    let lo = format!("{p}/");
    let hi = format!("{p}0"); // '0' follows '/'
    map.range(lo..hi).map(|(k, _)| k)
}

/// A path that ends up a file (or symlink...) while something remains below it is a
/// `DirectoryFile` conflict; a directory deleted on one side while the other added
/// below it stays. Directories missing from a tree above its paths are implied.
fn directories(ours: &Tree, theirs: &Tree, actions: &mut BTreeMap<String, Action>) {
    let mut holds: BTreeMap<String, Holds> = BTreeMap::new();
    for p in ours.keys().chain(theirs.keys()).chain(actions.keys()) {
        let h = match actions.get(p) {
            None => entry_holds(ours.get(p)),
            Some(Action::Delete) => Holds::Nothing,
            Some(Action::Write { .. }) => Holds::NonDir,
            Some(Action::Take { side, from, .. }) => entry_holds(match side {
                Side::Ours => ours.get(from),
                Side::Theirs => theirs.get(from),
            }),
            Some(Action::Conflict(_)) => Holds::Undecided,
        };
        holds.insert(p.clone(), h);
    }
    for (p, h) in &holds {
        let occupied = || below(&holds, p).any(|q| holds[q] != Holds::Nothing);
        match h {
            Holds::NonDir if occupied() => {
                let modes =
                    [None, ours.get(p), theirs.get(p)].map(|e| e.and_then(Entry::file_mode));
                actions.insert(
                    p.clone(),
                    Action::Conflict(Box::new(PathConflict {
                        conflict: Conflict {
                            kind: ConflictKind::DirectoryFile,
                            text: None,
                            modes,
                            mode: None,
                            content: None,
                        },
                        base: None,
                        ours: ours.contains_key(p).then(|| p.clone()),
                        theirs: theirs.contains_key(p).then(|| p.clone()),
                        ours_here: ours.contains_key(p),
                        ours_below: below(ours, p).cloned().collect(),
                        theirs_below: below(theirs, p).cloned().collect(),
                    })),
                );
            }
            // Deleting a directory the result still has content in: keep it. (A parent
            // missing from a tree is implied; whoever applies the plan creates it.)
            Holds::Nothing
                if matches!(actions.get(p), Some(Action::Delete))
                    && ours.get(p).is_some_and(Entry::is_dir)
                    && occupied() =>
            {
                actions.remove(p);
            }
            _ => {}
        }
    }
}

/// How the user settles conflicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Ours' version; for text, ours' lines in each conflicting hunk while the other
    /// side's non-conflicting changes stay (git's `merge-file --ours`).
    Ours,
    /// Theirs' version, the same way.
    Theirs,
    /// Text conflicts are written with conflict markers; others still need a side.
    Markers,
}

#[derive(Clone, Debug, Default)]
pub struct Choices {
    /// For every conflict not named in `paths`.
    pub all: Option<Choice>,
    pub paths: BTreeMap<String, Choice>,
    pub labels: Labels,
}

impl Choices {
    fn get(&self, p: &str) -> Option<Choice> {
        self.paths.get(p).copied().or(self.all)
    }
}

/// Conflicts the choices did not settle.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{} conflict(s) need a choice: {}", .paths.len(), .paths.iter().map(|(p, k)| format!("{p} ({})", k.name())).collect::<Vec<_>>().join(", "))]
pub struct Unresolved {
    pub paths: Vec<(String, ConflictKind)>,
}

/// The plan's actions with every conflict settled by `choices`. Nothing is settled
/// unless everything is: a conflict without a usable choice (none given, or markers
/// for a conflict that has no text hunks) makes the whole result `Unresolved`.
pub fn resolve(plan: &Plan, choices: &Choices) -> Result<BTreeMap<String, Action>, Unresolved> {
    let mut out = plan.actions.clone();
    let mut unresolved = Vec::new();
    // Directory/file conflicts settle their whole subtree for one side, first (outer
    // before inner: path order puts a directory before what is below it).
    let mut settled: Vec<String> = Vec::new();
    for (p, c) in plan.conflicts() {
        if c.conflict.kind != ConflictKind::DirectoryFile
            || settled.iter().any(|s| p.starts_with(&format!("{s}/")))
        {
            continue;
        }
        let side = match choices.get(p) {
            Some(Choice::Ours) => Side::Ours,
            Some(Choice::Theirs) => Side::Theirs,
            _ => {
                unresolved.push((p.clone(), c.conflict.kind.clone()));
                continue;
            }
        };
        let inner: Vec<String> = below(&out, p).cloned().collect();
        for q in inner {
            out.remove(&q);
        }
        out.remove(p);
        if let Some(a) = take(p, side, side_source(c, side), None, c.ours_here) {
            out.insert(p.clone(), a);
        }
        if side == Side::Theirs {
            for q in &c.theirs_below {
                out.insert(
                    q.clone(),
                    Action::Take {
                        side,
                        from: q.clone(),
                        mode: None,
                    },
                );
            }
            for q in &c.ours_below {
                if !c.theirs_below.contains(q) {
                    out.insert(q.clone(), Action::Delete);
                }
            }
        }
        settled.push(p.clone());
    }
    for (p, c) in plan.conflicts() {
        if c.conflict.kind == ConflictKind::DirectoryFile
            || settled.iter().any(|s| p.starts_with(&format!("{s}/")))
        {
            continue;
        }
        let action = choices
            .get(p)
            .and_then(|ch| settle(p, c, ch, &choices.labels));
        match action {
            Some(Some(a)) => {
                out.insert(p.clone(), a);
            }
            Some(None) => {
                out.remove(p);
            }
            None => unresolved.push((p.clone(), c.conflict.kind.clone())),
        }
    }
    if unresolved.is_empty() {
        Ok(out)
    } else {
        unresolved.sort_by(|a, b| a.0.cmp(&b.0));
        Err(Unresolved { paths: unresolved })
    }
}

fn side_source(c: &PathConflict, side: Side) -> Option<String> {
    match side {
        Side::Ours => c.ours.clone(),
        Side::Theirs => c.theirs.clone(),
    }
}

/// One conflict settled by a choice: Some(action or nothing to do), or None when the
/// choice cannot settle it.
fn settle(p: &str, c: &PathConflict, choice: Choice, labels: &Labels) -> Option<Option<Action>> {
    let k = &c.conflict;
    let side_mode = |side: Side| match side {
        Side::Ours => k.modes[1],
        Side::Theirs => k.modes[2],
    };
    let side = match choice {
        Choice::Markers => {
            let text = k.text.as_ref()?;
            let mode = k.mode.or(k.modes[1]).or(k.modes[2]).unwrap_or(0o644);
            return Some(Some(Action::Write {
                bytes: text.with_markers(labels),
                mode,
            }));
        }
        Choice::Ours => Side::Ours,
        Choice::Theirs => Side::Theirs,
    };
    if let (ConflictKind::Mode, Some(content)) = (&k.kind, &k.content) {
        let mode = side_mode(side)?;
        return Some(match content {
            Merged::Bytes(bytes) => Some(Action::Write {
                bytes: bytes.clone(),
                mode,
            }),
            Merged::Side(s) => {
                let own = side_mode(*s) == Some(mode);
                take(
                    p,
                    *s,
                    side_source(c, *s),
                    (!own).then_some(mode),
                    c.ours_here,
                )
            }
        });
    }
    if let Some(text) = &k.text {
        let mode = k.mode.or(side_mode(side)).unwrap_or(0o644);
        return Some(Some(Action::Write {
            bytes: text.resolve(side),
            mode,
        }));
    }
    // The side's whole entry; a mode both sides agreed on (one changed it) still applies.
    let mode = match (k.mode, side_mode(side)) {
        (Some(m), Some(own)) if m != own => Some(m),
        _ => None,
    };
    Some(take(p, side, side_source(c, side), mode, c.ours_here))
}

#[cfg(test)]
mod tests;
