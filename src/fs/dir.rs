//! Directory listing. A handle snapshots its directory when the kernel reads from offset
//! 0; the physical `.agx` of the project root is replaced by the virtual one.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use fuser::{Errno, FileType, FopenFlags, ReplyDirectory, ReplyDirectoryPlus};
use rustix::fs::OFlags;

use super::handle::{DirEntry, DirHandle, Handle};
use super::{attr, AgxFs, OrErrno, AGX_DIR_NAME};
use crate::ids::{HandleId, NodeId};

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
        let (node, file) = if ino == NodeId::AGX_DIR {
            (self.root(), None)
        } else {
            let node = self.node(ino)?;
            let file = self.reopen(
                std::os::fd::AsFd::as_fd(&node.fd),
                OFlags::RDONLY | OFlags::DIRECTORY,
            )?;
            (node, Some(file))
        };
        let fh = self.handles.insert(Handle::Dir(DirHandle {
            node,
            file,
            entries: Mutex::new(Vec::new()),
        }));
        Ok((
            fh,
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
        ))
    }

    /// Reads the whole directory behind `h`.
    fn list(&self, h: &DirHandle) -> Result<Vec<DirEntry>, Errno> {
        let mut out = Vec::new();
        let Some(file) = &h.file else {
            // The virtual .agx directory: empty.
            out.push(DirEntry {
                name: ".".into(),
                ino: NodeId::AGX_DIR.0,
                kind: FileType::Directory,
            });
            out.push(DirEntry {
                name: "..".into(),
                ino: NodeId::ROOT.0,
                kind: FileType::Directory,
            });
            return Ok(out);
        };
        let is_root = h.node.id == NodeId::ROOT;
        let dir = rustix::fs::Dir::read_from(file).or_errno()?;
        for ent in dir {
            let ent = ent.or_errno()?;
            let name = OsStr::from_bytes(ent.file_name().to_bytes());
            if is_root && name == AGX_DIR_NAME {
                continue;
            }
            let kind = match kind_of(ent.file_type()) {
                Some(k) => k,
                None => match rustix::fs::statat(file, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                {
                    Ok(st) => attr::file_type(st.st_mode),
                    Err(_) => continue,
                },
            };
            out.push(DirEntry {
                name: OsString::from(name),
                ino: ent.ino(),
                kind,
            });
        }
        if is_root {
            out.push(DirEntry {
                name: AGX_DIR_NAME.into(),
                ino: NodeId::AGX_DIR.0,
                kind: FileType::Directory,
            });
        }
        Ok(out)
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
        let Handle::Dir(d) = &*h else { unreachable!() };
        let mut entries = d.entries.lock().unwrap_or_else(|e| e.into_inner());
        if offset == 0 {
            match self.list(d) {
                Ok(list) => *entries = list,
                Err(e) => return Err((e, reply)),
            }
        }
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(fuser::INodeNo(e.ino), i as u64 + 1, e.kind, &e.name) {
                break;
            }
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
        let Handle::Dir(d) = &*h else { unreachable!() };
        let mut entries = d.entries.lock().unwrap_or_else(|e| e.into_inner());
        if offset == 0 {
            match self.list(d) {
                Ok(list) => *entries = list,
                Err(e) => return Err((e, reply)),
            }
        }
        let ttl = self.cfg.ttl;
        let zero = std::time::Duration::ZERO;
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let off = i as u64 + 1;
            let full = if e.name == "." || e.name == ".." {
                // The kernel neither links nor counts these; the attributes are unused.
                let mut a = self.agx_dir_attr();
                a.ino = fuser::INodeNo(e.ino);
                reply.add(
                    fuser::INodeNo(e.ino),
                    off,
                    &e.name,
                    &zero,
                    &a,
                    fuser::Generation(0),
                )
            } else if e.ino == NodeId::AGX_DIR.0 && d.node.id == NodeId::ROOT {
                let a = self.agx_dir_attr();
                reply.add(a.ino, off, &e.name, &ttl, &a, fuser::Generation(0))
            } else {
                let Some(file) = &d.file else { continue };
                let _ = file;
                let Ok((node, st)) = self.lookup_node(&d.node, &e.name) else {
                    continue;
                };
                let a = self.entry_attr(&node, &st);
                let full = reply.add(a.ino, off, &e.name, &ttl, &a, fuser::Generation(0));
                if full {
                    // Not sent: the kernel will not count this lookup.
                    self.inodes.forget(node.id, 1);
                }
                full
            };
            if full {
                break;
            }
        }
        reply.ok();
        Ok(())
    }

    pub(super) fn do_releasedir(&self, fh: HandleId) {
        self.handles.remove(fh);
    }
}
