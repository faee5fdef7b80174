//! The mount(8) helper and the systemd user unit template in mount-helpers/, run for real.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::agx_bin;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn is_agx_mount(p: &Path) -> bool {
    let want = p.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()) && l.contains(" fuse.agx "))
}

fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Unmounts whatever is left at `p` when dropped.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new(agx_bin())
            .arg("unmount")
            .arg(&self.0)
            .current_dir("/")
            .output();
        if is_agx_mount(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).output();
        }
    }
}

#[test]
fn mount_helper_mounts_in_place_and_at_a_mountpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&proj).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(proj.join("f"), "data").unwrap();
    let helper = repo().join("mount-helpers/mount.agx");

    let _c = Cleanup(proj.clone());
    let out = Command::new(&helper)
        .arg(&proj)
        .arg(&proj)
        .args(["-o", "rw,defaults,nofail"])
        .env("AGX_BIN", agx_bin())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_agx_mount(&proj));
    assert_eq!(std::fs::read_to_string(proj.join("f")).unwrap(), "data");
    assert!(Command::new(agx_bin())
        .arg("unmount")
        .arg(&proj)
        .status()
        .unwrap()
        .success());

    let _c2 = Cleanup(mnt.clone());
    let out = Command::new(&helper)
        .arg(&proj)
        .arg(&mnt)
        .args(["-o", "allow_other"])
        .env("AGX_BIN", agx_bin())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_agx_mount(&mnt));
    assert_eq!(std::fs::read_to_string(mnt.join("f")).unwrap(), "data");
    assert!(Command::new(agx_bin())
        .arg("unmount")
        .arg(&mnt)
        .status()
        .unwrap()
        .success());
}

#[test]
fn mount_helper_refuses_unknown_options_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(repo().join("mount-helpers/mount.agx"))
        .arg(tmp.path())
        .arg(tmp.path())
        .args(["-o", "bogus_option"])
        .env("AGX_BIN", agx_bin())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unsupported option: bogus_option"), "{err}");
    assert!(!is_agx_mount(tmp.path()));
    assert!(!tmp.path().join(".agx").exists());
}

/// `mount -t fuse.agx` through util-linux's mount(8), which runs /sbin/mount.fuse.agx.
#[test]
fn mount_t_fuse_agx_uses_the_helper() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to install /sbin/mount.fuse.agx");
        return;
    }
    let link = Path::new("/sbin/mount.fuse.agx");
    if std::fs::symlink_metadata(link).is_err() {
        std::os::unix::fs::symlink(repo().join("mount-helpers/mount.agx"), link).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("p r o j");
    std::fs::create_dir(&proj).unwrap();
    std::fs::write(proj.join("f"), "x").unwrap();
    let _c = Cleanup(proj.clone());
    let out = Command::new("mount")
        .args(["-t", "fuse.agx"])
        .arg(&proj)
        .arg(&proj)
        .env("AGX_BIN", agx_bin())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_agx_mount(&proj));
    assert!(proj.join(".agx").is_dir());
    let out = Command::new("umount").arg(&proj).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_agx_mount(&proj));
}

/// Runs the unit template's ExecStart and ExecStop lines as systemd would for an instance.
#[test]
fn systemd_unit_template_starts_and_stops_a_mount() {
    let unit = std::fs::read_to_string(repo().join("mount-helpers/agx@.service")).unwrap();
    let line = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} missing"))
            .to_string()
    };
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("unit-proj");
    std::fs::create_dir(&proj).unwrap();
    let _c = Cleanup(proj.clone());
    // agx must be found on PATH as /usr/bin/env agx would find it.
    let bin_dir = agx_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let expand = |cmd: &str| -> Vec<String> {
        cmd.split_whitespace()
            .map(|w| w.replace("%f", proj.to_str().unwrap()))
            .collect()
    };
    let start = expand(&line("ExecStart="));
    assert!(
        start.contains(&"--foreground".to_string()),
        "the unit runs the daemon in the foreground"
    );
    let mut daemon = Command::new(&start[0])
        .args(&start[1..])
        .env("PATH", &path)
        .spawn()
        .unwrap();
    wait_for(|| is_agx_mount(&proj), "the unit's mount");
    std::fs::write(proj.join("through-unit"), "ok").unwrap();
    let stop = expand(&line("ExecStop="));
    let st = Command::new(&stop[0])
        .args(&stop[1..])
        .env("PATH", &path)
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = daemon.try_wait().unwrap() {
            assert!(status.success(), "daemon exit status {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "daemon did not exit after ExecStop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!is_agx_mount(&proj));
    assert_eq!(
        std::fs::read_to_string(proj.join("through-unit")).unwrap(),
        "ok"
    );
}

#[test]
fn mount_warns_about_processes_whose_cwd_is_inside() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    std::fs::create_dir_all(proj.join("sub")).unwrap();
    let mut sleeper = Command::new("sleep")
        .arg("30")
        .current_dir(proj.join("sub"))
        .spawn()
        .unwrap();
    let _c = Cleanup(proj.clone());
    let out = Command::new(agx_bin())
        .arg("mount")
        .arg(&proj)
        .output()
        .unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning"), "{err}");
    assert!(err.contains(&format!("{} (sleep)", sleeper.id())), "{err}");
}
