//! Differences between two points: per file added, deleted, modified or renamed, with
//! unified text diffs (binary files are reported as binary).

use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::OwnedFd;

use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};

use super::plan::{resolve, Content, Want};
use super::RestoreError;
use super::State;
use crate::ids::{ContentHash, Seq};
use crate::store::Store;
use crate::timeline::{Kind, Timeline};
use crate::tree as live;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Added,
    Deleted,
    Modified,
    Renamed,
    /// Only the mode changed.
    Mode,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileDiff {
    pub path: String,
    /// For a rename: the new path (`path` is the old one).
    pub to_path: Option<String>,
    pub change: Change,
    pub binary: bool,
    pub added: usize,
    pub removed: usize,
    pub old_mode: Option<u32>,
    pub new_mode: Option<u32>,
    /// The unified diff (empty for binary files).
    pub text: String,
}

/// One side of a path's difference: what is there, its bytes (a symlink: its target) and
/// permission bits.
pub struct Side {
    pub kind: Kind,
    pub bytes: Vec<u8>,
    pub mode: u32,
}

fn read_side(root: &OwnedFd, store: &Store, w: Option<Want>) -> Result<Option<Side>, RestoreError> {
    let Some(w) = w else { return Ok(None) };
    let mode = w.meta.as_ref().map(|m| m.mode & 0o7777).unwrap_or(0);
    let bytes = match w.kind {
        Kind::File => match w.content {
            Some(Content::Hash(h)) => store.get(&h)?,
            Some(Content::Live(src)) => {
                let mut v = Vec::new();
                if let Ok(fd) = live::open_beneath(root, &src, OFlags::RDONLY | OFlags::NOFOLLOW) {
                    let _ = std::fs::File::from(fd).read_to_end(&mut v);
                }
                v
            }
            None => return Ok(None),
        },
        Kind::Symlink => w.target.unwrap_or_default(),
        _ => return Ok(None),
    };
    Ok(Some(Side {
        kind: w.kind,
        bytes,
        mode,
    }))
}

fn is_binary(b: &[u8]) -> bool {
    b[..b.len().min(8000)].contains(&0) || std::str::from_utf8(b).is_err()
}

