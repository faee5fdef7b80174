//! The capture policy: which changes pass through uncaptured.
//!
//! Ignore rules (`.gitignore` files, `.agxignore`, the config's `exclude`) exist to keep
//! build outputs and dependencies out of history. They must never be a way to switch
//! capture off for what matters (DESIGN.md invariant 3). A change of path P is passed
//! through uncaptured only when all of these hold:
//!
//! 1. the rules ignore P (git's object store always is);
//! 2. no ignore file behind that verdict was last written, or moved into place, by an
//!    agent session (ended or not): rules an agent writes never exempt anything, its own
//!    later changes included, until a person changes that file again;
//! 3. git does not track P (in the index of P's repository), nor, for a directory,
//!    anything below it;
//! 4. P has no history: no event names it, and nothing was moved to it or to one of its
//!    ancestors (an object moved into an ignored directory keeps its history);
//! 5. the object changed is not a regular file with several names (its history may be
//!    under another name; checked by the caller, `fs/record.rs`, which holds the object).
//!
//! Each check is cached per directory where it can be (a build creating thousands of
//! ignored files asks once per directory), and the caches are dropped whenever a recorded
//! change could alter an answer (an ignore file, a directory moved, git's index).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};

use super::gitindex::GitIndexes;
use super::ignore::IgnoreRules;
use crate::ids::Seq;
use crate::timeline::{Event, Op, Timeline};

/// Paths named by events begun and not yet in the timeline database (the worker writes in
/// batches): what a question to the database cannot see yet.
#[derive(Default)]
pub struct Recent {
    /// Events that left (reached the database or were dropped), for a reader that must
    /// know none did while it looked at the database and then the tree.
    left: std::sync::atomic::AtomicU64,
    paths: Mutex<HashMap<Vec<u8>, u32>>,
    /// The paths something was moved to (rename and exchange destinations, exchange
    /// sources).
    moved: Mutex<HashMap<Vec<u8>, u32>>,
}

fn count(m: &mut HashMap<Vec<u8>, u32>, p: &[u8], up: bool) {
    if up {
        *m.entry(p.to_vec()).or_default() += 1;
    } else if let Some(n) = m.get_mut(p) {
        *n -= 1;
        if *n == 0 {
            m.remove(p);
        }
    }
}

impl Recent {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, u32>> {
        self.paths.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn moves(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, u32>> {
        self.moved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `e`'s paths up or down. Only the main tree's events count: the set is
    /// about the main tree's paths (a branch's are relative to the branch).
    fn update(&self, e: &Event, up: bool) {
        if e.branch.is_some() {
            return;
        }
        {
            let mut m = self.map();
            count(&mut m, &e.path, up);
            if let Some(t) = &e.to_path {
                count(&mut m, t, up);
            }
        }
        if matches!(e.op, Op::Rename | Op::Exchange) {
            let mut m = self.moves();
            if let Some(t) = &e.to_path {
                count(&mut m, t, up);
            }
            if e.op == Op::Exchange {
                count(&mut m, &e.path, up);
            }
        }
    }

    pub fn add(&self, e: &Event) {
        self.update(e, true);
    }

    pub fn remove(&self, e: &Event) {
        self.update(e, false);
        self.left.fetch_add(1, Ordering::SeqCst);
    }

    /// How many events have left so far.
    pub fn left(&self) -> u64 {
        self.left.load(Ordering::SeqCst)
    }

    pub fn contains(&self, p: &[u8]) -> bool {
        self.map().contains_key(p)
    }

    /// Whether something was recently moved to `p`.
    pub fn moved_to(&self, p: &[u8]) -> bool {
        self.moves().contains_key(p)
    }

    /// Whether a recent path is below `dir` ("": any).
    pub fn any_below(&self, dir: &[u8]) -> bool {
        self.map()
            .keys()
            .any(|p| dir.is_empty() || (p.starts_with(dir) && p.get(dir.len()) == Some(&b'/')))
    }
}

/// What the history of a directory's entries says, as far as it can be said once for
/// all of them.
#[derive(Clone, Copy)]
struct DirHistory {
    /// Some event names a path below the directory.
    below: bool,
    /// Something was moved to the directory or to one of its ancestors.
    moved_in: bool,
}

/// What the policy consults.
pub struct Env<'a> {
    pub root: &'a OwnedFd,
    pub timeline: &'a Mutex<Timeline>,
    pub recent: &'a Recent,
}

#[derive(Default)]
pub struct Policy {
    /// Per directory: see [`DirHistory`].
    dirs: RwLock<HashMap<Vec<u8>, DirHistory>>,
    has_dirs: AtomicBool,
    /// Per ignore file: whether an agent session wrote it last (cached; see `trusted`).
    trust: Mutex<HashMap<PathBuf, bool>>,
    /// The latest event (seq, by an agent session) on each ignore file and each path a
    /// directory was moved from or to, since the daemon started: the database may not
    /// have them yet.
    writers: Mutex<HashMap<Vec<u8>, (Seq, bool)>>,
    git: GitIndexes,
}

fn ancestors(p: &[u8]) -> Vec<Vec<u8>> {
    p.iter()
        .enumerate()
        .filter(|(_, c)| **c == b'/')
        .map(|(i, _)| p[..i].to_vec())
        .collect()
}

fn parent(p: &[u8]) -> &[u8] {
    p.iter()
        .rposition(|c| *c == b'/')
        .map_or(&[][..], |i| &p[..i])
}

fn basename(p: &[u8]) -> &[u8] {
    p.iter()
        .rposition(|c| *c == b'/')
        .map_or(p, |i| &p[i + 1..])
}

/// Whether `e` moves or removes a directory.
fn moves_a_dir(e: &Event) -> bool {
    use crate::timeline::Kind;
    matches!(e.op, Op::Rename | Op::Exchange | Op::Rmdir)
        && (e.before.kind == Kind::Dir
            || e.target_before
                .as_ref()
                .is_some_and(|t| t.kind == Kind::Dir))
}

impl Policy {
    /// Whether a change of `path` passes through uncaptured (see the module comment).
    /// A question the database cannot answer (an I/O error) is answered "capture".
    pub fn skips(&self, rules: &IgnoreRules, path: &[u8], is_dir: bool, env: &Env) -> bool {
        let v = rules.verdict(Path::new(std::ffi::OsStr::from_bytes(path)), is_dir);
        if !v.ignored {
            return false;
        }
        if v.fixed {
            return true;
        }
        if v.files.iter().any(|f| !self.trusted(f, env)) {
            return false;
        }
        if self.git.tracks(env.root, path, is_dir) {
            return false;
        }
        !self.has_history(path, is_dir, env).unwrap_or(true)
    }

