//! `log`, `show` and `diff` in the engine, for the main tree or a branch (see `scope.rs`).
//!
//! Where a command takes a REF, a branch's current state can stand in for it: `main`
//! (the main tree as it is), `NAME` or `branch:NAME` (a branch as it is). Points are read
//! with the state-at-a-point rule in the scope's own tree; a branch's trees are compared
//! through `branches::sides`, which reads them where they may differ.

use std::sync::Arc;

use rustix::fs::OFlags;

use super::engine::{Engine, EngineError};
use super::scope::Scope;
use crate::branches::sides::{self, Item, Side};
use crate::ids::Seq;
use crate::restore::diff::{self, FileDiff};
use crate::restore::plan::{Content, Want};
use crate::timeline::branches::Branch;
use crate::timeline::{Event, Filter, Kind};

fn io(what: String) -> impl FnOnce(std::io::Error) -> EngineError {
    move |source| EngineError::Io { what, source }
}

/// One end of a `diff` (or what `show` reads): a tree as it is, or at a point.
enum End {
    MainNow,
    MainAt(Seq),
    BranchNow(Branch),
    BranchAt(Branch, Seq),
}

impl Engine {
    pub fn log(
        &self,
        path: Option<Vec<u8>>,
        since: Option<&str>,
        limit: Option<usize>,
        branch: Option<&str>,
    ) -> Result<Vec<Event>, EngineError> {
        let scope = self.scope(branch)?;
        if let (Some(p), Scope::Main) = (&path, &scope) {
            self.recorder.notice(p);
        }
        self.flush_all()?;
        let after = since.map(|s| self.point(s)).transpose()?;
        self.log_in(&scope, &Filter { path, after, limit })
    }

    /// The live branch `r` names (`NAME` or `branch:NAME`), if it names one.
    fn branch_ref(&self, r: &str) -> Result<Option<Branch>, EngineError> {
        if let Some(name) = r.strip_prefix("branch:") {
            return self.find_branch(name).map(Some);
        }
        // A name is a checkpoint's or a branch's, never both (creation refuses the other).
        Ok(self.tl().branch_by_name(r)?)
    }

    /// What `r` names in `scope`: a tree as it is (`main`, a branch), or a point of the
    /// scope's tree.
    fn end(&self, scope: &Scope, r: &str, paths: &[Vec<u8>]) -> Result<End, EngineError> {
        if r == "main" {
            return Ok(End::MainNow);
        }
        if let Some(b) = self.branch_ref(r)? {
            return Ok(End::BranchNow(b));
        }
        let p = self.point_in(scope, r, paths)?;
        Ok(match scope {
            Scope::Main => End::MainAt(p),
            Scope::Branch { branch, .. } => End::BranchAt(branch.clone(), p),
        })
    }

