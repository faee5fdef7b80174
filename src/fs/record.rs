//! Recording mutations: paths of nodes, and the begin/finish pair every mutating request
//! wraps around its change (see `crate::capture::Recorder`).

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use fuser::Errno;

use super::inode::Node;
use super::AgxFs;
use crate::capture::{After, Before, Ticket};
use crate::ids::{BranchId, NodeId};
use crate::timeline::Op;

/// A path in one of the trees the front serves: the main tree's (relative to the
/// project's root) or a branch's (relative to the branch's root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TreePath {
    pub tree: Option<BranchId>,
    pub path: Vec<u8>,
}

impl TreePath {
    /// `name` in the directory at this path.
    pub fn child(&self, name: &OsStr) -> TreePath {
        TreePath {
            tree: self.tree,
            path: crate::sys::path::join(&self.path, name.as_bytes()),
        }
    }
}

/// Deeper than this, a path is not resolved (a loop in the recorded places).
const MAX_DEPTH: usize = 4096;

/// Metadata changes (mode, owner, times, xattrs) that the creating process makes this soon
/// after creating an object are part of its creation (tar, cp -a, install and editors
/// create, then set owner, mode and times): no separate event. The creation event's
/// after-state is read when the worker records it.
pub const CREATION_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

impl AgxFs {
    /// The path of a directory in its tree by the names its nodes were last reached under
    /// ("" for a tree's root); None if some ancestor is no longer known.
    fn dir_path(&self, node: &Node) -> Option<Vec<u8>> {
        if node.tree_root {
            return Some(Vec::new());
        }
        let mut parts: Vec<std::ffi::OsString> = Vec::new();
        let (mut parent, mut name) = node.place()?;
        for _ in 0..MAX_DEPTH {
            parts.push(name);
            let p = self.inodes.get(parent)?;
            if p.tree_root {
                let mut out = Vec::new();
                for (i, p) in parts.iter().rev().enumerate() {
                    if i > 0 {
                        out.push(b'/');
                    }
                    out.extend_from_slice(p.as_bytes());
                }
                return Some(out);
            }
            (parent, name) = p.place()?;
        }
        None
    }

    /// Whether the object at `path` of `node`'s tree (resolved beneath its root, no
    /// symlinks) is `node`'s.
    fn is_at(&self, node: &Node, path: &[u8]) -> Result<bool, Errno> {
        let root = self.tree_root(node.tree)?;
        match crate::tree::stat_checked(&root, path) {
            Ok(Some(o)) => Ok(super::key_of(&o.stat) == node.key),
            Ok(None) => Ok(false),
            Err(e) => Err(super::errno(e)),
        }
    }

    /// A name `node` has now, under which a change of it is recorded. Names kept by the
    /// node are exact for every change made through the mount; after one of agx's own
    /// restores (a new tree epoch) a name is checked before it is used. `Ok(None)`: the
    /// object has no name in the project (its last one went through the mount, or it is
    /// linked only from outside the project), so changing it changes no path. An error
    /// (the tree cannot be looked at) fails the request: a change whose name cannot be
    /// determined never goes through unrecorded.
    pub(super) fn path_of(&self, node: &Node) -> Result<Option<TreePath>, Errno> {
        let placed = |path: Vec<u8>| {
            Some(TreePath {
                tree: node.tree,
                path,
            })
        };
        if node.tree_root {
            return Ok(placed(Vec::new()));
        }
        let epoch = self.rec.tree_epoch();
        let trusted = node.confirmed() == epoch;
        for (parent, name) in node.places() {
            let path = self
                .inodes
                .get(parent)
                .and_then(|p| self.dir_path(&p))
                .map(|mut p| {
                    if !p.is_empty() {
                        p.push(b'/');
                    }
                    p.extend_from_slice(name.as_bytes());
                    p
                });
            let Some(path) = path else { continue };
            if trusted {
                return Ok(placed(path));
            }
            if self.is_at(node, &path)? {
                node.set_confirmed(epoch);
                return Ok(placed(path));
            }
            node.drop_place(parent, &name, false);
        }
        if node.nameless() {
            return Ok(None);
        }
        // Every known name is gone, but the object may have others the kernel never
        // looked up (hard links): find one.
        let root = self.tree_root(node.tree)?;
        let found = search(&root, node.key).map_err(super::errno)?;
        if found.is_none() {
            log::debug!(
                "node {} has no name in the project: its change is not a change of the tree",
                node.id
            );
            node.drop_place(NodeId(0), std::ffi::OsStr::new(""), true);
        }
        Ok(found.and_then(placed))
    }