    /// Whether entries of `dir` may have history.
    pub fn may_have_history(&self, dir: &[u8], env: &Env) -> bool {
        self.dir(dir, env).map_or(true, |d| d.below || d.moved_in)
    }

    /// Whether `path` has history (rule 4).
    fn has_history(&self, path: &[u8], is_dir: bool, env: &Env) -> Result<bool, ()> {
        let d = self.dir(parent(path), env)?;
        if d.moved_in {
            return Ok(true);
        }
        if is_dir && self.dir(path, env)?.below {
            return Ok(true);
        }
        if !d.below {
            return Ok(false);
        }
        if env.recent.contains(path) {
            return Ok(true);
        }
        let tl = env.timeline.lock().unwrap_or_else(|e| e.into_inner());
        tl.has_history(path)
            .map_err(|e| log::warn!("capture policy: {e}"))
    }

    /// What the history of directory `dir` says (cached).
    fn dir(&self, dir: &[u8], env: &Env) -> Result<DirHistory, ()> {
        if let Some(d) = self.dirs.read().unwrap_or_else(|e| e.into_inner()).get(dir) {
            return Ok(*d);
        }
        // Computed and stored under the write lock, so an event noted meanwhile
        // (`note`) cannot be lost between the question and the answer's storing.
        let mut dirs = self.dirs.write().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = dirs.get(dir) {
            return Ok(*d);
        }
        let mut moved_to: Vec<Vec<u8>> = ancestors(dir);
        moved_to.retain(|a| !a.is_empty());
        if !dir.is_empty() {
            moved_to.push(dir.to_vec());
        }
        let d = {
            let tl = env.timeline.lock().unwrap_or_else(|e| e.into_inner());
            let below = env.recent.any_below(dir)
                || tl
                    .has_history_below(dir)
                    .map_err(|e| log::warn!("capture policy: {e}"))?;
            let moved_in = moved_to.iter().any(|p| env.recent.moved_to(p))
                || tl
                    .moved_to_any(&moved_to)
                    .map_err(|e| log::warn!("capture policy: {e}"))?;
            DirHistory { below, moved_in }
        };
        dirs.insert(dir.to_vec(), d);
        self.has_dirs.store(true, Ordering::Release);
        Ok(d)
    }

