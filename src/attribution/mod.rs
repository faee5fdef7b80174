//! Who made a change: the caller's thread id (what FUSE reports) -> its process (thread
//! group) id, name and executable, and the agent session it belongs to, read from /proc
//! and cached by (thread id, start time) so a recycled id is never mistaken for the thread
//! that had it.

pub mod agent;
pub mod proc;
pub mod registry;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use registry::{Registry, ENV_SESSION};

use crate::timeline::Actor;
use proc::start_time;

/// The process (thread group) a thread belongs to: FUSE reports the calling thread's id.
fn tgid(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(tid)
}

fn read_actor(tid: u32) -> Actor {
    let pid = tgid(tid);
    let process = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    Actor {
        pid,
        process,
        exe,
        ..Actor::default()
    }
}

/// A cached attribution: the process's start time, when it was last checked, the
/// registry generation its session was resolved at, and the actor.
struct Cached {
    start: u64,
    checked: Instant,
    gen: u64,
    actor: Actor,
}

#[derive(Default)]
pub struct Attributor {
    cache: Mutex<HashMap<u32, Cached>>,
    sessions: Arc<Registry>,
}

/// How long a cached pid is trusted without re-reading its start time. A pid cannot be
/// recycled this fast: the kernel hands out every other pid first.
const RECHECK: Duration = Duration::from_millis(500);

/// Above this many cached processes the cache starts over.
const CACHE_LIMIT: usize = 4096;

impl Attributor {
    pub fn new(sessions: Arc<Registry>) -> Attributor {
        Attributor {
            cache: Mutex::default(),
            sessions,
        }
    }

    pub fn sessions(&self) -> &Arc<Registry> {
        &self.sessions
    }

    /// The process behind thread `pid`, with its session and the session's current tool
    /// call.
    pub fn actor(&self, pid: u32) -> Actor {
        if pid == 0 {
            return Actor::default();
        }
        let mut a = self.process(pid);
        if let Some(s) = &a.session {
            a.tool_call = s
                .parse()
                .ok()
                .and_then(|id| self.sessions.tool_call(crate::ids::SessionId(id)));
        }
        a
    }

    fn process(&self, pid: u32) -> Actor {
        let now = Instant::now();
        let gen = self.sessions.generation();
        {
            let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = c.get(&pid) {
                if now.duration_since(e.checked) < RECHECK && e.gen == gen {
                    return e.actor.clone();
                }
            }
        }
        let st = start_time(pid).unwrap_or(0);
        {
            let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = c.get_mut(&pid) {
                if e.start == st && e.gen == gen {
                    e.checked = now;
                    return e.actor.clone();
                }
            }
        }
        let mut a = read_actor(pid);
        // Sessions claim by thread group: resolve from the process, not the thread.
        a.session = self.sessions.resolve(a.pid).map(|s| s.to_string());
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.len() >= CACHE_LIMIT {
            c.clear();
        }
        c.insert(
            pid,
            Cached {
                start: st,
                checked: now,
                gen,
                actor: a.clone(),
            },
        );
        a
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_resolves_to_its_process() {
        let me = std::process::id();
        // A live thread of this process, waiting until the check is done.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                .unwrap();
            let _ = done_rx.recv();
        });
        let live = rx.recv().unwrap();
        assert_ne!(live, me);
        let a = super::Attributor::default().actor(live);
        assert_eq!(a.pid, me);
        done_tx.send(()).unwrap();
        h.join().unwrap();
    }

    #[test]
    fn resolves_this_process() {
        let a = super::Attributor::default().actor(std::process::id());
        assert_eq!(a.pid, std::process::id());
        assert!(!a.process.is_empty());
        assert!(a.exe.contains("agx") || !a.exe.is_empty());
    }
}
