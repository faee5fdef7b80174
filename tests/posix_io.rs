//! Shared state of open files through the mount: flock and POSIX locks between processes,
//! and mmap (shared writable mappings, msync, reading through a mapping), each compared
//! with a plain directory, with and without kernel passthrough.

mod common;
mod util;

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use util::{check, cstr, same, NO_PASSTHROUGH};

// ---------------------------------------------------------------- locks

#[derive(Clone, Copy)]
enum Try {
    /// flock(LOCK_EX | LOCK_NB) on a descriptor of its own.
    Flock,
    /// fcntl(F_SETLK, F_WRLCK) over the whole file.
    Posix,
    /// fcntl(F_GETLK): exits 1 when a write lock of its parent is reported, else 0.
    PosixQuery,
}

fn whole_file_lock(kind: i32) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl
}

/// Forks a child that opens `path` and tries to lock it; returns the child's exit code
/// (0: it got the lock, else the errno). The child only makes async-signal-safe calls.
fn child_tries(path: &CString, how: Try) -> i32 {
    let mut fl = whole_file_lock(libc::F_WRLCK);
    // SAFETY: after fork the child calls only open, flock, fcntl, getppid and _exit, which
    // are async-signal-safe; `path` and `fl` were prepared before the fork.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let fd = libc::open(path.as_ptr(), libc::O_RDWR);
            if fd < 0 {
                libc::_exit(100);
            }
            let r = match how {
                Try::Flock => libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB),
                Try::Posix => libc::fcntl(fd, libc::F_SETLK, &fl),
                Try::PosixQuery => {
                    if libc::fcntl(fd, libc::F_GETLK, &mut fl) != 0 {
                        libc::_exit(101);
                    }
                    let held = fl.l_type == libc::F_WRLCK as i16 && fl.l_pid == libc::getppid();
                    libc::_exit(held as i32);
                }
            };
            libc::_exit(if r == 0 { 0 } else { *libc::__errno_location() });
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(libc::WIFEXITED(status));
        libc::WEXITSTATUS(status)
    }
}

fn lock_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let p = dir.join("lockme");
    std::fs::write(&p, "data").unwrap();
    let c = cstr(&p);
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();

    // flock: held by us, refused to another process, free again after unlock.
    // SAFETY: valid descriptor.
    check(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }).unwrap();
    log.push(format!("flock held: child {}", child_tries(&c, Try::Flock)));
    log.push(format!(
        "flock held: child posix {}",
        child_tries(&c, Try::Posix)
    ));
    // SAFETY: valid descriptor.
    check(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) }).unwrap();
    log.push(format!(
        "flock released: child {}",
        child_tries(&c, Try::Flock)
    ));

    // POSIX record locks.
    let wr = whole_file_lock(libc::F_WRLCK);
    // SAFETY: valid descriptor and flock struct.
    check(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &wr) }).unwrap();
    log.push(format!("posix held: child {}", child_tries(&c, Try::Posix)));
    log.push(format!(
        "posix held: child sees our lock {}",
        child_tries(&c, Try::PosixQuery)
    ));
    // Closing any descriptor of the file drops the process's POSIX locks.
    drop(File::open(&p).unwrap());
    log.push(format!(
        "posix after closing another fd: child {}",
        child_tries(&c, Try::Posix)
    ));
    // SAFETY: as above.
    check(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &wr) }).unwrap();
    let un = whole_file_lock(libc::F_UNLCK);
    // SAFETY: as above.
    check(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &un) }).unwrap();
    log.push(format!(
        "posix unlocked: child {}",
        child_tries(&c, Try::Posix)
    ));
    // flock(1) from the shell, against our flock.
    // SAFETY: valid descriptor.
    check(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) }).unwrap();
    let o = util::sh_out(
        dir,
        "flock -n -s lockme true && echo shared-ok; flock -n -x lockme true || echo excl-refused",
    );
    log.push(String::from_utf8_lossy(&o.stdout).into_owned());
    log
}

