//! The sessions the daemon attributes processes to: each open session's root process
//! (pid and start time) and its current tool call. Shared by the FUSE front (attributing
//! every mutation) and the control plane (starting and ending sessions).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use crate::ids::SessionId;

/// The environment variable `agx run` sets for the command it starts: a process that
/// outlives its parents (double fork, reparenting to init) still names its session.
pub const ENV_SESSION: &str = "AGX_SESSION";

#[derive(Default)]
struct Inner {
    /// (root pid, root start time) -> session.
    roots: HashMap<(u32, u64), SessionId>,
    /// Every session that exists (open or ended): an environment marker naming another
    /// id is ignored.
    known: HashMap<SessionId, Option<i64>>,
    /// Every root process a session ever had while this registry lived, open or ended:
    /// their descendants stay barred from history-destroying commands (see `agent`).
    ever: HashMap<(u32, u64), SessionId>,
}

#[derive(Default)]
pub struct Registry {
    inner: RwLock<Inner>,
    /// Bumped on every change of the roots: cached attributions older than it are re-done.
    gen: AtomicU64,
}

/// How far up the process tree a session root is looked for.
const MAX_DEPTH: usize = 128;

impl Registry {
    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A session exists (possibly ended); `root` is its live root process, if any.
    pub fn add(&self, id: SessionId, root: Option<(u32, u64)>) {
        let mut i = self.write();
        i.known.entry(id).or_insert(None);
        if let Some(r) = root {
            i.roots.insert(r, id);
            i.ever.insert(r, id);
        }
        drop(i);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// A session ended: its root no longer claims new processes by ancestry (the processes
    /// already attributed keep their session, and so do processes carrying its marker).
    pub fn end(&self, id: SessionId) {
        let mut i = self.write();
        i.roots.retain(|_, s| *s != id);
        if let Some(t) = i.known.get_mut(&id) {
            *t = None;
        }
        drop(i);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Remembers that `root` was once the root process of session `id` (an ended session
    /// from the timeline), without letting it claim processes.
    pub fn remember_root(&self, root: (u32, u64), id: SessionId) {
        self.write().ever.insert(root, id);
    }

    /// The session whose root process `root` is or was, open or ended.
    pub fn root_ever(&self, root: (u32, u64)) -> Option<SessionId> {
        self.read().ever.get(&root).copied()
    }

    /// The session rooted at process `root` (pid, start time), if any.
    pub fn rooted_at(&self, root: (u32, u64)) -> Option<SessionId> {
        self.read().roots.get(&root).copied()
    }

    pub fn set_tool_call(&self, id: SessionId, call: Option<i64>) {
        self.write().known.insert(id, call);
    }

    pub fn tool_call(&self, id: SessionId) -> Option<i64> {
        self.read().known.get(&id).copied().flatten()
    }

    pub fn is_empty(&self) -> bool {
        self.read().known.is_empty()
    }

    /// The session of process `pid`: the nearest ancestor (or itself) that is a session
    /// root, else the session its environment names.
    pub fn resolve(&self, pid: u32) -> Option<SessionId> {
        let i = self.read();
        if i.known.is_empty() {
            return None;
        }
        if !i.roots.is_empty() {
            let mut p = pid;
            for _ in 0..MAX_DEPTH {
                let Some((ppid, start)) = super::proc::parent_and_start(p) else {
                    break;
                };
                if let Some(s) = i.roots.get(&(p, start)) {
                    return Some(*s);
                }
                if ppid <= 1 {
                    break;
                }
                p = ppid;
            }
        }
        let marked = super::proc::env_var(pid, ENV_SESSION)?;
        let id = SessionId(marked.parse().ok()?);
        i.known.contains_key(&id).then_some(id)
    }
}
