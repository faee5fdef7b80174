//! Names and trees through the mount, compared with a plain directory: odd bytes in names,
//! length limits, deep paths beyond PATH_MAX, and large directories.

mod common;
mod util;

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use util::{err, same};

fn odd_names() -> Vec<OsString> {
    let mut v: Vec<OsString> = [
        "with space",
        " leading space",
        "trailing space ",
        "new\nline",
        "tab\there",
        "-dash",
        "*glob?[x]",
        "back\\slash",
        "quote'\"",
        "ünïcødé 🚀",
        "...",
        ".hidden",
        ".agx",
        "$HOME",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    v.push(OsString::from_vec(b"non-utf8 \xff\xfe".to_vec()));
    v.push(OsString::from_vec(b"latin1 caf\xe9".to_vec()));
    v.push(OsString::from_vec(vec![b'a'; 255]));
    // 255 bytes made of two-byte characters plus one byte.
    let mut multi = "é".repeat(127).into_bytes();
    multi.push(b'x');
    v.push(OsString::from_vec(multi));
    v
}

fn with_suffix(n: &OsStr, suffix: &str) -> OsString {
    let mut b = n.as_bytes().to_vec();
    if b.len() + suffix.len() > 255 {
        b.truncate(255 - suffix.len());
    }
    b.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(b)
}

fn name_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    for n in odd_names() {
        let p = dir.join(&n);
        std::fs::write(&p, n.as_bytes()).unwrap();
        std::fs::create_dir(dir.join(with_suffix(&n, "_d"))).unwrap();
        std::fs::write(dir.join(with_suffix(&n, "_d")).join(&n), b"inner").unwrap();
        std::os::unix::fs::symlink(&n, dir.join(with_suffix(&n, "_l"))).unwrap();
        let ok = std::fs::read(&p).unwrap() == n.as_bytes()
            && std::fs::read(dir.join(with_suffix(&n, "_l"))).unwrap() == n.as_bytes()
            && std::fs::read_link(dir.join(with_suffix(&n, "_l"))).unwrap() == Path::new(&n);
        if !ok {
            log.push(format!("{n:?}: content or link wrong"));
        }
    }
    log.push(format!("listing {:?}", util::names(dir)));
    // Rename every file to another odd name and back.
    for n in odd_names() {
        let r = with_suffix(&n, "_r");
        std::fs::rename(dir.join(&n), dir.join(&r)).unwrap();
        if std::fs::metadata(dir.join(&n)).is_ok() || std::fs::read(dir.join(&r)).is_err() {
            log.push(format!("{n:?}: rename wrong"));
        }
    }
    log.push(format!("after renames {:?}", util::names(dir)));
    let long = OsString::from_vec(vec![b'b'; 256]);
    log.push(format!(
        "256 bytes: create {} mkdir {} stat {}",
        err(std::fs::write(dir.join(&long), "x")),
        err(std::fs::create_dir(dir.join(&long))),
        err(std::fs::metadata(dir.join(&long)))
    ));
    // The shell and find cope with the same names.
    let o = util::sh_out(
        dir,
        "find . -name '*space*' | LC_ALL=C sort; find . -mindepth 1 -maxdepth 1 -printf x | wc -c",
    );
    log.push(String::from_utf8_lossy(&o.stdout).into_owned());
    for n in odd_names() {
        std::fs::remove_file(dir.join(with_suffix(&n, "_r"))).unwrap();
        std::fs::remove_dir_all(dir.join(with_suffix(&n, "_d"))).unwrap();
        std::fs::remove_file(dir.join(with_suffix(&n, "_l"))).unwrap();
    }
    log.push(format!("emptied {:?}", util::names(dir)));
    log
}

#[test]
fn names_with_spaces_newlines_and_non_utf8_bytes() {
    let log = same(&[], name_ops);
    assert!(log.iter().all(|l| !l.contains("wrong")), "{log:#?}");
    assert!(log.contains(&"256 bytes: create 36 mkdir 36 stat 36".to_string()));
    assert!(log.contains(&"emptied []".to_string()));
    // 18 names, each as a file, a directory and a link.
    assert!(log.iter().any(|l| l.ends_with("\n54\n")), "{log:#?}");
}

// ---------------------------------------------------------------- deep paths

