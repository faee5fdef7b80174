//! Taking before-images on the request path: what a change's before-state is, its content
//! kept by a staging link, a copy (hashed as it is made), the journal (small ones), or not
//! at all when the store already has it.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;

use fuser::Errno;

use super::recorder::{enospc_or_eio, Recorder};
use super::ticket::known_of;
use super::ticket::{Before, Held, Slot, INLINE_MAX};
use crate::ids::ContentHash;
use crate::sys::read::hash_file;
use crate::timeline::{Kind, ObjState};
use crate::tree::state::{key_of, kind_of, meta_of};

impl Recorder {
    /// Registers a content event of the file behind `fd` as begun.
    pub(super) fn enter(&self, fd: BorrowedFd<'_>) -> Option<Slot> {
        let key = key_of(&rustix::fs::fstat(fd).ok()?);
        let mut open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        let o = open.entry(key).or_default();
        o.count += 1;
        o.gen += 1;
        Some((key, o.gen))
    }
    /// Ends a content event's registration; true when another content event of the same
    /// file began after it.
    pub(super) fn leave(&self, slot: Option<Slot>) -> bool {
        let Some((key, gen)) = slot else {
            return false;
        };
        let mut open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(o) = open.get_mut(&key) else {
            return false;
        };
        let overlapped = o.gen != gen;
        o.count -= 1;
        if o.count == 0 {
            open.remove(&key);
        }
        overlapped
    }
    /// Takes a before-state; returns it, where its content waits for the worker (in
    /// memory only when `inline` allows), and whether the content was kept.
    pub(super) fn take(
        &self,
        b: Before<'_>,
        name: &str,
        inline: bool,
    ) -> Result<(ObjState, Held, bool), Errno> {
        match b {
            Before::Absent => Ok((ObjState::absent(), Held::Nothing, true)),
            Before::Recorded(mut state) => {
                // Content the store does not have was never kept (a creation's content
                // is only hashed): say so rather than name a version nobody can read.
                if state.hash.is_some_and(|h| !self.shared.store.has(&h)) {
                    state.hash = None;
                }
                Ok((state, Held::Nothing, true))
            }
            Before::Meta(fd) => {
                let st = rustix::fs::fstat(fd).map_err(crate::sys::errno)?;
                Ok((self.meta_state(fd, &st), Held::Nothing, true))
            }
            Before::Attrs { fd, flags, projid } => {
                let st = rustix::fs::fstat(fd).map_err(crate::sys::errno)?;
                let mut s = self.meta_state(fd, &st);
                if let Some(m) = s.meta.as_mut() {
                    (m.flags, m.projid) = (flags, projid);
                }
                Ok((s, Held::Nothing, true))
            }
            Before::Content(fd) => self.take_content(fd, None, name, inline),
            Before::Leaving {
                fd,
                dir,
                name: entry,
                may_change,
            } => {
                let st = rustix::fs::fstat(fd).map_err(crate::sys::errno)?;
                if kind_of(&st) != Kind::File {
                    return Ok((self.meta_state(fd, &st), Held::Nothing, true));
                }
                let link = if may_change || st.st_nlink > 1 {
                    None
                } else {
                    Some((dir, entry))
                };
                self.take_content(fd, link, name, inline)
            }
        }
    }
    pub(super) fn meta_state(&self, fd: BorrowedFd<'_>, st: &rustix::fs::Stat) -> ObjState {
        let kind = kind_of(st);
        // Content does not change; note its hash when it is known for free.
        let hash = if kind == Kind::File {
            self.known_hash(st)
        } else {
            None
        };
        ObjState {
            kind,
            hash,
            meta: Some(meta_of(fd, st)),
        }
    }
    fn known_hash(&self, st: &rustix::fs::Stat) -> Option<ContentHash> {
        let known = self.shared.known.lock().unwrap_or_else(|e| e.into_inner());
        known
            .get(&key_of(st))
            .filter(|k| **k == known_of(st, k.hash))
            .map(|k| k.hash)
    }
    fn take_content(
        &self,
        fd: BorrowedFd<'_>,
        link: Option<(BorrowedFd<'_>, &OsStr)>,
        name: &str,
        inline: bool,
    ) -> Result<(ObjState, Held, bool), Errno> {
        let st = rustix::fs::fstat(fd).map_err(crate::sys::errno)?;
        let mut state = self.meta_state(fd, &st);
        if state.kind != Kind::File {
            return Ok((state, Held::Nothing, true));
        }
        if let Some(h) = state.hash {
            if self.shared.store.has(&h) {
                return Ok((state, Held::Nothing, true));
            }
        }
        let file = self.shared.reopen_read(fd).map_err(|e| enospc_or_eio(&e))?;
        if st.st_size as u64 > self.cfg.max_size {
            let (h, _) = hash_file(&file).map_err(|e| enospc_or_eio(&e))?;
            state.hash = Some(h);
            return Ok((state, Held::Nothing, false));
        }
        if let Some((dir, entry)) = link {
            let linked = super::reserve::with_room(&self.shared.reserve, || {
                self.shared.staging.link(dir, entry, name)
            });
            if linked.is_ok() {
                self.shared.linked.add(key_of(&st), name);
                return Ok((state, Held::Staged(name.to_string()), true));
            }
        }
        if inline && st.st_size as u64 <= INLINE_MAX {
            let mut bytes = Vec::with_capacity(st.st_size as usize);
            // One byte past the bound tells a file that grew meanwhile.
            std::io::Read::read_to_end(
                &mut std::io::Read::take(
                    crate::sys::read::PositionalReader::new(&file),
                    INLINE_MAX + 1,
                ),
                &mut bytes,
            )
            .map_err(|e| enospc_or_eio(&e))?;
            // Grown past the bound while read: staged like any large file.
            if bytes.len() as u64 <= INLINE_MAX {
                state.hash = Some(ContentHash::of(&bytes));
                return Ok((state, Held::Inline(bytes), true));
            }
        }
        // On a full disk the room agx gave back is for its records, never for content.
        let size = rustix::fs::fstat(&file).map_or(0, |st| st.st_size as u64);
        if !self.shared.reserve.room_for_copy(size) {
            return Err(fuser::Errno::ENOSPC);
        }
        let staged = self
            .shared
            .staging
            .copy(&file, name)
            .map_err(|e| enospc_or_eio(&e))?;
        state.hash = staged.hash;
        Ok((state, Held::Staged(name.to_string()), true))
    }
}