    /// The path of `name` in the directory `parent` (see [`AgxFs::path_of`]).
    pub(super) fn child_path(
        &self,
        parent: &Node,
        name: &OsStr,
    ) -> Result<Option<TreePath>, Errno> {
        Ok(self.path_of(parent)?.map(|p| p.child(name)))
    }

    /// Begins recording a change of `path` by process `pid`, unless the path is ignored
    /// (then nothing is recorded and `Ok(None)` is returned). An error means the before
    /// state could not be kept: the change must not be made.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record(
        &self,
        pid: u32,
        op: Op,
        path: Option<TreePath>,
        is_dir: bool,
        to_path: Option<TreePath>,
        before: Before<'_>,
        target: Option<Before<'_>>,
    ) -> Result<Option<Ticket>, Errno> {
        // No name in the project: nothing in the tree changes (see `path_of`).
        let Some(TreePath { tree, path }) = path else {
            return Ok(None);
        };
        let to_path = to_path.map(|t| t.path);
        // A file of a branch still taking its content from the base gets it before its
        // before-image is taken or anything changes it (with capture on or off).
        if let Some(b) = tree {
            for b4 in [Some(&before), target.as_ref()].into_iter().flatten() {
                match b4 {
                    Before::Content(fd) | Before::Leaving { fd, .. } => self.copy_up_fd(b, *fd)?,
                    _ => {}
                }
            }
        }
        if !self.cfg.capture {
            return Ok(None);
        }
        // Branches: everything is recorded (the capture policy is the main tree's).
        // A file with several names is recorded whatever the rules say of this one: its
        // history may be under another name, which this change changes too.
        if tree.is_none() {
            let ignored = self.rec.skips(&path, is_dir)
                && to_path.as_ref().is_none_or(|t| self.rec.skips(t, is_dir))
                && !multi_linked(&before)
                && !target.as_ref().is_some_and(multi_linked);
            if ignored {
                return Ok(None);
            }
        }
        // A name made anew (no lookup found it) may have had an object agx recorded that
        // went outside agx: that change is history first (see `capture::outside`).
        let makes = matches!(
            op,
            Op::Create | Op::Mkdir | Op::Mknod | Op::Symlink | Op::Link
        );
        let names = [makes.then_some(&path), to_path.as_ref()];
        for p in names.into_iter().flatten().filter(|_| tree.is_none()) {
            let dir = p
                .iter()
                .rposition(|c| *c == b'/')
                .map_or(&[][..], |i| &p[..i]);
            if self.rec.may_have_history(dir) {
                self.rec.notice(p);
            }
        }
        let mut actor = self.attrib.actor(pid);
        actor.branch = tree;
        self.rec
            .begin(op, path, to_path, actor, before, target, None)
    }

    /// Ends a recorded change: commits it with `after` when the change was made, cancels it
    /// otherwise.
    pub(super) fn finish<T>(
        &self,
        ticket: Option<Ticket>,
        result: &Result<T, Errno>,
        after: impl FnOnce() -> After,
    ) {
        let Some(t) = ticket else { return };
        if result.is_ok() {
            self.rec.commit(t, after());
        } else {
            self.rec.cancel(t);
        }
    }

    /// Whether a metadata change of `node` by `pid` belongs to the node's creation.
    pub(super) fn part_of_creation(&self, node: &Node, pid: u32) -> bool {
        node.created_by(pid, CREATION_WINDOW)
            && node.creation().is_none_or(|s| self.rec.may_fold(s))
    }

    /// The state now at `parent/name`, for `After`.
    pub(super) fn after_at(&self, parent: &Node, name: &OsStr) -> After {
        match self.peek(parent, name) {
            Ok(Some(fd)) => After::State(self.rec.state_of(fd.as_fd())),
            _ => After::Absent,
        }
    }

    /// The metadata of `node` after a change.
    pub(super) fn after_meta(&self, node: &Node) -> After {
        match self.fd(node) {
            Ok(fd) => After::State(self.rec.state_of(fd.as_fd())),
            Err(_) => After::Absent,
        }
    }

    /// The new content of a file, read later by the capture worker.
    pub(super) fn after_content(&self, node: &Node) -> After {
        let Ok(fd) = self.fd(node) else {
            return After::Absent;
        };
        match self.retry(|| rustix::io::dup(&*fd)) {
            Ok(dup) => After::Content(dup),
            Err(_) => After::State(self.rec.state_of(fd.as_fd())),
        }
    }

    /// An `O_PATH` descriptor of `parent/name` (for before-states); None only when the name
    /// is truly free. Any other failure (out of descriptors, say) is an error: taking it
    /// for "absent" would record no before-image for what the change replaces.
    pub(super) fn peek(&self, parent: &Node, name: &OsStr) -> Result<Option<OwnedFd>, Errno> {
        let pfd = self.fd(parent)?;
        match crate::sys::fd::retry(|| {
            rustix::fs::openat(
                &*pfd,
                name,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
        }) {
            Ok(fd) => Ok(Some(fd)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(super::errno(e)),
        }
    }

    /// Whether an ignore file changed (the capture rules reload).
    pub(super) fn note_ignore_file(&self, name: &OsStr) {
        if crate::capture::ignore::is_ignore_file(name.as_bytes()) {
            self.rec.ignore_files_changed();
        }
    }
}

/// Which recorded operation a setattr is.
pub(super) fn setattr_op(size: bool, mode: bool, owner: bool) -> Op {
    if size {
        Op::Truncate
    } else if mode {
        Op::Chmod
    } else if owner {
        Op::Chown
    } else {
        Op::Utimens
    }
}

/// A path beneath `root` of the object `key` (not in `.agx` or git's object store), by a
/// walk of the tree: for an object whose known names are all gone while it keeps others.
/// Rare (hard links the kernel never looked up), so it trades time for an exact answer.
fn search(
    root: impl std::os::fd::AsFd,
    key: crate::ids::InodeKey,
) -> rustix::io::Result<Option<Vec<u8>>> {
    use rustix::fs::{AtFlags, FileType, OFlags};
    let mut dirs: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel) = dirs.pop() {
        let fd = match crate::tree::open_beneath(&root, &rel, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => continue,
            Err(e) => return Err(e),
        };
        for entry in rustix::fs::Dir::read_from(&fd)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let path = crate::sys::path::join(&rel, name);
            if path == crate::sys::path::AGX_DIR_NAME.as_bytes() || path == b".git/objects" {
                continue;
            }
            let st = match rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
            if super::key_of(&st) == key {
                return Ok(Some(path));
            }
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory && st.st_dev == key.dev {
                dirs.push(path);
            }
        }
    }
    Ok(None)
}

/// Whether the object a before-state reads is a regular file with more than one name.
fn multi_linked(b: &Before<'_>) -> bool {
    let fd = match b {
        Before::Meta(fd) | Before::Content(fd) | Before::Attrs { fd, .. } => fd,
        Before::Leaving { fd, .. } => fd,
        Before::Absent | Before::Recorded(_) => return false,
    };
    rustix::fs::fstat(fd).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
            && st.st_nlink > 1
    })
}
