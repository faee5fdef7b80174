//! Who made a change: the caller's thread id (what FUSE reports) -> its process (thread
//! group) id, name and executable, read from /proc and cached by (thread id, start time) so
//! a recycled id is never mistaken for the thread that had it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::timeline::Actor;

/// The start time of a process (field 22 of /proc/PID/stat), which tells a recycled pid
/// from the process that had it before.
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

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
    Actor { pid, process, exe }
}

#[derive(Default)]
pub struct Attributor {
    /// pid -> (start time, when it was last checked, actor).
    cache: Mutex<HashMap<u32, (u64, Instant, Actor)>>,
}

/// How long a cached pid is trusted without re-reading its start time. A pid cannot be
/// recycled this fast: the kernel hands out every other pid first.
const RECHECK: Duration = Duration::from_millis(500);

/// Above this many cached processes the cache starts over.
const CACHE_LIMIT: usize = 4096;

impl Attributor {
    pub fn actor(&self, pid: u32) -> Actor {
        if pid == 0 {
            return Actor::default();
        }
        let now = Instant::now();
        {
            let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, checked, a)) = c.get(&pid) {
                if now.duration_since(*checked) < RECHECK {
                    return a.clone();
                }
            }
        }
        let st = start_time(pid).unwrap_or(0);
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((t, checked, a)) = c.get_mut(&pid) {
            if *t == st {
                *checked = now;
                return a.clone();
            }
        }
        let a = read_actor(pid);
        if c.len() >= CACHE_LIMIT {
            c.clear();
        }
        c.insert(pid, (st, now, a.clone()));
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
