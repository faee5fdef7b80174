//! Whether a process is part of an agent session, for the commands that destroy history or
//! stop recording (`gc`, `checkpoint delete`, `unpin`, `unmount`, later `branch delete`):
//! invariant 3 refuses them to every process descending from an agent session, ended or
//! not, whatever its environment. [`evidence`] is the one check they all call.
//!
//! The environment and the parent chain alone cannot carry that: an agent can scrub its
//! environment (`env -u AGX_SESSION`) and leave the tree (`setsid -f`, a double fork whose
//! orphan init adopts once `agx run` has exited). So agx also leaves a mark an unprivileged
//! process can neither drop nor forge away: the **hard limit of RLIMIT_RTTIME**.
//!
//! - It is inherited across fork, exec and setsid, by everything an agent starts.
//! - Only CAP_SYS_RESOURCE in the initial user namespace raises a hard limit: a user
//!   namespace does not give it (`prlimit`/`setrlimit` check `capable()`, not
//!   `ns_capable()`), a root agent does.
//! - Its default is RLIM_INFINITY, and the value agx sets ([`MARK`], 2^62 µs, about
//!   146,000 years of realtime CPU without a blocking call) never triggers; the limit only
//!   concerns SCHED_FIFO/SCHED_RR threads anyway.
//! - `prlimit(2)` sets it on another process of the same user without any ptrace right,
//!   so the daemon (root or the agent's user) marks a hook session's agent process.
//!
//! A process is in an agent session when it or an ancestor carries a finite RTTIME hard
//! limit, or is the root process (pid and start time) of any session ever recorded, or has
//! `AGX_SESSION` in its environment; the daemon adds its own attribution.

use std::collections::HashMap;

use super::proc;
use super::registry::ENV_SESSION;
use crate::ids::SessionId;

/// The RLIMIT_RTTIME value agx sets (soft and hard), in microseconds: finite, so it marks,
/// and so large that no realtime thread ever reaches it. A different finite value found on
/// a process means some other party lowered the limit (a login's limits.conf `rttime`, or
/// the agent itself): it counts all the same, and the refusal says which it was.
pub const MARK: u64 = 1 << 62;

/// How far up the process tree the check looks.
const MAX_DEPTH: usize = 256;

/// (soft, hard) RLIMIT_RTTIME of process `pid` from /proc/PID/limits (readable by anyone,
/// whatever the process's dumpable flag); None for "unlimited".
pub fn rttime(pid: u32) -> Option<(Option<u64>, Option<u64>)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Max realtime timeout"))?;
    let mut f = line["Max realtime timeout".len()..].split_whitespace();
    let v = |t: &str| -> Option<Option<u64>> {
        if t == "unlimited" {
            Some(None)
        } else {
            t.parse().ok().map(Some)
        }
    };
    let soft = v(f.next()?)?;
    let hard = v(f.next()?)?;
    Some((soft, hard))
}

/// Marks process `pid` (this process with `None`) as an agent session's: lowers its
/// RLIMIT_RTTIME hard (and soft) limit to [`MARK`] unless it is lower already. Allowed on
/// a process of the same real and effective ids, or by root.
pub fn mark(pid: Option<u32>) -> std::io::Result<()> {
    use rustix::process::{prlimit, Pid, Resource, Rlimit};
    let target = pid.unwrap_or_else(std::process::id);
    let (soft, hard) = rttime(target).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("cannot read the limits of process {target}"),
        )
    })?;
    let new_hard = hard.map_or(MARK, |h| h.min(MARK));
    let new_soft = soft.map_or(new_hard, |s| s.min(new_hard));
    if hard == Some(new_hard) && soft == Some(new_soft) {
        return Ok(());
    }
    let pid = match pid {
        Some(p) => Some(
            Pid::from_raw(p as i32)
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "pid 0"))?,
        ),
        None => None,
    };
    prlimit(
        pid,
        Resource::Rttime,
        Rlimit {
            current: Some(new_soft),
            maximum: Some(new_hard),
        },
    )?;
    Ok(())
}

/// Marks `root` and every process descending from it now (an agent found by a hook may
/// have started helpers before the hook ran; processes it starts later inherit the mark).
/// The root's result is returned; descendants are best effort.
pub fn mark_tree(root: u32) -> std::io::Result<()> {
    // Never init (a root daemon would mark every service started from then on) nor the
    // process doing the marking (the daemon: it is no agent's).
    if root <= 1 || root == std::process::id() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("process {root} is not marked as an agent session's"),
        ));
    }
    mark(Some(root))?;
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for pid in rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
            if let Some((ppid, _)) = proc::parent_and_start(pid) {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut todo = children.remove(&root).unwrap_or_default();
    let mut n = 0;
    while let Some(p) = todo.pop() {
        n += 1;
        if n > 100_000 {
            break;
        }
        if let Err(e) = mark(Some(p)) {
            log::debug!("could not mark process {p} of session root {root}: {e}");
        }
        todo.extend(children.remove(&p).unwrap_or_default());
    }
    Ok(())
}

