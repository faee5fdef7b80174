//! Which paths git tracks: the index (`.git/index`) of each repository in the project,
//! read through the project's root descriptor and cached until a recorded change touches
//! it. Only paths are read; every index version git writes (2, 3 and the prefix-compressed
//! 4, SHA-1 or SHA-256 object ids, sparse directory entries) is understood. An index agx
//! cannot read whole (a split index, a format from the future, a torn file) counts as
//! tracking everything in its repository: the capture policy then errs towards capture.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use rustix::fs::OFlags;

use crate::tree as live;

/// The paths one index tracks, relative to its repository's work tree.
#[derive(Debug, Default)]
pub struct Tracked {
    /// Sorted paths of the entries.
    paths: Vec<Vec<u8>>,
    /// Sparse directory entries (paths ending in '/'): everything below is tracked.
    sparse: Vec<Vec<u8>>,
    /// The index could not be read whole: treat every path as tracked.
    all: bool,
}

impl Tracked {
    /// Whether `rel` is tracked, or for a directory, anything below it.
    pub fn tracks(&self, rel: &[u8], is_dir: bool) -> bool {
        if self.all {
            return true;
        }
        if self.sparse.iter().any(|d| rel.starts_with(d)) {
            return true;
        }
        let i = self.paths.partition_point(|p| p.as_slice() < rel);
        if self.paths.get(i).is_some_and(|p| p == rel) {
            return true;
        }
        if is_dir {
            let mut below = rel.to_vec();
            below.push(b'/');
            let j = self
                .paths
                .partition_point(|p| p.as_slice() < below.as_slice());
            return self.paths.get(j).is_some_and(|p| p.starts_with(&below));
        }
        false
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// git's offset varint (varint.c): 7 bits a byte, each continuation adds one.
fn varint(b: &[u8], at: &mut usize) -> Option<usize> {
    let mut c = *b.get(*at)?;
    *at += 1;
    let mut v = (c & 127) as usize;
    while c & 128 != 0 {
        v = v.checked_add(1)?;
        if v.leading_zeros() < 7 {
            return None;
        }
        c = *b.get(*at)?;
        *at += 1;
        v = (v << 7) + (c & 127) as usize;
    }
    Some(v)
}

/// Parses an index. None: not an index agx can read whole.
pub fn parse(b: &[u8], hash_len: usize) -> Option<Tracked> {
    if b.get(..4)? != b"DIRC" {
        return None;
    }
    let version = be32(b, 4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(b, 8)? as usize;
    let mut at = 12;
    let mut paths = Vec::with_capacity(count.min(1 << 20));
    let mut sparse = Vec::new();
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = at;
        // ctime, mtime, dev, ino, mode, uid, gid, size: 40 bytes; then the object id.
        let flags_at = at + 40 + hash_len;
        let flags = u16::from_be_bytes(b.get(flags_at..flags_at + 2)?.try_into().ok()?);
        at = flags_at + 2;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return None;
            }
            at += 2;
        }
        let path = if version == 4 {
            let strip = varint(b, &mut at)?;
            let end = at + b.get(at..)?.iter().position(|c| *c == 0)?;
            let keep = prev.len().checked_sub(strip)?;
            let mut p = prev[..keep].to_vec();
            p.extend_from_slice(&b[at..end]);
            at = end + 1;
            p
        } else {
            let end = at + b.get(at..)?.iter().position(|c| *c == 0)?;
            let p = b[at..end].to_vec();
            // Entries are padded with NULs to a multiple of 8 bytes.
            let len = end - start;
            at = start + (len + 8) / 8 * 8;
            p
        };
        if path.ends_with(b"/") {
            sparse.push(path.clone());
        } else {
            paths.push(path.clone());
        }
        prev = path;
    }
    // A split index keeps most entries in a shared file: not read whole here.
    let mut ext = at;
    while ext + 8 <= b.len().saturating_sub(hash_len) {
        let sig = &b[ext..ext + 4];
        let len = be32(b, ext + 4)? as usize;
        if sig == b"link" {
            return None;
        }
        ext = ext.checked_add(8 + len)?;
    }
    paths.sort();
    paths.dedup();
    Some(Tracked {
        paths,
        sparse,
        all: false,
    })
}

/// The repositories of a project and what their indexes track.
#[derive(Default)]
pub struct GitIndexes {
    /// Per directory: the work tree of the repository containing it, if any.
    repo_of: Mutex<HashMap<Vec<u8>, Option<Vec<u8>>>>,
    /// Per work tree: what its index tracks.
    tracked: Mutex<HashMap<Vec<u8>, Arc<Tracked>>>,
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    crate::sys::path::join(a, b)
}

fn parent(p: &[u8]) -> Option<&[u8]> {
    if p.is_empty() {
        return None;
    }
    Some(
        p.iter()
            .rposition(|c| *c == b'/')
            .map_or(&[][..], |i| &p[..i]),
    )
}

