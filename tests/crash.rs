//! Crash safety and storage (DESIGN.md invariants 4 and 5, section 10): a daemon killed
//! with SIGKILL in the middle of a workload loses no before-image of any mutation that
//! reached the disk; a mutation whose before-image cannot be stored on a full disk fails
//! and leaves the file alone; the timeline's SQLite files live on the backing directory and
//! nothing of `.agx` shows through the mount.

mod common;
mod hist;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Mounted;
use hist::{assert_same_tree, ok, tree};

const FILES: usize = 40;
const DIRS: usize = 5;

fn setup(p: &Path) {
    for d in 0..DIRS {
        std::fs::create_dir(p.join(format!("d{d}"))).unwrap();
    }
    for f in 0..FILES {
        let content: String = (0..(f * 13 % 50))
            .map(|l| format!("file {f} line {l}\n"))
            .collect();
        std::fs::write(p.join(format!("d{}/f{f}", f % DIRS)), content).unwrap();
    }
    std::fs::write(p.join("top"), "top\n").unwrap();
}

/// Mutation number `i` of the workload (deterministic): creates, rewrites, appends,
/// truncations, renames (also over existing files), unlinks, chmods, mkdir/rmdir. Returns
/// its outcome: a name that is not there is an ordinary failure.
fn mutate(root: &Path, i: usize) -> std::io::Result<()> {
    let f = |k: usize| root.join(format!("d{}/f{}", k % DIRS, k % FILES));
    let k = i.wrapping_mul(2654435761) >> 7;
    match i % 9 {
        // Now and then a large file, which keeps the capture worker busy (so the daemon
        // dies with events begun, ended but not yet recorded, or recorded in part).
        0 | 1 if i % 31 == 0 => std::fs::write(f(k), format!("large {i}\n").repeat(30_000)),
        0 | 1 => std::fs::write(f(k), format!("write {i}\n").repeat(1 + k % 20)),
        2 => OpenOptions::new()
            .append(true)
            .open(f(k))
            .and_then(|mut h| h.write_all(format!("append {i}\n").as_bytes())),
        3 => std::fs::rename(f(k), f(k / 3 + 1)),
        4 => std::fs::remove_file(f(k)),
        5 => std::fs::set_permissions(f(k), PermissionsExt::from_mode(0o600 | (k as u32 & 0o55))),
        6 => OpenOptions::new()
            .write(true)
            .open(f(k))
            .and_then(|h| h.set_len((k % 100) as u64)),
        7 => {
            let d = root.join(format!("d{}/sub{}", k % DIRS, k % 3));
            std::fs::create_dir(&d)
                .and_then(|()| std::fs::write(d.join("inner"), format!("inner {i}\n")))
        }
        _ => {
            let d = root.join(format!("d{}/sub{}", k % DIRS, k % 3));
            match std::fs::remove_file(d.join("inner")) {
                Err(e) if is_dead(&e) => Err(e),
                _ => std::fs::remove_dir(d),
            }
        }
    }
}

/// Whether an error says the mount's daemon is gone.
fn is_dead(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN) | Some(libc::ECONNABORTED)
    )
}

/// SIGKILLs `pid` at once (no helper process in between) and waits until it is gone.
fn kill9(pid: u32) {
    // SAFETY: kill(2) with a pid and a signal number has no memory effects.
    let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(r, 0, "kill -9 {pid}: {}", std::io::Error::last_os_error());
    hist::wait_gone(pid);
}

/// Runs mutations from `from` on in a thread and SIGKILLs the daemon once mutation
/// `kill_at` is reached; returns the first mutation the dead mount refused (it may or may
/// not have been applied: the next round runs it again).
fn run_and_kill(m: &Mounted, from: usize, kill_at: usize) -> usize {
    let next = Arc::new(AtomicUsize::new(from));
    let root = m.path().to_path_buf();
    let counter = next.clone();
    let worker = std::thread::spawn(move || {
        for i in from.. {
            if mutate(&root, i).is_err_and(|e| is_dead(&e)) {
                return i;
            }
            counter.store(i + 1, Ordering::SeqCst);
        }
        unreachable!()
    });
    let pid = m.daemon_pid().expect("daemon pid");
    let deadline = Instant::now() + Duration::from_secs(120);
    while next.load(Ordering::SeqCst) < kill_at && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    kill9(pid);
    worker.join().unwrap()
}

