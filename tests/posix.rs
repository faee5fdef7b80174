//! POSIX behaviour of names and contents through the mount, compared with the same
//! operations on a plain directory: regular files, directories, symlinks, hard links,
//! rename, fifos and sockets.
//!
//! Most tests run a closure on a bare directory and through a fresh mount (`util::same`)
//! and require identical results; the closures also assert a few absolute facts so the
//! test cannot pass with both sides equally wrong.

mod common;
mod util;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use util::{check, cstr, err, mode, ns_times, pattern, read, same, set_times, NO_PASSTHROUGH};

// ---------------------------------------------------------------- regular files

/// Create, write, read, append, O_EXCL, O_TRUNC, error cases; returns a log of outcomes.
fn file_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let f = dir.join("f");
    std::fs::write(&f, b"hello").unwrap();
    log.push(format!("read {:?}", String::from_utf8(read(&f)).unwrap()));

    // O_APPEND: writes go to the end even after a seek to 0.
    let mut a = OpenOptions::new().append(true).open(&f).unwrap();
    a.write_all(b" world").unwrap();
    a.seek(SeekFrom::Start(0)).unwrap();
    a.write_all(b"!").unwrap();
    drop(a);
    log.push(format!("append {:?}", String::from_utf8(read(&f)).unwrap()));

    // O_CREAT|O_EXCL.
    let excl = |p: &Path| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(p)
    };
    log.push(format!("excl existing {}", err(excl(&f))));
    let mut g = excl(&dir.join("g")).unwrap();
    g.write_all(b"new").unwrap();
    drop(g);
    log.push(format!(
        "excl new {:?} mode {:o}",
        read(&dir.join("g")),
        mode(&dir.join("g"))
    ));

    // O_TRUNC empties, and the size is right at once through another path.
    let mut t = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&f)
        .unwrap();
    log.push(format!(
        "after O_TRUNC size {}",
        std::fs::metadata(&f).unwrap().len()
    ));
    t.write_all(b"x").unwrap();
    drop(t);
    log.push(format!("trunc+write {:?}", read(&f)));

    // Read/write/seek on one descriptor, positional I/O, and a second reader.
    let data = pattern(100_000);
    let mut rw = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("rw"))
        .unwrap();
    rw.write_all(&data).unwrap();
    rw.seek(SeekFrom::Start(5000)).unwrap();
    let mut buf = [0u8; 100];
    rw.read_exact(&mut buf).unwrap();
    log.push(format!("read at 5000 ok {}", buf[..] == data[5000..5100]));
    rw.write_all_at(b"MIDDLE", 70_000).unwrap();
    let mut other = File::open(dir.join("rw")).unwrap();
    let mut all = Vec::new();
    other.read_to_end(&mut all).unwrap();
    let mut want = data.clone();
    want[70_000..70_006].copy_from_slice(b"MIDDLE");
    log.push(format!("second reader sees write {}", all == want));
    let mut at = [0u8; 6];
    rw.read_exact_at(&mut at, 70_000).unwrap();
    log.push(format!("pread {:?}", String::from_utf8_lossy(&at)));
    log.push(format!("size {}", rw.metadata().unwrap().len()));
    drop(rw);

    // Error cases.
    let ro = File::open(&f).unwrap();
    log.push(format!("write to O_RDONLY {}", err((&ro).write(b"y"))));
    log.push(format!(
        "open missing {}",
        err(File::open(dir.join("nope")))
    ));
    log.push(format!(
        "create in missing dir {}",
        err(File::create(dir.join("nope/x")))
    ));
    std::fs::create_dir(dir.join("d")).unwrap();
    log.push(format!(
        "open dir for writing {}",
        err(OpenOptions::new().write(true).open(dir.join("d")))
    ));
    log.push(format!(
        "file as directory {}",
        err(File::open(dir.join("f/x")))
    ));
    std::os::unix::fs::symlink("f", dir.join("lnk")).unwrap();
    let nofollow = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(p)
    };
    log.push(format!(
        "O_NOFOLLOW symlink {} file {}",
        err(nofollow(&dir.join("lnk"))),
        err(nofollow(&f))
    ));

    // An unlinked file stays readable and writable through open descriptors.
    let mut keep = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("g"))
        .unwrap();
    std::fs::remove_file(dir.join("g")).unwrap();
    keep.write_all_at(b"NEW", 0).unwrap();
    let mut s = String::new();
    keep.read_to_string(&mut s).unwrap();
    log.push(format!(
        "unlinked but open {s:?} nlink {}",
        keep.metadata().unwrap().nlink()
    ));
    log.push(format!("gone {}", err(std::fs::metadata(dir.join("g")))));
    // Attributes of the unlinked file still change through its descriptor.
    keep.set_len(2).unwrap();
    keep.set_permissions(std::fs::Permissions::from_mode(0o600))
        .unwrap();
    keep.set_modified(std::time::UNIX_EPOCH + std::time::Duration::new(1_000_000_000, 5))
        .unwrap();
    let md = keep.metadata().unwrap();
    log.push(format!(
        "unlinked fchmod/futimens/ftruncate: {:o} {}.{} {}",
        md.mode() & 0o7777,
        md.mtime(),
        md.mtime_nsec(),
        md.len()
    ));

    // pwrite on an O_APPEND descriptor appends (Linux), whatever the offset.
    let ap = OpenOptions::new().append(true).open(&f).unwrap();
    ap.write_all_at(b"<at0>", 0).unwrap();
    log.push(format!(
        "pwrite O_APPEND {:?}",
        String::from_utf8(read(&f)).unwrap()
    ));
    log
}

