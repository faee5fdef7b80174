//! Directory listing. Offsets given to the kernel are the backing filesystem's own seek
//! cookies (`d_off`), and every request seeks the backing directory to the offset it is
//! asked for: a listing can resume at any offset the kernel holds, also one it cached from
//! another handle's listing. The physical `.agx` of the project root is listed in its place
//! as the virtual one (the daemon creates the physical one before mounting, and nothing
//! through the mount can remove it).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use fuser::{Errno, FileType, FopenFlags, ReplyDirectory, ReplyDirectoryPlus};
use rustix::fs::{AtFlags, OFlags, RawDir, SeekFrom};

use super::handle::{DirHandle, Handle};
use super::{attr, AgxFs, OrErrno, AGX_DIR_NAME};
use crate::ids::{HandleId, NodeId};

/// getdents buffer per request; far more than one entry needs, about what one reply holds.
const GETDENTS_BUF: usize = 32 << 10;

/// One entry as given to the kernel. `off` is where the listing continues after it.
pub(super) struct Entry {
    pub name: OsString,
    pub ino: u64,
    pub kind: FileType,
    pub off: u64,
}

fn kind_of(t: rustix::fs::FileType) -> Option<FileType> {
    use rustix::fs::FileType as T;
    Some(match t {
        T::RegularFile => FileType::RegularFile,
        T::Directory => FileType::Directory,
        T::Symlink => FileType::Symlink,
        T::Fifo => FileType::NamedPipe,
        T::Socket => FileType::Socket,
        T::CharacterDevice => FileType::CharDevice,
        T::BlockDevice => FileType::BlockDevice,
        T::Unknown => return None,
    })
}

impl AgxFs {
    pub(super) fn do_opendir(&self, ino: NodeId) -> Result<(HandleId, FopenFlags), Errno> {
        let (node, file) = if ino.is_virtual_dir() {
            (self.root(), None)
        } else {
            let node = self.node(ino)?;
            let file = self.reopen_node(&node, OFlags::RDONLY | OFlags::DIRECTORY)?;
            (node, Some(file))
        };
        let fh = self.handles.insert(Handle::Dir(DirHandle {
            node,
            virt: ino.is_virtual_dir().then_some(ino),
            file,
            cursor: Mutex::new(()),
        }));
        Ok((
            fh,
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
        ))
    }

