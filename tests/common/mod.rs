//! Test harness: mounts the real `agx` binary over a project in a temporary directory and
//! always unmounts on drop, also when the test fails or panics.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub fn agx_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agx"))
}

/// Runs `agx ARGS...` and returns its output.
pub fn agx<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(agx_bin())
        .args(args)
        .output()
        .expect("running agx")
}

/// Runs a shell command line with `sh -c` in `dir`; panics with its output on failure.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("running sh");
    assert!(
        out.status.success(),
        "sh -c {script:?} in {} failed: {}\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd`, again while it fails with ETXTBSY: a program a test just wrote (a stand-in
/// agent copied from /bin/sh) can be busy for a moment when another test thread forked
/// while its descriptor was open for writing (the child holds it until its exec).
pub fn output_of(cmd: &mut Command) -> Output {
    for _ in 0..100 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            r => return r.expect("running a program"),
        }
    }
    panic!("{cmd:?} stayed busy")
}

/// A project directory mounted in place (or at a separate mountpoint) by agx.
pub struct Mounted {
    pub tmp: tempfile::TempDir,
    /// The project (backing) directory.
    pub project: PathBuf,
    /// Where the project is served.
    pub mountpoint: PathBuf,
    mounted: bool,
}

impl Mounted {
    /// An empty project, mounted in place.
    pub fn new() -> Mounted {
        Self::with(|_| {})
    }

    /// A project populated by `setup` (on the bare directory), then mounted in place.
    pub fn with(setup: impl FnOnce(&Path)) -> Mounted {
        Self::build(setup, false, &[])
    }

    /// A project mounted at a separate mountpoint (`--at`), leaving the backing directory
    /// visible for comparisons.
    pub fn at(setup: impl FnOnce(&Path)) -> Mounted {
        Self::build(setup, true, &[])
    }

    /// Like [`Mounted::with`], with extra environment for the daemon (e.g. AGX_PASSTHROUGH=0).
    pub fn with_env(setup: impl FnOnce(&Path), env: &[(&str, &str)]) -> Mounted {
        Self::build(setup, false, env)
    }

    fn build(setup: impl FnOnce(&Path), separate: bool, env: &[(&str, &str)]) -> Mounted {
        let tmp = tempfile::Builder::new()
            .prefix("agx-test-")
            .tempdir()
            .expect("tempdir");
        let project = tmp.path().join("project");
        std::fs::create_dir(&project).unwrap();
        setup(&project);
        let mountpoint = if separate {
            let m = tmp.path().join("mnt");
            std::fs::create_dir(&m).unwrap();
            m
        } else {
            project.clone()
        };
        let mut cmd = Command::new(agx_bin());
        cmd.arg("mount").arg(&project);
        if separate {
            cmd.arg("--at").arg(&mountpoint);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("running agx mount");
        assert!(
            out.status.success(),
            "agx mount failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Mounted {
            tmp,
            project,
            mountpoint,
            mounted: true,
        }
    }

    /// The mounted view (where tests do their work).
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// A path inside the mounted view.
    pub fn p(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mountpoint.join(rel)
    }

    /// Runs `agx -C PROJECT ARGS...`.
    pub fn agx<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Command::new(agx_bin())
            .arg("-C")
            .arg(&self.project)
            .args(args)
            .output()
            .expect("running agx")
    }

    /// The daemon's pid according to `agx status --json`.
    pub fn daemon_pid(&self) -> Option<u32> {
        let out = self.agx(["status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v["pid"].as_u64().map(|p| p as u32)
    }

    /// Unmounts now, asserting success (the drop guard then has nothing left to do).
    pub fn unmount(&mut self) {
        if !self.mounted {
            return;
        }
        let out = Command::new(agx_bin())
            .arg("unmount")
            .arg(&self.mountpoint)
            .current_dir("/")
            .output()
            .expect("running agx unmount");
        assert!(
            out.status.success(),
            "agx unmount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.mounted = false;
    }

    /// Mounts the project again after [`Mounted::unmount`], asserting success.
    pub fn remount(&mut self) {
        let out = Command::new(agx_bin())
            .arg("mount")
            .arg(&self.project)
            .output()
            .expect("running agx mount");
        assert!(
            out.status.success(),
            "agx mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.mounted = true;
    }

    /// Marks the mount as gone (after a test killed or unmounted it itself); drop will
    /// still clean up whatever is left.
    pub fn forget_mounted(&mut self) {
        self.mounted = false;
    }
}

fn is_mountpoint(p: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| {
            let want = p.to_string_lossy().replace(' ', "\\040");
            s.lines()
                .any(|l| l.split(' ').nth(4) == Some(want.as_str()) && l.contains("fuse.agx"))
        })
        .unwrap_or(false)
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let pid = self.daemon_pid();
        let _ = Command::new(agx_bin())
            .arg("unmount")
            .arg(&self.mountpoint)
            .current_dir("/")
            .output();
        // Whatever is still there (a killed daemon, a busy mount) goes by force.
        let deadline = Instant::now() + Duration::from_secs(5);
        while is_mountpoint(&self.mountpoint) && Instant::now() < deadline {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .output();
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(pid) = pid {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).output();
        }
    }
}

/// Runs `f` on a plain directory and on a mounted one, returning both results, so a test
/// can assert the mount behaves exactly like the disk.
pub fn compare<T>(f: impl Fn(&Path) -> T) -> (T, T) {
    let bare = tempfile::Builder::new()
        .prefix("agx-bare-")
        .tempdir()
        .unwrap();
    let a = f(bare.path());
    let m = Mounted::new();
    let b = f(m.path());
    (a, b)
}
