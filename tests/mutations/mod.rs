//! Random mutation sequences through a mount, shared by the property tests (restore,
//! views): a generator of steps, the starting project, and the step applier.
#![allow(dead_code)]

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::hist::{tree, Obj};
use proptest::prelude::*;

const NAMES: &[&str] = &["a", "b", "c", "p", "q"];
const TARGETS: &[&str] = &["a", "../b", "p/a", "nowhere", "q"];
const MODES: &[u32] = &[0o600, 0o644, 0o755, 0o700, 0o640];

/// One mutation. Indices pick among what exists when the step runs (modulo the count),
/// so most steps apply to something; a step the filesystem refuses is simply skipped.
#[derive(Clone, Debug)]
pub enum Step {
    /// Rewrite an existing file (O_TRUNC).
    Write {
        f: usize,
        data: Data,
    },
    /// A new file in an existing directory.
    Create {
        d: usize,
        n: usize,
        data: Data,
    },
    Append {
        f: usize,
        data: Data,
    },
    /// Overwrite in place at an offset (O_WRONLY, no truncation).
    Patch {
        f: usize,
        off: usize,
        data: Data,
    },
    /// truncate(2) by path.
    Truncate {
        f: usize,
        len: usize,
    },
    /// ftruncate through a handle opened for writing.
    Ftruncate {
        f: usize,
        len: usize,
    },
    /// Opened for writing, closed unchanged.
    OpenOnly {
        f: usize,
    },
    /// Any entry to `dir/name` (possibly over an existing file or empty directory).
    Rename {
        src: usize,
        d: usize,
        n: usize,
    },
    Unlink {
        f: usize,
    },
    Mkdir {
        d: usize,
        n: usize,
    },
    Rmdir {
        d: usize,
    },
    Chmod {
        e: usize,
        mode: usize,
    },
    Symlink {
        d: usize,
        n: usize,
        t: usize,
    },
    /// renameat2(RENAME_EXCHANGE) of two entries.
    Exchange {
        a: usize,
        b: usize,
    },
}

/// File content; printed short so a failing case stays readable.
#[derive(Clone)]
pub struct Data(pub Vec<u8>);

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.len() <= 24 {
            write!(f, "{:?}", String::from_utf8_lossy(&self.0))
        } else {
            write!(f, "<{} bytes>", self.0.len())
        }
    }
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

pub fn data() -> impl Strategy<Value = Data> {
    prop_oneof![
        3 => proptest::collection::vec(b'a'..=b'z', 0..40),
        1 => proptest::collection::vec(any::<u8>(), 0..5000),
    ]
    .prop_map(Data)
}

pub fn step() -> impl Strategy<Value = Step> {
    let i = || 0usize..64;
    prop_oneof![
        3 => (i(), data()).prop_map(|(f, data)| Step::Write { f, data }),
        3 => (i(), i(), data()).prop_map(|(d, n, data)| Step::Create { d, n, data }),
        2 => (i(), data()).prop_map(|(f, data)| Step::Append { f, data }),
        2 => (i(), 0usize..6000, data()).prop_map(|(f, off, data)| Step::Patch { f, off, data }),
        1 => (i(), 0usize..6000).prop_map(|(f, len)| Step::Truncate { f, len }),
        1 => (i(), 0usize..6000).prop_map(|(f, len)| Step::Ftruncate { f, len }),
        1 => i().prop_map(|f| Step::OpenOnly { f }),
        3 => (i(), i(), i()).prop_map(|(src, d, n)| Step::Rename { src, d, n }),
        2 => i().prop_map(|f| Step::Unlink { f }),
        2 => (i(), i()).prop_map(|(d, n)| Step::Mkdir { d, n }),
        1 => i().prop_map(|d| Step::Rmdir { d }),
        2 => (i(), i()).prop_map(|(e, mode)| Step::Chmod { e, mode }),
        1 => (i(), i(), i()).prop_map(|(d, n, t)| Step::Symlink { d, n, t }),
        1 => (i(), i()).prop_map(|(a, b)| Step::Exchange { a, b }),
    ]
}

