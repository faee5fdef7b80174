//! `.agx/head`: the highest sequence number known to be in the timeline database, kept
//! outside it. SQLite keeps committed transactions in its WAL file until a checkpoint
//! copies them into the database: a deleted or truncated `timeline.db-wal` (or a database
//! put back from an old copy) silently loses committed events, and agx would then hand
//! their sequence numbers out again. A timeline that ends before the head (once the
//! journal's events are recovered) lost history: opening it is refused, in one line,
//! until a person accepts the loss (`agx verify --repair`), which makes the last recorded
//! event the oldest restorable point, as gc would.
//!
//! Written after every successful insert (one `pwrite` of a fixed-width line, synced only
//! under `capture.fsync = "always"`, as the journal is), read at start.

use std::os::fd::{AsFd, OwnedFd};

use crate::ids::Seq;
use crate::sys::now_ns;
use rustix::fs::{Mode, OFlags};

pub const NAME: &str = "head";

/// Width of the record: 19 digits (any i64) and a newline.
const WIDTH: usize = 20;

pub struct Head {
    fd: OwnedFd,
    fsync: bool,
    at: i64,
}

impl Head {
    /// Opens (creating) the head of the `.agx` directory `agx`; returns it with the
    /// sequence number it records (0 when new or unreadable).
    pub fn open(agx: impl AsFd, fsync: bool) -> std::io::Result<Head> {
        let fd = rustix::fs::openat(
            agx,
            NAME,
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut buf = [0u8; WIDTH];
        let n = rustix::io::pread(&fd, &mut buf, 0)?;
        let at = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        Ok(Head { fd, fsync, at })
    }

    /// The sequence number recorded.
    pub fn at(&self) -> i64 {
        self.at
    }

    /// Records that the database holds every event up to `seq` (never moves back: an
    /// accepted loss becomes a horizon in the database, `Timeline::accept_loss`).
    pub fn advance(&mut self, seq: i64) -> std::io::Result<()> {
        if seq <= self.at {
            return Ok(());
        }
        self.write(seq)
    }

    fn write(&mut self, seq: i64) -> std::io::Result<()> {
        let line = format!("{seq:>19}\n");
        rustix::io::pwrite(&self.fd, line.as_bytes(), 0)?;
        if self.fsync {
            rustix::fs::fdatasync(&self.fd)?;
        }
        self.at = seq;
        Ok(())
    }
}

impl super::recorder::Recorder {
    /// History the timeline database lost, if any: (its last event, the last one
    /// recorded). Only a recorder opened with `tolerate_loss` has one.
    pub fn lost(&self) -> Option<(i64, i64)> {
        *self.lost.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// A person accepts the loss of history: the timeline as it is becomes the record.
    pub fn accept_loss(&self) -> Result<(), super::CaptureError> {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, recorded)) = *lost {
            self.query
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .accept_loss(Seq(recorded), now_ns())?;
            *lost = None;
        }
        Ok(())
    }
}
