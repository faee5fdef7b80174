//! The capture journal, `.agx/journal`: one JSON line per record, appended before a
//! mutation is applied (begin) and after it (commit or cancel). The timeline database may
//! lag behind; after a crash the journal tells which mutations may have reached the disk.
//! A torn last line (a write cut short) is ignored: its mutation was never applied.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::state::Stamp;
use crate::timeline::{Event, ObjState};

pub const NAME: &str = "journal";

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Record {
    Begin {
        event: Box<Event>,
        /// Staging file holding the before-image of `event.path`.
        staged: Option<String>,
        /// Staging file holding the before-image of `event.to_path` (rename over a file).
        target_staged: Option<String>,
    },
    Commit {
        seq: i64,
        /// The state after the change when the caller knew it; None: read it from the
        /// live file.
        after: Option<ObjState>,
        /// With `after: None`: the file's stamp at commit. The live file is this event's
        /// after-state only while its stamp is still this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stamp: Option<Stamp>,
    },
    /// The mutation failed, or (written by the worker) it changed nothing: there is no
    /// event to record.
    Cancel { seq: i64 },
}

pub struct Journal {
    file: std::fs::File,
    fsync: bool,
    len: u64,
}

impl Journal {
    pub fn open(agx: impl AsFd, fsync: bool) -> std::io::Result<Journal> {
        let fd: OwnedFd = rustix::fs::openat(
            agx,
            NAME,
            OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let file = std::fs::File::from(fd);
        let len = file.metadata()?.len();
        Ok(Journal { file, fsync, len })
    }

    /// Appends one record with a single write. A record that cannot be written whole (a
    /// full disk) is cut off again, so the next record does not continue a torn line.
    pub fn append(&mut self, r: &Record) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let written = self.file.write_all(&line).and_then(|()| {
            if self.fsync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += line.len() as u64;
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops every record (all are in the timeline).
    pub fn truncate(&mut self) -> std::io::Result<()> {
        self.file.set_len(0)?;
        if self.fsync {
            self.file.sync_data()?;
        }
        self.len = 0;
        Ok(())
    }
}

/// Every complete record of the journal in `agx`, in order.
pub fn read_all(agx: impl AsFd) -> std::io::Result<Vec<Record>> {
    let fd = match rustix::fs::openat(agx, NAME, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for line in BufReader::new(std::fs::File::from(fd)).split(b'\n') {
        let line = line?;
        match serde_json::from_slice::<Record>(&line) {
            Ok(r) => out.push(r),
            Err(e) => log::warn!("journal: skipping an unreadable record ({e})"),
        }
    }
    Ok(out)
}
