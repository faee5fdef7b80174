//! The capture journal, `.agx/journal`: one JSON line per record, appended before a
//! mutation is applied (begin) and after it (commit or cancel). The timeline database may
//! lag behind; after a crash the journal tells which mutations may have reached the disk.
//! A torn last line (a write cut short) is ignored: its mutation was never applied.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::timeline::{Event, ObjState};
use crate::tree::state::Stamp;

pub const NAME: &str = "journal";

/// Room kept allocated past the journal's end (see [`Journal::preallocate`]): 1/256 of the
/// filesystem, at least 64 KiB and at most 1 MiB (a few hundred to a few thousand
/// records). Safe to change; larger keeps more removals recordable on a full disk.
fn prealloc_for(fs_bytes: u64) -> u64 {
    (fs_bytes / 256).clamp(64 << 10, 1 << 20)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Record {
    Begin {
        event: Box<Event>,
        /// Staging file holding the before-image of `event.path`.
        staged: Option<String>,
        /// Staging file holding the before-image of `event.to_path` (rename over a file).
        target_staged: Option<String>,
        /// The before-image of `event.path` itself, when small enough to be kept here
        /// instead of in a staging file (hex in the record).
        #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_bytes")]
        inline: Option<Vec<u8>>,
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
    /// Records whose writing may wait (see [`Journal::defer`]), encoded, in order.
    deferred: Vec<u8>,
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
        let j = Journal {
            file,
            fsync,
            len,
            deferred: Vec::new(),
        };
        j.preallocate();
        Ok(j)
    }

    /// Allocates room past the end ([`prealloc_for`]) (the size stays): appends land in blocks
    /// the file already has, so agx can still record removals on a disk that is full to
    /// the last block (an unlink keeps its object by a hard link, which takes no block;
    /// its journal line is all it writes). Best effort: a filesystem without fallocate
    /// simply allocates as it appends.
    fn preallocate(&self) {
        let fs = rustix::fs::fstatvfs(&self.file).map_or(0, |s| s.f_blocks * s.f_frsize);
        let _ = rustix::fs::fallocate(
            &self.file,
            rustix::fs::FallocateFlags::KEEP_SIZE,
            self.len,
            prealloc_for(fs),
        );
    }

    /// Appends one record, after any deferred ones, with a single write. Records that
    /// cannot be written whole (a full disk) are cut off again, so the next write does not
    /// continue a torn line; deferred records stay deferred, and this one is dropped.
    pub fn append(&mut self, r: &Encoded) -> std::io::Result<()> {
        let deferred = self.deferred.len();
        self.deferred.extend_from_slice(&r.0);
        let written = self.write_deferred();
        if written.is_err() {
            self.deferred.truncate(deferred);
        }
        written
    }

    /// Keeps a record to be written with the next one (or by [`Journal::write_deferred`]).
    ///
    /// For records that end a change (commit): the journal on disk is then always a prefix
    /// of the records in order, which is all a crash can leave anyway, and a change ended
    /// but not yet written looks like one whose file was still open. Every record that
    /// begins a later change is written after it, so recovery never sees a later change
    /// without the earlier ends. This saves a write per change on the request path. With
    /// `fsync` every record is written at once (the policy asks for each to be durable).
    pub fn defer(&mut self, r: &Encoded) -> std::io::Result<()> {
        if self.fsync {
            return self.append(r);
        }
        self.deferred.extend_from_slice(&r.0);
        Ok(())
    }

    /// Writes the deferred records, if any.
    pub fn write_deferred(&mut self) -> std::io::Result<()> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let line = std::mem::take(&mut self.deferred);
        let written = self.write(&line);
        if written.is_err() {
            self.deferred = line;
        }
        written
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let written = self.file.write_all(bytes).and_then(|()| {
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
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Whether no record is written or deferred.
    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.deferred.is_empty()
    }

    /// Drops every record, deferred ones included (all are in the timeline).
    pub fn truncate(&mut self) -> std::io::Result<()> {
        self.deferred.clear();
        if self.len == 0 {
            return Ok(());
        }
        self.file.set_len(0)?;
        if self.fsync {
            self.file.sync_data()?;
        }
        self.len = 0;
        self.preallocate();
        Ok(())
    }
}

/// A record encoded as its journal line. Callers encode before they take the journal's
/// lock: the lock is then held only to copy the bytes and write them, and a release
/// encoding its end record does not hold up a creation waiting to write its begin.
pub struct Encoded(Vec<u8>);

impl Record {
    /// This record as a JSON line.
    pub fn encode(&self) -> std::io::Result<Encoded> {
        let mut out = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        out.push(b'\n');
        Ok(Encoded(out))
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

/// Bytes as a lowercase hex string (JSON has no byte strings).
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(b) => {
                let mut out = Vec::with_capacity(b.len() * 2);
                for x in b {
                    out.push(DIGITS[(x >> 4) as usize]);
                    out.push(DIGITS[(x & 15) as usize]);
                }
                // Only ASCII hex digits were pushed.
                s.serialize_str(std::str::from_utf8(&out).map_err(serde::ser::Error::custom)?)
            }
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let digit = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            _ => Err(serde::de::Error::custom("inline content: not hex")),
        };
        let t = text.as_bytes();
        if t.len() % 2 != 0 {
            return Err(serde::de::Error::custom("inline content: odd length"));
        }
        t.chunks(2)
            .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
            .collect::<Result<Vec<u8>, D::Error>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Seq;
    use crate::timeline::{Actor, Op};

    fn begin(seq: i64, inline: Option<Vec<u8>>) -> Encoded {
        Record::Begin {
            event: Box::new(Event {
                seq: Seq(seq),
                time_ns: 1,
                op: Op::Write,
                path: b"f".to_vec(),
                to_path: None,
                before: ObjState::absent(),
                after: ObjState::absent(),
                target_before: None,
                captured: true,
                actor: Actor::default(),
                session: None,
                tool_call: None,
                note: None,
                branch: None,
            }),
            staged: None,
            target_staged: None,
            inline,
        }
        .encode()
        .unwrap()
    }

    #[test]
    fn inline_before_images_survive_the_journal_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let agx =
            rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let all_bytes: Vec<u8> = (0..=255u8).collect();
        let mut j = Journal::open(&agx, false).unwrap();
        j.append(&begin(1, Some(all_bytes.clone()))).unwrap();
        j.append(&begin(2, Some(Vec::new()))).unwrap();
        j.append(&begin(3, None)).unwrap();
        // A record cut short by a crash.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(NAME))
            .unwrap();
        f.write_all(br#"{"t":"begin","event":{"seq":4,"#).unwrap();
        let got: Vec<(i64, Option<Vec<u8>>)> = read_all(&agx)
            .unwrap()
            .into_iter()
            .map(|r| match r {
                Record::Begin { event, inline, .. } => (event.seq.0, inline),
                other => panic!("unexpected record {other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            vec![(1, Some(all_bytes)), (2, Some(Vec::new())), (3, None)]
        );
    }

    fn seqs(agx: &OwnedFd) -> Vec<(char, i64)> {
        read_all(agx)
            .unwrap()
            .into_iter()
            .map(|r| match r {
                Record::Begin { event, .. } => ('b', event.seq.0),
                Record::Commit { seq, .. } => ('c', seq),
                Record::Cancel { seq } => ('x', seq),
            })
            .collect()
    }

    #[test]
    fn deferred_ends_reach_the_file_before_any_later_record_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let agx =
            rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let commit = |seq| {
            Record::Commit {
                seq,
                after: None,
                stamp: None,
            }
            .encode()
            .unwrap()
        };
        let mut j = Journal::open(&agx, false).unwrap();
        j.append(&begin(1, None)).unwrap();
        j.defer(&commit(1)).unwrap();
        // A crash now leaves the prefix: event 1 begun, its end not yet written.
        assert_eq!(seqs(&agx), vec![('b', 1)]);
        assert!(!j.is_empty());
        j.append(&begin(2, None)).unwrap();
        assert_eq!(seqs(&agx), vec![('b', 1), ('c', 1), ('b', 2)]);
        j.defer(&commit(2)).unwrap();
        j.write_deferred().unwrap();
        j.write_deferred().unwrap();
        assert_eq!(seqs(&agx), vec![('b', 1), ('c', 1), ('b', 2), ('c', 2)]);
        // Emptied with its deferred records: nothing of them comes back later.
        j.defer(&commit(3)).unwrap();
        j.truncate().unwrap();
        assert!(j.is_empty());
        j.append(&Record::Cancel { seq: 4 }.encode().unwrap())
            .unwrap();
        assert_eq!(seqs(&agx), vec![('x', 4)]);
        // With fsync every record is written at once.
        let mut j = Journal::open(&agx, true).unwrap();
        j.defer(&commit(5)).unwrap();
        assert_eq!(seqs(&agx), vec![('x', 4), ('c', 5)]);
    }
}
