//! Mounting and unmounting a project: validation, stale-mount recovery, the daemon's life
//! (foreground or detached), and `status`.

pub mod error;
mod fusermount;
pub mod gitexclude;
pub mod mountinfo;
pub mod procs;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, SessionACL};
use rustix::fs::{Mode, OFlags};

pub use error::MountError;

use crate::control::engine::Engine;
use crate::control::{self, MountState};
use crate::fs::{AgxFs, FsConfig, AGX_DIR_NAME};

/// Set in the environment of a detached daemon: report readiness on stdout.
const READY_ENV: &str = "AGX_READY_STDOUT";

/// What `agx mount` was asked to do.
#[derive(Clone, Debug)]
pub struct MountRequest {
    pub dir: PathBuf,
    pub at: Option<PathBuf>,
    pub foreground: bool,
    /// None: the default (on when running as root).
    pub allow_other: Option<bool>,
}

/// A validated mount: the canonical project and mountpoint, ready to serve.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub project: PathBuf,
    pub mountpoint: PathBuf,
    pub allow_other: bool,
    pub state_path: PathBuf,
    pub log_path: PathBuf,
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Request threads. Default 4 (each blocks in the kernel waiting for a request, so more
/// threads than cores is normal); `AGX_THREADS` overrides it, 1 to 64.
fn threads() -> usize {
    std::env::var("AGX_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(4)
}

/// Removes a mount whose daemon is gone ("transport endpoint is not connected").
pub fn clear_stale(mp: &Path) -> Result<(), MountError> {
    log::warn!("removing a dead agx mount at {}", mp.display());
    if is_root() {
        rustix::mount::unmount(mp, rustix::mount::UnmountFlags::DETACH).map_err(|e| {
            MountError::UnmountFailed {
                dir: mp.to_path_buf(),
                reason: std::io::Error::from(e).to_string(),
            }
        })
    } else {
        fusermount(mp, true)
    }
}

fn fusermount(mp: &Path, lazy: bool) -> Result<(), MountError> {
    let mut cmd = Command::new("fusermount3");
    cmd.arg(if lazy { "-uz" } else { "-u" }).arg("--").arg(mp);
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => MountError::NoFusermount,
        _ => MountError::io("running fusermount3", e),
    })?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if msg.contains("busy") {
        return Err(MountError::Busy {
            dir: mp.to_path_buf(),
            procs: procs::list(&procs::using(mp)),
        });
    }
    Err(MountError::UnmountFailed {
        dir: mp.to_path_buf(),
        reason: msg,
    })
}

/// Whether an agx mount at `mp` has lost its daemon. The kernel may answer `stat` of the
/// root from its attribute cache, so this opens the directory, which always asks the daemon.
fn is_dead_mount(mp: &Path) -> bool {
    let dead = |e: &std::io::Error| e.raw_os_error() == Some(libc::ENOTCONN);
    match std::fs::metadata(mp) {
        Err(e) => dead(&e),
        Ok(_) => {
            mountinfo::agx_mount_at(mp).is_some()
                && std::fs::read_dir(mp).err().is_some_and(|e| dead(&e))
        }
    }
}

/// Removes a dead agx mount at `p`, if there is one. Returns whether it did.
pub fn recover(p: &Path) -> Result<bool, MountError> {
    if is_dead_mount(p) {
        clear_stale(p)?;
        return Ok(true);
    }
    Ok(false)
}

/// The canonical form of a directory given on the command line. A dead agx mount found
/// there is removed first, so a killed daemon never blocks the next command.
pub fn resolve_dir(p: &Path) -> Result<PathBuf, MountError> {
    let abs = std::path::absolute(p).map_err(|e| MountError::io(p.display().to_string(), e))?;
    recover(&abs)?;
    match std::fs::metadata(&abs) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => return Err(MountError::NotADirectory(abs)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(MountError::NotFound(abs))
        }
        Err(e) => return Err(MountError::io(abs.display().to_string(), e)),
    }
    let canon = abs
        .canonicalize()
        .map_err(|e| MountError::io(abs.display().to_string(), e))?;
    if canon != abs {
        recover(&canon)?;
    }
    Ok(canon)
}

