//! How a daemon's mount ends, and whether agx asked for it. `agx unmount` asks the daemon
//! over its control socket and the daemon unmounts itself (after refusing an agent
//! session's request, as for gc); SIGTERM, SIGINT and SIGHUP unmount too, unless an agent
//! session sent them. Any other end of the mount (`fusermount3 -u` or `umount` by
//! someone, an error) was not asked for, and `.agx/daemon` keeps saying so (`record`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::{fusermount, is_root, procs, MountError};
use crate::control::engine::Engine;

/// Whether the stop that comes was asked for, and if it was not clean, what to say.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Asked {
    No,
    Clean,
    /// Asked for in a way that cannot be vouched for (a signal whose sender was gone
    /// before it could be checked): kept in the record as this.
    Unclean(String),
}

static ASKED: Mutex<Asked> = Mutex::new(Asked::No);
static MOUNTPOINT: OnceLock<PathBuf> = OnceLock::new();

fn set(a: Asked) {
    *ASKED.lock().unwrap_or_else(|e| e.into_inner()) = a;
}

/// The daemon serves `mp`: `unmount_requested` unmounts it.
pub fn serving(mp: &Path) {
    let _ = MOUNTPOINT.set(mp.to_path_buf());
}

/// How the mount ended, once `session.run()` returned: None for a stop agx asked for
/// (the record goes), else what the record keeps.
pub fn outcome(run: &std::io::Result<()>) -> Option<String> {
    let asked = ASKED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match (asked, run) {
        (_, Err(e)) => Some(format!("stopped by an error ({e})")),
        (Asked::Clean, Ok(())) => None,
        (Asked::Unclean(how), Ok(())) => Some(how),
        (Asked::No, Ok(())) => Some("unmounted from outside agx".into()),
    }
}

fn unmount_at(mp: &Path, lazy: bool) -> Result<(), MountError> {
    if !is_root() {
        // Mounted through fusermount3, which must unmount it too.
        return fusermount::unmount(mp, lazy);
    }
    let flags = if lazy {
        rustix::mount::UnmountFlags::DETACH
    } else {
        rustix::mount::UnmountFlags::empty()
    };
    match rustix::mount::unmount(mp, flags) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::BUSY) => Err(MountError::Busy {
            dir: mp.to_path_buf(),
            procs: procs::list(&procs::using(mp)),
        }),
        Err(e) => Err(MountError::UnmountFailed {
            dir: mp.to_path_buf(),
            reason: std::io::Error::from(e).to_string(),
        }),
    }
}

/// `agx unmount`, in the daemon (the caller was checked): unmounts this daemon's mount,
/// lazily with `lazy`. A busy mount stays, and so does the daemon.
pub fn unmount_requested(lazy: bool) -> Result<(), MountError> {
    let Some(mp) = MOUNTPOINT.get() else {
        return Err(MountError::UnmountFailed {
            dir: PathBuf::new(),
            reason: "this agx process serves no mount".into(),
        });
    };
    set(Asked::Clean);
    let r = unmount_at(mp, lazy);
    if r.is_err() {
        set(Asked::No);
    }
    r
}

fn signal_name(sig: i32) -> String {
    signal_hook::low_level::signal_name(sig)
        .map(String::from)
        .unwrap_or_else(|| format!("signal {sig}"))
}

/// Unmounts on SIGTERM, SIGINT and SIGHUP, except when the sender is part of an agent
/// session (checked as for gc): then the signal is ignored and logged, and recording goes
/// on. A sender that is gone before it can be checked still stops the daemon, and the
/// record keeps saying so.
pub fn watch_signals(mp: &Path, engine: Arc<Engine>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::iterator::SignalsInfo;
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGTERM, SIGINT, SIGHUP])?;
    let mp = mp.to_path_buf();
    std::thread::Builder::new()
        .name("agx-signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let name = signal_name(origin.signal);
                let verdict = origin.process.map(|p| {
                    let pid = p.pid as u32;
                    (pid, engine.agent_evidence(pid))
                });
                match verdict {
                    Some((pid, Some(crate::attribution::agent::Evidence::Gone { .. }))) => {
                        set(Asked::Unclean(format!(
                            "stopped by {name} from process {pid} (gone before agx could tell whether it was an agent's)"
                        )))
                    }
                    Some((pid, Some(e))) => {
                        log::warn!(
                            "{name} from process {pid} ignored: {}",
                            crate::attribution::agent::refusal("stopping agx", pid, &e)
                        );
                        continue;
                    }
                    // The kernel (a terminal's hangup or ^C), or a process outside any
                    // agent session.
                    _ => set(Asked::Clean),
                }
                log::info!("{name}: unmounting {}", mp.display());
                if let Err(e) = unmount_at(&mp, false) {
                    log::warn!("unmount on {name} failed ({e}); detaching");
                    let _ = unmount_at(&mp, true);
                }
                break;
            }
        })?;
    Ok(())
}
