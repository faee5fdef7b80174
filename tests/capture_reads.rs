//! How capture reads the after-image of a file closed after writing: through the released
//! handle's own descriptor, which agx opens read-write for a recorded write-only open. The
//! caller must see none of that (its open stays write-only, atime does not move), and the after-image must be the whole file whatever the
//! handle's offset.

mod common;
mod hist;
mod util;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use common::Mounted;
use hist::{b3, events_after};
use util::{ns_times, same, set_times, sh_as_nobody};

/// The after hash of the last event of `path`.
fn last_after(m: &Mounted, path: &str) -> Option<String> {
    events_after(m, 0)
        .into_iter()
        .rev()
        .find(|e| e["path"] == path)
        .and_then(|e| e["after"].as_str().map(String::from))
}

fn content(n: usize) -> Vec<u8> {
    (0..n).map(|i| b"abcdefghij\n"[i % 11]).collect()
}

/// A handle served by the daemon whose offset the caller moved (SEEK_HOLE moves the
/// daemon's descriptor too): the after-image is still read from offset 0.
#[test]
fn after_image_is_whole_when_the_handle_has_seeked() {
    for env in [util::NO_PASSTHROUGH, &[]] {
        let m = Mounted::with_env(|_| {}, env);
        let data = content(70_000);
        {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(m.p("f"))
                .unwrap();
            f.write_all(&data).unwrap();
            let end = rustix::fs::seek(&f, rustix::fs::SeekFrom::Hole(0)).unwrap();
            assert_eq!(end, data.len() as u64, "{env:?}");
        }
        {
            // A write-only open of an existing file, left at its end.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(m.p("f"))
                .unwrap();
            f.write_all(b"ABC").unwrap();
            rustix::fs::seek(&f, rustix::fs::SeekFrom::Hole(0)).unwrap();
        }
        let mut want = data.clone();
        want[..3].copy_from_slice(b"ABC");
        assert_eq!(std::fs::read(m.p("f")).unwrap(), want);
        assert_eq!(last_after(&m, "f"), Some(b3(&want)), "{env:?}");
    }
}

/// Opens for writing only stay write-only for the caller (another user's included, on a
/// file it may not read), and a FIFO opened for writing without a reader fails as on the
/// disk.
#[test]
fn write_only_opens_look_as_on_disk() {
    let got = same(&[], |dir: &Path| {
        let mut log = Vec::new();
        let f = dir.join("f");
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&f)
            .unwrap();
        w.write_all(b"one\n").unwrap();
        let mut buf = [0u8; 4];
        log.push(format!(
            "read through a write-only fd: {:?}",
            rustix::io::pread(&w, &mut buf, 0).map_err(|e| e.raw_os_error())
        ));
        drop(w);
        let fifo = dir.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let r = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
        log.push(format!(
            "fifo without a reader: {:?}",
            r.map(drop).map_err(|e| e.raw_os_error())
        ));
        // Another user's file it may write and not read.
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let o = sh_as_nobody(
            dir,
            "umask 077; printf a > g; chmod 200 g; printf b > g; printf c >> g; \
             cat g 2>/dev/null || echo unreadable; ls -l g | cut -c1-10",
        );
        log.push(String::from_utf8_lossy(&o.stdout).into_owned());
        log
    });
    assert!(got[2].contains("unreadable"), "{got:?}");
}

/// agx's reads of a written file do not move its atime (relatime would: atime is older
/// than the new mtime), whether the caller opened it write-only or read-write.
#[test]
fn capture_reads_leave_atime_alone() {
    let m = Mounted::new();
    for (name, read_write) in [("w", false), ("rw", true)] {
        let p = m.p(name);
        std::fs::write(&p, "old\n").unwrap();
        set_times(&p, (1_000_000_000, 5), (1_100_000_000, 0), false).unwrap();
        {
            let mut f = std::fs::OpenOptions::new()
                .read(read_write)
                .write(true)
                .open(&p)
                .unwrap();
            f.write_all(b"new\n").unwrap();
        }
        // `agx log` waits for the worker, which has then read the after-image.
        assert_eq!(last_after(&m, name), Some(b3(b"new\n")), "{name}");
        let (atime, _) = ns_times(&p);
        assert_eq!(atime, (1_000_000_000, 5), "{name}: atime moved");
    }
}