/// The starting project: files of several sizes and modes, nested and empty directories,
/// symlinks (one dangling).
pub fn setup(p: &Path) {
    std::fs::write(p.join("a"), "alpha\n").unwrap();
    std::fs::write(
        p.join("b"),
        (0..3000u32)
            .map(|i| (i * 7 % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    std::fs::set_permissions(p.join("b"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(p.join("c"), "").unwrap();
    std::fs::create_dir_all(p.join("p/q")).unwrap();
    std::fs::write(p.join("p/a"), "pa\n").unwrap();
    std::os::unix::fs::symlink("../a", p.join("p/c")).unwrap();
    std::os::unix::fs::symlink("gone", p.join("p/b")).unwrap();
    std::fs::create_dir(p.join("q")).unwrap();
    std::fs::set_permissions(p.join("q"), PermissionsExt::from_mode(0o700)).unwrap();
}

/// What exists now: files, directories (the root first), and every entry.
pub struct Now {
    pub files: Vec<PathBuf>,
    pub dirs: Vec<PathBuf>,
    pub all: Vec<PathBuf>,
}

pub fn now(root: &Path) -> Now {
    let t = tree(root);
    let mut n = Now {
        files: Vec::new(),
        dirs: vec![PathBuf::new()],
        all: Vec::new(),
    };
    for (p, node) in t {
        match node.obj {
            Obj::File(_) => n.files.push(p.clone()),
            Obj::Dir => n.dirs.push(p.clone()),
            _ => {}
        }
        n.all.push(p);
    }
    n
}

pub fn pick(v: &[PathBuf], i: usize) -> Option<&PathBuf> {
    (!v.is_empty()).then(|| &v[i % v.len()])
}

/// Applies one step through the mount at `root`; errors from the filesystem are ignored
/// (the step then changed nothing, which the restore must cope with too).
pub fn apply(root: &Path, s: &Step) {
    let n = now(root);
    let at = |p: &Path| root.join(p);
    let file = |i: usize| pick(&n.files, i).map(|p| at(p));
    let new_name = |d: usize, k: usize| at(&pick(&n.dirs, d).unwrap().join(NAMES[k % NAMES.len()]));
    let _ = match s {
        Step::Write { f, data } => file(*f).map(|p| std::fs::write(p, &data[..])),
        Step::Create { d, n: k, data } => Some(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(new_name(*d, *k))
                .and_then(|mut f| f.write_all(&data[..])),
        ),
        Step::Append { f, data } => file(*f).map(|p| {
            OpenOptions::new()
                .append(true)
                .open(p)
                .and_then(|mut f| f.write_all(&data[..]))
        }),
        Step::Patch { f, off, data } => file(*f).map(|p| {
            OpenOptions::new().write(true).open(p).and_then(|f| {
                let len = f.metadata()?.len() as usize;
                f.write_all_at(&data[..], (off % (len + 1)) as u64)
            })
        }),
        Step::Truncate { f, len } => file(*f).map(|p| {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            if unsafe { libc::truncate(c.as_ptr(), *len as libc::off_t) } == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }),
        Step::Ftruncate { f, len } => file(*f).map(|p| {
            OpenOptions::new()
                .write(true)
                .open(p)
                .and_then(|f| f.set_len(*len as u64))
        }),
        Step::OpenOnly { f } => {
            file(*f).map(|p| OpenOptions::new().read(true).write(true).open(p).map(drop))
        }
        Step::Rename { src, d, n: k } => {
            pick(&n.all, *src).map(|p| std::fs::rename(at(p), new_name(*d, *k)))
        }
        Step::Unlink { f } => {
            let cands: Vec<PathBuf> = n
                .all
                .iter()
                .filter(|p| !n.dirs.contains(p))
                .cloned()
                .collect();
            pick(&cands, *f).map(|p| std::fs::remove_file(at(p)))
        }
        Step::Mkdir { d, n: k } => Some(std::fs::create_dir(new_name(*d, *k))),
        Step::Rmdir { d } => pick(&n.dirs[1..], *d).map(|p| std::fs::remove_dir(at(p))),
        Step::Chmod { e, mode } => {
            let cands: Vec<PathBuf> = n
                .all
                .iter()
                .filter(|p| n.files.contains(p) || n.dirs.contains(p))
                .cloned()
                .collect();
            pick(&cands, *e).map(|p| {
                std::fs::set_permissions(
                    at(p),
                    PermissionsExt::from_mode(MODES[mode % MODES.len()]),
                )
            })
        }
        Step::Symlink { d, n: k, t } => Some(std::os::unix::fs::symlink(
            TARGETS[t % TARGETS.len()],
            new_name(*d, *k),
        )),
        Step::Exchange { a, b } => match (pick(&n.all, *a), pick(&n.all, *b)) {
            (Some(x), Some(y)) => Some(exchange(&at(x), &at(y))),
            _ => None,
        },
    };
}

pub fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let (a, b) = (c(a), c(b));
    // SAFETY: two valid NUL-terminated paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
