//! Helpers shared by the POSIX and tool tests: comparing a mount with a bare directory,
//! running as another user, snapshots of trees, thin wrappers over raw syscalls.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::Mounted;

/// The daemon environment that forces the non-passthrough (read/write through the daemon)
/// path.
pub const NO_PASSTHROUGH: &[(&str, &str)] = &[("AGX_PASSTHROUGH", "0")];

/// Runs `f` on a plain directory and on a directory inside a freshly mounted project
/// (mounted with `env`), returning both results. `f` gets a subdirectory `work` of the
/// project, so the virtual `.agx` of the mount root is not in its way. Both directories
/// are reachable by other users (mode 0755 up the tree), so `f` may run commands as uid
/// 65534.
pub fn compare_env<T>(env: &[(&str, &str)], f: impl Fn(&Path) -> T) -> (T, T) {
    set_umask();
    let bare = tempfile::Builder::new()
        .prefix("agx-bare-")
        .tempdir()
        .unwrap();
    let dir = bare.path().join("project/work");
    std::fs::create_dir_all(&dir).unwrap();
    open_up(bare.path());
    let a = f(&dir);
    let m = Mounted::with_env(|_| {}, env);
    open_up(m.tmp.path());
    std::fs::create_dir(m.p("work")).unwrap();
    let b = f(&m.p("work"));
    (a, b)
}

/// [`compare_env`] with the default (passthrough when granted) daemon.
pub fn compare<T>(f: impl Fn(&Path) -> T) -> (T, T) {
    compare_env(&[], f)
}

/// Asserts that `f` gives the same result on a bare directory and through the mount, and
/// returns that result.
pub fn same<T: PartialEq + std::fmt::Debug>(env: &[(&str, &str)], f: impl Fn(&Path) -> T) -> T {
    let (bare, mounted) = compare_env(env, f);
    assert_eq!(bare, mounted, "bare directory (left) vs mount (right)");
    mounted
}

/// Sets the process umask to 022. Every test that depends on it sets the same value, so
/// tests running in parallel threads cannot disturb each other.
pub fn set_umask() {
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0o022) };
}

/// Makes a temporary directory traversable by everyone.
pub fn open_up(p: &Path) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub fn cstr(p: impl AsRef<OsStr>) -> CString {
    CString::new(p.as_ref().as_bytes()).unwrap()
}

/// The errno of a failed call, or 0 on success.
pub fn err<T>(r: io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// `-1`-returning libc call to `io::Result`.
pub fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    let (a, b) = (cstr(from), cstr(to));
    // SAFETY: both paths are valid NUL-terminated strings.
    check(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// `sh -c script` in `dir` as uid/gid 65534 with no supplementary groups, to be run.
pub fn nobody_sh(dir: &Path, script: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sh",
        "-c",
        script,
    ])
    .current_dir(dir);
    cmd
}

/// Runs `sh -c script` in `dir` as uid/gid 65534 with no supplementary groups.
pub fn sh_as_nobody(dir: &Path, script: &str) -> Output {
    nobody_sh(dir, script).output().expect("running setpriv")
}

/// Runs `sh -c script` in `dir` and returns its output whatever the exit status.
pub fn sh_out(dir: &Path, script: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("running sh")
}

/// Evicts clean dentries and inodes, so the kernel forgets the mount's nodes and has to
/// look everything up again.
pub fn drop_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").expect("writing drop_caches (root?)");
}

/// What a path is, as far as these tests care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    File(Vec<u8>),
    Dir,
    Symlink(OsString),
    Other(u32),
}

/// One entry of a [`snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// mtime in nanoseconds; `None` for directories when times are not compared.
    pub mtime: Option<i128>,
    pub nlink: u64,
}

/// Options of [`snapshot`].
#[derive(Clone, Copy, Default)]
pub struct Snap {
    /// Record mtimes of files and symlinks.
    pub file_times: bool,
    /// Record mtimes of directories as well.
    pub dir_times: bool,
}

/// Every object under `root` (not `root` itself), keyed by relative path, with contents,
/// modes, owners, sizes and optionally times.
pub fn snapshot(root: &Path, opt: Snap) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), opt, &mut out);
    out
}

fn walk(root: &Path, rel: &Path, opt: Snap, out: &mut BTreeMap<PathBuf, Entry>) {
    let dir = root.join(rel);
    for ent in std::fs::read_dir(&dir).unwrap() {
        let ent = ent.unwrap();
        let rel = rel.join(ent.file_name());
        let p = root.join(&rel);
        let md = std::fs::symlink_metadata(&p).unwrap();
        let ft = md.file_type();
        let kind = if ft.is_file() {
            Kind::File(std::fs::read(&p).unwrap())
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Symlink(std::fs::read_link(&p).unwrap().into_os_string())
        } else {
            Kind::Other(md.mode() & libc::S_IFMT)
        };
        let timed = if ft.is_dir() {
            opt.dir_times
        } else {
            opt.file_times
        };
        let e = Entry {
            kind: kind.clone(),
            mode: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            size: if ft.is_dir() { 0 } else { md.size() },
            mtime: timed.then(|| md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128),
            nlink: if ft.is_dir() { 0 } else { md.nlink() },
        };
        out.insert(rel.clone(), e);
        if kind == Kind::Dir {
            walk(root, &rel, opt, out);
        }
    }
}

