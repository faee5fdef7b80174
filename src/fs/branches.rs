//! FUSE glue for branches (served by [`crate::branches`]): the virtual `.agx/branches/`
//! directory, and what the front does for objects of a branch's tree before it uses them.
//!
//! `.agx/branches/` lists the live branches by name; `.agx/branches/NAME` is the root of the
//! branch's tree, a real directory served like the main tree. Walkers of the project never
//! reach it unasked: `.agx` lists only `at` (see `dir.rs`), so `find`, `grep -r`, `tar`,
//! `du` and `rsync` of the project see no branch, while `ls .agx/branches/` lists them.
//!
//! Two rules keep a branch's lazily made tree (see `crate::branches::fill`) whole:
//! - Every directory of a branch the kernel knows is filled: a lookup fills a directory
//!   before it gives the kernel its attributes (so its link count, and every name in it,
//!   are there before anything can use them).
//! - A file's content is copied up before anything reads it as the branch's own or changes
//!   it: every change that records a before-image goes through `record`, which copies
//!   first (with capture on or off); reads of a file not copied go to the base
//!   (`io.rs`, `file.rs`).

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use fuser::{Errno, FileAttr, FileType, INodeNo};

use super::inode::{Node, TreeOf};
use super::{AgxFs, OrErrno};
use crate::branches::Tree;
use crate::ids::{BranchId, NodeId};

/// A branch's file still taking its content from the base: its tree and base path.
pub(super) type Based = (Arc<Tree>, Vec<u8>);

/// The name of the branches' directory in `.agx`.
pub const BRANCHES_DIR_NAME: &str = "branches";

impl AgxFs {
    pub(super) fn branches_dir_attr(&self) -> FileAttr {
        let mut a = self.agx_dir_attr();
        a.ino = INodeNo(NodeId::BRANCHES_DIR.0);
        a.nlink = 2;
        a
    }

    /// Branch `id`'s tree, opened.
    pub(super) fn branch_tree(&self, id: BranchId) -> Result<Arc<Tree>, Errno> {
        let b = self.branches.as_ref().ok_or(Errno::ENOENT)?;
        b.tree(id).map_err(Errno::from)
    }

    /// The descriptor of the root of `tree` (`O_PATH`).
    pub(super) fn tree_root(&self, tree: Option<BranchId>) -> Result<TreeRoot, Errno> {
        if tree == self.root().tree {
            return Ok(TreeRoot::Fd(self.root_fd()));
        }
        let id = tree.ok_or(Errno::EXDEV)?;
        Ok(TreeRoot::Branch(self.branch_tree(id)?))
    }

    /// `.agx/branches/NAME`: the root of branch NAME's tree, with one more kernel lookup.
    pub(super) fn lookup_branch_root(
        &self,
        name: &OsStr,
    ) -> Result<(Arc<Node>, rustix::fs::Stat), Errno> {
        let b = self.branches.as_ref().ok_or(Errno::ENOENT)?;
        let id = name
            .to_str()
            .and_then(|n| b.by_name(n))
            .ok_or(Errno::ENOENT)?;
        let tree = b.tree(id).map_err(Errno::from)?;
        let fd = self.retry(|| rustix::io::dup(tree.root()))?;
        let st = rustix::fs::fstat(&fd).or_errno()?;
        let (node, _) = self.inodes.insert_new(
            super::key_of(&st),
            FileType::Directory,
            fd,
            NodeId::BRANCHES_DIR,
            name,
            TreeOf {
                branch: Some(id),
                root: true,
            },
        );
        match self.settle_dir(&node, st) {
            Ok(st) => Ok((node, st)),
            Err(e) => {
                self.inodes.forget(node.id, 1);
                Err(e)
            }
        }
    }

    /// Fills a directory of a branch the kernel is about to learn of (see the module's
    /// rules). Returns its attributes as they are after.
    pub(super) fn settle_dir(
        &self,
        node: &Node,
        st: rustix::fs::Stat,
    ) -> Result<rustix::fs::Stat, Errno> {
        let Some(id) = node.tree else {
            return Ok(st);
        };
        if node.kind != FileType::Directory || node.based() == Some(false) {
            return Ok(st);
        }
        let tree = self.branch_tree(id)?;
        let fd = self.fd(node)?;
        tree.fill(&fd).map_err(Errno::from)?;
        node.set_based(false);
        rustix::fs::fstat(&*fd).or_errno()
    }

    /// For a regular file of a branch: its tree and the base path whose content it still
    /// has.
    pub(super) fn based_file(&self, node: &Node) -> Result<Option<Based>, Errno> {
        let Some(id) = node.tree else {
            return Ok(None);
        };
        if node.kind != FileType::RegularFile || node.based() == Some(false) {
            return Ok(None);
        }
        let tree = self.branch_tree(id)?;
        let fd = self.fd(node)?;
        match tree.based(&fd).map_err(Errno::from)? {
            Some(base) => {
                node.set_based(true);
                Ok(Some((tree, base)))
            }
            None => {
                node.set_based(false);
                Ok(None)
            }
        }
    }

