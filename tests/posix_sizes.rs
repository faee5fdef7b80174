//! Sizes and space through the mount, compared with a plain directory: truncate,
//! fallocate (punch hole, keep size, zero range), fsync, copy_file_range, statfs, and
//! sparse files beyond 4 GiB.

mod common;
mod util;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use common::Mounted;
use util::{check, cstr, err, pattern, read, same, NO_PASSTHROUGH};

// ---------------------------------------------------------------- sizes

fn truncate_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let f = dir.join("f");
    let data = pattern(10_000);
    std::fs::write(&f, &data).unwrap();
    let h = OpenOptions::new().read(true).write(true).open(&f).unwrap();
    h.set_len(20_000).unwrap();
    let got = read(&f);
    log.push(format!(
        "up: len {} head same {} tail zero {}",
        got.len(),
        got[..10_000] == data[..],
        got[10_000..].iter().all(|&b| b == 0)
    ));
    h.set_len(5_000).unwrap();
    log.push(format!(
        "down: {}",
        read(&f) == data[..5_000] && h.metadata().unwrap().len() == 5_000
    ));
    // A read through another descriptor past the new end sees EOF.
    let mut buf = [0u8; 10];
    let n = File::open(&f).unwrap().read_at(&mut buf, 6_000).unwrap();
    log.push(format!("read past end {n}"));
    // truncate(2) by path, without an open descriptor.
    let c = cstr(&f);
    // SAFETY: valid path.
    check(unsafe { libc::truncate(c.as_ptr(), 3) }).unwrap();
    log.push(format!("by path {:?}", read(&f)));
    let out = util::sh_out(
        dir,
        "truncate -s 1M f && truncate -s -1000 f && stat -c %s f",
    );
    log.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
    // Growing again reads zeros, not the old bytes.
    h.set_len(6_000).unwrap();
    h.set_len(0).unwrap();
    h.set_len(8_000).unwrap();
    log.push(format!("regrown zero {}", read(&f).iter().all(|&b| b == 0)));
    // Truncating a read-only descriptor fails; a read-only file can still be truncated
    // by root by path.
    let ro = File::open(&f).unwrap();
    log.push(format!("ftruncate O_RDONLY {}", err(ro.set_len(1))));
    log
}

#[test]
fn truncate_up_and_down_like_on_disk() {
    let log = same(&[], truncate_ops);
    assert!(log.contains(&"up: len 20000 head same true tail zero true".into()));
    assert!(log.contains(&"1047576".into()), "{log:#?}");
    assert!(log.contains(&"ftruncate O_RDONLY 22".into()), "{log:#?}");
}

#[test]
fn truncate_up_and_down_like_on_disk_without_passthrough() {
    let log = same(NO_PASSTHROUGH, truncate_ops);
    assert!(log.contains(&"down: true".into()), "{log:#?}");
}

fn fallocate(f: &File, mode: i32, off: i64, len: i64) -> std::io::Result<()> {
    // SAFETY: a valid descriptor.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) }).map(drop)
}

fn lseek(f: &File, off: i64, whence: i32) -> i64 {
    // SAFETY: a valid descriptor.
    unsafe { libc::lseek(f.as_raw_fd(), off, whence) }
}

fn fallocate_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let p = dir.join("f");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    let st = |f: &File| {
        let m = f.metadata().unwrap();
        (m.len(), m.blocks())
    };
    fallocate(&f, 0, 0, 1 << 20).unwrap();
    let (len, blocks) = st(&f);
    log.push(format!(
        "plain: len {len} allocated {}",
        blocks * 512 >= 1 << 20
    ));
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20).unwrap();
    let (len2, blocks2) = st(&f);
    log.push(format!(
        "keep size: len {len2} more blocks {}",
        blocks2 > blocks
    ));
    log.push(format!(
        "stat through path agrees {}",
        std::fs::metadata(&p).unwrap().len() == len2
    ));
    f.write_all_at(&pattern(1 << 20), 0).unwrap();
    fallocate(
        &f,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        65536,
        131072,
    )
    .unwrap();
    let data = read(&p);
    let mut want = pattern(1 << 20);
    want[65536..196608].iter_mut().for_each(|b| *b = 0);
    log.push(format!(
        "punch: len {} content right {}",
        data.len(),
        data == want
    ));
    log.push(format!(
        "seek hole {} seek data {}",
        lseek(&f, 0, libc::SEEK_HOLE),
        lseek(&f, 65536, libc::SEEK_DATA)
    ));
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 4096, 4096).unwrap();
    want[4096..8192].iter_mut().for_each(|b| *b = 0);
    log.push(format!("zero range {}", read(&p) == want));
    log.push(format!(
        "punch without keep size {}",
        err(fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE, 0, 4096))
    ));
    let ro = File::open(&p).unwrap();
    log.push(format!("on O_RDONLY {}", err(fallocate(&ro, 0, 0, 4096))));
    log
}