    /// Whether the ignore file `f` may exempt paths (rule 2): the newest change of it, or
    /// of which object one of its directories names, was not made by an agent session.
    fn trusted(&self, f: &Path, env: &Env) -> bool {
        if let Some(t) = self.trust.lock().unwrap_or_else(|e| e.into_inner()).get(f) {
            return *t;
        }
        let p = f.as_os_str().as_bytes();
        let mut anc = ancestors(p);
        anc.retain(|a| !a.is_empty());
        let newest_here = {
            let w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
            std::iter::once(p.to_vec())
                .chain(anc.iter().cloned())
                .filter_map(|q| w.get(&q).copied())
                .max_by_key(|(s, _)| *s)
        };
        let newest_before = {
            let tl = env.timeline.lock().unwrap_or_else(|e| e.into_inner());
            match tl.last_touching(p, &anc, None) {
                Ok(e) => e.map(|e| (e.seq, e.session.is_some())),
                Err(e) => {
                    log::warn!("capture policy: {e}");
                    Some((Seq(i64::MAX), true))
                }
            }
        };
        let by_session = [newest_here, newest_before]
            .into_iter()
            .flatten()
            .max_by_key(|(s, _)| *s)
            .is_some_and(|(_, session)| session);
        if by_session {
            log::info!(
                "{}: written by an agent session; its rules exempt nothing from capture",
                f.display()
            );
        }
        self.trust
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(f.to_path_buf(), !by_session);
        !by_session
    }

    /// Takes note of an event as it begins: it may give a path history, change an ignore
    /// file's author, move directories (and the ignore files in them) or change git's
    /// index. Returns whether the ignore rules must be reloaded.
    pub fn note(&self, e: &Event) -> bool {
        if e.branch.is_some() {
            return false;
        }
        let dir_moved = moves_a_dir(e);
        let names_rules = |p: &[u8]| super::ignore::is_ignore_file(basename(p));
        let rules =
            dir_moved || names_rules(&e.path) || e.to_path.as_deref().is_some_and(names_rules);
        if rules {
            let by_session = e.session.is_some();
            let mut w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
            w.insert(e.path.clone(), (e.seq, by_session));
            if let Some(t) = &e.to_path {
                w.insert(t.clone(), (e.seq, by_session));
            }
            drop(w);
            self.trust.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        let gitish = |p: &[u8]| {
            let b = basename(p);
            let in_git = basename(parent(p)) == b".git";
            b == b".git" || (in_git && (b == b"index" || b == b"config"))
        };
        if gitish(&e.path) || e.to_path.as_deref().is_some_and(gitish) || dir_moved {
            if basename(&e.path) == b".git" || dir_moved {
                self.git.reset();
            } else {
                self.git.reset_indexes();
            }
        }
        if dir_moved || matches!(e.op, Op::Rename | Op::Exchange) {
            // What was moved where is asked per directory: start over.
            if dir_moved {
                self.dirs.write().unwrap_or_else(|e| e.into_inner()).clear();
                return rules;
            }
        }
        if self.has_dirs.load(Ordering::Acquire) {
            // Most events change no answer: look under the read lock first.
            let stale: Vec<Vec<u8>> = {
                let dirs = self.dirs.read().unwrap_or_else(|e| e.into_inner());
                std::iter::once(&e.path)
                    .chain(e.to_path.as_ref())
                    .flat_map(|p| std::iter::once(Vec::new()).chain(ancestors(p)))
                    .filter(|a| dirs.get(a).is_some_and(|d| !d.below))
                    .collect()
            };
            if !stale.is_empty() {
                let mut dirs = self.dirs.write().unwrap_or_else(|e| e.into_inner());
                for a in stale {
                    if let Some(d) = dirs.get_mut(&a) {
                        d.below = true;
                    }
                }
            }
        }
        rules
    }
}

impl super::recorder::Recorder {
    /// Whether changes to `path` pass through without capture (see `policy.rs`: ignore
    /// rules never exempt what has history, what git tracks, or anything under rules an
    /// agent session wrote).
    pub fn skips(&self, path: &[u8], is_dir: bool) -> bool {
        let env = super::policy::Env {
            root: &self.shared.root,
            timeline: &self.query,
            recent: &self.shared.recent,
        };
        self.policy.skips(&self.ignore, path, is_dir, &env)
    }
    /// Whether entries of directory `dir` may have history (cheap once asked: cached per
    /// directory). False means none has any.
    pub fn may_have_history(&self, dir: &[u8]) -> bool {
        let env = super::policy::Env {
            root: &self.shared.root,
            timeline: &self.query,
            recent: &self.shared.recent,
        };
        self.policy.may_have_history(dir, &env)
    }
}
