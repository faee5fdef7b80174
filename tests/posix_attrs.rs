//! Metadata through the mount, compared with a plain directory: modes (set-id and sticky
//! bits), ownership of what other users create, chown and set-gid inheritance, POSIX ACLs,
//! nanosecond timestamps, extended attributes.

mod common;
mod util;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::Mounted;
use util::{
    cstr, err, getx, listx, mode, ns_times, pattern, read, rmx, same, set_times, setx,
    NO_PASSTHROUGH,
};

// ---------------------------------------------------------------- modes and owners

fn chmod_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    std::fs::write(dir.join("f"), "x").unwrap();
    std::fs::create_dir(dir.join("d")).unwrap();
    for m in [
        0o000, 0o644, 0o755, 0o4755, 0o2755, 0o1777, 0o6711, 0o7777, 0o2070, 0o400,
    ] {
        for n in ["f", "d"] {
            let p = dir.join(n);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
            log.push(format!("{n} {m:o} -> {:o}", mode(&p)));
        }
    }
    // Modes chosen at creation time, under a umask set in the child shell.
    let out = util::sh_out(
        dir,
        "umask 027; touch u; mkdir ud; mkfifo up; umask 0; mkdir -m 1777 sticky; \
         touch open; chmod g+s,u+s open; stat -c '%n %a %F' u ud up sticky open",
    );
    log.push(String::from_utf8_lossy(&out.stdout).into_owned());
    log
}

