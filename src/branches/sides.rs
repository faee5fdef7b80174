//! The trees that `agx diff`, `agx merge` and `agx switch` compare: the main tree as it is,
//! the main tree at a past point (a view), or a branch as it is. Each is read only where a
//! change may be: at the candidate paths (those the events after the oldest point involved
//! name, in the main tree and in the branches) and below them. Everywhere else all of them
//! are the same object (the main tree's live file, untouched since every base involved).
//!
//! A tree here is `merge3::Tree`: paths as UTF-8 strings (a path that is not UTF-8 is an
//! error: a merge cannot name it in its report), contents as bytes up to [`MAX_BYTES`] and
//! as hashes beyond (two such files changed on both sides are a binary conflict).

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::OFlags;

use super::merge3::{Content, Entry, Tree as MTree};
use super::set::Tree;
use crate::ids::{ContentHash, Seq};
use crate::restore::plan::{Content as WantContent, Want};
use crate::timeline::{Kind, Meta};
use crate::tree::{self as live, LiveObj};
use crate::views::{Snapshot, Source, ViewError, Views};

/// Files up to this size are read whole (a line merge needs the bytes); larger ones are
/// compared by hash. 16 MiB: a merge of 1,000 changed files stays well within memory.
pub const MAX_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SideError {
    #[error(
        "{0}: the path is not UTF-8; merge, switch and diff of branches name paths in UTF-8 only"
    )]
    NotUtf8(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    View(#[from] ViewError),
}

fn io(what: &[u8]) -> impl FnOnce(std::io::Error) -> SideError + '_ {
    move |source| SideError::Io {
        what: String::from_utf8_lossy(what).into_owned(),
        source,
    }
}

/// One of the trees compared.
pub enum Side<'a> {
    /// The main tree as it is (its backing root).
    Main(&'a OwnedFd),
    /// The main tree at a past point.
    Point(&'a Views, Snapshot),
    /// A branch as it is.
    Branch(Arc<Tree>),
    /// A branch at a past point: its events after the point undone over its tree.
    BranchAt {
        tree: Arc<Tree>,
        state: crate::restore::State,
        store: &'a crate::store::Store,
    },
}

/// One path's state on a side: the entry merge compares, and the metadata to give it.
#[derive(Clone, Debug)]
pub struct Item {
    pub entry: Entry,
    pub meta: Meta,
}

/// A side read at the candidate paths and below them.
#[derive(Default)]
pub struct Read {
    pub tree: MTree,
    pub items: BTreeMap<String, Item>,
}

fn utf8(p: &[u8]) -> Result<String, SideError> {
    String::from_utf8(p.to_vec()).map_err(|_| SideError::NotUtf8(String::from_utf8_lossy(p).into()))
}

fn read_fd_all(fd: impl AsFd) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = rustix::io::pread(&fd, &mut buf, out.len() as u64)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Opens the object behind an `O_PATH` descriptor for reading.
fn reopen(fd: &OwnedFd) -> std::io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    crate::sys::fd::without_atime(|quiet| {
        rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::CLOEXEC | quiet,
            rustix::fs::Mode::empty(),
        )
    })
    .map_err(Into::into)
}

/// The content of a live regular file (`O_PATH` descriptor), whole.
pub fn read_live(o: &LiveObj) -> std::io::Result<Vec<u8>> {
    read_fd_all(reopen(&o.fd)?)
}

fn content_of(bytes: Vec<u8>, size: u64) -> Content {
    if size > MAX_BYTES {
        Content::Hash(ContentHash::of(&bytes))
    } else {
        Content::Bytes(bytes)
    }
}

fn entry_of(
    kind: Kind,
    meta: &Meta,
    content: impl FnOnce() -> Result<Content, SideError>,
) -> Result<Entry, SideError> {
    Ok(match kind {
        Kind::File => Entry::File {
            content: content()?,
            mode: meta.mode & 0o7777,
        },
        Kind::Dir => Entry::Dir,
        Kind::Symlink => Entry::Symlink {
            target: meta.target.clone().unwrap_or_default(),
        },
        _ => Entry::Other {
            mode: meta.mode,
            rdev: meta.rdev,
        },
    })
}

