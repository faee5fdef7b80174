//! Mounting and unmounting a project: validation, stale-mount recovery, the daemon's life
//! (foreground or detached), and `status`.

pub mod branchmount;
pub mod error;
mod fusermount;
pub mod gitexclude;
pub mod mountinfo;
pub mod procs;
pub mod record;
mod session;
pub mod stale;
mod status;
pub mod stop;
mod unmount;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use rustix::fs::{Mode, OFlags};

pub use error::MountError;
use session::threads;
pub(crate) use session::{invalidate, open_session};
pub use stale::{Health, Recovered};
pub use status::{status, Status};
pub use unmount::{unmount, UnmountError};

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
    /// Dead mounts (of a killed daemon) removed to make way for this one.
    pub recovered: Vec<Recovered>,
    /// The previous daemon stopped without `agx unmount` (`record`): reported by this
    /// mount, whose daemon then replaces the record with its own.
    pub interrupted: Option<record::Interrupted>,
}

pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The canonical form of a directory given on the command line. A dead agx mount there
/// is an error naming the way out: removing it here would let the project's writers reach
/// the bare directory unrecorded, so only `agx mount` (which replaces it at once) and
/// `agx unmount` remove one.
pub fn resolve_dir(p: &Path) -> Result<PathBuf, MountError> {
    let canon = stale::locate(p)?;
    if stale::health(&canon) == Health::Dead {
        return Err(dead_mount(&canon));
    }
    check_dir(&canon)?;
    Ok(canon)
}

fn dead_mount(dir: &Path) -> MountError {
    MountError::DeadMount {
        dir: dir.to_path_buf(),
        daemon: match stale::recorded_pid(dir) {
            Some(pid) => format!("daemon (pid {pid})"),
            None => "daemon".into(),
        },
    }
}