fn open_dir(at: &OwnedFd, name: &str) -> OwnedFd {
    rustix::fs::openat(
        at,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// 100 nested directories with 60-byte names (over 6000 bytes of path), built and read
/// with descriptor-relative calls, then removed again.
fn deep_ops(dir: &Path) -> Vec<String> {
    const DEPTH: usize = 100;
    let mut log = Vec::new();
    let name = |i: usize| format!("{i:03}-{}", "n".repeat(56));
    let top = rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let mut fds = vec![top];
    for i in 0..DEPTH {
        let at = fds.last().unwrap();
        rustix::fs::mkdirat(at, name(i).as_str(), Mode::from_raw_mode(0o755)).unwrap();
        let next = open_dir(at, &name(i));
        fds.push(next);
    }
    let leaf = rustix::fs::openat(
        fds.last().unwrap(),
        "leaf",
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&leaf, b"at the bottom").unwrap();
    drop(leaf);

    // Walk down again from a fresh descriptor and read the leaf back.
    let mut at = rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    for i in 0..DEPTH {
        at = open_dir(&at, &name(i));
    }
    let f = rustix::fs::openat(&at, "leaf", OFlags::RDONLY, Mode::empty()).unwrap();
    let mut buf = [0u8; 64];
    let n = rustix::io::read(&f, &mut buf).unwrap();
    log.push(format!("leaf {:?}", String::from_utf8_lossy(&buf[..n])));
    let st = rustix::fs::statat(&at, "leaf", AtFlags::empty()).unwrap();
    log.push(format!("leaf size {}", st.st_size));

    // The whole path is longer than PATH_MAX: the kernel refuses it as one string.
    let mut full = dir.to_path_buf();
    for i in 0..DEPTH {
        full.push(name(i));
    }
    full.push("leaf");
    log.push(format!(
        "full path {} bytes: open {}",
        full.as_os_str().len() > 4096,
        err(std::fs::File::open(&full))
    ));
    // Tools walk it relative to each directory.
    let o = util::sh_out(dir, "find . -name leaf | wc -c; du -a . | wc -l");
    log.push(String::from_utf8_lossy(&o.stdout).into_owned());

    // Remove bottom-up through the descriptors.
    rustix::fs::unlinkat(fds.last().unwrap(), "leaf", AtFlags::empty()).unwrap();
    for i in (0..DEPTH).rev() {
        rustix::fs::unlinkat(&fds[i], name(i).as_str(), AtFlags::REMOVEDIR).unwrap();
    }
    log.push(format!("removed {:?}", util::names(dir)));
    log
}

#[test]
fn deep_paths_beyond_path_max() {
    let log = same(&[], deep_ops);
    assert!(log.contains(&"leaf \"at the bottom\"".to_string()));
    assert!(
        log.contains(&"full path true bytes: open 36".to_string()),
        "{log:#?}"
    );
    assert!(log.contains(&"removed []".to_string()));
}

/// 100 nested directories by plain paths (under PATH_MAX), created with create_dir_all and
/// removed with remove_dir_all.
#[test]
fn hundred_nested_directories() {
    let log = same(&[], |dir| {
        let mut p = dir.to_path_buf();
        for i in 0..100 {
            p.push(format!("lvl{i:02}"));
        }
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("f"), "deep").unwrap();
        let read = std::fs::read_to_string(p.join("f")).unwrap();
        let depth = p.strip_prefix(dir).unwrap().components().count();
        std::fs::remove_dir_all(dir.join("lvl00")).unwrap();
        (read, depth, util::names(dir))
    });
    assert_eq!(log, ("deep".to_string(), 100, vec![]));
}

// ---------------------------------------------------------------- big directories

fn big_name(i: usize) -> String {
    format!("entry-{i:05}-{}", "x".repeat(i % 60))
}

fn big_dir_ops(dir: &Path) -> Vec<String> {
    const N: usize = 2000;
    let mut log = Vec::new();
    let d = dir.join("big");
    std::fs::create_dir(&d).unwrap();
    for i in 0..N {
        if i % 10 == 0 {
            std::fs::create_dir(d.join(big_name(i))).unwrap();
        } else {
            std::fs::write(d.join(big_name(i)), i.to_string()).unwrap();
        }
    }
    let names = util::names(&d);
    let mut want: Vec<OsString> = (0..N).map(|i| OsString::from(big_name(i))).collect();
    want.sort();
    log.push(format!("listing complete {}", names == want));
    let raw = util::raw_readdir(&d);
    log.push(format!("raw entries {}", raw.len()));
    // d_ino agrees with st_ino for every entry.
    let bad: Vec<_> = raw
        .iter()
        .filter(|(n, _)| n != "." && n != "..")
        .filter(|(n, ino)| std::fs::symlink_metadata(d.join(n)).unwrap().ino() != *ino)
        .map(|(n, _)| n.clone())
        .collect();
    log.push(format!("d_ino mismatches {bad:?}"));
    log.push(format!(
        "dir nlink {}",
        std::fs::metadata(&d).unwrap().nlink()
    ));
    // Remove half; the listing follows.
    for i in (0..N).step_by(2) {
        if i % 10 == 0 {
            std::fs::remove_dir(d.join(big_name(i))).unwrap();
        } else {
            std::fs::remove_file(d.join(big_name(i))).unwrap();
        }
    }
    let want: Vec<OsString> = want
        .into_iter()
        .filter(|n| {
            let i: usize = n.to_str().unwrap()[6..11].parse().unwrap();
            i % 2 == 1
        })
        .collect();
    log.push(format!("after removing half {}", util::names(&d) == want));
    let o = util::sh_out(&d, "ls -f | wc -l; ls -la | wc -l");
    log.push(String::from_utf8_lossy(&o.stdout).into_owned());
    log
}

#[test]
fn directory_with_two_thousand_entries_lists_like_on_disk() {
    let log = same(&[], big_dir_ops);
    for w in [
        "listing complete true",
        "raw entries 2002",
        "d_ino mismatches []",
        "dir nlink 202",
        "after removing half true",
        "1002\n1003\n",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

/// A directory stream that is rewound sees entries created meanwhile; seekdir to a
/// telldir position resumes the same sequence.
#[test]
fn rewinddir_and_seekdir_like_on_disk() {
    let log = same(&[], |dir| {
        for i in 0..300 {
            std::fs::write(dir.join(format!("f{i}")), "").unwrap();
        }
        let c = util::cstr(dir);
        let mut log = Vec::new();
        // SAFETY: a plain opendir/readdir/telldir/seekdir/rewinddir/closedir sequence on a
        // valid path; dirent pointers are read before the next call.
        unsafe {
            let d = libc::opendir(c.as_ptr());
            assert!(!d.is_null());
            let next = |d: *mut libc::DIR| -> Option<OsString> {
                let e = libc::readdir(d);
                if e.is_null() {
                    return None;
                }
                let n = std::ffi::CStr::from_ptr((*e).d_name.as_ptr());
                Some(OsStr::from_bytes(n.to_bytes()).to_os_string())
            };
            for _ in 0..150 {
                next(d).unwrap();
            }
            let pos = libc::telldir(d);
            let mut rest = Vec::new();
            while let Some(n) = next(d) {
                rest.push(n);
            }
            libc::seekdir(d, pos);
            let mut again = Vec::new();
            while let Some(n) = next(d) {
                again.push(n);
            }
            log.push(format!(
                "seekdir resumes {} ({})",
                rest == again,
                rest.len()
            ));
            std::fs::write(dir.join("late"), "").unwrap();
            std::fs::remove_file(dir.join("f7")).unwrap();
            libc::rewinddir(d);
            let mut all = Vec::new();
            while let Some(n) = next(d) {
                all.push(n);
            }
            log.push(format!(
                "after rewind: late {} f7 {} count {}",
                all.iter().any(|n| n == "late"),
                all.iter().any(|n| n == "f7"),
                all.len()
            ));
            libc::closedir(d);
        }
        log
    });
    assert_eq!(
        log,
        vec![
            "seekdir resumes true (152)".to_string(),
            "after rewind: late true f7 false count 302".to_string()
        ]
    );
}

/// A directory stream that is half read when the kernel drops its cached copy of the
/// directory still returns every entry exactly once: the rest comes from agx at the
/// stream's offset, which must mean the same position it meant in the cached listing.
#[test]
fn directory_stream_survives_losing_the_kernel_dir_cache() {
    let log = same(&[], |dir| {
        for i in 0..1500 {
            std::fs::write(dir.join(big_name(i)), "").unwrap();
        }
        // Fill the kernel's directory cache completely.
        let first = util::raw_readdir(dir);
        let c = util::cstr(dir);
        let mut names = Vec::new();
        // SAFETY: opendir/readdir/closedir on a valid path; each dirent is read before the
        // next call.
        unsafe {
            let d = libc::opendir(c.as_ptr());
            assert!(!d.is_null());
            let next = || -> Option<OsString> {
                let e = libc::readdir(d);
                if e.is_null() {
                    return None;
                }
                let n = std::ffi::CStr::from_ptr((*e).d_name.as_ptr());
                Some(OsStr::from_bytes(n.to_bytes()).to_os_string())
            };
            for _ in 0..700 {
                names.push(next().unwrap());
            }
            util::drop_caches();
            while let Some(n) = next() {
                names.push(n);
            }
            libc::closedir(d);
        }
        let total = names.len();
        names.sort();
        names.dedup();
        (first.len(), total, names.len())
    });
    assert_eq!(log, (1502, 1502, 1502));
}
