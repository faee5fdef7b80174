//! `.agx/daemon`: the daemon's record of itself in the project, so that a daemon that
//! stopped without `agx unmount` (killed, crashed, the machine restarted, or its mount
//! removed by `fusermount3 -u` / `umount`) is reported by the next agx command on the
//! project: from that moment until the next mount, changes reach the bare directory and
//! agx does not record them.
//!
//! Life of the file:
//! - the daemon writes it (through its `.agx` descriptor) once its mount is up, before it
//!   reports ready, and rewrites it whenever the set of open sessions changes;
//! - a stop agx asked for (`agx unmount`, or SIGTERM/SIGINT/SIGHUP from outside any agent
//!   session: see `stop`) removes it;
//! - any other end of `session.run()` (an unmount from outside agx, an error) rewrites it
//!   with `ended` and keeps it;
//! - a daemon killed leaves it as it was: its pid is then gone, or another process's (the
//!   start time tells), or from an earlier boot.
//!
//! Every command reads it when no daemon serves the project ([`interrupted`]) and warns in
//! one line; the next successful mount reports it once and replaces it with its own. It
//! lives in `.agx/` (hidden and unwritable through an in-place mount), so an agent cannot
//! remove it while agx runs; once it has stopped agx and unmounted, an agent of the same
//! user can (README, threat model).

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::attribution::proc;
use crate::sys::path::AGX_DIR_NAME;

/// The file's name in `.agx/`.
pub const FILE: &str = "daemon";

/// A session open while the daemon ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenSession {
    pub id: String,
    pub agent: Option<String>,
    pub name: Option<String>,
}

/// What `.agx/daemon` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub pid: u32,
    /// The daemon's start time (clock ticks after boot) and the boot it ran in: with the
    /// pid they tell the daemon from a later process that has its pid.
    pub start: u64,
    pub boot_id: String,
    pub project: PathBuf,
    pub mountpoint: PathBuf,
    pub since_ns: i64,
    /// The sessions open when the record was last written.
    #[serde(default)]
    pub sessions: Vec<OpenSession>,
    /// How the daemon stopped when agx did not ask it to, written as it stopped ("unmounted
    /// from outside agx"); None while it runs, and for a daemon that was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ns: Option<i64>,
}

