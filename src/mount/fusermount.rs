//! Mounting without root: fuse3's set-uid `fusermount3` mounts and hands the opened
//! `/dev/fuse` descriptor back over a Unix socket (the `_FUSE_COMMFD` protocol). Doing this
//! here, rather than in fuser, works when `/dev/fuse` itself is not accessible to the user.

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};

use rustix::io::FdFlags;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

use super::MountError;

/// Mounts a FUSE filesystem at `mountpoint` with `options` (comma-separated) through
/// fusermount3 and returns the connection's `/dev/fuse` descriptor.
pub fn mount(mountpoint: &Path, options: &str) -> Result<OwnedFd, MountError> {
    let (ours, theirs) =
        UnixStream::pair().map_err(|e| MountError::io("creating a socket pair", e))?;
    // fusermount3 finds its end by number; it must survive exec. Only this end is
    // inheritable, and only until the child has started.
    rustix::io::fcntl_setfd(&theirs, FdFlags::empty())
        .map_err(|e| MountError::io("preparing the fusermount3 socket", e.into()))?;
    let fd_num = std::os::fd::AsRawFd::as_raw_fd(&theirs);
    let child = Command::new("fusermount3")
        .arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", fd_num.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => MountError::NoFusermount,
            _ => MountError::io("running fusermount3", e),
        })?;
    drop(theirs);

    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        &ours,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    );
    let mut fd = None;
    if received.is_ok() {
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(mut fds) = msg {
                fd = fds.next();
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| MountError::io("waiting for fusermount3", e))?;
    match fd {
        Some(fd) if out.status.success() => Ok(fd),
        _ => {
            let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let reason = if msg.is_empty() {
                format!("fusermount3 failed ({})", out.status)
            } else {
                msg
            };
            Err(MountError::MountFailed {
                dir: mountpoint.to_path_buf(),
                reason,
            })
        }
    }
}

/// Unmounts a mount made through fusermount3 (`-u`; `-uz` detaches it lazily). A busy
/// mount names the processes using it.
pub fn unmount(mp: &Path, lazy: bool) -> Result<(), MountError> {
    let mut cmd = Command::new("fusermount3");
    cmd.arg(if lazy { "-uz" } else { "-u" }).arg("--").arg(mp);
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => MountError::NoFusermount,
        _ => MountError::io("running fusermount3", e),
    })?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if msg.contains("busy") {
        return Err(MountError::Busy {
            dir: mp.to_path_buf(),
            procs: super::procs::list(&super::procs::using(mp)),
        });
    }
    Err(MountError::UnmountFailed {
        dir: mp.to_path_buf(),
        reason: msg,
    })
}