fn check_locks(log: &[String]) {
    for w in [
        "flock held: child 11",
        "flock released: child 0",
        "posix held: child 11",
        "posix held: child sees our lock 1",
        "posix after closing another fd: child 0",
        "posix unlocked: child 0",
        "shared-ok\nexcl-refused\n",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

#[test]
fn flock_and_posix_locks_between_processes() {
    check_locks(&same(&[], lock_ops));
}

#[test]
fn flock_and_posix_locks_between_processes_without_passthrough() {
    check_locks(&same(NO_PASSTHROUGH, lock_ops));
}

// ---------------------------------------------------------------- mmap

struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    fn new(f: &File, len: usize, prot: i32, flags: i32) -> Map {
        // SAFETY: a fresh mapping of a valid descriptor; checked for MAP_FAILED.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, f.as_raw_fd(), 0) };
        assert_ne!(ptr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        Map {
            ptr: ptr.cast(),
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is live and `len` bytes long.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn write(&mut self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.len);
        // SAFETY: in bounds of a live, writable mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(at), data.len()) };
    }

    fn sync(&self) {
        // SAFETY: the whole live mapping.
        check(unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) }).unwrap();
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 253) as u8).collect()
}

fn mmap_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let p = dir.join("m");
    let len = 3 * 4096 + 100;
    std::fs::write(&p, pattern(len)).unwrap();
    // A time far back, to see the mapping's writes move mtime.
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(old)
        .unwrap();

    // Read a file through a private read-only mapping.
    let ro = File::open(&p).unwrap();
    let m = Map::new(&ro, len, libc::PROT_READ, libc::MAP_PRIVATE);
    log.push(format!("mapped read {}", m.bytes() == pattern(len)));
    drop(m);

    // Write through a shared mapping; msync; read() sees it, before and after munmap.
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let mut m = Map::new(
        &f,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    );
    m.write(10, b"first page");
    m.write(4096 * 2 + 7, b"third page");
    m.write(len - 5, b"TAIL!");
    m.sync();
    let mut want = pattern(len);
    want[10..20].copy_from_slice(b"first page");
    want[8199..8209].copy_from_slice(b"third page");
    want[len - 5..].copy_from_slice(b"TAIL!");
    log.push(format!(
        "read() while mapped {}",
        std::fs::read(&p).unwrap() == want
    ));
    // A write() is seen through the mapping.
    f.write_all_at(b"via write", 100).unwrap();
    want[100..109].copy_from_slice(b"via write");
    log.push(format!("mapping sees write() {}", m.bytes() == want));
    drop(m);
    drop(f);
    log.push(format!(
        "after munmap {} size {}",
        std::fs::read(&p).unwrap() == want,
        std::fs::metadata(&p).unwrap().len()
    ));
    log.push(format!(
        "mtime moved {}",
        std::fs::metadata(&p).unwrap().mtime() > 1_000_000_000
    ));

    // Writes through a mapping alone (no write() after them) move mtime too.
    let only = dir.join("onlymapped");
    std::fs::write(&only, pattern(8192)).unwrap();
    File::options()
        .write(true)
        .open(&only)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let before = std::fs::metadata(&only).unwrap().mtime();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&only)
        .unwrap();
    let mut m = Map::new(
        &f,
        8192,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    );
    m.write(5000, b"mapped only");
    m.sync();
    drop(m);
    drop(f);
    let md = std::fs::metadata(&only).unwrap();
    log.push(format!(
        "mapping-only write: mtime moved {} content {}",
        md.mtime() > before,
        std::fs::read(&only).unwrap()[5000..5011] == *b"mapped only"
    ));

    // A mapping of a descriptor opened with O_APPEND writes in place, like any other.
    let q = dir.join("appendmap");
    std::fs::write(&q, pattern(5000)).unwrap();
    let fa = OpenOptions::new().read(true).append(true).open(&q).unwrap();
    let mut m = Map::new(
        &fa,
        5000,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    );
    m.write(0, b"ABCD");
    m.sync();
    drop(m);
    (&fa).write_all(b"appended").unwrap();
    drop(fa);
    let got = std::fs::read(&q).unwrap();
    let mut want = pattern(5000);
    want[..4].copy_from_slice(b"ABCD");
    want.extend_from_slice(b"appended");
    log.push(format!(
        "O_APPEND mapping: len {} in place {}",
        got.len(),
        got == want
    ));
    log
}

