//! What a change records: the states it is given (`Before`, `After`) and the begun event
//! it is carried by (`Ticket`), with what tells whether its content changed (`Stamps`).

use std::ffi::OsStr;
use std::os::fd::{BorrowedFd, OwnedFd};

use crate::ids::{ContentHash, InodeKey, Seq};
use crate::timeline::{Event, ObjState, Op};
use crate::tree::state::Stamp;

/// What to record of the state a mutation changes.
pub enum Before<'a> {
    /// Nothing is there (a creation).
    Absent,
    /// Kind and metadata only: the content does not change (chmod, rename source, ...).
    Meta(BorrowedFd<'a>),
    /// Content too, by copy (write, truncate, fallocate).
    Content(BorrowedFd<'a>),
    /// The object loses this name (unlink, rename over it): kept by a hard link from
    /// `dir/name` unless `may_change` (other names or open writers), then copied.
    Leaving {
        fd: BorrowedFd<'a>,
        dir: BorrowedFd<'a>,
        name: &'a OsStr,
        may_change: bool,
    },
    /// A state known from the timeline (the last one recorded before a change made
    /// outside agx): its content is kept only if the store has it.
    Recorded(ObjState),
    /// Metadata, with the inode flags and project id read by the caller (a change of
    /// them: `Meta::flags`).
    Attrs {
        fd: BorrowedFd<'a>,
        flags: Option<u32>,
        projid: Option<u32>,
    },
}

/// The state after a mutation.
pub enum After {
    Absent,
    /// Known now (metadata read by the caller; content unchanged or not a file).
    State(ObjState),
    /// A file whose new content the worker reads (an `O_PATH` descriptor of it).
    Content(OwnedFd),
}

/// A begun event. (Kept small: open file handles carry one.)
pub struct Ticket {
    pub(super) event: Box<Event>,
    pub(super) staged: Option<String>,
    pub(super) target_staged: Option<String>,
    /// The before-image of `event.path` itself, when small (see [`INLINE_MAX`]): kept in
    /// the journal's begin record instead of a staging file.
    pub(super) inline: Option<Vec<u8>>,
    pub(super) stamps: Box<Stamps>,
}

/// Before-images copied on the request path up to this size are kept in memory and in the
/// journal's begin record (hex) instead of in a staging file: no file is created, written
/// and later removed per change, which on a busy ext4 costs an inode allocation on the
/// request path. Larger ones are staged. Default 32 KiB (most source files); an open
/// handle carries its before-image until release, so this bounds the memory per open
/// recorded file.
pub const INLINE_MAX: u64 = 32 * 1024;

/// Where a taken before-image's content waits for the worker.
pub(super) enum Held {
    Nothing,
    Staged(String),
    Inline(Vec<u8>),
}

/// What tells whether a content change changed anything, and which content it left.
#[derive(Default)]
pub(super) struct Stamps {
    /// For a content change: the file's stamp just before its before-image was taken.
    pub(super) begun: Option<Stamp>,
    /// The file's stamp when the event was committed with `After::Content`: the content
    /// the worker reads later is this event's after-image only if the stamp still holds.
    /// None when another content change of the file began before this one ended (its
    /// changes may then be in that stamp too).
    pub(super) committed: Option<Stamp>,
    /// The file's stamp when the event was committed, also when another change overlapped:
    /// equal to `begun`, nobody changed the file during the event.
    pub(super) ended: Option<Stamp>,
    /// For a content change: its place among the open content events of the file.
    pub(super) slot: Option<Slot>,
}

/// A content event's registration in [`Shared::open`]: the file and the generation it
/// began at.
pub(super) type Slot = (InodeKey, u64);

/// The content events of one file that have begun and not ended.
#[derive(Default)]
pub(super) struct OpenEvents {
    pub(super) count: u32,
    /// Bumped by every begin: an event that sees another generation at its end overlapped
    /// with a later change of the same file.
    pub(super) gen: u64,
}

impl Ticket {
    pub(super) fn from_parts(
        event: Event,
        staged: Option<String>,
        target_staged: Option<String>,
        inline: Option<Vec<u8>>,
        committed: Option<Stamp>,
    ) -> Ticket {
        Ticket {
            event: Box::new(event),
            staged,
            target_staged,
            inline,
            stamps: Box::new(Stamps {
                committed,
                ..Stamps::default()
            }),
        }
    }

    pub fn seq(&self) -> Seq {
        self.event.seq
    }

    pub fn op(&self) -> Op {
        self.event.op
    }

    pub fn before_hash(&self) -> Option<ContentHash> {
        self.event.before.hash
    }

    /// The process the change is attributed to.
    pub fn pid(&self) -> u32 {
        self.event.actor.pid
    }

    /// The project-relative path the change began at.
    pub fn path(&self) -> &[u8] {
        &self.event.path
    }
}

/// The last after-image recorded for an inode: a later before-image with the same size,
/// times and inode is that content, already stored.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Known {
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    pub(super) hash: ContentHash,
}

pub(super) fn known_of(st: &rustix::fs::Stat, hash: ContentHash) -> Known {
    Known {
        size: st.st_size,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        hash,
    }
}
