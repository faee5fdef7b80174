//! The content store: `.agx/objects/`, zstd blobs keyed by the BLAKE3 hash of the raw
//! content.
//!
//! Invariants:
//! - An object's name is the hash of the bytes `get` returns; `get` verifies it and reports
//!   a mismatch as [`StoreError::Corrupt`], never returning wrong content.
//! - Objects are written to `objects/tmp/` and renamed into place, so a reader (or a crash)
//!   never sees a partial object under its final name. Putting an existing hash is a no-op.
//! - A "patch" object is compressed against a base object (zstd with the base as a raw
//!   dictionary, like `zstd --patch-from`); chains are at most [`MAX_CHAIN`] long.

mod format;
mod verify;

pub use verify::ObjectCheck;

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};
use thiserror::Error;

use crate::ids::ContentHash;
pub use format::Kind;

/// Longest chain of patch objects; a longer one is stored whole instead.
pub const MAX_CHAIN: usize = 8;
/// Files larger than this are never patched against a base (both must fit in memory).
const PATCH_LIMIT: u64 = 64 << 20;
/// zstd level for objects: fast, good ratio on source text.
const LEVEL: i32 = 3;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("object {0} is missing from the store")]
    Missing(ContentHash),
    #[error("object {hash} is corrupt: {reason}")]
    Corrupt { hash: ContentHash, reason: String },
    #[error("store I/O on {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let what = what.into();
    move |source| StoreError::Io { what, source }
}

fn rio(what: &str) -> impl FnOnce(rustix::io::Errno) -> StoreError + '_ {
    move |e| StoreError::Io {
        what: what.to_string(),
        source: e.into(),
    }
}

/// What `put` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Put {
    pub hash: ContentHash,
    pub size: u64,
    /// False when the object was already there.
    pub new: bool,
    /// Bytes the object takes on disk (0 when it was already there).
    pub stored: u64,
}

pub struct Store {
    dir: OwnedFd,
    /// `staging/`, where content waits for room (see [`Store::has`]).
    waiting: Option<OwnedFd>,
    fsync: bool,
    counter: AtomicU64,
    /// Which of the 256 fan-out directories are known to exist.
    fanout: [std::sync::atomic::AtomicBool; 256],
}

/// Where before-images wait, named by their hash, when the store has no room for them:
/// `staging/` (see `capture::staging::Staging::keep_by_hash`).
const WAITING: &str = "staging";

fn rel(h: &ContentHash) -> String {
    let hex = h.to_hex();
    format!("{}/{}", &hex[..2], &hex[2..])
}