fn check_mmap(log: &[String]) {
    for w in [
        "mapped read true",
        "read() while mapped true",
        "mapping sees write() true",
        "after munmap true size 12388",
        "mtime moved true",
        "O_APPEND mapping: len 5008 in place true",
        "mapping-only write: mtime moved true content true",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

#[test]
fn mmap_like_on_disk() {
    check_mmap(&same(&[], mmap_ops));
}

#[test]
fn mmap_like_on_disk_without_passthrough() {
    check_mmap(&same(NO_PASSTHROUGH, mmap_ops));
}

/// Data written through the mount by one descriptor is read at once through others,
/// including ones opened before the write (no stale page cache between handles).
fn coherence_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let p = dir.join("c");
    std::fs::write(&p, vec![b'.'; 10_000]).unwrap();
    let reader = File::open(&p).unwrap();
    let mut buf = vec![0u8; 10_000];
    reader.read_exact_at(&mut buf, 0).unwrap();
    for round in 0..20u8 {
        let w = OpenOptions::new().write(true).open(&p).unwrap();
        w.write_all_at(&[b'a' + round; 3000], 1000 + round as u64 * 100)
            .unwrap();
        drop(w);
        reader.read_exact_at(&mut buf, 0).unwrap();
        let ok = buf[1000 + round as usize * 100] == b'a' + round;
        if !ok {
            log.push(format!("round {round}: stale"));
        }
    }
    // Growing through one descriptor is seen by fstat of another.
    let w = OpenOptions::new().append(true).open(&p).unwrap();
    (&w).write_all(&[b'z'; 5000]).unwrap();
    log.push(format!(
        "fstat of reader {}",
        reader.metadata().unwrap().len()
    ));
    log.push(format!(
        "sum {}",
        std::fs::read(&p)
            .unwrap()
            .iter()
            .map(|&b| b as u64)
            .sum::<u64>()
    ));
    log
}

#[test]
fn writes_are_seen_by_other_descriptors() {
    let log = same(&[], coherence_ops);
    assert!(
        log.contains(&"fstat of reader 15000".to_string()),
        "{log:#?}"
    );
    let log = same(NO_PASSTHROUGH, coherence_ops);
    assert!(
        log.contains(&"fstat of reader 15000".to_string()),
        "{log:#?}"
    );
}

// ---------------------------------------------------------------- O_DIRECT

/// A 4096-aligned buffer.
struct Aligned(Box<[u8]>, usize);

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + 4096].into_boxed_slice();
        let off = (4096 - (raw.as_ptr() as usize % 4096)) % 4096;
        Aligned(raw, off)
    }
    fn buf(&mut self, len: usize) -> &mut [u8] {
        &mut self.0[self.1..self.1 + len]
    }
}

fn direct_ops(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut log = Vec::new();
    let p = dir.join("direct");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    let mut a = Aligned::new(65536);
    a.buf(65536).copy_from_slice(&pattern(65536));
    f.write_all_at(a.buf(65536), 8192).unwrap();
    let mut b = Aligned::new(65536);
    f.read_exact_at(b.buf(65536), 8192).unwrap();
    log.push(format!(
        "direct read back {}",
        b.buf(65536) == &pattern(65536)[..]
    ));
    // Buffered readers see the direct writes.
    let all = std::fs::read(&p).unwrap();
    log.push(format!(
        "buffered view: len {} head zero {} data {}",
        all.len(),
        all[..8192].iter().all(|&x| x == 0),
        all[8192..] == pattern(65536)[..]
    ));
    // And direct readers see buffered writes.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .write_all_at(&[7u8; 4096], 0)
        .unwrap();
    f.read_exact_at(b.buf(4096), 0).unwrap();
    log.push(format!(
        "direct sees buffered {}",
        b.buf(4096).iter().all(|&x| x == 7)
    ));
    log
}

#[test]
fn o_direct_io_like_on_disk() {
    let want = [
        "direct read back true",
        "buffered view: len 73728 head zero true data true",
        "direct sees buffered true",
    ];
    assert_eq!(same(&[], direct_ops), want);
    assert_eq!(same(NO_PASSTHROUGH, direct_ops), want);
}

// ---------------------------------------------------------------- exec

/// Programs and scripts run from the mount (exec maps the file through the mount).
#[test]
fn programs_and_scripts_run_from_the_mount() {
    for env in [&[][..], NO_PASSTHROUGH] {
        let out = same(env, |dir| {
            std::fs::copy("/bin/echo", dir.join("myecho")).unwrap();
            std::fs::write(
                dir.join("script.sh"),
                "#!/bin/sh\n./myecho from-script \"$@\"\n",
            )
            .unwrap();
            let o = util::sh_out(
                dir,
                "chmod +x script.sh && ./script.sh arg && ./myecho direct",
            );
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
            )
        });
        assert_eq!(out, (Some(0), "from-script arg\ndirect\n".to_string()));
    }
}

// ---------------------------------------------------------------- inotify

