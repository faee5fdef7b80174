//! The CLI side of the control socket.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::proto::{Reply, Request};

/// Sends `req` and returns the final reply's data; `progress` sees progress replies.
pub fn call(
    socket: &Path,
    req: &Request,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<serde_json::Value, String> {
    let s = UnixStream::connect(socket)
        .map_err(|e| format!("cannot reach the agx daemon at {}: {e}", socket.display()))?;
    let mut line = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    line.push(b'\n');
    send_all(&s, &line).map_err(|e| format!("talking to the daemon: {e}"))?;
    let mut r = BufReader::new(s);
    loop {
        let mut l = String::new();
        let n = r
            .read_line(&mut l)
            .map_err(|e| format!("talking to the daemon: {e}"))?;
        if n == 0 {
            return Err("the daemon closed the connection without an answer".into());
        }
        let reply: Reply =
            serde_json::from_str(&l).map_err(|e| format!("bad reply from the daemon: {e}"))?;
        if let Some((d, t)) = reply.progress {
            progress(d, t);
            continue;
        }
        if reply.ok {
            return Ok(reply.data.unwrap_or(serde_json::Value::Null));
        }
        return Err(reply.error.unwrap_or_else(|| "the daemon failed".into()));
    }
}

/// Writes all of `buf` without SIGPIPE (MSG_NOSIGNAL): the CLI runs with SIGPIPE's default
/// action (so `agx log | head` ends quietly), and a daemon that closed the connection
/// early must be an error here, not a silent death.
fn send_all(s: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = rustix::net::send(s, buf, rustix::net::SendFlags::NOSIGNAL)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}