#[test]
fn chmod_including_setid_and_sticky_bits_like_on_disk() {
    let log = same(&[], chmod_ops);
    for w in [
        "f 4755 -> 4755",
        "d 2755 -> 2755",
        "d 1777 -> 1777",
        "f 7777 -> 7777",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
    assert!(
        log.last().unwrap().contains("sticky 1777 directory"),
        "{log:#?}"
    );
}

/// Everything uid 65534 creates: name, uid, gid, mode (as seen through `dir`).
fn nobody_creates(dir: &Path) -> String {
    std::fs::create_dir(dir.join("shared")).unwrap();
    std::fs::set_permissions(dir.join("shared"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(dir.join("shared/roots"), "root's").unwrap();
    std::fs::create_dir(dir.join("sticky")).unwrap();
    std::fs::set_permissions(dir.join("sticky"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::write(dir.join("sticky/roots"), "root's").unwrap();
    let out = util::sh_as_nobody(
        &dir.join("shared"),
        "set -e; echo hi > f; mkdir d; ln -s f l; mkfifo p; ln f hard; \
         mkdir -m 2775 sgid; touch sgid/inherits; \
         touch suid; chmod 4755 suid; echo more >> suid; \
         if echo no > roots 2>/dev/null; then echo wrote-roots; fi; \
         if chmod 777 roots 2>/dev/null; then echo chmod-roots; fi; \
         if chown 65534 roots 2>/dev/null; then echo chown-roots; fi; \
         if rm -f ../sticky/roots 2>/dev/null; then echo removed-sticky; fi; \
         touch ../sticky/mine && rm ../sticky/mine && echo own-sticky-ok; \
         stat -c '%n %u %g %a' f d l p hard sgid sgid/inherits suid roots",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn objects_created_by_another_user_belong_to_that_user() {
    let out = same(&[], nobody_creates);
    for w in [
        "f 65534 65534 644",
        "d 65534 65534 755",
        "l 65534 65534 777",
        "p 65534 65534 644",
        "sgid 65534 65534 2775",
        // The write by the owner cleared the set-uid bit.
        "suid 65534 65534 755",
        "roots 0 0 644",
    ] {
        assert!(out.lines().any(|l| l == w), "missing {w:?} in\n{out}");
    }
    assert!(!out.contains("-roots"), "{out}");
    assert!(!out.contains("removed-sticky"), "{out}");
    assert!(out.contains("own-sticky-ok"), "{out}");
}

#[test]
fn objects_created_by_another_user_belong_to_it_on_the_backing_dir() {
    let m = Mounted::at(|_| {});
    util::open_up(m.tmp.path());
    nobody_creates(m.path());
    for n in ["f", "d", "l", "p", "hard", "sgid", "sgid/inherits"] {
        let md = std::fs::symlink_metadata(m.project.join("shared").join(n)).unwrap();
        assert_eq!(
            (md.uid(), md.gid()),
            (65534, 65534),
            "{n} on the backing dir"
        );
    }
}

fn chown_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let p = |n: &str| dir.join(n);
    std::fs::write(p("f"), "x").unwrap();
    std::os::unix::fs::symlink("f", p("l")).unwrap();
    std::fs::create_dir(p("d")).unwrap();
    let st = |n: &str| {
        let m = std::fs::symlink_metadata(p(n)).unwrap();
        format!("{n} {}:{} {:o}", m.uid(), m.gid(), m.mode() & 0o7777)
    };
    std::os::unix::fs::chown(p("f"), Some(1234), Some(5678)).unwrap();
    log.push(st("f"));
    // lchown changes the link, not its target.
    std::os::unix::fs::lchown(p("l"), Some(42), Some(43)).unwrap();
    log.push(st("l"));
    log.push(st("f"));
    // chown through a symlink changes the target.
    std::os::unix::fs::chown(p("l"), Some(7), None).unwrap();
    log.push(st("f"));
    // chown of a set-id executable clears the bits (also as root); a directory keeps them.
    std::fs::set_permissions(p("f"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    std::os::unix::fs::chown(p("f"), Some(8), Some(9)).unwrap();
    log.push(st("f"));
    std::fs::set_permissions(p("d"), std::fs::Permissions::from_mode(0o2755)).unwrap();
    std::os::unix::fs::chown(p("d"), Some(8), Some(4321)).unwrap();
    log.push(st("d"));
    // New objects in a set-gid directory take its group; subdirectories also the bit.
    std::fs::write(p("d/new"), "n").unwrap();
    std::fs::create_dir(p("d/newdir")).unwrap();
    std::os::unix::fs::symlink("new", p("d/newlink")).unwrap();
    log.push(st("d/new"));
    log.push(st("d/newdir"));
    log.push(st("d/newlink"));
    // Another user creating there also gets the directory's group.
    std::os::unix::fs::chown(p("d"), Some(65534), None).unwrap();
    let o = util::sh_as_nobody(&p("d"), "touch bynobody && mkdir nobodydir");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    log.push(st("d/bynobody"));
    log.push(st("d/nobodydir"));
    log
}

#[test]
fn chown_and_setgid_inheritance_like_on_disk() {
    let log = same(&[], chown_ops);
    for w in [
        "f 1234:5678 644",
        "l 42:43 777",
        "f 7:5678 644",
        "f 8:9 755",
        "d 8:4321 2755",
        "d/new 0:4321 644",
        "d/newdir 0:4321 2755",
        "d/newlink 0:4321 777",
        "d/bynobody 65534:4321 644",
        "d/nobodydir 65534:4321 2755",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

// ---------------------------------------------------------------- times

fn time_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let p = |n: &str| dir.join(n);
    std::fs::write(p("f"), "x").unwrap();
    std::fs::create_dir(p("d")).unwrap();
    std::os::unix::fs::symlink("f", p("l")).unwrap();
    std::fs::write(p("old"), "x").unwrap();
    std::fs::write(p("future"), "x").unwrap();
    set_times(
        &p("f"),
        (1_234_567_890, 123_456_789),
        (1_500_000_000, 987_654_321),
        false,
    )
    .unwrap();
    set_times(
        &p("d"),
        (1_000_000_001, 1),
        (1_000_000_002, 999_999_999),
        false,
    )
    .unwrap();
    set_times(&p("l"), (1_111_111_111, 111), (1_222_222_222, 222), true).unwrap();
    set_times(&p("old"), (-1, 500_000_000), (-86_400 * 365, 7), false).unwrap();
    set_times(&p("future"), (1 << 33, 5), (1 << 33, 6), false).unwrap();
    for n in ["f", "d", "l", "old", "future"] {
        log.push(format!("{n} {:?}", ns_times(&p(n))));
    }
    // UTIME_OMIT leaves one time alone.
    set_times(&p("f"), (0, libc::UTIME_OMIT), (1_600_000_000, 42), false).unwrap();
    log.push(format!("omit atime {:?}", ns_times(&p("f"))));
    // touch -d, and touch -r copying times from another file.
    let out = util::sh_out(
        dir,
        "export TZ=UTC; touch -d '2001-02-03 04:05:06.123456789' t1 && touch -r f t2 && \
         touch -m -d '1999-12-31 23:59:59.5' d && \
         stat -c '%n %X.%x %Y.%y' t1 t2 d",
    );
    assert!(out.status.success());
    log.push(String::from_utf8_lossy(&out.stdout).into_owned());
    // UTIME_NOW sets the current time and moves ctime.
    let before = std::fs::metadata(p("f")).unwrap();
    set_times(&p("f"), (0, libc::UTIME_NOW), (0, libc::UTIME_NOW), false).unwrap();
    let after = std::fs::metadata(p("f")).unwrap();
    log.push(format!(
        "now: mtime moved {} ctime moved {}",
        after.mtime() > 1_600_000_000,
        (after.ctime(), after.ctime_nsec()) >= (before.ctime(), before.ctime_nsec())
    ));
    // Writing moves mtime and ctime; reading the file does not move mtime.
    set_times(&p("f"), (1, 0), (2, 0), false).unwrap();
    let _ = read(&p("f"));
    let (atime, mtime) = ns_times(&p("f"));
    log.push(format!(
        "after read mtime {mtime:?} atime moved {}",
        atime.0 > 1_000_000_000
    ));
    OpenOptions::new()
        .append(true)
        .open(p("f"))
        .unwrap()
        .write_all(b"y")
        .unwrap();
    log.push(format!(
        "after write mtime moved {}",
        ns_times(&p("f")).1 .0 > 1_000_000_000
    ));
    // Creating in a directory moves its mtime.
    std::fs::write(p("d/new"), "").unwrap();
    log.push(format!(
        "dir mtime moved {}",
        ns_times(&p("d")).1 .0 > 1_000_000_000
    ));
    log
}

#[test]
fn nanosecond_timestamps_round_trip_like_on_disk_without_passthrough() {
    let log = same(NO_PASSTHROUGH, time_ops);
    assert!(
        log.contains(&"after read mtime (2, 0) atime moved true".to_string()),
        "{log:#?}"
    );
}

#[test]
fn nanosecond_timestamps_round_trip_like_on_disk() {
    let log = same(&[], time_ops);
    for w in [
        "f ((1234567890, 123456789), (1500000000, 987654321))",
        "d ((1000000001, 1), (1000000002, 999999999))",
        "l ((1111111111, 111), (1222222222, 222))",
        "old ((-1, 500000000), (-31536000, 7))",
        "omit atime ((1234567890, 123456789), (1600000000, 42))",
        "now: mtime moved true ctime moved true",
        "after read mtime (2, 0) atime moved true",
        "after write mtime moved true",
        "dir mtime moved true",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
    assert!(
        log.iter()
            .any(|l| l.contains("t1 981173106.2001-02-03 04:05:06.123456789")),
        "{log:#?}"
    );
}

// ---------------------------------------------------------------- xattrs

fn xattr_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    std::fs::write(dir.join("f"), "x").unwrap();
    std::fs::create_dir(dir.join("d")).unwrap();
    std::os::unix::fs::symlink("f", dir.join("l")).unwrap();
    for n in ["f", "d"] {
        let p = dir.join(n);
        setx(&p, "user.one", b"1", 0, false).unwrap();
        setx(&p, "user.big", &pattern(3000), 0, false).unwrap();
        setx(&p, "user.empty", b"", 0, false).unwrap();
        log.push(format!(
            "{n}: one {:?} big ok {} empty {:?} list {:?}",
            getx(&p, "user.one", false).unwrap(),
            getx(&p, "user.big", false).unwrap() == pattern(3000),
            getx(&p, "user.empty", false).unwrap(),
            listx(&p, false).unwrap()
        ));
        log.push(format!(
            "{n}: missing {} create existing {} replace missing {}",
            err(getx(&p, "user.nope", false)),
            err(setx(&p, "user.one", b"2", libc::XATTR_CREATE, false)),
            err(setx(&p, "user.nope", b"2", libc::XATTR_REPLACE, false))
        ));
        setx(&p, "user.one", b"22", libc::XATTR_REPLACE, false).unwrap();
        rmx(&p, "user.big").unwrap();
        log.push(format!(
            "{n}: replaced {:?} removed {} remove missing {} list {:?}",
            getx(&p, "user.one", false).unwrap(),
            err(getx(&p, "user.big", false)),
            err(rmx(&p, "user.big")),
            listx(&p, false).unwrap()
        ));
        // A buffer that is too small is ERANGE.
        let (c, name) = (cstr(&p), cstr("user.one"));
        let mut small = [0u8; 1];
        // SAFETY: valid strings and a one-byte buffer.
        let r = unsafe {
            libc::getxattr(
                c.as_ptr(),
                name.as_ptr(),
                small.as_mut_ptr().cast(),
                small.len(),
            )
        };
        log.push(format!(
            "{n}: small buffer {}",
            if r < 0 {
                std::io::Error::last_os_error().raw_os_error().unwrap()
            } else {
                0
            }
        ));
    }
    // Through a symlink, the xattrs are the target's; on the link itself user.* is refused.
    log.push(format!(
        "via symlink {:?}",
        getx(&dir.join("l"), "user.one", false)
    ));
    log.push(format!(
        "on symlink: set {} list {:?}",
        err(setx(&dir.join("l"), "user.x", b"1", 0, true)),
        listx(&dir.join("l"), true)
    ));
    log.push(format!(
        "unknown namespace {}",
        err(setx(&dir.join("f"), "bogus.x", b"1", 0, false))
    ));
    log
}

#[test]
fn xattrs_like_on_disk() {
    let log = same(&[], xattr_ops);
    for w in [
        "f: one [49] big ok true empty [] list [\"user.big\", \"user.empty\", \"user.one\"]",
        "d: missing 61 create existing 17 replace missing 61",
        "f: replaced [50, 50] removed 61 remove missing 61 list [\"user.empty\", \"user.one\"]",
        "d: small buffer 34",
        "via symlink Ok([50, 50])",
        "on symlink: set 1 list Ok([])",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

// ---------------------------------------------------------------- POSIX ACLs

const ACL_UNDEFINED: u32 = u32::MAX;

/// A POSIX ACL in the kernel's xattr format: version 2, then (tag, perm, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// user::rw(x), user:65534:rwx, group::r-x, mask::(mask), other::r--
fn nobody_acl(user: u16, mask: u16) -> Vec<u8> {
    acl(&[
        (0x01, user, ACL_UNDEFINED),
        (0x02, 7, 65534),
        (0x04, 5, ACL_UNDEFINED),
        (0x10, mask, ACL_UNDEFINED),
        (0x20, 4, ACL_UNDEFINED),
    ])
}

fn acl_ops(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let f = dir.join("f");
    std::fs::write(&f, "root's\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    let write_as_nobody = |p: &Path| {
        let o = util::sh_as_nobody(dir, &format!("echo nobody >> '{}'", p.display()));
        o.status.success()
    };
    log.push(format!("nobody writes before acl {}", write_as_nobody(&f)));
    // An access ACL granting uid 65534 read and write.
    setx(&f, "system.posix_acl_access", &nobody_acl(6, 6), 0, false).unwrap();
    log.push(format!(
        "acl reads back {} mode {:o}",
        getx(&f, "system.posix_acl_access", false).unwrap() == nobody_acl(6, 6),
        mode(&f)
    ));
    log.push(format!("nobody writes with acl {}", write_as_nobody(&f)));
    // chmod rewrites the mask entry; the ACL follows.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    log.push(format!(
        "after chmod 640: nobody writes {}",
        write_as_nobody(&f)
    ));
    rmx(&f, "system.posix_acl_access").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o660)).unwrap();
    log.push(format!(
        "acl removed: nobody writes {}",
        write_as_nobody(&f)
    ));

    // A default ACL on a directory is inherited, and umask does not apply under it.
    let d = dir.join("d");
    std::fs::create_dir(&d).unwrap();
    setx(&d, "system.posix_acl_default", &nobody_acl(7, 7), 0, false).unwrap();
    std::fs::write(d.join("new"), "").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    log.push(format!(
        "inherited: new {:o} has acl {} sub {:o} has default {}",
        mode(&d.join("new")),
        getx(&d.join("new"), "system.posix_acl_access", false).is_ok(),
        mode(&d.join("sub")),
        getx(&d.join("sub"), "system.posix_acl_default", false).is_ok()
    ));
    log.push(format!(
        "nobody writes the inherited file {}",
        write_as_nobody(&d.join("new"))
    ));
    // Without a default ACL, umask applies as usual.
    std::fs::write(dir.join("plain"), "").unwrap();
    std::fs::create_dir(dir.join("plaindir")).unwrap();
    log.push(format!(
        "umask: {:o} {:o}",
        mode(&dir.join("plain")),
        mode(&dir.join("plaindir"))
    ));
    log
}

#[test]
fn posix_acls_are_enforced_and_inherited_like_on_disk() {
    let log = same(&[], acl_ops);
    for w in [
        "nobody writes before acl false",
        "acl reads back true mode 664",
        "nobody writes with acl true",
        "after chmod 640: nobody writes false",
        "acl removed: nobody writes false",
        "inherited: new 664 has acl true sub 774 has default true",
        "nobody writes the inherited file true",
        "umask: 644 755",
    ] {
        assert!(log.iter().any(|l| l == w), "missing {w:?} in {log:#?}");
    }
}

/// Set-id bits as an unprivileged writer leaves them: cleared by write, append, truncate and
/// fallocate (set-gid only when group-executable); kept when root writes. agx clears them
/// itself (FUSE_HANDLE_KILLPRIV_V2), so this pins it on both I/O paths.
fn setid_kill_ops(dir: &Path) -> Vec<String> {
    let st = |n: &str| {
        let md = std::fs::symlink_metadata(dir.join(n)).unwrap();
        format!("{n} {:o}", md.permissions().mode() & 0o7777)
    };
    let mut log = Vec::new();
    for (name, mode) in [
        ("w", 0o6777),
        ("a", 0o6777),
        ("t", 0o6777),
        ("g", 0o2767),
        ("r", 0o6777),
        ("f", 0o6777),
    ] {
        std::fs::write(dir.join(name), "data\n").unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let o = util::sh_as_nobody(
        dir,
        "printf x | dd of=w conv=notrunc status=none && echo more >> a && truncate -s 2 t \
         && echo x >> g && fallocate -l 64k f",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(dir.join("r"), "root writes\n").unwrap();
    for n in ["w", "a", "t", "g", "r", "f"] {
        log.push(st(n));
    }
    log
}

#[test]
fn unprivileged_writes_clear_setid_bits_like_on_disk() {
    let log = same(&[], setid_kill_ops);
    assert_eq!(log, ["w 777", "a 777", "t 777", "g 767", "r 6777", "f 777"]);
}

#[test]
fn unprivileged_writes_clear_setid_bits_without_passthrough() {
    same(util::NO_PASSTHROUGH, setid_kill_ops);
}