/// The inotify events a watcher of `dir` sees for common edits, as (event names, file
/// name) in order. File watchers (editors, build tools) depend on these.
fn inotify_ops(dir: &Path) -> Vec<String> {
    let c = cstr(dir);
    // SAFETY: plain inotify calls on a valid path; the buffer is parsed within its length.
    unsafe {
        let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
        assert!(fd >= 0);
        let mask = libc::IN_CREATE
            | libc::IN_MODIFY
            | libc::IN_ATTRIB
            | libc::IN_CLOSE_WRITE
            | libc::IN_MOVED_FROM
            | libc::IN_MOVED_TO
            | libc::IN_DELETE;
        assert!(libc::inotify_add_watch(fd, c.as_ptr(), mask) >= 0);

        std::fs::write(dir.join("new"), "x").unwrap();
        OpenOptions::new()
            .append(true)
            .open(dir.join("new"))
            .unwrap()
            .write_all(b"y")
            .unwrap();
        std::fs::set_permissions(
            dir.join("new"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        // The editor's save: write a temporary file, rename it over the original.
        std::fs::write(dir.join(".new.swp"), "z").unwrap();
        std::fs::rename(dir.join(".new.swp"), dir.join("new")).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::remove_dir(dir.join("sub")).unwrap();
        std::fs::remove_file(dir.join("new")).unwrap();

        let mut buf = vec![0u8; 65536];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        assert!(n > 0);
        let names = [
            (libc::IN_CREATE, "CREATE"),
            (libc::IN_MODIFY, "MODIFY"),
            (libc::IN_ATTRIB, "ATTRIB"),
            (libc::IN_CLOSE_WRITE, "CLOSE_WRITE"),
            (libc::IN_MOVED_FROM, "MOVED_FROM"),
            (libc::IN_MOVED_TO, "MOVED_TO"),
            (libc::IN_DELETE, "DELETE"),
            (libc::IN_ISDIR, "ISDIR"),
        ];
        let mut out = Vec::new();
        let mut off = 0usize;
        while off < n as usize {
            let ev = &*(buf.as_ptr().add(off) as *const libc::inotify_event);
            let name_bytes = std::slice::from_raw_parts(
                buf.as_ptr()
                    .add(off + std::mem::size_of::<libc::inotify_event>()),
                ev.len as usize,
            );
            let name = String::from_utf8_lossy(name_bytes)
                .trim_end_matches('\0')
                .to_string();
            let kinds: Vec<&str> = names
                .iter()
                .filter(|(m, _)| ev.mask & m != 0)
                .map(|(_, s)| *s)
                .collect();
            out.push(format!("{} {name}", kinds.join("|")));
            off += std::mem::size_of::<libc::inotify_event>() + ev.len as usize;
        }
        out
    }
}

/// Like `same`, tried up to three times: another test thread forking while a file of
/// `inotify_ops` is open gives the child a reference to it until it execs, which moves
/// the file's CLOSE_WRITE past the read (on the bare directory as on the mount).
fn same_events(env: &[(&str, &str)]) -> Vec<String> {
    for _ in 0..2 {
        let (bare, mounted) = util::compare_env(env, inotify_ops);
        if bare == mounted {
            return mounted;
        }
    }
    same(env, inotify_ops)
}

#[test]
fn inotify_sees_the_same_events_as_on_disk() {
    let events = same_events(&[]);
    assert!(
        events.contains(&"CLOSE_WRITE new".to_string()),
        "{events:#?}"
    );
    assert!(events.contains(&"MOVED_TO new".to_string()), "{events:#?}");
    same_events(NO_PASSTHROUGH);
}

// ---------------------------------------------------------------- ioctl

/// isatty() on files of the mount (TCGETS, asked of nearly every file a program opens) is
/// ENOTTY as on disk, and costs the daemon no log line each time.
#[test]
fn isatty_on_files_is_enotty_and_quiet() {
    let tcgets = |dir: &Path| {
        std::fs::write(dir.join("f"), "x").unwrap();
        let f = File::open(dir.join("f")).unwrap();
        (0..50)
            .map(|_| {
                // SAFETY: TCGETS writes a termios into the zeroed struct.
                let r = unsafe {
                    let mut t: libc::termios = std::mem::zeroed();
                    libc::ioctl(f.as_raw_fd(), libc::TCGETS, &mut t)
                };
                (r, std::io::Error::last_os_error().raw_os_error())
            })
            .collect::<Vec<_>>()
    };
    let r = same(&[], tcgets);
    assert!(r.iter().all(|x| *x == (-1, Some(libc::ENOTTY))), "{r:?}");
    let m = common::Mounted::new();
    tcgets(m.path());
    let o = m.agx(["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let log = std::fs::read_to_string(v["log"].as_str().unwrap()).unwrap();
    assert!(!log.contains("ioctl"), "{log}");
}
