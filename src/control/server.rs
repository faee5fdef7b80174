//! The daemon's control socket: a Unix socket (mode 0600) in the runtime directory,
//! answering requests from processes of the daemon's own user (or root), checked with
//! SO_PEERCRED.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::engine::Engine;
use super::proto::{Reply, Request};

pub struct Server {
    path: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Listens on `path` and serves requests on a thread per connection.
pub fn start(path: &Path, engine: Arc<Engine>) -> std::io::Result<Server> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    std::thread::Builder::new()
        .name("agx-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else {
                    // Out of descriptors, say: the connection waits in the backlog; don't
                    // spin on it.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                };
                let engine = engine.clone();
                let _ = std::thread::Builder::new()
                    .name("agx-request".into())
                    .spawn(move || guarded(conn, |c| serve(c, &engine)));
            }
        })?;
    Ok(Server {
        path: path.to_path_buf(),
    })
}

/// Serves one connection with `f`; if `f` panics, the client still gets an answer (an
/// error naming the daemon's log) instead of a connection closed without one. The
/// request's thread ends either way; the daemon's state stays usable, as every lock it
/// takes is taken over after a panic (`unwrap_or_else(into_inner)`) and an unfinished
/// SQLite transaction rolls back when dropped.
fn guarded(conn: UnixStream, f: impl FnOnce(UnixStream)) {
    let spare = conn.try_clone().ok();
    let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| f(conn))) else {
        return;
    };
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "?".into());
    log::error!("control request: its handler panicked ({what})");
    if let Some(mut out) = spare {
        let _ = send(
            &mut out,
            &fail(
                "internal error in the agx daemon while serving this request (its log says more)"
                    .into(),
            ),
        );
    }
}

fn send(out: &mut UnixStream, r: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)
}

fn fail(msg: String) -> Reply {
    Reply {
        ok: false,
        error: Some(msg),
        data: None,
        progress: None,
    }
}

fn done(v: serde_json::Value) -> Reply {
    Reply {
        ok: true,
        error: None,
        data: Some(v),
        progress: None,
    }
}

fn serve(mut conn: UnixStream, engine: &Engine) {
    let me = rustix::process::geteuid().as_raw();
    let cred = rustix::net::sockopt::socket_peercred(&conn);
    let peer = match cred {
        Ok(c) if c.uid.as_raw() == me || c.uid.is_root() => c,
        _ => {
            let _ = send(
                &mut conn,
                &fail("permission denied: not the daemon's user".into()),
            );
            return;
        }
    };
    let mut line = String::new();
    let Ok(reader) = conn.try_clone() else { return };
    if BufReader::new(reader).read_line(&mut line).is_err() {
        return;
    }
    let req: Request = match serde_json::from_str(&line) {
        Ok(r) => r,
        Err(e) => {
            let _ = send(&mut conn, &fail(format!("malformed request: {e}")));
            return;
        }
    };
    let actor = engine.attrib.actor(peer.pid.as_raw_nonzero().get() as u32);
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    // Progress of long operations, every 100 steps once there are more than 200.
    let mut progress = |d: usize, t: usize| {
        if t > 200 && (d % 100 == 0 || d == t) {
            let _ = send(
                &mut out,
                &Reply {
                    ok: true,
                    error: None,
                    data: None,
                    progress: Some((d, t)),
                },
            );
        }
    };
    let reply = match super::dispatch::handle(req, engine, &actor, &mut progress) {
        Ok(v) => done(v),
        Err(e) => fail(e),
    };
    let _ = send(&mut conn, &reply);
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixStream;

    use super::{guarded, Reply};

    #[test]
    fn a_panicking_handler_still_answers_an_error() {
        let (daemon, client) = UnixStream::pair().unwrap();
        guarded(daemon, |_conn| panic!("handler bug"));
        let mut line = String::new();
        BufReader::new(client).read_line(&mut line).unwrap();
        let r: Reply = serde_json::from_str(&line).unwrap();
        assert!(!r.ok);
        assert!(r.error.unwrap().contains("internal error"));
    }

    #[test]
    fn a_handler_that_answers_is_left_alone() {
        let (daemon, client) = UnixStream::pair().unwrap();
        guarded(daemon, |mut conn| {
            super::send(&mut conn, &super::done(serde_json::json!(1))).unwrap()
        });
        let lines: Vec<String> = BufReader::new(client).lines().map(Result::unwrap).collect();
        assert_eq!(lines.len(), 1);
        assert!(serde_json::from_str::<Reply>(&lines[0]).unwrap().ok);
    }
}