impl Store {
    /// Opens (creating if needed) `objects/` under the directory `agx_dir`. With `fsync`,
    /// each object is synced before it is renamed into place.
    pub fn open(agx_dir: impl AsFd, fsync: bool) -> Result<Store, StoreError> {
        for d in ["objects", "objects/tmp", WAITING] {
            match rustix::fs::mkdirat(&agx_dir, d, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(rio(d)(e)),
            }
        }
        let dir = rustix::fs::openat(
            &agx_dir,
            "objects",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(rio("objects"))?;
        let waiting = rustix::fs::openat(
            &agx_dir,
            WAITING,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok();
        Ok(Store {
            dir,
            waiting,
            fsync,
            counter: AtomicU64::new(0),
            fanout: std::array::from_fn(|_| std::sync::atomic::AtomicBool::new(false)),
        })
    }

    pub fn contains(&self, h: &ContentHash) -> bool {
        rustix::fs::statat(&self.dir, rel(h), AtFlags::empty()).is_ok()
    }

    /// Whether the content of `h` can be read: stored, or waiting in staging.
    pub fn has(&self, h: &ContentHash) -> bool {
        self.contains(h)
            || self
                .waiting
                .as_ref()
                .is_some_and(|w| rustix::fs::statat(w, h.to_hex(), AtFlags::empty()).is_ok())
    }

    /// Size on disk of an object, if present.
    pub fn stored_size(&self, h: &ContentHash) -> Option<u64> {
        rustix::fs::statat(&self.dir, rel(h), AtFlags::empty())
            .ok()
            .map(|st| st.st_size as u64)
    }

    /// Stores `data`, compressed against `base` when that is smaller.
    pub fn put(&self, data: &[u8], base: Option<&ContentHash>) -> Result<Put, StoreError> {
        let hash = ContentHash::of(data);
        if self.contains(&hash) {
            return Ok(Put {
                hash,
                size: data.len() as u64,
                new: false,
                stored: 0,
            });
        }
        let whole = zstd::bulk::compress(data, LEVEL).map_err(io("compressing"))?;
        let mut body = format::encode_whole(&whole);
        if let Some(base) = base.filter(|b| **b != hash && (data.len() as u64) < PATCH_LIMIT) {
            if let Ok((base_data, depth)) = self.get_with_depth(base) {
                if depth < MAX_CHAIN && (base_data.len() as u64) < PATCH_LIMIT {
                    if let Ok(p) = format::compress_patch(data, &base_data, LEVEL) {
                        if p.len() + 32 < whole.len() {
                            body = format::encode_patch(base, &p);
                        }
                    }
                }
            }
        }
        let stored = body.len() as u64;
        self.write_object(&hash, &body)?;
        Ok(Put {
            hash,
            size: data.len() as u64,
            new: true,
            stored,
        })
    }

    /// Stores the content read from `r` (which must be at most `limit` bytes to be read
    /// into memory; larger content is streamed and stored whole).
    pub fn put_reader(
        &self,
        mut r: impl Read,
        base: Option<&ContentHash>,
    ) -> Result<Put, StoreError> {
        let mut head = Vec::new();
        (&mut r)
            .take(PATCH_LIMIT)
            .read_to_end(&mut head)
            .map_err(io("reading content"))?;
        if (head.len() as u64) < PATCH_LIMIT {
            return self.put(&head, base);
        }
        self.put_stream(head, r)
    }

    /// Streams large content into a whole object: hash and compress in one pass.
    fn put_stream(&self, head: Vec<u8>, mut r: impl Read) -> Result<Put, StoreError> {
        let tmp = self.tmp_name();
        let f = self.create_tmp(&tmp)?;
        let mut f = std::fs::File::from(f);
        f.write_all(&format::header(Kind::Whole))
            .map_err(io("writing object"))?;
        let mut enc = zstd::stream::Encoder::new(f, LEVEL).map_err(io("compressing"))?;
        let mut hasher = blake3::Hasher::new();
        let mut size = head.len() as u64;
        hasher.update(&head);
        enc.write_all(&head).map_err(io("compressing"))?;
        drop(head);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = r.read(&mut buf).map_err(io("reading content"))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            enc.write_all(&buf[..n]).map_err(io("compressing"))?;
            size += n as u64;
        }
        let f = enc.finish().map_err(io("compressing"))?;
        let hash = ContentHash(*hasher.finalize().as_bytes());
        if self.contains(&hash) {
            let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
            return Ok(Put {
                hash,
                size,
                new: false,
                stored: 0,
            });
        }
        let stored = f.metadata().map(|m| m.len()).unwrap_or(0);
        self.commit_tmp(&tmp, &f, &hash)?;
        Ok(Put {
            hash,
            size,
            new: true,
            stored,
        })
    }

    fn tmp_name(&self) -> String {
        format!(
            "tmp/{}-{}",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn create_tmp(&self, tmp: &str) -> Result<OwnedFd, StoreError> {
        rustix::fs::openat(
            &self.dir,
            tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o400),
        )
        .map_err(rio("creating an object"))
    }

    fn commit_tmp(
        &self,
        tmp: &str,
        f: &std::fs::File,
        hash: &ContentHash,
    ) -> Result<(), StoreError> {
        if self.fsync {
            f.sync_all().map_err(io("syncing an object"))?;
        }
        let hex = hash.to_hex();
        let known = &self.fanout[hash.0[0] as usize];
        if !known.load(Ordering::Relaxed) {
            match rustix::fs::mkdirat(&self.dir, &hex[..2], Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => known.store(true, Ordering::Relaxed),
                Err(e) => return Err(rio("creating an object directory")(e)),
            }
        }
        rustix::fs::renameat(&self.dir, tmp, &self.dir, rel(hash)).map_err(rio("storing an object"))
    }

    fn write_object(&self, hash: &ContentHash, body: &[u8]) -> Result<(), StoreError> {
        let tmp = self.tmp_name();
        let fd = self.create_tmp(&tmp)?;
        let mut f = std::fs::File::from(fd);
        if let Err(e) = f.write_all(body) {
            let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
            return Err(io("writing an object")(e));
        }
        let r = self.commit_tmp(&tmp, &f, hash);
        if r.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
        }
        r
    }

    /// Content that waits in staging for room in the store (a full disk kept a
    /// before-image there under its hash: `staging/<hash>`), verified against its hash.
    fn waiting_content(&self, h: &ContentHash) -> Result<(Vec<u8>, usize), StoreError> {
        let Some(w) = &self.waiting else {
            return Err(StoreError::Missing(*h));
        };
        let fd = match rustix::fs::openat(
            w,
            h.to_hex(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(_) => return Err(StoreError::Missing(*h)),
        };
        let mut v = Vec::new();
        std::fs::File::from(fd)
            .read_to_end(&mut v)
            .map_err(io("reading a staged before-image"))?;
        if ContentHash::of(&v) != *h {
            return Err(StoreError::Corrupt {
                hash: *h,
                reason: "the staged copy does not match its hash".into(),
            });
        }
        Ok((v, 0))
    }

    /// The content of an object, verified against its hash.
    pub fn get(&self, h: &ContentHash) -> Result<Vec<u8>, StoreError> {
        self.get_with_depth(h).map(|(d, _)| d)
    }

    fn get_with_depth(&self, h: &ContentHash) -> Result<(Vec<u8>, usize), StoreError> {
        let raw = match rustix::fs::openat(
            &self.dir,
            rel(h),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let mut v = Vec::new();
                std::fs::File::from(fd)
                    .read_to_end(&mut v)
                    .map_err(io("reading an object"))?;
                v
            }
            Err(rustix::io::Errno::NOENT) => return self.waiting_content(h),
            Err(e) => return Err(rio("opening an object")(e)),
        };
        let corrupt = |reason: String| StoreError::Corrupt { hash: *h, reason };
        let (data, depth) = match format::decode(&raw).map_err(corrupt)? {
            format::Decoded::Whole(z) => (
                zstd::stream::decode_all(z)
                    .map_err(|e| corrupt(format!("cannot decompress: {e}")))?,
                0,
            ),
            format::Decoded::Patch { base, body } => {
                let (base_data, depth) = match self.get_with_depth(&base) {
                    Ok(x) => x,
                    Err(StoreError::Missing(b)) => {
                        return Err(corrupt(format!("its base object {b} is missing")))
                    }
                    Err(e) => return Err(e),
                };
                (
                    format::decompress_patch(body, &base_data)
                        .map_err(|e| corrupt(format!("cannot decompress: {e}")))?,
                    depth + 1,
                )
            }
        };
        if ContentHash::of(&data) != *h {
            return Err(corrupt("content does not match its hash".into()));
        }
        Ok((data, depth))
    }

    /// Every object hash in the store.
    pub fn list(&self) -> Result<Vec<ContentHash>, StoreError> {
        let mut out = Vec::new();
        let top = rustix::fs::openat(
            &self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(rio("listing objects"))?;
        for e in rustix::fs::Dir::read_from(&top).map_err(rio("listing objects"))? {
            let e = e.map_err(rio("listing objects"))?;
            let prefix = e.file_name().to_string_lossy().into_owned();
            if prefix.len() != 2 {
                continue;
            }
            let sub = rustix::fs::openat(
                &top,
                prefix.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(rio("listing objects"))?;
            for f in rustix::fs::Dir::read_from(&sub).map_err(rio("listing objects"))? {
                let f = f.map_err(rio("listing objects"))?;
                let name = f.file_name().to_string_lossy();
                if let Some(h) = ContentHash::from_hex(&format!("{prefix}{name}")) {
                    out.push(h);
                }
            }
        }
        Ok(out)
    }

    /// The object `h` is patched against, if it is a patch object (read from its header
    /// only). gc keeps the base of every object it keeps: a patch cannot be read without it.
    pub fn base_of(&self, h: &ContentHash) -> Result<Option<ContentHash>, StoreError> {
        let fd = match rustix::fs::openat(
            &self.dir,
            rel(h),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Err(StoreError::Missing(*h)),
            Err(e) => return Err(rio("opening an object")(e)),
        };
        let mut head = Vec::with_capacity(38);
        std::fs::File::from(fd)
            .take(38)
            .read_to_end(&mut head)
            .map_err(io("reading an object"))?;
        match format::decode(&head) {
            Ok(format::Decoded::Patch { base, .. }) => Ok(Some(base)),
            Ok(format::Decoded::Whole(_)) => Ok(None),
            Err(reason) => Err(StoreError::Corrupt { hash: *h, reason }),
        }
    }

    /// Deletes object `h`; returns the bytes it took (0 when it was not there). Only gc
    /// calls this, after the events that referred to `h` are gone.
    pub fn remove(&self, h: &ContentHash) -> Result<u64, StoreError> {
        let size = self.stored_size(h).unwrap_or(0);
        match rustix::fs::unlinkat(&self.dir, rel(h), AtFlags::empty()) {
            Ok(()) => Ok(size),
            Err(rustix::io::Errno::NOENT) => Ok(0),
            Err(e) => Err(rio("deleting an object")(e)),
        }
    }

    /// Total bytes the objects take on disk.
    pub fn disk_usage(&self) -> u64 {
        self.list()
            .unwrap_or_default()
            .iter()
            .filter_map(|h| self.stored_size(h))
            .sum()
    }
}

#[cfg(test)]
mod tests;
