//! Corners where a FUSE server easily differs from the disk, each compared with a plain
//! directory: set-id bits changing while a file is open (passthrough and non-passthrough
//! opens of one inode must not mix), `chown(f, -1, -1)`, writes through a shared mapping,
//! and the `trusted.*` names an unprivileged user must not see.

mod common;
mod util;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use util::{same, sh_as_nobody, sh_out, NO_PASSTHROUGH};

fn chmod(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

fn mode(p: &Path) -> String {
    format!("{:o}", std::fs::metadata(p).unwrap().mode() & 0o7777)
}

fn out(o: &std::process::Output) -> String {
    format!(
        "{} {}{}",
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn setid_while_open(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let f = dir.join("f");
    std::fs::write(&f, "start\n").unwrap();
    chmod(&f, 0o666);
    // Open (passthrough where granted), then the file turns set-uid.
    let held = std::fs::File::open(&f).unwrap();
    chmod(&f, 0o4777);
    // Another user writes: the bits go, as on the disk.
    let o = sh_as_nobody(dir, "printf 'by nobody\\n' >> f && cat f");
    log.push(format!("nobody appends: {}", out(&o)));
    log.push(format!("mode after nobody's write: {}", mode(&f)));
    // Root opens it again, for writing and for reading.
    chmod(&f, 0o6777);
    let w = std::fs::OpenOptions::new().append(true).open(&f);
    log.push(format!("root opens for append: {}", w.is_ok()));
    drop(w);
    log.push(format!("mode after root's open: {}", mode(&f)));
    log.push(format!(
        "read back: {:?}",
        std::fs::read_to_string(&f).map_err(|e| e.raw_os_error())
    ));
    drop(held);

    // The other way round: the set-id file is first held open for writing by another
    // user (served by the daemon), then opened by root for reading.
    let g = dir.join("g");
    std::fs::write(&g, "g\n").unwrap();
    chmod(&g, 0o4777);
    chmod(dir, 0o777);
    let script = "exec 3>>g; printf 'x\\n' >&3; touch ready; \
                  while [ ! -e go ]; do sleep 0.02; done; printf 'z\\n' >&3";
    let child = util::nobody_sh(dir, script).spawn().unwrap();
    while !dir.join("ready").exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let r = std::fs::read_to_string(&g).map_err(|e| e.raw_os_error());
    log.push(format!("root reads g while nobody holds it: {r:?}"));
    std::fs::write(dir.join("go"), "").unwrap();
    let o = child.wait_with_output().unwrap();
    log.push(format!("nobody's held write: {}", o.status.success()));
    log.push(format!(
        "g: {:?} mode {}",
        std::fs::read_to_string(&g).unwrap(),
        mode(&g)
    ));
    log
}

#[test]
fn set_id_bits_changing_while_a_file_is_open_like_on_disk() {
    let log = same(&[], setid_while_open);
    assert!(
        log.iter().any(|l| l == "root opens for append: true"),
        "{log:#?}"
    );
}

#[test]
fn set_id_bits_changing_while_a_file_is_open_without_passthrough() {
    same(NO_PASSTHROUGH, setid_while_open);
}

fn chown_nothing(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    for (name, m) in [("suid", 0o4755), ("sgid", 0o2755), ("sgid-noexec", 0o2745)] {
        let f = dir.join(name);
        std::fs::write(&f, "x").unwrap();
        chmod(&f, m);
        let before = std::fs::metadata(&f).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::os::unix::fs::chown(&f, None, None).unwrap();
        let after = std::fs::metadata(&f).unwrap();
        let ctime_moved =
            (after.ctime(), after.ctime_nsec()) > (before.ctime(), before.ctime_nsec());
        log.push(format!(
            "{name}: mode {} ctime moved {ctime_moved}",
            mode(&f)
        ));
    }
    log
}

#[test]
fn chown_to_minus_one_clears_set_id_bits_and_moves_ctime_like_on_disk() {
    let log = same(&[], chown_nothing);
    assert!(
        log.contains(&"suid: mode 755 ctime moved true".to_string()),
        "{log:#?}"
    );
}

/// The attributes are read (and cached by the kernel) while the file is mapped, before the
/// mapped write: only that write can move mtime afterwards.
fn mapped_write(dir: &Path) -> String {
    let script = r#"
import mmap, os, time
f = "m"
with open(f, "wb") as w:
    w.write(b"\0" * 8192)
h = open(f, "r+b")
mm = mmap.mmap(h.fileno(), 8192)
m0 = os.stat(f).st_mtime_ns
time.sleep(0.05)
mm[100:105] = b"hello"
mm.flush()
mm.close()
h.close()
st = os.stat(f)
print("mtime moved", st.st_mtime_ns > m0, "size", st.st_size)
print(open(f, "rb").read()[100:105])
"#;
    out(&sh_out(
        dir,
        &format!("python3 -c '{}'", script.replace('\'', "\\'")),
    ))
}

#[test]
fn writes_through_a_shared_mapping_move_mtime_like_on_disk() {
    let log = same(&[], mapped_write);
    assert!(log.contains("mtime moved True"), "{log}");
}

fn trusted_names(dir: &Path) -> Vec<String> {
    let f = dir.join("f");
    std::fs::write(&f, "x").unwrap();
    chmod(&f, 0o644);
    for (k, v) in [("user.seen", "1"), ("trusted.hidden", "2")] {
        let o = sh_out(dir, &format!("setfattr -n {k} -v {v} f"));
        assert!(o.status.success(), "setfattr {k}: {}", out(&o));
    }
    let list = "import os; print(sorted(os.listxattr('f')))";
    vec![
        out(&sh_out(dir, &format!("python3 -c \"{list}\""))),
        out(&sh_as_nobody(dir, &format!("python3 -c \"{list}\""))),
    ]
}

#[test]
fn trusted_xattr_names_are_hidden_from_other_users_like_on_disk() {
    let log = same(&[], trusted_names);
    assert!(log[0].contains("trusted.hidden"), "{log:#?}");
    assert!(!log[1].contains("trusted.hidden"), "{log:#?}");
}