fn remount(m: &Mounted) {
    ok(
        common::agx(["mount".as_ref(), m.project.as_os_str()]),
        "agx mount after a killed daemon",
    );
}

/// 5,000 mutations with the daemon killed three times at different depths of its work
/// (the workload resuming after each remount), then a restore to the start gives back the
/// original tree exactly, and undoing that restore gives back the tree the workload left.
#[test]
fn sigkill_mid_workload_loses_no_before_image() {
    let m = Mounted::with(setup);
    let original = tree(m.path());
    let mut next = 0;
    for kill_at in [1300, 2800, 4300] {
        next = run_and_kill(&m, next, kill_at);
        remount(&m);
    }
    for i in next..5000 {
        mutate(m.path(), i).ok();
    }
    let worked = tree(m.path());
    assert_ne!(original, worked, "the workload changed the tree");
    let events = hist::events(&m);
    assert!(events.len() > 1000, "{} events", events.len());
    let first = format!("event:{}", events[0]["seq"]);
    let undo = hist::restore(&m, &first, &[]).expect("the restore changed something");
    assert_same_tree(&original, &tree(m.path()), "restored to the start");
    hist::restore(&m, &undo, &[]);
    assert_same_tree(&worked, &tree(m.path()), "the restore undone");
}

/// Kills the daemon while a file is held open for writing (its event begun, not ended),
/// right after removing original files (before-images kept by hard links in staging) and a
/// burst of quick changes behind them (so the capture worker is still busy with them):
/// after the remount every one of those changes is in the history with its before-image.
#[test]
fn sigkill_with_open_writer_and_unflushed_events() {
    let m = Mounted::with(|p| {
        std::fs::write(p.join("held"), "held before\n").unwrap();
        std::fs::create_dir(p.join("orig")).unwrap();
        for i in 0..20 {
            let body = format!("original {i}\n").repeat(5000 + i * 100);
            std::fs::write(p.join(format!("orig/{i}")), body).unwrap();
        }
    });
    let original = tree(m.path());
    let mut held = OpenOptions::new().write(true).open(m.p("held")).unwrap();
    held.write_all(b"HELD").unwrap();
    for i in 0..20 {
        std::fs::remove_file(m.p(format!("orig/{i}"))).unwrap();
    }
    for i in 0..300 {
        std::fs::write(m.p(format!("burst{}", i % 7)), format!("burst {i}\n")).unwrap();
        if i % 2 == 0 {
            std::fs::rename(m.p(format!("burst{}", i % 7)), m.p("moved")).unwrap();
        }
    }
    kill9(m.daemon_pid().expect("daemon pid"));
    drop(held);
    remount(&m);
    assert_eq!(std::fs::read(m.p("held")).unwrap(), b"HELD before\n");
    let worked = tree(m.path());
    let events = hist::events(&m);
    assert!(
        events
            .iter()
            .any(|e| e["path"] == "held" && e["op"] == "write"),
        "the open writer's event was recovered: {events:#?}"
    );
    let first = format!("event:{}", events[0]["seq"]);
    let undo = hist::restore(&m, &first, &[]).unwrap();
    assert_same_tree(&original, &tree(m.path()), "restored to the start");
    hist::restore(&m, &undo, &[]);
    assert_same_tree(&worked, &tree(m.path()), "the restore undone");
}

/// Files created and closed just before the kill, and small files rewritten in place: their
/// events may exist only in the journal (creations write no end record; small
/// before-images live in the begin record, not in staging). After the remount every
/// creation is in the history with its exact after-image, and every rewrite with its
/// before-image.
#[test]
fn sigkill_right_after_creations_and_small_rewrites() {
    let m = Mounted::with(|p| {
        for i in 0..50 {
            std::fs::write(p.join(format!("old{i}")), format!("old {i}\n")).unwrap();
        }
    });
    for i in 0..200 {
        std::fs::write(m.p(format!("new{i}")), format!("new {i}\n")).unwrap();
    }
    for i in 0..50 {
        std::fs::write(m.p(format!("old{i}")), format!("rewritten {i}\n")).unwrap();
    }
    kill9(m.daemon_pid().expect("daemon pid"));
    remount(&m);
    let events = hist::events(&m);
    for i in 0..200 {
        let path = format!("new{i}");
        let e = events
            .iter()
            .find(|e| e["path"] == path.as_str() && e["op"] == "create")
            .unwrap_or_else(|| panic!("no create of {path}: {events:#?}"));
        assert_eq!(
            e["after"],
            hist::b3(format!("new {i}\n").as_bytes()),
            "{path}"
        );
    }
    for i in 0..50 {
        let path = format!("old{i}");
        let at = events
            .iter()
            .find(|e| e["path"] == path.as_str() && e["op"] == "write")
            .map(|e| format!("event:{}", e["seq"]))
            .unwrap_or_else(|| panic!("no write of {path}: {events:#?}"));
        assert_eq!(hist::show(&m, &at, &path), format!("old {i}\n").as_bytes());
    }
}