/// A daemon that stopped without `agx unmount`, as commands report it.
#[derive(Clone, Debug, Serialize)]
pub struct Interrupted {
    /// The daemon's pid (it may belong to another process by now).
    pub pid: u32,
    pub mountpoint: PathBuf,
    /// When it started serving (RFC 3339).
    pub since: String,
    /// "killed" (it died without a word: SIGKILL, a crash, a restart of the machine), or
    /// what it wrote as it stopped ("unmounted from outside agx", ...).
    pub how: String,
    /// When it stopped, when known (RFC 3339).
    pub at: Option<String>,
    /// The last change agx recorded (RFC 3339): a killed daemon stopped after it.
    pub last_change: Option<String>,
    /// The sessions that were open.
    pub sessions: Vec<OpenSession>,
    /// The one-line warning.
    pub message: String,
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn rfc3339(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn local(ns: i64) -> String {
    use chrono::{Local, TimeZone};
    Local
        .timestamp_nanos(ns)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

fn now_ns() -> i64 {
    crate::sys::now_ns()
}

/// Writes `rec` as `.agx/daemon` atomically (temporary name, then rename), through the
/// `.agx` descriptor.
fn write_at(agx: impl AsFd, rec: &DaemonRecord) -> std::io::Result<()> {
    let tmp = format!("{FILE}.tmp");
    let fd = rustix::fs::openat(
        &agx,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o600),
    )?;
    let mut f = std::fs::File::from(fd);
    let mut text = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
    text.push(b'\n');
    f.write_all(&text)?;
    // A killed daemon's record must survive a crash of the machine that follows.
    f.sync_all()?;
    rustix::fs::renameat(&agx, tmp.as_str(), &agx, FILE)?;
    Ok(())
}

/// The record in the project directory `project` (read by path: on a project not served
/// in place, where `.agx/` is the real one).
pub fn read(project: &Path) -> Option<DaemonRecord> {
    let text = std::fs::read_to_string(project.join(AGX_DIR_NAME).join(FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Whether the daemon a record describes is still running.
fn running(rec: &DaemonRecord) -> bool {
    rec.ended.is_none()
        && crate::control::pid_alive(rec.pid)
        && proc::start_time(rec.pid) == Some(rec.start)
        && boot_id() == rec.boot_id
}

/// The time of the last recorded change, read from the timeline (without taking the
/// project's lock: the command that follows takes it).
fn last_change_ns(project: &Path) -> Option<i64> {
    let agx = project.join(AGX_DIR_NAME);
    if !agx.join("timeline.db").exists() {
        return None;
    }
    let dir = rustix::fs::open(
        &agx,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let tl = crate::timeline::Timeline::open_in(&dir).ok()?;
    let last = tl.max_seq().ok()?;
    tl.get(last).ok()?.map(|e| e.time_ns)
}

fn sessions_text(s: &[OpenSession]) -> String {
    let one = |s: &OpenSession| {
        let mut t = s.id.clone();
        match (&s.agent, &s.name) {
            (Some(a), Some(n)) => t.push_str(&format!(" ({a}, {n})")),
            (Some(a), None) => t.push_str(&format!(" ({a})")),
            (None, Some(n)) => t.push_str(&format!(" ({n})")),
            (None, None) => {}
        }
        t
    };
    match s {
        [] => "no agent session was open".into(),
        [x] => format!("session {} was open", one(x)),
        xs => format!(
            "sessions {} were open",
            xs.iter().map(one).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The daemon of `project` that stopped without `agx unmount`, if its record says so.
/// Looks in `project` and its ancestors, up to the first that has a `.agx` directory.
pub fn interrupted(project: &Path) -> Option<Interrupted> {
    let mut dir = None;
    for a in project.ancestors() {
        match std::fs::symlink_metadata(a.join(AGX_DIR_NAME)) {
            Ok(md) if md.is_dir() => {
                dir = Some(a);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Not a directory, or unreadable (a dead mount): nothing to say from here.
            _ => return None,
        }
    }
    let dir = dir?;
    let rec = read(dir)?;
    if running(&rec) {
        return None;
    }
    let last = last_change_ns(dir);
    let sessions = sessions_text(&rec.sessions);
    let (how, message) = match &rec.ended {
        Some(how) => (
            how.clone(),
            format!(
                "{} was {how} at {} (daemon pid {}), not by `agx unmount`, while {sessions}: changes made since were not recorded by agx",
                rec.mountpoint.display(),
                rec.ended_ns.map(local).unwrap_or_else(|| "?".into()),
                rec.pid
            ),
        ),
        None => (
            "killed".to_string(),
            format!(
                "the agx daemon (pid {}) serving {} since {} stopped without `agx unmount` (killed, crashed or the machine restarted; {}) while {sessions}: changes made since were not recorded by agx",
                rec.pid,
                rec.mountpoint.display(),
                local(rec.since_ns),
                match last {
                    Some(t) => format!("the last change it recorded was at {}", local(t)),
                    None => "it recorded no change".into(),
                }
            ),
        ),
    };
    Some(Interrupted {
        pid: rec.pid,
        mountpoint: rec.mountpoint.clone(),
        since: rfc3339(rec.since_ns),
        how,
        at: rec.ended_ns.map(rfc3339),
        last_change: last.map(rfc3339),
        sessions: rec.sessions,
        message,
    })
}

/// Prints the warning for `project` on stderr, if there is one.
pub fn warn(project: &Path) {
    if let Some(i) = interrupted(project) {
        eprintln!("agx: warning: {}", i.message);
    }
}

/// This daemon's record while it runs.
struct Live {
    agx: OwnedFd,
    rec: Mutex<DaemonRecord>,
}

static LIVE: OnceLock<Live> = OnceLock::new();

/// Whether this process is a daemon with a record.
pub fn active() -> bool {
    LIVE.get().is_some()
}

/// Writes this daemon's record (replacing a previous daemon's) through `agx`, the
/// project's `.agx` descriptor.
pub fn start(
    agx: &OwnedFd,
    project: &Path,
    mountpoint: &Path,
    sessions: Vec<OpenSession>,
) -> std::io::Result<()> {
    let pid = std::process::id();
    let rec = DaemonRecord {
        pid,
        start: proc::start_time(pid).unwrap_or(0),
        boot_id: boot_id(),
        project: project.to_path_buf(),
        mountpoint: mountpoint.to_path_buf(),
        since_ns: now_ns(),
        sessions,
        ended: None,
        ended_ns: None,
    };
    write_at(agx, &rec)?;
    let agx = rustix::io::dup(agx)?;
    let _ = LIVE.set(Live {
        agx,
        rec: Mutex::new(rec),
    });
    Ok(())
}

/// The sessions open now: rewritten only when they changed.
pub fn set_sessions(open: Vec<OpenSession>) {
    let Some(live) = LIVE.get() else { return };
    let mut rec = live.rec.lock().unwrap_or_else(|e| e.into_inner());
    if rec.sessions == open || rec.ended.is_some() {
        return;
    }
    rec.sessions = open;
    if let Err(e) = write_at(&live.agx, &rec) {
        log::warn!("could not update .agx/{FILE}: {e}");
    }
}

/// A stop agx asked for: the record goes.
pub fn finish_clean() {
    let Some(live) = LIVE.get() else { return };
    let _rec = live.rec.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = rustix::fs::unlinkat(&live.agx, FILE, rustix::fs::AtFlags::empty()) {
        log::warn!("could not remove .agx/{FILE}: {e}");
    }
}

/// Any other stop: the record stays, saying how (`how`, e.g. "unmounted from outside
/// agx") and when.
pub fn finish_unclean(how: &str) {
    let Some(live) = LIVE.get() else { return };
    let mut rec = live.rec.lock().unwrap_or_else(|e| e.into_inner());
    rec.ended = Some(how.to_string());
    rec.ended_ns = Some(now_ns());
    log::warn!("stopping: {how}; changes made from now on are not recorded until the next mount");
    if let Err(e) = write_at(&live.agx, &rec) {
        log::warn!("could not update .agx/{FILE}: {e}");
    }
}