impl GitIndexes {
    /// Forgets every index read (one of them may have changed).
    pub fn reset_indexes(&self) {
        self.tracked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Forgets where the repositories are (a `.git` appeared, went or moved).
    pub fn reset(&self) {
        self.repo_of
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.reset_indexes();
    }

    /// The work tree of the repository directory `dir` belongs to.
    fn repo(&self, root: &OwnedFd, dir: &[u8]) -> Option<Vec<u8>> {
        if let Some(r) = self
            .repo_of
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
        {
            return r.clone();
        }
        let here = live::stat(root, &join(dir, b".git"))
            .is_some_and(|o| o.kind == crate::timeline::Kind::Dir);
        let r = if here {
            Some(dir.to_vec())
        } else {
            parent(dir).and_then(|p| self.repo(root, p))
        };
        self.repo_of
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir.to_vec(), r.clone());
        r
    }

    fn tracked_in(&self, root: &OwnedFd, repo: &[u8]) -> Arc<Tracked> {
        if let Some(t) = self
            .tracked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(repo)
        {
            return t.clone();
        }
        let git = join(repo, b".git");
        let read = |name: &[u8]| -> Option<Vec<u8>> {
            let fd = live::open_beneath(root, &join(&git, name), OFlags::RDONLY).ok()?;
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut v).ok()?;
            Some(v)
        };
        let config = read(b"config").unwrap_or_default();
        let config = String::from_utf8_lossy(&config).to_ascii_lowercase();
        let hash_len = if config.contains("objectformat") && config.contains("sha256") {
            32
        } else {
            20
        };
        let t = match live::stat(root, &join(&git, b"index")) {
            // A repository with nothing added yet.
            None => Tracked::default(),
            Some(_) => match read(b"index").and_then(|b| parse(&b, hash_len)) {
                Some(t) => t,
                None => {
                    log::warn!(
                        "{}: cannot read git's index; every path in that repository counts as tracked",
                        String::from_utf8_lossy(&git)
                    );
                    Tracked {
                        all: true,
                        ..Tracked::default()
                    }
                }
            },
        };
        let t = Arc::new(t);
        self.tracked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(repo.to_vec(), t.clone());
        t
    }

    /// Whether git tracks `path` (project-relative), or for a directory, anything below.
    pub fn tracks(&self, root: &OwnedFd, path: &[u8], is_dir: bool) -> bool {
        let Some(dir) = parent(path) else {
            return false;
        };
        let Some(repo) = self.repo(root, dir) else {
            return false;
        };
        let rel = if repo.is_empty() {
            path
        } else {
            &path[repo.len() + 1..]
        };
        if rel == b".git" || rel.starts_with(b".git/") {
            return false;
        }
        self.tracked_in(root, &repo).tracks(rel, is_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &std::path::Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    /// Every index version git writes, read back as the paths `git ls-files` lists.
    #[test]
    fn reads_the_paths_of_every_index_version() {
        for version in ["2", "3", "4"] {
            let d = tempfile::tempdir().unwrap();
            git(d.path(), &["init", "-q"]);
            for p in [
                "a",
                "dir/b",
                "dir/sub/c",
                "dir/sub/long-name-that-shares-a-prefix",
                "z é",
            ] {
                let f = d.path().join(p);
                std::fs::create_dir_all(f.parent().unwrap()).unwrap();
                std::fs::write(&f, p).unwrap();
            }
            git(d.path(), &["add", "."]);
            // An entry with the extended flag set (v3+): intent-to-add.
            std::fs::write(d.path().join("ita"), "x").unwrap();
            if version != "2" {
                git(d.path(), &["add", "-N", "ita"]);
            }
            git(d.path(), &["update-index", "--index-version", version]);
            let b = std::fs::read(d.path().join(".git/index")).unwrap();
            let t = parse(&b, 20).unwrap_or_else(|| panic!("index version {version}"));
            assert!(t.tracks(b"dir/sub/c", false), "v{version}");
            assert!(t.tracks("z é".as_bytes(), false), "v{version}");
            assert!(t.tracks(b"dir/sub/long-name-that-shares-a-prefix", false));
            assert!(t.tracks(b"dir", true) && t.tracks(b"dir/sub", true));
            assert!(!t.tracks(b"di", true) && !t.tracks(b"dir/s", false));
            assert!(!t.tracks(b"nope", false));
            assert_eq!(t.tracks(b"ita", false), version != "2", "v{version}");
        }
    }

    #[test]
    fn a_torn_index_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        git(d.path(), &["init", "-q"]);
        std::fs::write(d.path().join("a"), "a").unwrap();
        git(d.path(), &["add", "a"]);
        let b = std::fs::read(d.path().join(".git/index")).unwrap();
        for cut in [5, 20, 60, b.len() / 2] {
            assert!(parse(&b[..cut], 20).is_none_or(|t| !t.tracks(b"zz", false)));
        }
        assert!(parse(b"garbage", 20).is_none());
    }
}