/// A file created, renamed while still open (as `tempfile`'s persist and editors do), then
/// closed just before the kill: the rename is in the timeline, the creation only in the
/// journal. The creation must still be recovered, or undoing the history would move the
/// file back to a name that never held it and leave it there.
#[test]
fn sigkill_after_a_creation_renamed_while_open() {
    let m = Mounted::with(|p| std::fs::write(p.join("keep"), "keep\n").unwrap());
    let original = tree(m.path());
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.p("tmp"))
        .unwrap();
    f.write_all(b"new content\n").unwrap();
    std::fs::rename(m.p("tmp"), m.p("target")).unwrap();
    // The rename reaches the timeline (asking for the pid flushes); the creation has not
    // ended yet, and may or may not have when the daemon dies.
    let pid = m.daemon_pid().expect("daemon pid");
    drop(f);
    kill9(pid);
    remount(&m);
    let events = hist::events(&m);
    assert!(
        events
            .iter()
            .any(|e| e["path"] == "tmp" && e["op"] == "create"),
        "the creation was recovered: {events:#?}"
    );
    let first = format!("event:{}", events[0]["seq"]);
    hist::restore(&m, &first, &[]);
    assert_same_tree(&original, &tree(m.path()), "restored to the start");
}

/// Unmounts a tmpfs (lazily, so a failed test cannot leave it behind busy) when dropped.
/// Declared before the `Mounted` on it, so it is dropped after the agx mount is gone.
#[derive(Default)]
struct Tmpfs(Option<PathBuf>);