fn check_file_ops(log: &[String]) {
    let want = [
        "read \"hello\"",
        "append \"hello world!\"",
        "excl existing 17",
        "after O_TRUNC size 0",
        "second reader sees write true",
        "write to O_RDONLY 9",
        "open missing 2",
        "open dir for writing 21",
        "file as directory 20",
        "O_NOFOLLOW symlink 40 file 0",
        "unlinked fchmod/futimens/ftruncate: 600 1000000000.5 2",
        "pwrite O_APPEND \"x<at0>\"",
        "unlinked but open \"NEW\" nlink 0",
    ];
    for w in want {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

#[test]
fn regular_files_like_on_disk() {
    check_file_ops(&same(&[], file_ops));
}

#[test]
fn regular_files_like_on_disk_without_passthrough() {
    check_file_ops(&same(NO_PASSTHROUGH, file_ops));
}

// ---------------------------------------------------------------- directories

fn dir_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let d = dir.join("d");
    std::fs::create_dir(&d).unwrap();
    log.push(format!("mkdir again {}", err(std::fs::create_dir(&d))));
    std::fs::create_dir_all(d.join("a/b/c")).unwrap();
    std::fs::write(d.join("a/file"), "x").unwrap();
    log.push(format!("rmdir non-empty {}", err(std::fs::remove_dir(&d))));
    log.push(format!(
        "rmdir file {}",
        err(std::fs::remove_dir(d.join("a/file")))
    ));
    log.push(format!("unlink dir {}", err(std::fs::remove_file(&d))));
    log.push(format!(
        "mkdir under file {}",
        err(std::fs::create_dir(d.join("a/file/x")))
    ));
    let md = std::fs::metadata(d.join("a")).unwrap();
    log.push(format!("nlink of a {}", md.nlink()));
    log.push(format!("names {:?}", util::names(&d.join("a"))));
    std::fs::remove_dir(d.join("a/b/c")).unwrap();
    log.push(format!(
        "nlink of a/b after rmdir {}",
        std::fs::metadata(d.join("a/b")).unwrap().nlink()
    ));
    // rmdir of the current directory of another process's view: "." and ".." are refused.
    log.push(format!(
        "rmdir dot {}",
        err(std::fs::remove_dir(d.join("a/b/.")))
    ));
    std::fs::remove_dir_all(&d).unwrap();
    log.push(format!("removed {}", err(std::fs::metadata(&d))));
    let mut raw: Vec<String> = util::raw_readdir(dir)
        .into_iter()
        .map(|(n, _)| n.to_string_lossy().into_owned())
        .collect();
    raw.sort();
    log.push(format!("raw listing {raw:?}"));
    log
}

#[test]
fn directories_like_on_disk() {
    let log = same(&[], dir_ops);
    for w in [
        "mkdir again 17",
        "rmdir non-empty 39",
        "rmdir file 20",
        "unlink dir 21",
        "nlink of a 3",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

// ---------------------------------------------------------------- symlinks

fn symlink_ops(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::symlink;
    let mut log = Vec::new();
    std::fs::write(dir.join("target"), "pointed at").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    symlink("target", dir.join("rel")).unwrap();
    symlink(dir.join("target"), dir.join("abs")).unwrap();
    symlink("does/not/exist", dir.join("dangling")).unwrap();
    symlink("sub", dir.join("dirlink")).unwrap();
    symlink("loop2", dir.join("loop1")).unwrap();
    symlink("loop1", dir.join("loop2")).unwrap();
    let long_target = "x".repeat(4000);
    symlink(&long_target, dir.join("long")).unwrap();

    for n in ["rel", "dangling", "dirlink", "loop1"] {
        let p = dir.join(n);
        let l = std::fs::symlink_metadata(&p).unwrap();
        log.push(format!(
            "{n}: readlink {:?} lstat symlink {} size {} stat {}",
            std::fs::read_link(&p).unwrap(),
            l.file_type().is_symlink(),
            l.len(),
            match std::fs::metadata(&p) {
                Ok(m) => format!("dir {} len {}", m.is_dir(), m.len()),
                Err(e) => format!("errno {}", e.raw_os_error().unwrap()),
            }
        ));
    }
    log.push(format!(
        "abs readlink is the path {}",
        std::fs::read_link(dir.join("abs")).unwrap() == dir.join("target")
    ));
    log.push(format!(
        "long target {}",
        std::fs::read_link(dir.join("long")).unwrap().as_os_str() == long_target.as_str()
    ));
    log.push(format!(
        "read through {:?}",
        String::from_utf8(read(&dir.join("rel"))).unwrap()
    ));
    std::fs::write(dir.join("dirlink/inside"), "i").unwrap();
    log.push(format!(
        "through dir link {:?}",
        util::names(&dir.join("sub"))
    ));
    // Writing through a dangling link creates its target.
    std::fs::create_dir_all(dir.join("does/not")).unwrap();
    std::fs::write(dir.join("dangling"), "now it exists").unwrap();
    log.push(format!(
        "dangling resolved {:?}",
        String::from_utf8(read(&dir.join("does/not/exist"))).unwrap()
    ));
    log.push(format!(
        "symlink over existing {}",
        err(symlink("x", dir.join("rel")))
    ));
    // Removing the link leaves the target.
    std::fs::remove_file(dir.join("rel")).unwrap();
    log.push(format!(
        "target after unlink of link {}",
        dir.join("target").exists()
    ));
    log
}

#[test]
fn symlinks_like_on_disk() {
    let log = same(&[], symlink_ops);
    for w in [
        "rel: readlink \"target\" lstat symlink true size 6 stat dir false len 10",
        "dangling: readlink \"does/not/exist\" lstat symlink true size 14 stat errno 2",
        "loop1: readlink \"loop2\" lstat symlink true size 5 stat errno 40",
        "long target true",
        "dangling resolved \"now it exists\"",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

// ---------------------------------------------------------------- hard links

fn link_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let (a, b, c) = (dir.join("a"), dir.join("b"), dir.join("sub/c"));
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(&a, "one").unwrap();
    std::fs::hard_link(&a, &b).unwrap();
    std::fs::hard_link(&b, &c).unwrap();
    let (ma, mb, mc) = (
        std::fs::metadata(&a).unwrap(),
        std::fs::metadata(&b).unwrap(),
        std::fs::metadata(&c).unwrap(),
    );
    log.push(format!(
        "nlink {} {} {}",
        ma.nlink(),
        mb.nlink(),
        mc.nlink()
    ));
    log.push(format!(
        "same ino {}",
        ma.ino() == mb.ino() && mb.ino() == mc.ino()
    ));
    // A write through one name shows through the others.
    OpenOptions::new()
        .append(true)
        .open(&c)
        .unwrap()
        .write_all(b" two")
        .unwrap();
    log.push(format!("via a {:?}", String::from_utf8(read(&a)).unwrap()));
    std::fs::remove_file(&a).unwrap();
    log.push(format!(
        "after unlink a: b nlink {} content {:?}, a {}",
        std::fs::metadata(&b).unwrap().nlink(),
        String::from_utf8(read(&b)).unwrap(),
        err(std::fs::metadata(&a))
    ));
    log.push(format!(
        "link over existing {}",
        err(std::fs::hard_link(&b, &c))
    ));
    log.push(format!(
        "link of a dir {}",
        err(std::fs::hard_link(dir.join("sub"), dir.join("sub2")))
    ));
    // A hard link to a symlink is a second symlink (linkat without AT_SYMLINK_FOLLOW).
    std::os::unix::fs::symlink("b", dir.join("sl")).unwrap();
    let (from, to) = (cstr(dir.join("sl")), cstr(dir.join("sl2")));
    // SAFETY: valid paths.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            0,
        )
    })
    .unwrap();
    let l = std::fs::symlink_metadata(dir.join("sl2")).unwrap();
    log.push(format!(
        "linked symlink: is symlink {} nlink {} target {:?}",
        l.file_type().is_symlink(),
        l.nlink(),
        std::fs::read_link(dir.join("sl2")).unwrap()
    ));
    log.push(format!(
        "b nlink after symlink games {}",
        std::fs::metadata(&b).unwrap().nlink()
    ));
    // With the second name gone, the first still takes its own times.
    std::fs::remove_file(dir.join("sl2")).unwrap();
    log.push(format!(
        "times of the remaining symlink {} {:?}",
        err(set_times(&dir.join("sl"), (5, 6), (7, 8), true)),
        ns_times(&dir.join("sl"))
    ));
    log
}

#[test]
fn hard_links_like_on_disk() {
    let log = same(&[], link_ops);
    for w in [
        "nlink 3 3 3",
        "same ino true",
        "via a \"one two\"",
        "after unlink a: b nlink 2 content \"one two\", a 2",
        "linked symlink: is symlink true nlink 2 target \"b\"",
        "times of the remaining symlink 0 ((5, 6), (7, 8))",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

// ---------------------------------------------------------------- rename

fn rename_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let p = |n: &str| dir.join(n);
    std::fs::write(p("a"), "A").unwrap();
    std::fs::write(p("b"), "B").unwrap();
    let ino_a = std::fs::metadata(p("a")).unwrap().ino();

    std::fs::rename(p("a"), p("a2")).unwrap();
    log.push(format!(
        "plain: old {} new {:?} same ino {}",
        err(std::fs::metadata(p("a"))),
        read(&p("a2")),
        std::fs::metadata(p("a2")).unwrap().ino() == ino_a
    ));

    // Over an existing file; an open descriptor of the replaced file keeps its data.
    let old_b = File::open(p("b")).unwrap();
    std::fs::rename(p("a2"), p("b")).unwrap();
    let mut s = String::new();
    (&old_b).read_to_string(&mut s).unwrap();
    log.push(format!(
        "over existing: b {:?} replaced fd reads {s:?} nlink {} a2 {}",
        read(&p("b")),
        old_b.metadata().unwrap().nlink(),
        err(std::fs::metadata(p("a2")))
    ));

    // Directories, with contents, across parents.
    std::fs::create_dir_all(p("d1/x/y")).unwrap();
    std::fs::write(p("d1/x/y/f"), "deep").unwrap();
    std::fs::create_dir(p("d2")).unwrap();
    std::fs::rename(p("d1/x"), p("d2/moved")).unwrap();
    log.push(format!(
        "dir rename: {:?} old {}",
        read(&p("d2/moved/y/f")),
        err(std::fs::metadata(p("d1/x")))
    ));
    std::fs::create_dir(p("empty")).unwrap();
    std::fs::rename(p("d2/moved"), p("empty")).unwrap();
    log.push(format!("dir over empty dir {:?}", read(&p("empty/y/f"))));
    std::fs::create_dir(p("full")).unwrap();
    std::fs::write(p("full/z"), "z").unwrap();
    log.push(format!(
        "dir over non-empty dir {}",
        err(std::fs::rename(p("empty"), p("full")))
    ));
    log.push(format!(
        "file over dir {}",
        err(std::fs::rename(p("b"), p("full")))
    ));
    log.push(format!(
        "dir over file {}",
        err(std::fs::rename(p("full"), p("b")))
    ));
    log.push(format!(
        "dir into itself {}",
        err(std::fs::rename(p("empty"), p("empty/y/inside")))
    ));
    log.push(format!(
        "missing source {}",
        err(std::fs::rename(p("nope"), p("x")))
    ));
    std::fs::rename(p("b"), p("b")).unwrap();
    log.push(format!("onto itself {:?}", read(&p("b"))));

    // RENAME_NOREPLACE.
    std::fs::write(p("c"), "C").unwrap();
    log.push(format!(
        "noreplace onto existing {} b {:?} c {:?}",
        err(util::renameat2(&p("b"), &p("c"), libc::RENAME_NOREPLACE)),
        read(&p("b")),
        read(&p("c"))
    ));
    util::renameat2(&p("c"), &p("c2"), libc::RENAME_NOREPLACE).unwrap();
    log.push(format!("noreplace to new {:?}", read(&p("c2"))));

    // RENAME_EXCHANGE: two files, then a file and a directory.
    let (ib, ic) = (
        std::fs::metadata(p("b")).unwrap().ino(),
        std::fs::metadata(p("c2")).unwrap().ino(),
    );
    util::renameat2(&p("b"), &p("c2"), libc::RENAME_EXCHANGE).unwrap();
    log.push(format!(
        "exchange files: b {:?} c2 {:?} inos swapped {}",
        read(&p("b")),
        read(&p("c2")),
        std::fs::metadata(p("b")).unwrap().ino() == ic
            && std::fs::metadata(p("c2")).unwrap().ino() == ib
    ));
    util::renameat2(&p("b"), &p("full"), libc::RENAME_EXCHANGE).unwrap();
    log.push(format!(
        "exchange file and dir: b is dir {} full/.. {:?} full {:?}",
        std::fs::metadata(p("b")).unwrap().is_dir(),
        util::names(&p("b")),
        read(&p("full"))
    ));
    log.push(format!(
        "exchange with missing {}",
        err(util::renameat2(&p("b"), &p("nope"), libc::RENAME_EXCHANGE))
    ));
    log.push(format!(
        "exchange|noreplace {}",
        err(util::renameat2(
            &p("b"),
            &p("full"),
            libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE
        ))
    ));
    log.push(format!("final {:?}", util::names(dir)));
    log
}

#[test]
fn rename_like_on_disk() {
    let log = same(&[], rename_ops);
    for w in [
        "plain: old 2 new [65] same ino true",
        "over existing: b [65] replaced fd reads \"B\" nlink 0 a2 2",
        "dir over non-empty dir 39",
        "file over dir 21",
        "dir over file 20",
        "dir into itself 22",
        "noreplace onto existing 17 b [65] c [67]",
        "exchange files: b [67] c2 [65] inos swapped true",
        "exchange with missing 2",
        "exchange|noreplace 22",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

/// A renamed symlink still takes its own times (not its target's, not those of whatever
/// now has its old name).
#[test]
fn renamed_symlink_keeps_taking_its_own_times() {
    let log = same(&[], |dir| {
        std::os::unix::fs::symlink("t", dir.join("l")).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::rename(dir.join("l"), dir.join("sub/l2")).unwrap();
        // Reuse the old name for something else.
        std::os::unix::fs::symlink("other", dir.join("l")).unwrap();
        set_times(&dir.join("sub/l2"), (1, 2), (3, 4), true).unwrap();
        let md = std::fs::symlink_metadata(dir.join("sub/l2")).unwrap();
        let other = std::fs::symlink_metadata(dir.join("l")).unwrap();
        (
            (md.atime(), md.atime_nsec(), md.mtime(), md.mtime_nsec()),
            other.mtime() == 3,
        )
    });
    assert_eq!(log, ((1, 2, 3, 4), false));
}

/// mknod of fifos and sockets, and a fifo actually carries data through the mount.
#[test]
fn fifos_and_sockets_like_on_disk() {
    let out = same(&[], |dir| {
        let o = util::sh_out(
            dir,
            "mkfifo p && (echo through-fifo > p &) && cat p && \
             python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind(\"sock\")' && \
             stat -c '%n %F %a' p sock",
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    });
    assert!(
        out.starts_with("through-fifo\np fifo 644\nsock socket"),
        "{out}"
    );
}