/// Why a process counts as part of an agent session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// The process or an ancestor is the root process of a recorded session.
    Root {
        pid: u32,
        comm: String,
        session: SessionId,
    },
    /// The process's or an ancestor's environment names a session.
    Env {
        pid: u32,
        comm: String,
        value: String,
    },
    /// The process carries a finite RLIMIT_RTTIME hard limit; `pid` is the furthest
    /// ancestor that carries it (where it was set, or inherited from).
    Marked { pid: u32, comm: String, limit: u64 },
    /// The daemon attributes the process to a session.
    Attributed { session: String },
    /// The process is gone (or /proc hides it): it cannot be vouched for.
    Gone { pid: u32 },
}

/// Whether process `pid` is part of an agent session, and why. `root_of` names the
/// session whose root process is (pid, start time), over every session ever recorded.
/// None: it is not (as far as agx can tell; see the README's threat model).
pub fn evidence(pid: u32, root_of: &dyn Fn(u32, u64) -> Option<SessionId>) -> Option<Evidence> {
    let Some((mut ppid, mut start)) = proc::parent_and_start(pid) else {
        return Some(Evidence::Gone { pid });
    };
    let comm = |p: u32| proc::comm(p).unwrap_or_else(|| "?".into());
    let mut env = None;
    let mut marked = None;
    let mut p = pid;
    for _ in 0..MAX_DEPTH {
        if let Some(session) = root_of(p, start) {
            return Some(Evidence::Root {
                pid: p,
                comm: comm(p),
                session,
            });
        }
        if env.is_none() {
            if let Some(value) = proc::env_var(p, ENV_SESSION) {
                env = Some(Evidence::Env {
                    pid: p,
                    comm: comm(p),
                    value,
                });
            }
        }
        if let Some((_, Some(limit))) = rttime(p) {
            marked = Some(Evidence::Marked {
                pid: p,
                comm: comm(p),
                limit,
            });
        }
        if ppid == 0 {
            break;
        }
        p = ppid;
        match proc::parent_and_start(p) {
            Some((pp, st)) => (ppid, start) = (pp, st),
            None => break,
        }
    }
    env.or(marked)
}

/// The one-line refusal of command `what` (e.g. "agx gc") to process `caller`, for `e`.
pub fn refusal(what: &str, caller: u32, e: &Evidence) -> String {
    let who = |pid: u32, comm: &str| {
        if pid == caller {
            format!("this process ({pid}, {comm})")
        } else {
            format!("process {pid} ({comm}), an ancestor of this command,")
        }
    };
    let outside = "run it from a shell outside any agent session";
    match e {
        Evidence::Gone { pid } => format!(
            "{what} is refused: process {pid}, which asked for it, exited before agx could tell whether it belongs to an agent session"
        ),
        Evidence::Attributed { session } => format!(
            "{what} is refused inside an agent session (this process belongs to session {session}); {outside}"
        ),
        Evidence::Root { pid, comm, session } => format!(
            "{what} is refused inside an agent session: {} is the root process of session {session} (ended or not, everything below it stays barred); {outside}",
            who(*pid, comm)
        ),
        Evidence::Env { pid, comm, value } => format!(
            "{what} is refused inside an agent session: {} has {ENV_SESSION}={value} in its environment; {outside}",
            who(*pid, comm)
        ),
        Evidence::Marked { pid, comm, limit } if *limit == MARK => format!(
            "{what} is refused inside an agent session: {} carries agx's session mark (the RLIMIT_RTTIME hard limit `agx run` and agent hooks set, inherited by everything an agent starts and never removable without root); {outside}",
            who(*pid, comm)
        ),
        Evidence::Marked { pid, comm, limit } => format!(
            "{what} is refused inside an agent session: {} has a finite realtime-timeout hard limit ({limit} us), which agx takes as an agent session's mark; {outside} (if your own login sets that limit, e.g. `rttime` in limits.conf, run it from a login where `prlimit --rttime` shows it unlimited)",
            who(*pid, comm)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_limits() {
        let (soft, hard) = rttime(std::process::id()).unwrap();
        if let (Some(s), Some(h)) = (soft, hard) {
            assert!(s <= h);
        }
    }

    #[test]
    fn a_gone_process_is_not_vouched_for() {
        assert_eq!(
            evidence(u32::MAX / 2, &|_, _| None),
            Some(Evidence::Gone { pid: u32::MAX / 2 })
        );
    }

    #[test]
    fn a_root_anywhere_above_counts() {
        let me = std::process::id();
        let start = proc::start_time(me).unwrap();
        let found = evidence(me, &|p, s| (p == me && s == start).then_some(SessionId(7)));
        assert!(
            matches!(found, Some(Evidence::Root { pid, session: SessionId(7), .. }) if pid == me)
        );
    }
}