impl Tmpfs {
    fn mount(&mut self, dir: &Path, size: &str) {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs on {}", dir.display());
        self.0 = Some(dir.to_path_buf());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = Command::new("umount").arg("-l").arg(&d).status();
            // The test's temporary directory could not remove a directory that was still a
            // mountpoint: remove it (and its then empty parent) now.
            let _ = std::fs::remove_dir(&d);
            if let Some(parent) = d.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

/// Fills the filesystem of `dir` with a file until writes fail with ENOSPC.
fn fill(dir: &Path) {
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0xa5u8; 64 << 10];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    // Single bytes, until not even one fits.
    while f.write_all(&[1]).is_ok() {}
    let _ = f.sync_all();
}

#[test]
fn full_disk_refuses_a_mutation_it_cannot_capture() {
    let big: Vec<u8> = (0..(3 << 20) as u32).map(|i| (i % 251) as u8).collect();
    let content = big.clone();
    let mut fs = Tmpfs::default();
    let m = Mounted::at(|p| {
        fs.mount(p, "8m");
        std::fs::write(p.join("big"), &content).unwrap();
        std::fs::write(p.join("small"), "small\n").unwrap();
    });
    // The mount works before the disk is full, and records. (The kernel sends the release
    // that ends the write's event after close returns: under load, `agx log` can run
    // first, so the event is awaited, within a bound.)
    std::fs::write(m.p("small"), "small 2\n").unwrap();
    hist::wait_event(&m, 0, "small");
    assert_eq!(hist::events(&m).len(), 1);
    fill(&m.project);

    let errno = |r: std::io::Result<std::fs::File>| r.err().and_then(|e| e.raw_os_error());
    let full = [Some(libc::ENOSPC), Some(libc::EIO)];
    // O_TRUNC: refused before anything is cut.
    let r = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m.p("big"));
    assert!(
        full.contains(&errno(r)),
        "O_TRUNC open of big on a full disk"
    );
    // A rewrite in place: refused at open.
    let r = OpenOptions::new().write(true).open(m.p("big"));
    assert!(
        full.contains(&errno(r)),
        "O_WRONLY open of big on a full disk"
    );
    // truncate(2) by path.
    let c = std::ffi::CString::new(m.p("big").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let r = unsafe { libc::truncate(c.as_ptr(), 0) };
    let e = std::io::Error::last_os_error().raw_os_error();
    assert!(
        r == -1 && full.contains(&e),
        "truncate of big on a full disk: {e:?}"
    );
    assert_eq!(
        std::fs::read(m.p("big")).unwrap(),
        big,
        "big is untouched (mount)"
    );
    assert_eq!(
        std::fs::read(m.project.join("big")).unwrap(),
        big,
        "big is untouched (disk)"
    );
    assert_eq!(
        std::fs::metadata(m.project.join("big")).unwrap().size(),
        big.len() as u64
    );

    // With room again, the same change goes through and is captured.
    std::fs::remove_file(m.project.join("filler")).unwrap();
    std::fs::write(m.p("big"), "now small\n").unwrap();
    let ev = hist::events(&m);
    let last = ev.last().unwrap();
    assert_eq!(last["path"], "big");
    assert_eq!(
        hist::show(&m, &format!("event:{}", last["seq"]), "big"),
        big
    );
    drop(m);
    drop(fs);
}

/// The timeline's -wal and -shm files are on the backing directory: visible there beside
/// a separate mountpoint, and opened on the backing filesystem by a daemon mounted in
/// place. Nothing of `.agx` shows through the mount.
#[test]
fn sqlite_wal_and_shm_live_on_the_backing_directory() {
    let m = Mounted::at(|p| std::fs::write(p.join("f"), "f\n").unwrap());
    std::fs::write(m.p("f"), "g\n").unwrap();
    assert_eq!(hist::events(&m).len(), 1);
    for name in ["timeline.db", "timeline.db-wal", "timeline.db-shm"] {
        assert!(
            m.project.join(".agx").join(name).exists(),
            "backing .agx/{name}"
        );
        assert!(!m.p(".agx").join(name).exists(), "{name} through the mount");
    }
    assert_agx_shows_only_views(&m);

    // In place: the backing directory is reached through the daemon's own handle of it.
    let m = Mounted::with(|p| std::fs::write(p.join("f"), "f\n").unwrap());
    std::fs::write(m.p("f"), "g\n").unwrap();
    assert_eq!(hist::events(&m).len(), 1);
    let pid = m.daemon_pid().unwrap();
    let backing_dev = std::fs::metadata(m.tmp.path()).unwrap().dev();
    let mount_dev = std::fs::metadata(m.path()).unwrap().dev();
    assert_ne!(backing_dev, mount_dev);
    let mut db_files = Vec::new();
    let mut root_fd = None;
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let fd = e.unwrap().path();
        let Ok(target) = std::fs::read_link(&fd) else {
            continue;
        };
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned());
        // The project directory as the daemon opened it before mounting (not the mount
        // root, which has the same name).
        let dev = std::fs::metadata(&fd).map(|md| md.dev()).ok();
        if target == m.project && dev == Some(backing_dev) {
            // Held open here: the daemon's descriptor number could be reused later.
            if root_fd.is_none() {
                root_fd = std::fs::File::open(&fd).ok();
            }
        }
        if name
            .as_deref()
            .is_some_and(|n| n.starts_with("timeline.db"))
        {
            db_files.push((
                name.unwrap(),
                dev.expect("a database file the daemon keeps open"),
            ));
        }
    }
    for want in ["timeline.db", "timeline.db-wal", "timeline.db-shm"] {
        let found: Vec<_> = db_files.iter().filter(|(n, _)| n == want).collect();
        assert!(
            !found.is_empty(),
            "the daemon has {want} open: {db_files:?}"
        );
        for (_, dev) in found {
            assert_eq!(*dev, backing_dev, "{want} is on the backing filesystem");
        }
    }
    let root_dir = root_fd.expect("the daemon holds the project directory");
    let root = PathBuf::from(format!("/proc/self/fd/{}", root_dir.as_raw_fd()));
    for name in [
        "timeline.db",
        "timeline.db-wal",
        "timeline.db-shm",
        "objects",
    ] {
        assert!(root.join(".agx").join(name).exists(), "backing .agx/{name}");
        assert!(!m.p(".agx").join(name).exists(), "{name} through the mount");
    }
    assert_agx_shows_only_views(&m);
}

/// The virtual `.agx` of a mount lists nothing of agx's state, only the views' `at`.
fn assert_agx_shows_only_views(m: &Mounted) {
    let shown: Vec<_> = std::fs::read_dir(m.p(".agx"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        shown,
        vec![std::ffi::OsString::from("at")],
        "only the views"
    );
}