    /// The side an end is read as.
    fn side_of<'a>(&'a self, e: &End) -> Result<Side<'a>, EngineError> {
        let set = self.branches();
        let need = || {
            EngineError::Invalid(
                "comparing with a branch needs the project mounted: run `agx mount` first".into(),
            )
        };
        Ok(match e {
            End::MainNow => Side::Main(&self.root),
            End::MainAt(p) => {
                let views = set.ok_or_else(need)?.views();
                let snap = views
                    .at(*p)
                    .map_err(|e| EngineError::Invalid(format!("event:{}: {e}", p.0 + 1)))?;
                Side::Point(views, snap)
            }
            End::BranchNow(b) => Side::Branch(self.tree_of(b)?),
            End::BranchAt(b, p) => {
                let tree = self.tree_of(b)?;
                let events = self.tl().branch_events_after(b.id, *p)?;
                let scope = Scope::Branch {
                    branch: b.clone(),
                    tree: tree.clone(),
                };
                self.prepare(&scope, &events, &[], false)?;
                Side::BranchAt {
                    tree,
                    state: crate::restore::State::before(&events),
                    store: &self.store,
                }
            }
        })
    }

    fn tree_of(&self, b: &Branch) -> Result<Arc<crate::branches::Tree>, EngineError> {
        let set = self.branches().ok_or_else(|| {
            EngineError::Invalid(format!(
                "branch {}: a branch's tree is served by the daemon: run `agx mount` first",
                b.name
            ))
        })?;
        set.tree(b.id)
            .map_err(io(format!("opening branch '{}'", b.name)))
    }

    /// The bytes of `path` at `r` (a symlink: its target), in the main tree or a branch;
    /// `r` may name a tree as it is (`main`, a branch).
    pub fn show(&self, r: &str, path: &[u8], branch: Option<&str>) -> Result<Vec<u8>, EngineError> {
        let scope = self.scope(branch)?;
        match self.end(&scope, r, &[path.to_vec()])? {
            End::MainAt(point) => self.bytes_at(point, path, r),
            end => {
                let side = self.side_of(&end)?;
                let name = String::from_utf8_lossy(path).into_owned();
                let item = side
                    .item(path)
                    .map_err(|e| EngineError::Invalid(e.to_string()))?
                    .ok_or_else(|| EngineError::Absent {
                        path: name.clone(),
                        at: r.to_string(),
                    })?;
                self.item_bytes(&side, item, path, r)
            }
        }
    }

    fn item_bytes(
        &self,
        side: &Side<'_>,
        item: Item,
        path: &[u8],
        r: &str,
    ) -> Result<Vec<u8>, EngineError> {
        let name = String::from_utf8_lossy(path).into_owned();
        match item.entry {
            crate::branches::merge3::Entry::Dir => Err(EngineError::IsDir {
                path: name,
                at: r.to_string(),
            }),
            crate::branches::merge3::Entry::Symlink { target } => Ok(target),
            crate::branches::merge3::Entry::File { content, .. } => match content.bytes() {
                Some(b) => Ok(b.to_vec()),
                // Over the size read whole for comparisons: read it again, whole.
                None => match side {
                    Side::Main(root) => {
                        let o = crate::tree::stat_checked(root, path)
                            .map_err(|e| io(name.clone())(e.into()))?
                            .ok_or_else(|| EngineError::Absent {
                                path: name.clone(),
                                at: r.to_string(),
                            })?;
                        sides::read_live(&o).map_err(io(name))
                    }
                    Side::Branch(t) => {
                        let o = t.stat(path).map_err(io(name.clone()))?.ok_or_else(|| {
                            EngineError::Absent {
                                path: name.clone(),
                                at: r.to_string(),
                            }
                        })?;
                        t.content(&o).map_err(io(name))
                    }
                    Side::BranchAt { tree, state, store } => {
                        let w = state
                            .want(tree.root(), path)
                            .map_err(|e| io(name.clone())(e.into()))?
                            .ok_or_else(|| EngineError::Absent {
                                path: name.clone(),
                                at: r.to_string(),
                            })?;
                        sides::branch_bytes(tree, store, &w, path)
                            .map_err(|e| EngineError::Invalid(e.to_string()))
                    }
                    Side::Point(..) => Err(EngineError::Invalid(format!(
                        "{name}: too large to show from this point"
                    ))),
                },
            },
            crate::branches::merge3::Entry::Other { .. } => Err(EngineError::NotKept {
                path: name,
                at: r.to_string(),
                why: "it is a special file (no content)".into(),
            }),
        }
    }

    /// The bytes of `path` at `point` in `scope` (a symlink: its target); `label` names the
    /// point in errors.
    pub(crate) fn bytes_in(
        &self,
        scope: &Scope,
        point: Seq,
        path: &[u8],
        label: &str,
    ) -> Result<Vec<u8>, EngineError> {
        let Scope::Branch { branch, .. } = scope else {
            return self.bytes_at(point, path, label);
        };
        let end = End::BranchAt(branch.clone(), point.max(branch.base));
        let side = self.side_of(&end)?;
        let item = side
            .item(path)
            .map_err(|e| EngineError::Invalid(e.to_string()))?
            .ok_or_else(|| EngineError::Absent {
                path: String::from_utf8_lossy(path).into_owned(),
                at: label.to_string(),
            })?;
        self.item_bytes(&side, item, path, label)
    }

    /// The bytes of `path` at `point` of the main tree (a symlink: its target); `label`
    /// names the point in errors.
    pub(crate) fn bytes_at(
        &self,
        point: Seq,
        path: &[u8],
        label: &str,
    ) -> Result<Vec<u8>, EngineError> {
        let events = self.tl().events_after(point)?;
        let state = crate::restore::State::before(&events);
        let name = String::from_utf8_lossy(path).into_owned();
        let want = state
            .want(&self.root, path)
            .map_err(|e| io(name.clone())(e.into()))?
            .ok_or_else(|| EngineError::Absent {
                path: name.clone(),
                at: label.to_string(),
            })?;
        self.want_bytes(want, &name, label)
    }

    fn want_bytes(&self, want: Want, name: &str, r: &str) -> Result<Vec<u8>, EngineError> {
        let name = name.to_string();
        match want.kind {
            Kind::Dir => Err(EngineError::IsDir {
                path: name,
                at: r.to_string(),
            }),
            Kind::Symlink => Ok(want.target.unwrap_or_default()),
            _ => match want.content {
                Some(Content::Hash(h)) => {
                    if !want.captured {
                        return Err(EngineError::NotKept {
                            path: name,
                            at: r.to_string(),
                            why: "it was larger than the capture limit".into(),
                        });
                    }
                    self.store.get(&h).map_err(|source| EngineError::BadObject {
                        path: name,
                        at: r.to_string(),
                        source,
                    })
                }
                Some(Content::Live(src)) => {
                    let fd = crate::tree::open_beneath(
                        &self.root,
                        &src,
                        OFlags::RDONLY | OFlags::NOFOLLOW,
                    )
                    .map_err(|e| io(name.clone())(e.into()))?;
                    let mut v = Vec::new();
                    std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut v)
                        .map_err(io(name))?;
                    Ok(v)
                }
                None => Err(EngineError::NotKept {
                    path: name,
                    at: r.to_string(),
                    why: "no before-image was recorded".into(),
                }),
            },
        }
    }

    /// What changed from `from` to `to` (each a REF, `main` or a branch; FROM: the last
    /// mount in the main tree, a branch's base in a branch; TO: now), limited to `paths`.
    pub fn diff(
        &self,
        from: Option<&str>,
        to: Option<&str>,
        paths: &[Vec<u8>],
        branch: Option<&str>,
    ) -> Result<Vec<FileDiff>, EngineError> {
        self.flush_all()?;
        let scope = self.scope(branch)?;
        let from = match (from, &scope) {
            (Some(f), _) => self.end(&scope, f, paths)?,
            (None, Scope::Main) => {
                // Never before the gc horizon, whose history is gone.
                let tl = self.tl();
                let h = tl.horizon()?.map(|h| h.seq).unwrap_or(Seq(0));
                End::MainAt(tl.last_mount_point()?.unwrap_or(Seq(0)).max(h))
            }
            (None, Scope::Branch { branch, .. }) => End::MainAt(branch.base),
        };
        let to = match (to, &scope) {
            (Some(t), _) => self.end(&scope, t, paths)?,
            (None, Scope::Main) => End::MainNow,
            (None, Scope::Branch { branch, .. }) => End::BranchNow(branch.clone()),
        };
        match (&from, &to) {
            (End::MainAt(f), End::MainNow) => {
                let tl = self.tl();
                Ok(diff::diff(&self.root, &tl, &self.store, *f, None, paths)?)
            }
            (End::MainAt(f), End::MainAt(t)) => {
                let tl = self.tl();
                Ok(diff::diff(
                    &self.root,
                    &tl,
                    &self.store,
                    *f,
                    Some(*t),
                    paths,
                )?)
            }
            _ => self.diff_sides(&from, &to, paths),
        }
    }

    /// A diff where at least one end is a branch, read through `branches::sides`.
    fn diff_sides(
        &self,
        from: &End,
        to: &End,
        paths: &[Vec<u8>],
    ) -> Result<Vec<FileDiff>, EngineError> {
        let mut oldest: Option<Seq> = None;
        let mut branches = Vec::new();
        for e in [from, to] {
            let p = match e {
                End::MainNow => None,
                End::MainAt(p) => Some(*p),
                End::BranchNow(b) | End::BranchAt(b, _) => {
                    branches.push(b.id);
                    Some(b.base)
                }
            };
            oldest = match (oldest, p) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let mut cand = sides::candidates(&self.tl(), oldest, &branches)?;
        cand.extend(paths.iter().cloned());
        let err = |e: sides::SideError| EngineError::Invalid(e.to_string());
        let a = self.side_of(from)?.read(&cand).map_err(err)?;
        let b = self.side_of(to)?.read(&cand).map_err(err)?;
        let keys: std::collections::BTreeSet<&String> =
            a.items.keys().chain(b.items.keys()).collect();
        let side = |i: Option<&Item>| -> Option<diff::Side> {
            let i = i?;
            let (kind, bytes) = match &i.entry {
                crate::branches::merge3::Entry::File { content, .. } => (
                    Kind::File,
                    content.bytes().map(<[u8]>::to_vec).unwrap_or_else(|| {
                        // Too large to read whole here: compared by hash, shown as binary.
                        let mut v = vec![0u8];
                        v.extend_from_slice(content.hash().to_hex().as_bytes());
                        v
                    }),
                ),
                crate::branches::merge3::Entry::Symlink { target } => {
                    (Kind::Symlink, target.clone())
                }
                _ => return None,
            };
            Some(diff::Side {
                kind,
                bytes,
                mode: i.meta.mode & 0o7777,
            })
        };
        let pairs = keys
            .into_iter()
            .filter(|k| diff::within(k.as_bytes(), paths))
            .map(|k| (k.clone(), side(a.items.get(k)), side(b.items.get(k))))
            .collect();
        Ok(diff::compare(pairs))
    }
}