fn text_diff(old: &[u8], new: &[u8], a: &str, b: &str) -> (String, usize, usize) {
    let old = String::from_utf8_lossy(old);
    let new = String::from_utf8_lossy(new);
    let d = similar::TextDiff::from_lines(old.as_ref(), new.as_ref());
    let (mut add, mut del) = (0, 0);
    for c in d.iter_all_changes() {
        match c.tag() {
            similar::ChangeTag::Insert => add += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    let text = d.unified_diff().context_radius(3).header(a, b).to_string();
    (text, add, del)
}

/// The state of every touched path at `from` and at `to` (to = None: the live tree).
pub fn diff(
    root: &OwnedFd,
    timeline: &Timeline,
    store: &Store,
    from: Seq,
    to: Option<Seq>,
    only: &[Vec<u8>],
) -> Result<Vec<FileDiff>, RestoreError> {
    let after_from = timeline.events_after(from)?;
    let between: Vec<_> = match to {
        Some(to) => after_from.iter().filter(|e| e.seq <= to).cloned().collect(),
        None => after_from.clone(),
    };
    let state_from = State::before(&after_from);
    let state_to = match to {
        Some(to) => State::before(&timeline.events_after(to)?),
        None => State::default(),
    };
    let (model_from, model_to) = (state_from.model(), state_to.model());
    let mut paths = BTreeSet::new();
    for e in &between {
        paths.insert(e.path.clone());
        if let Some(t) = &e.to_path {
            paths.insert(t.clone());
        }
    }
    // Paths either model states explicitly (undone directory moves carry entries to paths
    // no event named).
    for m in [model_from, model_to] {
        paths.extend(m.entries().map(|(k, _)| k.clone()));
    }
    // Directories: their files, live and at both points, are what differ.
    let mut extra = Vec::new();
    for p in &paths {
        for m in [model_from, model_to] {
            if let Some(w) = resolve(root, m.lookup(p)) {
                if w.kind == Kind::Dir {
                    if let super::model::Entry::Node(n) = m.lookup(p) {
                        if let Some(src) = n.src {
                            let mut below = Vec::new();
                            live::walk(root, &src, &mut below);
                            extra.extend(
                                below
                                    .into_iter()
                                    .map(|b| crate::sys::path::join(p, &b[src.len() + 1..])),
                            );
                        }
                    }
                }
            }
        }
    }
    paths.extend(extra);
    let mut pairs = Vec::new();
    for p in paths {
        if super::plan::protected(&p) || !within(&p, only) {
            continue;
        }
        let name = String::from_utf8_lossy(&p).into_owned();
        let failed = |e: rustix::io::Errno| RestoreError::Other(format!("{name}: {e}"));
        let a = read_side(root, store, state_from.want(root, &p).map_err(failed)?)?;
        let b = read_side(root, store, state_to.want(root, &p).map_err(failed)?)?;
        pairs.push((name, a, b));
    }
    Ok(compare(pairs))
}

/// Whether `p` is one of `only` or below one (everything when `only` is empty).
pub fn within(p: &[u8], only: &[Vec<u8>]) -> bool {
    only.is_empty()
        || only
            .iter()
            .any(|o| p == o.as_slice() || (p.starts_with(o) && p.get(o.len()) == Some(&b'/')))
}

/// The differences of paths given with what each is on the two sides (None: nothing,
/// or a directory or special file, which show no content), renames found among the added
/// and deleted files, sorted by path.
pub fn compare(pairs: Vec<(String, Option<Side>, Option<Side>)>) -> Vec<FileDiff> {
    let mut added: Vec<(String, Side)> = Vec::new();
    let mut deleted: Vec<(String, Side)> = Vec::new();
    let mut out = Vec::new();
    for (name, a, b) in pairs {
        match (a, b) {
            (None, None) => {}
            (None, Some(b)) => added.push((name, b)),
            (Some(a), None) => deleted.push((name, a)),
            (Some(a), Some(b)) => {
                if a.bytes == b.bytes && a.kind == b.kind {
                    if a.mode != b.mode {
                        out.push(FileDiff {
                            path: name,
                            to_path: None,
                            change: Change::Mode,
                            binary: false,
                            added: 0,
                            removed: 0,
                            old_mode: Some(a.mode),
                            new_mode: Some(b.mode),
                            text: String::new(),
                        });
                    }
                    continue;
                }
                out.push(file_diff(&name, None, Change::Modified, &a, &b));
            }
        }
    }
    // A deleted file whose exact content appears as an added one was renamed.
    let mut renamed_to = BTreeSet::new();
    for (old, a) in &deleted {
        let h = ContentHash::of(&a.bytes);
        if let Some((new, b)) = added.iter().find(|(n, b)| {
            !renamed_to.contains(n) && b.kind == a.kind && ContentHash::of(&b.bytes) == h
        }) {
            renamed_to.insert(new.clone());
            let mut d = file_diff(old, Some(new), Change::Renamed, a, b);
            d.text = String::new();
            out.push(d);
        } else {
            let empty = Side {
                kind: a.kind,
                bytes: Vec::new(),
                mode: 0,
            };
            out.push(file_diff(old, None, Change::Deleted, a, &empty));
        }
    }
    for (new, b) in &added {
        if renamed_to.contains(new) {
            continue;
        }
        let empty = Side {
            kind: b.kind,
            bytes: Vec::new(),
            mode: 0,
        };
        out.push(file_diff(new, None, Change::Added, &empty, b));
    }
    out.sort_by(|x, y| x.path.cmp(&y.path));
    out
}

fn file_diff(path: &str, to: Option<&String>, change: Change, a: &Side, b: &Side) -> FileDiff {
    let binary = is_binary(&a.bytes) || is_binary(&b.bytes);
    let (text, added, removed) = if binary {
        (String::new(), 0, 0)
    } else {
        let an = match change {
            Change::Added => "/dev/null".to_string(),
            _ => format!("a/{path}"),
        };
        let bn = match change {
            Change::Deleted => "/dev/null".to_string(),
            _ => format!("b/{}", to.map(String::as_str).unwrap_or(path)),
        };
        text_diff(&a.bytes, &b.bytes, &an, &bn)
    };
    FileDiff {
        path: path.to_string(),
        to_path: to.cloned(),
        change,
        binary,
        added,
        removed,
        old_mode: (a.mode != 0).then_some(a.mode),
        new_mode: (b.mode != 0).then_some(b.mode),
        text,
    }
}