    /// The virtual `.agx` directory: `.`, `..` and `at` (the views) at offsets 1 to 3.
    /// `branches` is not listed (reachable by name only): tools that walk the project would
    /// otherwise descend into every branch.
    fn agx_dir_entries(
        &self,
        offset: u64,
        add: &mut impl FnMut(Entry) -> bool,
    ) -> Result<(), Errno> {
        // `..` reports the number stat gives the root: its backing st_ino.
        let root_ino = rustix::fs::fstat(&*self.root_fd()).or_errno()?.st_ino;
        let entries = [
            (".", NodeId::AGX_DIR.0),
            ("..", root_ino),
            ("at", NodeId::AT_DIR.0),
        ];
        for (i, (name, ino)) in entries.into_iter().enumerate().skip(offset as usize) {
            let e = Entry {
                name: name.into(),
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

    /// Hands the entries of `h` from `offset` on to `add` until it reports a full reply
    /// (returns true); entries read beyond that are read again by the next request.
    fn each_entry(
        &self,
        h: &DirHandle,
        offset: u64,
        mut add: impl FnMut(Entry) -> bool,
    ) -> Result<(), Errno> {
        let Some(file) = &h.file else {
            if h.virt == Some(NodeId::BRANCHES_DIR) {
                return self.branch_entries(offset, &mut add);
            }
            return self.agx_dir_entries(offset, &mut add);
        };
        // The main tree's root, where the physical `.agx` is.
        let is_root = h.node.id == NodeId::ROOT && h.node.tree.is_none();
        let _cursor = h.cursor.lock().unwrap_or_else(|e| e.into_inner());
        rustix::fs::seek(file, SeekFrom::Start(offset)).or_errno()?;
        let mut buf: Vec<u8> = Vec::with_capacity(GETDENTS_BUF);
        let mut dir = RawDir::new(file, buf.spare_capacity_mut());
        while let Some(ent) = dir.next() {
            let ent = ent.or_errno()?;
            let name = OsStr::from_bytes(ent.file_name().to_bytes());
            let (ino, kind) = if is_root && name == AGX_DIR_NAME {
                // The virtual directory takes the physical one's place in the listing.
                (NodeId::AGX_DIR.0, FileType::Directory)
            } else {
                let kind = match kind_of(ent.file_type()) {
                    Some(k) => k,
                    None => match rustix::fs::statat(file, name, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => attr::file_type(st.st_mode),
                        // Gone meanwhile.
                        Err(_) => continue,
                    },
                };
                (ent.ino(), kind)
            };
            let e = Entry {
                name: name.to_os_string(),
                ino,
                kind,
                off: ent.next_entry_cookie(),
            };
            if add(e) {
                break;
            }
        }
        Ok(())
    }

    fn dir_handle(&self, fh: HandleId) -> Result<std::sync::Arc<Handle>, Errno> {
        match self.handles.get(fh) {
            Some(h) if matches!(*h, Handle::Dir(_)) => Ok(h),
            _ => Err(Errno::EBADF),
        }
    }

    pub(super) fn do_readdir(
        &self,
        fh: HandleId,
        offset: u64,
        mut reply: ReplyDirectory,
    ) -> Result<(), (Errno, ReplyDirectory)> {
        let h = match self.dir_handle(fh) {
            Ok(h) => h,
            Err(e) => return Err((e, reply)),
        };
        let Handle::Dir(d) = &*h else {
            return Err((Errno::EBADF, reply));
        };
        let r = self.each_entry(d, offset, |e| {
            reply.add(fuser::INodeNo(e.ino), e.off, e.kind, &e.name)
        });
        if let Err(e) = r {
            return Err((e, reply));
        }
        reply.ok();
        Ok(())
    }

    pub(super) fn do_readdirplus(
        &self,
        fh: HandleId,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) -> Result<(), (Errno, ReplyDirectoryPlus)> {
        let h = match self.dir_handle(fh) {
            Ok(h) => h,
            Err(e) => return Err((e, reply)),
        };
        let Handle::Dir(d) = &*h else {
            return Err((Errno::EBADF, reply));
        };
        let ttl = self.ttl_in(d.node.tree);
        let zero = std::time::Duration::ZERO;
        let gen = fuser::Generation(0);
        let r = self.each_entry(d, offset, |e| {
            if e.name == "." || e.name == ".." {
                // The kernel neither links nor counts these; the attributes are unused.
                let mut a = self.agx_dir_attr();
                a.ino = fuser::INodeNo(e.ino);
                return reply.add(a.ino, e.off, &e.name, &zero, &a, gen);
            }
            if e.ino == NodeId::AT_DIR.0 {
                let a = self.at_dir_attr();
                return reply.add(a.ino, e.off, &e.name, &super::views::VIEW_TTL, &a, gen);
            }
            if e.ino == NodeId::AGX_DIR.0 && d.file.is_some() && d.node.id == NodeId::ROOT {
                let a = self.agx_dir_attr();
                return reply.add(a.ino, e.off, &e.name, &ttl, &a, gen);
            }
            let found = if d.virt == Some(NodeId::BRANCHES_DIR) {
                self.lookup_branch_root(&e.name)
            } else {
                self.lookup_known(&d.node, &e.name)
            };
            let Ok((node, st)) = found else {
                // Gone meanwhile.
                return false;
            };
            let a = self.entry_attr(&node, &st);
            let full = reply.add(a.ino, e.off, &e.name, &ttl, &a, gen);
            if full {
                // Not sent: the kernel will not count this lookup.
                self.inodes.forget(node.id, 1);
            }
            full
        });
        if let Err(e) = r {
            return Err((e, reply));
        }
        reply.ok();
        Ok(())
    }

    pub(super) fn do_releasedir(&self, fh: HandleId) {
        self.handles.remove(fh);
    }
}