    /// Copies up the content of the object behind `fd` in `tree` if it is a file still
    /// taking its content from the base: before anything records its before-image or
    /// changes it.
    pub(super) fn copy_up_fd(&self, tree: BranchId, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        let st = rustix::fs::fstat(fd).or_errno()?;
        if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() {
            return Ok(());
        }
        let node = self.inodes.find(super::key_of(&st));
        if node.as_ref().is_some_and(|n| n.based() == Some(false)) {
            return Ok(());
        }
        let t = self.branch_tree(tree)?;
        let owned = self.retry(|| rustix::io::dup(fd))?;
        t.copy_up(&owned).map_err(Errno::from)?;
        if let Some(n) = node {
            n.set_based(false);
        }
        Ok(())
    }

    /// Copies up `node`'s content if it still takes it from the base.
    pub(super) fn copy_up_node(&self, node: &Node) -> Result<(), Errno> {
        if let Some(id) = node.tree {
            if node.kind == FileType::RegularFile && node.based() != Some(false) {
                let fd = self.fd(node)?;
                self.copy_up_fd(id, fd.as_fd())?;
                node.set_based(false);
            }
        }
        Ok(())
    }

    /// The entries of `.agx/branches/`: `.`, `..`, then each live branch (at offsets from
    /// 1 on).
    pub(super) fn branch_entries(
        &self,
        offset: u64,
        add: &mut impl FnMut(super::dir::Entry) -> bool,
    ) -> Result<(), Errno> {
        let mut entries: Vec<(std::ffi::OsString, u64)> = vec![
            (".".into(), NodeId::BRANCHES_DIR.0),
            ("..".into(), NodeId::AGX_DIR.0),
        ];
        if let Some(b) = &self.branches {
            for (name, id) in b.names() {
                // The root's inode, as a lookup gives it; 0 when it cannot be opened (the
                // lookup will say why).
                let ino = b
                    .tree(id)
                    .ok()
                    .and_then(|t| rustix::fs::fstat(t.root()).ok())
                    .map_or(0, |st| st.st_ino);
                entries.push((name.into(), ino));
            }
        }
        for (i, (name, ino)) in entries.into_iter().enumerate().skip(offset as usize) {
            let e = super::dir::Entry {
                name,
                ino,
                kind: FileType::Directory,
                off: i as u64 + 1,
            };
            if add(e) {
                break;
            }
        }
        Ok(())
    }

    /// Whether `name` in `parent` is reserved for agx: `.agx` at the top of the main tree or
    /// of a branch's.
    pub(super) fn is_reserved(&self, parent: NodeId, name: &OsStr) -> bool {
        if name != super::AGX_DIR_NAME {
            return false;
        }
        parent == NodeId::ROOT || self.inodes.get(parent).is_some_and(|p| p.tree_root)
    }
}

/// Where a read-only open of a branch's file not copied up yet reads: the base.
pub(crate) struct BaseRead {
    pub tree: Arc<Tree>,
    pub reader: crate::branches::lower::Reader,
}

impl AgxFs {
    /// For a read-only open of `node`: a reader of its base content when it is a branch's
    /// file whose content is still the base's and that is a live file of the main tree.
    /// A base content that is a stored version is copied up now instead (read once either
    /// way; the copy is then the branch's).
    pub(super) fn base_reader(&self, node: &Node) -> Result<Option<BaseRead>, Errno> {
        let Some((tree, base)) = self.based_file(node)? else {
            return Ok(None);
        };
        match tree.reader(&base).map_err(Errno::from)? {
            Some(reader) => Ok(Some(BaseRead { tree, reader })),
            None => {
                self.copy_up_node(node)?;
                Ok(None)
            }
        }
    }

    /// Reads through a base reader while `node` is not copied up; None once it is (or
    /// had to be): read the branch's file then.
    pub(super) fn read_base(
        &self,
        node: &Node,
        b: &BaseRead,
        offset: u64,
        size: u32,
    ) -> Result<Option<Vec<u8>>, Errno> {
        if node.based() == Some(false) {
            return Ok(None);
        }
        match b.tree.read(&b.reader, offset, size).map_err(Errno::from)? {
            Some(data) => Ok(Some(data)),
            None => {
                self.copy_up_node(node)?;
                Ok(None)
            }
        }
    }

    /// Runs `f` on the base's live file while `node` is not copied up (None otherwise).
    pub(super) fn with_base<T>(
        &self,
        node: &Node,
        b: &BaseRead,
        f: impl FnOnce(&OwnedFd) -> rustix::io::Result<T>,
    ) -> Result<Option<T>, Errno> {
        if node.based() == Some(false) {
            return Ok(None);
        }
        match b.tree.with_live(&b.reader, f).map_err(Errno::from)? {
            Some(v) => Ok(Some(v)),
            None => {
                self.copy_up_node(node)?;
                Ok(None)
            }
        }
    }
}

/// The root of a tree: held by the front (the main tree, or the branch mounted) or by a
/// branch's open tree.
pub(super) enum TreeRoot {
    Fd(Arc<OwnedFd>),
    Branch(Arc<Tree>),
}

impl AsFd for TreeRoot {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            TreeRoot::Fd(f) => f.as_fd(),
            TreeRoot::Branch(t) => t.root().as_fd(),
        }
    }
}
