//! Writing a file's content and making links, for a restore. A file is written to a
//! temporary name in its directory and renamed into place, so the name always shows a
//! whole file, and a file it replaces keeps its content for whoever holds it open (the
//! plan's live sources among them). A link that replaces a file goes the same way.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::apply::{set_meta, Ctx};
use super::plan::Content;
use super::sources::{Source, Sources};
use crate::capture::{Before, Ticket};
use crate::ids::ContentHash;
use crate::timeline::{Kind, Meta, Op};
use crate::tree::{self as live, os, split};

fn io_err(e: rustix::io::Errno) -> String {
    std::io::Error::from(e).to_string()
}

impl Ctx<'_> {
    fn tmp_name(&mut self) -> String {
        self.tmp_counter += 1;
        format!(".agx-restore.{}.{}", std::process::id(), self.tmp_counter)
    }

    /// Begins the event of replacing what `path` holds (recording it), or of creating it.
    fn begin_replace(
        &mut self,
        op: Op,
        path: &[u8],
        parent: &OwnedFd,
        name: &[u8],
        replace: bool,
    ) -> Result<Ticket, String> {
        let live = if replace {
            live::stat(self.root, path)
        } else {
            None
        };
        match &live {
            Some(obj) => {
                self.note_links(obj);
                self.begin(
                    op,
                    path,
                    Before::Leaving {
                        fd: obj.fd.as_fd(),
                        dir: parent.as_fd(),
                        name: os(name),
                        may_change: false,
                    },
                )
            }
            None => self.begin(
                if op == Op::Write { Op::Create } else { op },
                path,
                Before::Absent,
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_file(
        &mut self,
        parent: &OwnedFd,
        path: &[u8],
        name: &[u8],
        content: &Content,
        meta: Option<&Meta>,
        replace: bool,
        sources: &Sources,
    ) -> Result<(), String> {
        let tmp = self.tmp_name();
        let fd = rustix::fs::openat(
            parent,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io_err)?;
        let cleanup = |e: String| {
            let _ = rustix::fs::unlinkat(parent, tmp.as_str(), AtFlags::empty());
            e
        };
        let mut f = std::fs::File::from(fd);
        let source = match content {
            Content::Hash(h) => Source::Stored(*h),
            Content::Live(src) => sources
                .get(src)
                .ok_or_else(|| cleanup("its source vanished".into()))?,
        };
        let hash = match source {
            Source::Stored(h) => {
                let data = self.store.get(&h).map_err(|e| cleanup(e.to_string()))?;
                f.write_all(&data).map_err(|e| cleanup(e.to_string()))?;
                h
            }
            Source::Held(s) => copy_hashing(s, &mut f).map_err(cleanup)?,
        };
        drop(f);
        if let Some(m) = meta {
            let tfd = rustix::fs::openat(
                parent,
                tmp.as_str(),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| cleanup(io_err(e)))?;
            set_meta(&tfd, parent, tmp.as_bytes(), Kind::File, m)
                .map_err(|e| cleanup(e.to_string()))?;
        }
        // A replaced file may be kept by a staging link (see `capture::linked`).
        let replaced = live::stat(self.root, path).filter(|_| replace);
        let _content = replaced
            .as_ref()
            .map(|o| self.recorder.lock(crate::sys::key_of(&o.stat)));
        let t = self
            .begin_replace(Op::Write, path, parent, name, replace)
            .map_err(&cleanup)?;
        if let Err(e) = rustix::fs::renameat(parent, tmp.as_str(), parent, os(name)) {
            self.recorder.cancel(t);
            return Err(cleanup(io_err(e)));
        }
        let after = self.after_of(parent, name, Some(hash));
        self.recorder.commit(t, after);
        Ok(())
    }

    /// Makes `path` another name of the file at `from` (restored earlier in the plan),
    /// replacing the file there if `replace`. Recorded as a link whose before-state is
    /// what it replaced.
    pub(super) fn link(
        &mut self,
        parent: &OwnedFd,
        path: &[u8],
        name: &[u8],
        from: &[u8],
        replace: bool,
    ) -> Result<(), String> {
        if self.failed.contains(from) {
            return Err(format!(
                "{} could not be restored, so it is not linked to it",
                String::from_utf8_lossy(from)
            ));
        }
        let src_parent = super::apply::open_parent(self.root, from)?;
        let (_, src_name) = split(from);
        let hash = live::stat(self.root, from)
            .filter(|o| o.kind == Kind::File)
            .ok_or("the file to link to is gone")?;
        let hash = self.recorder.state_of(hash.fd.as_fd()).hash;
        if !replace {
            let t = self.begin(Op::Link, path, Before::Absent)?;
            if let Err(e) = rustix::fs::linkat(
                &src_parent,
                os(src_name),
                parent,
                os(name),
                AtFlags::empty(),
            ) {
                self.recorder.cancel(t);
                return Err(io_err(e));
            }
            let after = self.after_of(parent, name, hash);
            self.recorder.commit(t, after);
            return Ok(());
        }
        let tmp = self.tmp_name();
        rustix::fs::linkat(
            &src_parent,
            os(src_name),
            parent,
            tmp.as_str(),
            AtFlags::empty(),
        )
        .map_err(io_err)?;
        let cleanup = |e: String| {
            let _ = rustix::fs::unlinkat(parent, tmp.as_str(), AtFlags::empty());
            e
        };
        let replaced = live::stat(self.root, path);
        let _content = replaced
            .as_ref()
            .map(|o| self.recorder.lock(crate::sys::key_of(&o.stat)));
        let t = self
            .begin_replace(Op::Link, path, parent, name, true)
            .map_err(&cleanup)?;
        if let Err(e) = rustix::fs::renameat(parent, tmp.as_str(), parent, os(name)) {
            self.recorder.cancel(t);
            return Err(cleanup(io_err(e)));
        }
        // A rename between two links of one file changes nothing and leaves the source.
        cleanup(String::new());
        let after = self.after_of(parent, name, hash);
        self.recorder.commit(t, after);
        Ok(())
    }
}

/// Copies all of `src` (read from offset 0, whatever its position) into `to`; returns the
/// content's hash.
fn copy_hashing(src: &OwnedFd, to: &mut std::fs::File) -> Result<ContentHash, String> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = rustix::io::pread(src, &mut buf, off).map_err(io_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n]).map_err(|e| e.to_string())?;
        off += n as u64;
    }
    Ok(ContentHash(*hasher.finalize().as_bytes()))
}