/// The paths whose entries differ between two snapshots, at most 20 (readable when a test
/// fails).
pub fn differing(a: &BTreeMap<PathBuf, Entry>, b: &BTreeMap<PathBuf, Entry>) -> Vec<String> {
    let keys: std::collections::BTreeSet<_> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| match (a.get(k), b.get(k)) {
            (Some(x), Some(y)) => format!(
                "{}: mode {:o}/{:o} size {}/{} mtime {:?}/{:?} same content {}",
                k.display(),
                x.mode,
                y.mode,
                x.size,
                y.size,
                x.mtime,
                y.mtime,
                x.kind == y.kind
            ),
            (x, _) => format!(
                "{}: only {}",
                k.display(),
                if x.is_some() { "before" } else { "after" }
            ),
        })
        .take(20)
        .collect()
}

/// Sorted names in `dir` (without `.` and `..`).
pub fn names(dir: &Path) -> Vec<OsString> {
    let mut v: Vec<OsString> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    v.sort();
    v
}

/// All names in `dir` including `.` and `..`, as libc's readdir reports them, with d_ino.
pub fn raw_readdir(dir: &Path) -> Vec<(OsString, u64)> {
    let c = cstr(dir);
    let mut out = Vec::new();
    // SAFETY: a plain opendir/readdir/closedir loop over a valid path; the dirent pointer
    // is only read before the next readdir call.
    unsafe {
        let d = libc::opendir(c.as_ptr());
        assert!(!d.is_null(), "opendir {}", dir.display());
        loop {
            let e = libc::readdir(d);
            if e.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*e).d_name.as_ptr());
            out.push((OsString::from_vec(name.to_bytes().to_vec()), (*e).d_ino));
        }
        libc::closedir(d);
    }
    out
}

/// (ino, mtime ns, ctime ns, size, mode, nlink) of a path, not following symlinks.
pub fn ident(p: &Path) -> (u64, i128, i128, u64, u32, u64) {
    let md = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (
        md.ino(),
        md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
        md.ctime() as i128 * 1_000_000_000 + md.ctime_nsec() as i128,
        md.size(),
        md.mode(),
        md.nlink(),
    )
}

/// A git command line with a fixed identity and dates and no user or system config, so
/// the same steps give the same commit ids everywhere.
pub fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_AUTHOR_DATE", "2005-04-07T22:13:13Z")
        .env("GIT_COMMITTER_DATE", "2005-04-07T22:13:13Z")
        .output()
        .expect("running git")
}

/// Like [`git`], panicking with git's output on failure; returns stdout.
pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let o = git(dir, args);
    assert!(
        o.status.success(),
        "git {args:?} in {}: {}{}",
        dir.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The contents of a file, panicking with its path on error.
pub fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Permission and set-id bits of a path, not following symlinks.
pub fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// `n` bytes of a non-repeating-looking pattern.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// utimensat with explicit (seconds, nanoseconds) for atime and mtime; `nofollow` sets
/// them on a symlink itself.
pub fn set_times(
    p: &Path,
    atime: (i64, i64),
    mtime: (i64, i64),
    nofollow: bool,
) -> std::io::Result<()> {
    let ts = [
        libc::timespec {
            tv_sec: atime.0,
            tv_nsec: atime.1,
        },
        libc::timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1,
        },
    ];
    let c = cstr(p);
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    // SAFETY: a valid path and a two-element timespec array.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), flags) }).map(drop)
}

/// (atime, mtime) of a path as (seconds, nanoseconds), not following symlinks.
pub fn ns_times(p: &Path) -> ((i64, i64), (i64, i64)) {
    let m = std::fs::symlink_metadata(p).unwrap();
    ((m.atime(), m.atime_nsec()), (m.mtime(), m.mtime_nsec()))
}

/// setxattr / lsetxattr.
pub fn setx(p: &Path, name: &str, v: &[u8], flags: i32, nofollow: bool) -> std::io::Result<()> {
    let (c, n) = (cstr(p), cstr(name));
    // SAFETY: valid strings and buffer.
    check(unsafe {
        if nofollow {
            libc::lsetxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), flags)
        } else {
            libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), flags)
        }
    })
    .map(drop)
}

/// getxattr / lgetxattr, sizing the buffer with a size query first (as tools do).
pub fn getx(p: &Path, name: &str, nofollow: bool) -> std::io::Result<Vec<u8>> {
    let (c, n) = (cstr(p), cstr(name));
    let call = |buf: *mut libc::c_void, len: usize| -> isize {
        // SAFETY: valid strings; buf has len bytes (or is null with len 0).
        unsafe {
            if nofollow {
                libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf, len)
            } else {
                libc::getxattr(c.as_ptr(), n.as_ptr(), buf, len)
            }
        }
    };
    let size = call(std::ptr::null_mut(), 0);
    if size < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut buf = vec![0u8; size as usize];
    let n = call(buf.as_mut_ptr().cast(), buf.len());
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// listxattr / llistxattr, sized by a query first; the sorted `user.` names.
pub fn listx(p: &Path, nofollow: bool) -> std::io::Result<Vec<String>> {
    let c = cstr(p);
    let call = |buf: *mut libc::c_char, len: usize| -> isize {
        // SAFETY: valid path; buf has len bytes (or is null with len 0).
        unsafe {
            if nofollow {
                libc::llistxattr(c.as_ptr(), buf, len)
            } else {
                libc::listxattr(c.as_ptr(), buf, len)
            }
        }
    };
    let size = call(std::ptr::null_mut(), 0);
    if size < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut buf = vec![0u8; size as usize];
    let n = call(buf.as_mut_ptr().cast(), buf.len());
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut names: Vec<String> = buf[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .filter(|s| s.starts_with("user."))
        .collect();
    names.sort();
    Ok(names)
}

/// removexattr.
pub fn rmx(p: &Path, name: &str) -> std::io::Result<()> {
    let (c, n) = (cstr(p), cstr(name));
    // SAFETY: valid strings.
    check(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) }).map(drop)
}
