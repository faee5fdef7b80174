//! The daemon's control socket: a Unix socket (mode 0600) in the runtime directory,
//! answering requests from processes of the daemon's own user (or root), checked with
//! SO_PEERCRED.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
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
                    .spawn(move || serve(conn, &engine));
            }
        })?;
    Ok(Server {
        path: path.to_path_buf(),
    })
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