fn check_dir(canon: &Path) -> Result<(), MountError> {
    match std::fs::metadata(canon) {
        Ok(md) if md.is_dir() => Ok(()),
        Ok(_) => Err(MountError::NotADirectory(canon.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(MountError::NotFound(canon.to_path_buf()))
        }
        // Below a dead mount (not at its root).
        Err(e) if stale::is_disconnected(&e) => Err(dead_mount(canon)),
        Err(e) => Err(MountError::io(canon.display().to_string(), e)),
    }
}

/// Like [`resolve_dir`] for a directory about to be mounted on: a dead agx mount there is
/// removed (and reported in `recovered`), since the new mount takes its place at once.
fn resolve_for_mount(p: &Path, recovered: &mut Vec<Recovered>) -> Result<PathBuf, MountError> {
    let canon = stale::locate(p)?;
    if stale::health(&canon) == Health::Dead {
        recovered.push(stale::remove(&canon)?);
    }
    check_dir(&canon)?;
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

/// Whether agx has served `project` and not cleanly stopped: a state file names it, with
/// a live daemon or a dead one (whose mount may still be there).
pub fn known(project: &Path) -> bool {
    control::paths(project).is_ok_and(|p| control::read_state(&p.state).is_some())
}

pub fn prepare(req: &MountRequest) -> Result<Prepared, MountError> {
    let mut recovered = Vec::new();
    let project = resolve_for_mount(&req.dir, &mut recovered)?;
    let mountpoint = match &req.at {
        Some(at) => resolve_for_mount(at, &mut recovered)?,
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
    let interrupted = record::interrupted(&project);
    Ok(Prepared {
        project,
        mountpoint,
        allow_other,
        state_path: paths.state,
        log_path: paths.log,
        recovered,
        interrupted,
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

/// Raises the descriptor limit: the more descriptors the daemon may hold, the fewer cached
/// inodes it must reopen by name (see `fs/descriptors.rs`). With CAP_SYS_RESOURCE (root) the hard limit goes up to the kernel's `fs.nr_open` (at
/// most 2^20); otherwise the soft limit goes up to the hard one.
///
/// `AGX_MAX_FDS=N` instead sets the soft limit to N (at most the hard limit) and leaves the
/// hard one alone: to share a machine, or to test how the daemon lives within few
/// descriptors. Default unset. Safe at any value from 256: the daemon keeps a quarter of
/// its limit for open files and releases cached inodes' descriptors to stay within it.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    const CEILING: u64 = 1 << 20;
    let cur = getrlimit(Resource::Nofile);
    if let Some(n) = std::env::var("AGX_MAX_FDS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        let n = cur.maximum.map_or(n, |m| n.min(m)).max(64);
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(n),
                maximum: cur.maximum,
            },
        );
        return;
    }
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
    // First of all: not dumpable. Processes of the daemon's user (the agent's, usually)
    // can then no longer open /proc/DAEMON/fd/* (the bare project under the mount and
    // `.agx/` itself), cwd, root, map_files, environ or mem, nor ptrace it; the daemon's own
    // /proc/self/fd reopens are unaffected (same thread group). The flag survives as long
    // as the daemon neither execs nor changes credentials, which it never does.
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        log::warn!("could not make the daemon non-dumpable: {e}");
    }
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
    // Capture and history: recovers what a killed daemon left, before anything is served.
    let engine_root = rustix::io::dup(&root)
        .map_err(|e| MountError::io("duplicating the project handle", e.into()))?;
    let engine = Arc::new(
        Engine::open_with(
            engine_root,
            &p.project.display().to_string(),
            crate::control::engine::Opening {
                check_integrity: true,
                tolerate_loss: false,
            },
        )
        .map_err(|e| MountError::MountFailed {
            dir: p.project.clone(),
            reason: e.to_string(),
        })?,
    );

    if let Err(e) = engine.exclude_from_git() {
        log::warn!("could not add .agx/ to .git/info/exclude: {e}");
    }

    let mut cfg = FsConfig::default();
    if std::env::var("AGX_PASSTHROUGH").is_ok_and(|v| v == "0") {
        cfg.passthrough = false;
    }
    if std::env::var("AGX_CAPTURE").is_ok_and(|v| v == "0") {
        log::warn!("AGX_CAPTURE=0: changes are not recorded (plain mount, for measurements)");
        cfg.capture = false;
    }
    let report = Arc::new(Mutex::new(None));
    let views = crate::fs::open_views(&engine.root, &engine.agx, engine.recorder.clone());
    let branches = views.as_ref().and_then(|v| {
        let sync = engine.recorder.config().fsync == crate::capture::config::Fsync::Always;
        match crate::branches::Branches::new(&engine.agx, v.clone(), sync) {
            Ok(b) => Some(Arc::new(b)),
            Err(e) => {
                log::warn!("branches unavailable: {e}");
                None
            }
        }
    });
    if let Some(b) = &branches {
        engine.set_branches(b.clone());
    }
    let fs = AgxFs::new(
        root,
        cfg,
        engine.recorder.clone(),
        engine.attrib.clone(),
        report.clone(),
        crate::fs::Trees {
            views,
            branches: branches.clone(),
            root_branch: None,
        },
    )
    .map_err(|e| MountError::io(p.project.display().to_string(), e))?;
    let fs_notifier = fs.notifier_slot();
    // Commands that name "now" first wait for releases on their way (`fs::settle`). The
    // callers' descriptors show the mountpoint as the kernel resolves it.
    let seen_at = std::fs::canonicalize(&p.mountpoint).unwrap_or_else(|_| p.mountpoint.clone());
    engine.recorder.set_settle(fs.settler(seen_at));

    let session = open_session(fs, &p.mountpoint, p.allow_other)?;
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
    if let Some(i) = &p.interrupted {
        log::warn!("previous daemon: {}", i.message);
    }
    // Written before "ready": a daemon killed from now on is reported by the next command.
    if let Err(e) = record::start(&engine.agx, &p.project, &p.mountpoint, Vec::new()) {
        log::warn!("could not write .agx/{}: {e}", record::FILE);
    }
    engine.note_open_sessions();
    stop::serving(&p.mountpoint);

    let notifier = session.notifier();
    let _ = fs_notifier.set(notifier.clone());
    let inval_root = rustix::io::dup(&engine.root)
        .map_err(|e| MountError::io("duplicating the project handle", e.into()))?;
    engine.set_restore_hook(Box::new(move |branch_root, paths, inodes| {
        match branch_root {
            None => invalidate(&notifier, &inval_root, 1, paths, inodes),
            // A branch's nodes are numbered by their backing inodes, its root too.
            Some(r) => {
                if let Ok(st) = rustix::fs::fstat(r) {
                    invalidate(&notifier, r, st.st_ino, paths, inodes)
                }
            }
        }
    }));
    // Branches served at mountpoints of their own, by this daemon.
    let branch_mounts = branches.as_ref().map(|b| {
        branchmount::BranchMounts::new(
            p.project.clone(),
            engine.recorder.clone(),
            engine.attrib.clone(),
            b.clone(),
            p.allow_other,
        )
    });
    if let Some(m) = &branch_mounts {
        engine.set_mounter(Box::new(branchmount::Handle(m.clone())));
    }
    if let Some(b) = &branches {
        let notifier = session.notifier();
        b.set_on_change(Box::new(move |names| {
            for n in names {
                let _ = notifier.inval_entry(
                    fuser::INodeNo(crate::ids::NodeId::BRANCHES_DIR.0),
                    std::ffi::OsStr::new(n),
                );
            }
        }));
    }
    if let Err(e) = engine.record_mount() {
        log::warn!("could not record the mount in the timeline: {e}");
    }
    // Changes made while nothing was mounted become history now, in the background:
    // mounting stays O(1), and what needs them first (a view, a checkpoint) waits.
    {
        let rec = engine.recorder.clone();
        let _ = std::thread::Builder::new()
            .name("agx-sweep".into())
            .spawn(move || rec.sweep());
    }
    let socket = control::paths(&p.project)?.socket;
    let _server = control::server::start(&socket, engine.clone())
        .map_err(|e| MountError::io(format!("control socket {}", socket.display()), e))?;

    // Unmount cleanly on SIGTERM, SIGINT and SIGHUP (unless an agent session sent them).
    stop::watch_signals(&p.mountpoint, engine.clone())
        .map_err(|e| MountError::io("installing signal handlers", e))?;

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
    if let Some(m) = &branch_mounts {
        m.stop_all();
    }
    match stop::outcome(&res) {
        None => record::finish_clean(),
        Some(how) => record::finish_unclean(&how),
    }
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