/// The live daemon serving `project`, if any (state file plus a running pid).
pub fn live_state(project: &Path) -> Option<MountState> {
    let paths = control::paths(project).ok()?;
    let st = control::read_state(&paths.state)?;
    if control::pid_alive(st.pid) {
        Some(st)
    } else {
        None
    }
}

pub fn prepare(req: &MountRequest) -> Result<Prepared, MountError> {
    let project = resolve_dir(&req.dir)?;
    let mountpoint = match &req.at {
        Some(at) => resolve_dir(at)?,
        None => project.clone(),
    };
    if mountpoint != project && mountpoint.starts_with(&project) {
        return Err(MountError::MountFailed {
            dir: project,
            reason: format!(
                "the mountpoint {} is inside the project; choose a directory outside it",
                mountpoint.display()
            ),
        });
    }
    if let Some(st) = live_state(&project) {
        return Err(MountError::AlreadyMounted {
            dir: project,
            pid: st.pid,
        });
    }
    if mountinfo::agx_mount_at(&mountpoint).is_some() {
        return Err(MountError::AlreadyMountedNoPid(mountpoint));
    }
    if project.join(AGX_DIR_NAME).exists() && !project.join(AGX_DIR_NAME).is_dir() {
        return Err(MountError::MountFailed {
            dir: project.clone(),
            reason: format!(
                "{} exists and is not a directory",
                project.join(AGX_DIR_NAME).display()
            ),
        });
    }
    // As root agx opens /dev/fuse itself; other users go through the set-uid fusermount3,
    // which opens it for them (the device is often mode 0600).
    let dev = if is_root() {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map(drop)
    } else {
        std::fs::metadata("/dev/fuse").map(drop)
    };
    if let Err(e) = dev {
        return Err(MountError::FuseUnavailable(e.to_string()));
    }
    let allow_other = req.allow_other.unwrap_or_else(is_root);
    if !is_root() {
        if which("fusermount3").is_none() {
            return Err(MountError::NoFusermount);
        }
        if allow_other && !user_allow_other() {
            return Err(MountError::AllowOtherNeedsConf);
        }
    }
    let paths = control::paths(&project)?;
    Ok(Prepared {
        project,
        mountpoint,
        allow_other,
        state_path: paths.state,
        log_path: paths.log,
    })
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    })
}

fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .map(|s| s.lines().any(|l| l.trim() == "user_allow_other"))
        .unwrap_or(false)
}

/// Raises the descriptor limit: the daemon holds one descriptor per inode the kernel knows,
/// so a tree of more files than the limit (an npm install, a big untar) would run out.
/// With CAP_SYS_RESOURCE (root) the hard limit goes up to the kernel's `fs.nr_open` (at
/// most 2^20); otherwise the soft limit goes up to the hard one.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    const CEILING: u64 = 1 << 20;
    let cur = getrlimit(Resource::Nofile);
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|n| n.min(CEILING));
    if let Some(n) = nr_open.filter(|n| cur.maximum.is_some_and(|m| *n > m)) {
        let raised = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(n),
                maximum: Some(n),
            },
        );
        if raised.is_ok() {
            return;
        }
    }
    if let Some(max) = cur.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(max),
                maximum: Some(max),
            },
        );
    }
}

/// Runs the daemon in this process until the filesystem is unmounted. With `notify`, the
/// first line on stdout says "ready" or "error: ..." for the parent `agx mount`.
pub fn serve(p: &Prepared, notify: bool) -> Result<(), MountError> {
    let result = serve_inner(p, notify);
    if let Err(e) = &result {
        if notify {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "error: {e}");
            let _ = out.flush();
        }
    }
    result
}