impl Side<'_> {
    /// The state of `path` (None: absent).
    pub fn item(&self, path: &[u8]) -> Result<Option<Item>, SideError> {
        match self {
            Side::Main(root) => {
                let Some(o) = live::stat_checked(root, path).map_err(|e| io(path)(e.into()))?
                else {
                    return Ok(None);
                };
                live_item(&o, path, read_live)
            }
            Side::Branch(t) => {
                let Some(o) = t.stat(path).map_err(io(path))? else {
                    return Ok(None);
                };
                live_item(&o, path, |o| t.content(o))
            }
            Side::BranchAt { tree, state, store } => {
                let Some(w) = state
                    .want(tree.root(), path)
                    .map_err(|e| io(path)(e.into()))?
                else {
                    return Ok(None);
                };
                let meta = w.meta.clone().unwrap_or_default();
                let entry = entry_of(w.kind, &meta, || {
                    let bytes = branch_bytes(tree, store, &w, path)?;
                    let size = bytes.len() as u64;
                    Ok(content_of(bytes, size))
                })?;
                Ok(Some(Item { entry, meta }))
            }
            Side::Point(views, s) => {
                let w = match views.want(s, path) {
                    Ok(w) => w,
                    Err(ViewError::NotFound) => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                let meta = w.meta.clone().unwrap_or_default();
                let entry = entry_of(w.kind, &meta, || {
                    let bytes = match views.open(s, path)? {
                        Source::Stored(d) => d.as_ref().clone(),
                        Source::Live(fd) => read_fd_all(&fd).map_err(io(path))?,
                    };
                    let size = bytes.len() as u64;
                    Ok(content_of(bytes, size))
                })?;
                Ok(Some(Item { entry, meta }))
            }
        }
    }

    /// The names in directory `dir`.
    pub fn names(&self, dir: &[u8]) -> Result<Vec<Vec<u8>>, SideError> {
        let mut names = match self {
            Side::Main(root) => live::list(root, dir),
            Side::Branch(t) => t.list(dir).map_err(io(dir))?,
            Side::Point(views, s) => views.list(s, dir)?.into_iter().map(|(n, _)| n).collect(),
            Side::BranchAt { tree, state, .. } => state
                .list(tree.root(), dir, |src| tree.list(src).unwrap_or_default())
                .map_err(|e| io(dir)(e.into()))?
                .into_iter()
                .map(|(n, _)| n)
                .collect(),
        };
        if dir.is_empty() {
            names.retain(|n| n != crate::sys::path::AGX_DIR_NAME.as_bytes());
        }
        Ok(names)
    }

    /// This side at the paths `cand` and everything below those that are directories.
    pub fn read(&self, cand: &BTreeSet<Vec<u8>>) -> Result<Read, SideError> {
        let mut out = Read::default();
        let mut todo: Vec<Vec<u8>> = cand.iter().rev().cloned().collect();
        let mut seen: BTreeSet<Vec<u8>> = BTreeSet::new();
        while let Some(p) = todo.pop() {
            if p.is_empty() || crate::sys::path::is_agx(&p) || !seen.insert(p.clone()) {
                continue;
            }
            let Some(item) = self.item(&p)? else { continue };
            if item.entry.is_dir() {
                for n in self.names(&p)? {
                    todo.push(crate::sys::path::join(&p, &n));
                }
            }
            let key = utf8(&p)?;
            out.tree.insert(key.clone(), item.entry.clone());
            out.items.insert(key, item);
        }
        Ok(out)
    }
}

/// The bytes of a branch's file at a point: a stored version, or the branch's live file
/// the state mirrors (its own content, or its base's while not copied up).
pub fn branch_bytes(
    tree: &Tree,
    store: &crate::store::Store,
    w: &Want,
    path: &[u8],
) -> Result<Vec<u8>, SideError> {
    match &w.content {
        Some(WantContent::Hash(h)) if w.captured => Ok(store
            .get(h)
            .map_err(|e| io(path)(std::io::Error::other(e.to_string())))?),
        Some(WantContent::Live(src)) => {
            let o = tree
                .stat(src)
                .map_err(io(path))?
                .ok_or_else(|| io(path)(std::io::Error::from_raw_os_error(libc::ENOENT)))?;
            tree.content(&o).map_err(io(path))
        }
        _ => Err(io(path)(std::io::Error::other(
            "its content at that point was not kept",
        ))),
    }
}

fn live_item(
    o: &LiveObj,
    path: &[u8],
    read: impl FnOnce(&LiveObj) -> std::io::Result<Vec<u8>>,
) -> Result<Option<Item>, SideError> {
    let meta = o.meta();
    let entry = entry_of(o.kind, &meta, || {
        let bytes = read(o).map_err(io(path))?;
        let size = bytes.len() as u64;
        Ok(content_of(bytes, size))
    })?;
    Ok(Some(Item { entry, meta }))
}

/// The state merge or switch asks of the main tree at a path: `item`, its content put in
/// the store first (`put`) so the restore machinery can write it and verify it.
pub fn want_of(
    item: &Item,
    put: impl FnOnce(&[u8]) -> std::io::Result<ContentHash>,
    bytes: Option<&[u8]>,
) -> std::io::Result<Want> {
    let kind = match &item.entry {
        Entry::File { .. } => Kind::File,
        Entry::Dir => Kind::Dir,
        Entry::Symlink { .. } => Kind::Symlink,
        Entry::Other { .. } => Kind::Other,
    };
    let content = match (&item.entry, bytes) {
        (Entry::File { .. }, Some(b)) => Some(WantContent::Hash(put(b)?)),
        (Entry::File { content, .. }, None) => match content.bytes() {
            Some(b) => Some(WantContent::Hash(put(b)?)),
            None => {
                return Err(std::io::Error::other(
                    "a file over the merge size limit has no bytes to write",
                ))
            }
        },
        _ => None,
    };
    Ok(Want {
        kind,
        content,
        target: item.meta.target.clone(),
        meta: Some(item.meta.clone()),
        captured: true,
        inode: None,
        seen: None,
    })
}

/// The candidate paths for sides based at `oldest` (a point of the main tree) and the
/// branches `branches`: every path the main tree's events after `oldest` and the branches'
/// events name (the path and the one moved to).
pub fn candidates(
    tl: &crate::timeline::Timeline,
    oldest: Option<Seq>,
    branches: &[crate::ids::BranchId],
) -> Result<BTreeSet<Vec<u8>>, crate::timeline::TimelineError> {
    let mut cand = BTreeSet::new();
    let mut add = |e: &crate::timeline::Event| {
        cand.insert(e.path.clone());
        if let Some(t) = &e.to_path {
            cand.insert(t.clone());
        }
    };
    if let Some(p) = oldest {
        for e in tl.events_after(p)? {
            add(&e);
        }
    }
    for b in branches {
        for e in tl.branch_events_after(*b, Seq(0))? {
            add(&e);
        }
    }
    Ok(cand)
}
