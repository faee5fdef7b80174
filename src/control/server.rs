//! The daemon's control socket: a Unix socket (mode 0600) in the runtime directory,
//! answering requests from processes of the daemon's own user (or root), checked with
//! SO_PEERCRED.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::engine::Engine;
use super::proto::{unhex, Reply, Request};
use crate::attribution::Attributor;

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
    let attrib = Arc::new(Attributor::default());
    std::thread::Builder::new()
        .name("agx-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let engine = engine.clone();
                let attrib = attrib.clone();
                let _ = std::thread::Builder::new()
                    .name("agx-request".into())
                    .spawn(move || serve(conn, &engine, &attrib));
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

fn serve(mut conn: UnixStream, engine: &Engine, attrib: &Attributor) {
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
    let actor = attrib.actor(peer.pid.as_raw_nonzero().get() as u32);
    let reply = handle(req, engine, actor, &mut conn);
    let _ = send(&mut conn, &reply);
}

fn paths(v: &[String]) -> Result<Vec<Vec<u8>>, String> {
    v.iter().map(|p| unhex(p)).collect()
}

fn handle(
    req: Request,
    engine: &Engine,
    actor: crate::timeline::Actor,
    conn: &mut UnixStream,
) -> Reply {
    let r: Result<serde_json::Value, String> = (|| match req {
        Request::Flush => {
            engine.recorder.flush();
            Ok(serde_json::Value::Null)
        }
        Request::Summary => engine
            .summary()
            .map(|s| serde_json::to_value(s).unwrap_or_default())
            .map_err(|e| e.to_string()),
        Request::Log { path, since, limit } => {
            let path = path.map(|p| unhex(&p)).transpose()?;
            let events = engine
                .log(path, since.as_deref(), limit)
                .map_err(|e| e.to_string())?;
            Ok(serde_json::to_value(events).unwrap_or_default())
        }
        Request::Show { at, path } => {
            let bytes = engine
                .show(&at, &unhex(&path)?)
                .map_err(|e| e.to_string())?;
            Ok(serde_json::Value::String(super::proto::hex(&bytes)))
        }
        Request::Diff {
            from,
            to,
            paths: ps,
        } => {
            let d = engine
                .diff(from.as_deref(), to.as_deref(), &paths(&ps)?)
                .map_err(|e| e.to_string())?;
            Ok(serde_json::to_value(d).unwrap_or_default())
        }
        Request::Plan { at, paths: ps } => {
            let p = engine.plan(&at, &paths(&ps)?).map_err(|e| e.to_string())?;
            Ok(serde_json::to_value(p).unwrap_or_default())
        }
        Request::Restore {
            at,
            paths: ps,
            reason,
        } => {
            let mut progress = |d: usize, t: usize| {
                if t > 200 && (d % 100 == 0 || d == t) {
                    let _ = send(
                        conn,
                        &Reply {
                            ok: true,
                            error: None,
                            data: None,
                            progress: Some((d, t)),
                        },
                    );
                }
            };
            let (plan, report) = engine
                .restore(&at, &paths(&ps)?, reason.as_deref(), actor, &mut progress)
                .map_err(|e| e.to_string())?;
            engine.after_restore(&report);
            Ok(serde_json::json!({ "plan": plan, "report": report }))
        }
    })();
    match r {
        Ok(v) => done(v),
        Err(e) => fail(e),
    }
}
