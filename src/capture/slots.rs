//! A bound on the descriptors the capture queue holds.
//!
//! A content event's job carries an `O_PATH` descriptor of the file until the worker reads
//! its after-image. When the worker falls behind (an untar of many small files), an
//! unbounded queue would hold one descriptor per queued file and take the daemon past its
//! descriptor limit. Senders wait for a free slot instead, as on a full queue; the worker
//! always makes progress, so the wait ends.

use std::sync::{Condvar, Mutex, OnceLock};

pub struct Slots {
    max: usize,
    used: Mutex<Count>,
    freed: Condvar,
    /// The worker, which naps between looks at the queue: a sender out of slots wakes it.
    worker: OnceLock<std::thread::Thread>,
}

#[derive(Default)]
struct Count {
    used: usize,
    /// Senders waiting for a slot: a release wakes one only then (a wakeup is a syscall, and
    /// the worker releases a slot per change).
    waiting: usize,
}

impl Slots {
    /// Slots for a process limit of `nofile` descriptors: an eighth of it, between 16 and
    /// 4,096.
    pub fn for_limit(nofile: usize) -> Slots {
        Slots {
            max: (nofile / 8).clamp(16, 4096),
            used: Mutex::default(),
            freed: Condvar::new(),
            worker: OnceLock::new(),
        }
    }

    pub fn set_worker(&self, t: std::thread::Thread) {
        let _ = self.worker.set(t);
    }

    /// Has the worker look at the queue now.
    pub fn wake_worker(&self) {
        if let Some(t) = self.worker.get() {
            t.unpark();
        }
    }

    /// Takes a slot, waiting for one if all are taken.
    pub fn acquire(&self) {
        let mut c = self.used.lock().unwrap_or_else(|e| e.into_inner());
        while c.used >= self.max {
            self.wake_worker();
            c.waiting += 1;
            c = self.freed.wait(c).unwrap_or_else(|e| e.into_inner());
            c.waiting -= 1;
        }
        c.used += 1;
    }

    /// Gives a slot back.
    pub fn release(&self) {
        let mut c = self.used.lock().unwrap_or_else(|e| e.into_inner());
        c.used = c.used.saturating_sub(1);
        if c.waiting > 0 {
            self.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Slots;
    use std::sync::Arc;

    #[test]
    fn a_sender_waits_until_the_worker_frees_a_slot() {
        let slots = Arc::new(Slots::for_limit(0));
        for _ in 0..16 {
            slots.acquire();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let s = slots.clone();
        let waiter = std::thread::spawn(move || {
            s.acquire();
            tx.send(()).unwrap();
        });
        // Still waiting: every slot is taken.
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_err());
        slots.release();
        rx.recv().unwrap();
        waiter.join().unwrap();
    }
}