fn serve_inner(p: &Prepared, notify: bool) -> Result<(), MountError> {
    if notify {
        let _ = rustix::process::setsid();
    }
    rustix::process::umask(Mode::empty());
    raise_nofile();
    let _ = std::env::set_current_dir("/");

    // The project is reached only through this descriptor from here on.
    let root = rustix::fs::open(
        &p.project,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| MountError::io(p.project.display().to_string(), e.into()))?;
    if let Err(e) = gitexclude::ensure(&root) {
        log::warn!("could not add .agx/ to .git/info/exclude: {e}");
    }
    // Capture and history: recovers what a killed daemon left, before anything is served.
    let engine_root = rustix::io::dup(&root)
        .map_err(|e| MountError::io("duplicating the project handle", e.into()))?;
    let engine = Arc::new(
        Engine::open(engine_root, &p.project.display().to_string()).map_err(|e| {
            MountError::MountFailed {
                dir: p.project.clone(),
                reason: e.to_string(),
            }
        })?,
    );

    let mut cfg = FsConfig::default();
    if std::env::var("AGX_PASSTHROUGH").is_ok_and(|v| v == "0") {
        cfg.passthrough = false;
    }
    if std::env::var("AGX_CAPTURE").is_ok_and(|v| v == "0") {
        log::warn!("AGX_CAPTURE=0: changes are not recorded (plain mount, for measurements)");
        cfg.capture = false;
    }
    let report = Arc::new(Mutex::new(None));
    let fs = AgxFs::new(
        root,
        cfg,
        engine.recorder.clone(),
        engine.attrib.clone(),
        report.clone(),
        crate::fs::open_views(&engine.root, &engine.agx, engine.recorder.clone()),
    )
    .map_err(|e| MountError::io(p.project.display().to_string(), e))?;

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("agx".into()),
        MountOption::CUSTOM("subtype=agx".into()),
        MountOption::DefaultPermissions,
    ];
    config.acl = if p.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(threads());
    config.clone_fd = true;

    let session = if is_root() {
        fuser::Session::new(fs, &p.mountpoint, &config).map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                MountError::Permission {
                    dir: p.mountpoint.clone(),
                    reason: e.to_string(),
                }
            } else {
                MountError::MountFailed {
                    dir: p.mountpoint.clone(),
                    reason: e.to_string(),
                }
            }
        })?
    } else {
        let mut opts = String::from("fsname=agx,subtype=agx,default_permissions");
        if p.allow_other {
            opts.push_str(",allow_other");
        }
        let dev = fusermount::mount(&p.mountpoint, &opts)?;
        fuser::Session::from_fd(fs, dev, config.acl, config.clone()).map_err(|e| {
            let _ = fusermount(&p.mountpoint, true);
            MountError::MountFailed {
                dir: p.mountpoint.clone(),
                reason: e.to_string(),
            }
        })?
    };
    let mut session = session;
    let mode = match report.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(r) if r.passthrough => "passthrough",
        _ => "fuse",
    };
    let state = MountState {
        project: p.project.clone(),
        mountpoint: p.mountpoint.clone(),
        pid: std::process::id(),
        since: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        mode: mode.to_string(),
        log: p.log_path.clone(),
    };
    if let Err(e) = control::write_state(&p.state_path, &state) {
        log::warn!("could not write {}: {e}", p.state_path.display());
    }

    let notifier = session.notifier();
    let inval_root = rustix::io::dup(&engine.root)
        .map_err(|e| MountError::io("duplicating the project handle", e.into()))?;
    engine.set_restore_hook(Box::new(move |paths, inodes| {
        invalidate(&notifier, &inval_root, paths, inodes)
    }));
    if let Err(e) = engine.record_mount() {
        log::warn!("could not record the mount in the timeline: {e}");
    }
    let socket = control::paths(&p.project)?.socket;
    let _server = control::server::start(&socket, engine.clone())
        .map_err(|e| MountError::io(format!("control socket {}", socket.display()), e))?;

    // Unmount cleanly on SIGTERM, SIGINT and SIGHUP.
    let mut unmounter = session.unmount_callable();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| MountError::io("installing signal handlers", e))?;
    let sig_mp = p.mountpoint.clone();
    std::thread::Builder::new()
        .name("agx-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                log::info!("signal {sig}: unmounting {}", sig_mp.display());
                if !is_root() {
                    // Mounted through fusermount3, which must unmount it too.
                    if let Err(e) = fusermount(&sig_mp, false) {
                        log::warn!("unmount on signal failed ({e}); detaching");
                        let _ = fusermount(&sig_mp, true);
                    }
                } else if let Err(e) = unmounter.unmount() {
                    log::warn!("unmount on signal failed ({e}); detaching");
                    let _ = rustix::mount::unmount(&sig_mp, rustix::mount::UnmountFlags::DETACH);
                }
            }
        })
        .map_err(|e| MountError::io("starting the signal thread", e))?;

    log::info!(
        "serving {} at {} ({mode}, {} threads)",
        p.project.display(),
        p.mountpoint.display(),
        threads()
    );
    if notify {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "ready {mode}");
        let _ = out.flush();
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            let _ = rustix::stdio::dup2_stdout(&null);
        }
    }
    let res = session.run();
    engine.recorder.shutdown();
    if control::read_state(&p.state_path).is_some_and(|s| s.pid == std::process::id()) {
        let _ = std::fs::remove_file(&p.state_path);
    }
    log::info!("daemon for {} exits", p.project.display());
    // A clean run leaves no log behind; one with warnings keeps it for `agx status`'s
    // next reader.
    if notify && res.is_ok() && !crate::logging::warned() {
        let _ = std::fs::remove_file(&p.log_path);
    }
    res.map_err(|e| MountError::io("serving the mount", e))
}

