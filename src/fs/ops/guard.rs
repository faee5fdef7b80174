//! The last line of defence of the request path: a panic in a request's handler costs
//! that request (answered EIO), never the daemon.

use std::panic::AssertUnwindSafe;

/// Runs the handler of one request, so that a panic in it costs that request and not the
/// daemon: fuser runs handlers on a few threads, and a thread that unwinds out of a
/// handler is gone, the last one with the mount (every later request then hangs).
///
/// Exactly one reply is still sent: the handler's closure owns the request's reply, so
/// either the reply was sent before the panic, or unwinding drops it unsent, and fuser
/// answers a reply dropped unsent with EIO (`ReplyRaw`'s `Drop`, fuser 0.18
/// `src/reply.rs`). Handlers without a reply (`forget`, `destroy`) only log. Mutexes a
/// panic poisons are taken over by every later user (`unwrap_or_else(into_inner)`), so
/// one panic never becomes a panic per request. `catch_unwind` costs nothing on the path
/// that does not panic.
///
/// None when `f` panicked.
pub(super) fn guard<T>(op: &'static str, f: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "?".into());
            log::error!("{op}: the request's handler panicked ({what}); answered EIO unless it had answered");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::guard;

    /// Stands in for a fuser reply: answered once by `ok`, or with EIO when dropped
    /// unanswered, as `fuser::ReplyRaw` does.
    struct Reply {
        sent: Arc<Mutex<Vec<&'static str>>>,
        done: bool,
    }

    impl Reply {
        fn ok(mut self) {
            self.sent.lock().unwrap().push("ok");
            self.done = true;
        }
    }

    impl Drop for Reply {
        fn drop(&mut self) {
            if !self.done {
                self.sent.lock().unwrap().push("EIO");
            }
        }
    }

    fn reply() -> (Reply, Arc<Mutex<Vec<&'static str>>>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let r = Reply {
            sent: sent.clone(),
            done: false,
        };
        (r, sent)
    }

    #[test]
    fn a_panic_before_the_reply_is_answered_eio_once() {
        let (r, sent) = reply();
        let out = guard("lookup", || {
            let s = String::from("abcé");
            let _ = &s[..4];
            r.ok();
        });
        assert_eq!(out, None);
        assert_eq!(*sent.lock().unwrap(), ["EIO"]);
    }

    #[test]
    fn a_panic_after_the_reply_sends_nothing_more() {
        let (r, sent) = reply();
        let out = guard("release", || {
            r.ok();
            panic!("bookkeeping after the answer");
        });
        assert_eq!(out, None);
        assert_eq!(*sent.lock().unwrap(), ["ok"]);
    }

    #[test]
    fn no_panic_passes_the_result_through() {
        let (r, sent) = reply();
        assert_eq!(guard("getattr", || r.ok()), Some(()));
        assert_eq!(*sent.lock().unwrap(), ["ok"]);
        assert_eq!(guard("statfs", || 7), Some(7));
    }
}
