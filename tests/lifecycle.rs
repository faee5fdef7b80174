//! Mount lifecycle: mount/unmount cycles, killed daemons, bad input.

mod common;

use common::{agx, sh, Mounted};
use std::process::Command;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn mount_serves_the_project_in_place_and_unmount_restores_the_bare_dir() {
    let mut m = Mounted::with(|p| std::fs::write(p.join("a.txt"), "hello\n").unwrap());
    assert_eq!(std::fs::read_to_string(m.p("a.txt")).unwrap(), "hello\n");
    std::fs::write(m.p("b.txt"), "through the mount\n").unwrap();
    m.unmount();
    assert_eq!(
        std::fs::read_to_string(m.project.join("b.txt")).unwrap(),
        "through the mount\n"
    );
    // After the unmount the project is the bare directory again.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(m.project.to_str().unwrap()));
}

#[test]
fn twenty_mount_unmount_cycles() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("f"), "x").unwrap();
    for i in 0..20 {
        let o = agx(["mount".as_ref(), dir.as_os_str()]);
        assert!(o.status.success(), "cycle {i}: mount: {}", stderr(&o));
        let content = std::fs::read_to_string(dir.join("f")).unwrap();
        std::fs::write(dir.join("f"), format!("{content}{i}")).unwrap();
        let o = agx(["unmount".as_ref(), dir.as_os_str()]);
        assert!(o.status.success(), "cycle {i}: unmount: {}", stderr(&o));
    }
    let want: String = std::iter::once("x".to_string())
        .chain((0..20).map(|i| i.to_string()))
        .collect();
    assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), want);
}

#[test]
fn killed_daemon_leaves_no_mount_that_blocks_the_next_one() {
    let mut m = Mounted::with(|p| std::fs::write(p.join("keep"), "kept\n").unwrap());
    let pid = m.daemon_pid().expect("daemon pid");
    let st = Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success());
    // Wait for the process to be gone.
    for _ in 0..200 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let err = std::fs::metadata(m.p("keep")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN));
    // status says not mounted; mount recovers.
    let o = m.agx(["status", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mounted"], false);
    let o = agx(["mount".as_ref(), m.project.as_os_str()]);
    assert!(o.status.success(), "remount: {}", stderr(&o));
    assert_eq!(std::fs::read_to_string(m.p("keep")).unwrap(), "kept\n");
    m.unmount();
}

#[test]
fn mount_of_a_missing_dir_is_a_one_line_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let o = agx(["mount".as_ref(), missing.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains("no such directory"), "{e}");
    assert!(!missing.exists());
}

#[test]
fn mount_of_a_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("file");
    std::fs::write(&f, "x").unwrap();
    let o = agx(["mount".as_ref(), f.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a directory"), "{}", stderr(&o));
}

#[test]
fn second_mount_of_the_same_dir_is_refused() {
    let m = Mounted::new();
    let o = agx(["mount".as_ref(), m.project.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("already mounted"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    // The first mount still works.
    std::fs::write(m.p("x"), "1").unwrap();
}

#[test]
fn unmount_of_an_unmounted_dir_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let o = agx(["unmount".as_ref(), tmp.path().as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not mounted"), "{}", stderr(&o));
}

#[test]
fn unknown_flags_are_usage_errors() {
    let o = agx(["mount", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn status_reports_pid_since_and_mode() {
    let m = Mounted::new();
    let o = m.agx(["status", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mounted"], true);
    assert!(v["pid"].as_u64().unwrap() > 1);
    assert!(v["since"].as_str().unwrap().contains('T'));
    let mode = v["mode"].as_str().unwrap();
    assert!(mode == "passthrough" || mode == "fuse", "{mode}");
    let human = m.agx(["status"]);
    assert!(String::from_utf8_lossy(&human.stdout).contains("daemon pid"));
}

#[test]
fn mount_at_a_separate_mountpoint() {
    let m = Mounted::at(|p| std::fs::write(p.join("a"), "A").unwrap());
    assert_ne!(m.path(), m.project);
    assert_eq!(std::fs::read_to_string(m.p("a")).unwrap(), "A");
    std::fs::write(m.p("b"), "B").unwrap();
    assert_eq!(std::fs::read_to_string(m.project.join("b")).unwrap(), "B");
}

#[test]
fn mountpoint_inside_the_project_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    let o = agx([
        "mount".as_ref(),
        tmp.path().as_os_str(),
        "--at".as_ref(),
        tmp.path().join("sub").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("inside the project"), "{}", stderr(&o));
}

#[test]
fn sigterm_unmounts_cleanly() {
    let mut m = Mounted::new();
    let pid = m.daemon_pid().unwrap();
    Command::new("kill").arg(pid.to_string()).status().unwrap();
    for _ in 0..500 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    // Clean unmount: the project is the bare directory again, no ENOTCONN.
    std::fs::metadata(&m.project).unwrap();
    m.forget_mounted();
}

/// A user without root mounts through fuse3's fusermount3 (no passthrough: mode "fuse"),
/// gets their files, and unmounts.
#[test]
fn non_root_user_mounts_through_fusermount3() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to switch to uid 65534");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let proj = tmp.path().join("proj");
    std::fs::create_dir(&proj).unwrap();
    std::fs::write(proj.join("mine"), "nobody's\n").unwrap();
    sh(tmp.path(), "chown -R 65534:65534 proj");
    let as_nobody = |args: &[&std::ffi::OsStr]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(common::agx_bin())
            .args(args)
            .env_remove("XDG_RUNTIME_DIR")
            .current_dir("/")
            .output()
            .unwrap()
    };
    let o = as_nobody(&["mount".as_ref(), proj.as_os_str()]);
    struct Guard(std::path::PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).output();
        }
    }
    let _g = Guard(proj.clone());
    assert!(o.status.success(), "{}", stderr(&o));
    let o = as_nobody(&[
        "-C".as_ref(),
        proj.as_os_str(),
        "status".as_ref(),
        "--json".as_ref(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mounted"], true, "{v}");
    assert_eq!(v["mode"], "fuse");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(format!(
            "cd '{}' && cat mine && echo new > made && stat -c %u made",
            proj.display()
        ))
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "nobody's\n65534\n");
    let o = as_nobody(&["unmount".as_ref(), proj.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(proj.join("made")).unwrap(), "new\n");
}