/// Starts a detached daemon and returns once its mount answers.
pub fn spawn(p: &Prepared) -> Result<MountState, MountError> {
    let exe = std::env::current_exe().map_err(|e| MountError::io("finding the agx binary", e))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&p.log_path)
        .map_err(|e| MountError::io(p.log_path.display().to_string(), e))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg(&p.project).arg("--foreground");
    if p.mountpoint != p.project {
        cmd.arg("--at").arg(&p.mountpoint);
    }
    cmd.arg(if p.allow_other {
        "--allow-other"
    } else {
        "--no-allow-other"
    });
    cmd.env(READY_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    let mut child = cmd
        .spawn()
        .map_err(|e| MountError::io("starting the daemon", e))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    let _ = BufReader::new(stdout).read_line(&mut line);
    let line = line.trim_end();
    if line.starts_with("ready") {
        // The daemon writes its state before it says ready.
        let pid = child.id();
        return Ok(control::read_state(&p.state_path).unwrap_or(MountState {
            project: p.project.clone(),
            mountpoint: p.mountpoint.clone(),
            pid,
            since: String::new(),
            mode: line.trim_start_matches("ready ").to_string(),
            log: p.log_path.clone(),
        }));
    }
    let _ = child.wait();
    match line.strip_prefix("error: ") {
        Some(msg) => Err(MountError::Daemon(msg.to_string())),
        None => Err(MountError::DaemonDied {
            log: p.log_path.clone(),
        }),
    }
}

/// Runs the daemon as asked: in this process with --foreground, detached otherwise.
pub fn mount(req: &MountRequest) -> Result<Option<MountState>, MountError> {
    let p = prepare(req)?;
    if req.foreground {
        let notify = std::env::var_os(READY_ENV).is_some();
        serve(&p, notify)?;
        Ok(None)
    } else {
        spawn(&p).map(Some)
    }
}

/// What `agx status` reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Status {
    pub project: PathBuf,
    pub mounted: bool,
    pub mountpoint: Option<PathBuf>,
    pub pid: Option<u32>,
    pub since: Option<String>,
    pub mode: Option<String>,
    pub log: Option<PathBuf>,
}

pub fn status(project: &Path) -> Result<Status, MountError> {
    let project = resolve_dir(project)?;
    let paths = control::paths(&project)?;
    let st = control::read_state(&paths.state).filter(|s| control::pid_alive(s.pid));
    let mounted = st
        .as_ref()
        .is_some_and(|s| mountinfo::agx_mount_at(&s.mountpoint).is_some());
    Ok(match st {
        Some(s) if mounted => Status {
            project,
            mounted: true,
            mountpoint: Some(s.mountpoint),
            pid: Some(s.pid),
            since: Some(s.since),
            mode: Some(s.mode),
            log: Some(s.log),
        },
        _ => Status {
            project,
            mounted: false,
            mountpoint: None,
            pid: None,
            since: None,
            mode: None,
            log: None,
        },
    })
}