#[test]
fn fallocate_and_punch_hole_like_on_disk() {
    let log = same(&[], fallocate_ops);
    for w in [
        "plain: len 1048576 allocated true",
        "keep size: len 1048576 more blocks true",
        "stat through path agrees true",
        "punch: len 1048576 content right true",
        "seek hole 65536 seek data 196608",
        "zero range true",
        "punch without keep size 95",
        "on O_RDONLY 9",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

#[test]
fn fallocate_and_punch_hole_like_on_disk_without_passthrough() {
    let log = same(NO_PASSTHROUGH, fallocate_ops);
    assert!(log.contains(&"zero range true".into()), "{log:#?}");
}

/// fsync and fdatasync of files and directories succeed, and data written before them is
/// on the backing file (read by the backing path, not through the mount).
#[test]
fn fsync_and_fdatasync_reach_the_backing_file() {
    let m = Mounted::at(|_| {});
    let mut f = File::create(m.p("f")).unwrap();
    f.write_all(b"synced").unwrap();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    assert_eq!(read(&m.project.join("f")), b"synced");
    File::open(m.path()).unwrap().sync_all().unwrap();
    std::fs::create_dir(m.p("d")).unwrap();
    File::open(m.p("d")).unwrap().sync_data().unwrap();
    // SAFETY: a valid descriptor.
    check(unsafe { libc::syncfs(f.as_raw_fd()) }).unwrap();
}

#[test]
fn fsync_and_fdatasync_without_passthrough() {
    let mut m = Mounted::with_env(|_| {}, NO_PASSTHROUGH);
    let mut f = File::create(m.p("f")).unwrap();
    f.write_all(b"synced").unwrap();
    f.sync_all().unwrap();
    f.write_all(b" twice").unwrap();
    f.sync_data().unwrap();
    File::open(m.path()).unwrap().sync_all().unwrap();
    drop(f);
    m.unmount();
    assert_eq!(read(&m.project.join("f")), b"synced twice");
}

/// copy_file_range between two files of the mount (cp uses it).
#[test]
fn copy_file_range_like_on_disk() {
    let out = same(&[], |dir| {
        let data = pattern(300_000);
        std::fs::write(dir.join("src"), &data).unwrap();
        let i = File::open(dir.join("src")).unwrap();
        let o = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("dst"))
            .unwrap();
        o.write_all_at(b"head", 0).unwrap();
        let (mut off_in, mut off_out) = (1000i64, 10i64);
        let mut left = 200_000usize;
        while left > 0 {
            // SAFETY: valid descriptors and offsets.
            let n = unsafe {
                libc::copy_file_range(
                    i.as_raw_fd(),
                    &mut off_in,
                    o.as_raw_fd(),
                    &mut off_out,
                    left,
                    0,
                )
            };
            assert!(n > 0, "{}", std::io::Error::last_os_error());
            left -= n as usize;
        }
        let got = read(&dir.join("dst"));
        (
            got.len(),
            &got[..4] == b"head",
            got[10..] == data[1000..201_000],
            o.metadata().unwrap().len(),
        )
    });
    assert_eq!(out, (200_010, true, true, 200_010));
}

// ---------------------------------------------------------------- statfs

fn statvfs(p: &Path) -> libc::statvfs {
    let c = cstr(p);
    // SAFETY: valid path; statvfs fills the zeroed struct.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        check(libc::statvfs(c.as_ptr(), &mut s)).unwrap();
        s
    }
}

#[test]
fn statfs_reports_the_backing_filesystem() {
    let m = Mounted::at(|p| std::fs::create_dir(p.join("sub")).unwrap());
    let (a, b) = (statvfs(&m.project.join("sub")), statvfs(&m.p("sub")));
    assert_eq!(a.f_bsize, b.f_bsize);
    assert_eq!(a.f_frsize, b.f_frsize);
    assert_eq!(a.f_blocks, b.f_blocks);
    assert_eq!(a.f_files, b.f_files);
    assert_eq!(a.f_namemax, b.f_namemax);
    // Free counts move, but not by much in between.
    assert!(a.f_bfree.abs_diff(b.f_bfree) < a.f_blocks / 100 + 1000);
    // df agrees too.
    let df = |p: &Path| {
        let o = util::sh_out(p, "df -k --output=size . | tail -1");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(df(&m.project), df(m.path()));
}

// ---------------------------------------------------------------- large files

fn sparse_ops(dir: &Path) -> Vec<String> {
    const OFF: u64 = 5 << 30;
    let mut log = Vec::new();
    let p = dir.join("big");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all_at(b"Z", OFF).unwrap();
    f.write_all_at(b"past4g", (4 << 30) + 12345).unwrap();
    drop(f);
    let md = std::fs::metadata(&p).unwrap();
    log.push(format!(
        "size {} sparse {}",
        md.len(),
        md.blocks() * 512 < 1 << 20
    ));
    let g = File::open(&p).unwrap();
    let mut b = [0u8; 1];
    g.read_exact_at(&mut b, OFF).unwrap();
    log.push(format!("byte {:?}", b[0] as char));
    let mut w = [0u8; 6];
    g.read_exact_at(&mut w, (4 << 30) + 12345).unwrap();
    log.push(format!("past 4 GiB {:?}", String::from_utf8_lossy(&w)));
    let mut z = [1u8; 4096];
    g.read_exact_at(&mut z, 3 << 30).unwrap();
    log.push(format!("hole reads zeros {}", z.iter().all(|&x| x == 0)));
    log.push(format!(
        "read at end {}",
        g.read_at(&mut b, OFF + 1).unwrap()
    ));
    log.push(format!("first data {}", lseek(&g, 0, libc::SEEK_DATA)));
    log.push(format!("end {}", lseek(&g, 0, libc::SEEK_END)));
    log
}

fn check_sparse(log: &[String]) {
    for w in [
        "size 5368709121 sparse true",
        "byte 'Z'",
        "past 4 GiB \"past4g\"",
        "hole reads zeros true",
        "read at end 0",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

#[test]
fn sparse_file_over_4_gib() {
    check_sparse(&same(&[], sparse_ops));
}

#[test]
fn sparse_file_over_4_gib_without_passthrough() {
    check_sparse(&same(NO_PASSTHROUGH, sparse_ops));
}