/// Unmounts the agx mount of `dir` (a project or a mountpoint) and waits for its daemon
/// to finish. Returns a line describing what happened.
pub fn unmount(dir: &Path, lazy: bool) -> Result<String, MountError> {
    let abs = std::path::absolute(dir).map_err(|e| MountError::io(dir.display().to_string(), e))?;
    if recover(&abs)? {
        forget_states(|s| s.mountpoint == abs || s.project == abs);
        return Ok(format!(
            "removed a dead mount at {} (its daemon had died)",
            abs.display()
        ));
    }
    let canon = resolve_dir(&abs)?;
    let state = control::all_states()
        .into_iter()
        .map(|(_, s)| s)
        .find(|s| (s.project == canon || s.mountpoint == canon) && control::pid_alive(s.pid));
    let mp = state
        .as_ref()
        .map(|s| s.mountpoint.clone())
        .unwrap_or_else(|| canon.clone());
    if mountinfo::agx_mount_at(&mp).is_none() {
        forget_states(|s| {
            (s.project == canon || s.mountpoint == canon) && !control::pid_alive(s.pid)
        });
        return Err(MountError::NotMounted(canon));
    }
    // This process must not hold the mount itself.
    let _ = std::env::set_current_dir("/");
    if is_root() {
        let flags = if lazy {
            rustix::mount::UnmountFlags::DETACH
        } else {
            rustix::mount::UnmountFlags::empty()
        };
        match rustix::mount::unmount(&mp, flags) {
            Ok(()) => {}
            Err(rustix::io::Errno::BUSY) => {
                return Err(MountError::Busy {
                    dir: mp.clone(),
                    procs: procs::list(&procs::using(&mp)),
                })
            }
            Err(e) => {
                return Err(MountError::UnmountFailed {
                    dir: mp,
                    reason: std::io::Error::from(e).to_string(),
                })
            }
        }
    } else {
        fusermount(&mp, lazy)?;
    }
    let Some(state) = state else {
        return Ok(format!("unmounted {}", mp.display()));
    };
    if lazy {
        return Ok(format!(
            "detached {}; the daemon (pid {}) exits when the last user leaves",
            mp.display(),
            state.pid
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while control::pid_alive(state.pid) {
        if Instant::now() > deadline {
            return Ok(format!(
                "unmounted {}; the daemon (pid {}) is still finishing",
                mp.display(),
                state.pid
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(format!("unmounted {}", mp.display()))
}

fn forget_states(pred: impl Fn(&MountState) -> bool) {
    for (path, s) in control::all_states() {
        if pred(&s) && !control::pid_alive(s.pid) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Makes the kernel forget what it cached about paths agx changed itself (a restore):
/// their directory entries and the attributes of what is there now, and of `inodes`
/// (files that lost a name, whose other names show a changed link count).
fn invalidate(
    notifier: &fuser::Notifier,
    root: &std::os::fd::OwnedFd,
    paths: &[Vec<u8>],
    inodes: &[u64],
) {
    use crate::restore::live;
    let node_of = |rel: &[u8]| -> Option<u64> {
        if rel.is_empty() {
            return Some(1);
        }
        live::stat(root, rel).map(|o| o.stat.st_ino)
    };
    for p in paths {
        let (parent, name) = live::split(p);
        if let Some(pino) = node_of(parent) {
            let _ = notifier.inval_entry(fuser::INodeNo(pino), live::os(name));
            let _ = notifier.inval_inode(fuser::INodeNo(pino), 0, 0);
        }
        if let Some(ino) = node_of(p) {
            let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
        }
    }
    for ino in inodes {
        let _ = notifier.inval_inode(fuser::INodeNo(*ino), 0, 0);
    }
}
