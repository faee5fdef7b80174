//! Carrying out a plan. Every change goes through the recorder like any other mutation, so
//! the restore itself is in the timeline with what it replaced (DESIGN.md invariant 2):
//! restoring to the point just before it undoes it.

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::fs::{AtFlags, Gid, Mode, OFlags, Timespec, Timestamps, Uid};
use serde::Serialize;

use super::plan::{Plan, Step};
use super::sources::Sources;
use super::RestoreError;
use crate::capture::{After, Before, Recorder};
use crate::ids::{ContentHash, Seq};
use crate::store::Store;
use crate::timeline::{Actor, Kind, Meta, ObjState, Op};
use crate::tree::{self as live, open_beneath, os, split, LiveObj};

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The first event the restore recorded: `agx restore event:N` undoes the restore.
    pub first_event: Option<Seq>,
    pub done: usize,
    pub failed: Vec<(String, String)>,
    /// Project-relative paths whose entries changed (for kernel cache invalidation).
    #[serde(skip)]
    pub touched: Vec<Vec<u8>>,
    /// Inode numbers of files that lost a name but keep others: their link count changed
    /// under names the restore did not touch (for kernel cache invalidation).
    #[serde(skip)]
    pub inodes: Vec<u64>,
}

/// Who the restore's events are attributed to, and why.
pub struct Why {
    pub actor: Actor,
    pub note: String,
}

pub(super) struct Ctx<'a> {
    pub(super) root: &'a OwnedFd,
    pub(super) store: &'a Store,
    pub(super) recorder: &'a Recorder,
    why: &'a Why,
    report: Report,
    pub(super) tmp_counter: u64,
    /// Paths whose step failed (a link to such a path is not made).
    pub(super) failed: HashSet<Vec<u8>>,
}

fn err(path: &[u8], e: impl std::fmt::Display) -> (String, String) {
    (String::from_utf8_lossy(path).into_owned(), e.to_string())
}

pub(super) fn open_parent(root: &OwnedFd, path: &[u8]) -> Result<OwnedFd, String> {
    let (parent, _) = split(path);
    open_beneath(root, parent, OFlags::PATH | OFlags::DIRECTORY).map_err(|e| {
        format!(
            "its directory cannot be opened: {}",
            std::io::Error::from(e)
        )
    })
}

fn ts(sec: i64, nsec: u32) -> Timespec {
    Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    }
}

fn proc_path(fd: impl AsFd) -> String {
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

/// Sets the inode flags and project id `m` names (when it names them) on the object
/// behind `fd`; with `hold_back`, without the flags that forbid other changes (immutable,
/// append only), which go on last.
fn set_attrs(fd: &OwnedFd, kind: Kind, m: &Meta, hold_back: bool) -> std::io::Result<()> {
    use rustix::fs::IFlags;
    if m.flags.is_none() && m.projid.is_none() {
        return Ok(());
    }
    let obj = live::LiveObj {
        fd: rustix::io::dup(fd)?,
        stat: rustix::fs::fstat(fd)?,
        kind,
    };
    let Some(f) = live::open_attrs(&obj) else {
        return Ok(());
    };
    if let Some(projid) = m.projid {
        let mut x = crate::sys::fsxattr::get(&f)?;
        if x.projid != projid {
            x.projid = projid;
            crate::sys::fsxattr::set(&f, x)?;
        }
    }
    if let Some(flags) = m.flags {
        let mut want = IFlags::from_bits_retain(flags);
        if hold_back {
            want -= IFlags::IMMUTABLE | IFlags::APPEND;
        }
        if rustix::fs::ioctl_getflags(&f)? != want {
            rustix::fs::ioctl_setflags(&f, want)?;
        }
    }
    Ok(())
}

/// Sets owner, mode, xattrs, times, and the inode flags and project id when `m` names
/// them, of `fd` (an O_PATH descriptor) to `m`.
pub(super) fn set_meta(
    fd: &OwnedFd,
    parent: &OwnedFd,
    name: &[u8],
    kind: Kind,
    m: &Meta,
) -> std::io::Result<()> {
    // Immutable or append-only now would refuse the rest: off first, on again last.
    set_attrs(fd, kind, m, true)?;
    rustix::fs::chownat(
        fd,
        "",
        Some(Uid::from_raw(m.uid)),
        Some(Gid::from_raw(m.gid)),
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
    )?;
    if kind != Kind::Symlink {
        rustix::fs::chmod(proc_path(fd), Mode::from_raw_mode(m.mode & 0o7777))?;
        let path = proc_path(fd);
        let mut names = vec![0u8; 4096];
        if let Ok(n) = rustix::fs::listxattr(&path, &mut names) {
            names.truncate(n);
            for have in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
                if !m.xattrs.iter().any(|(k, _)| k == have) {
                    if let Ok(s) = std::str::from_utf8(have) {
                        let _ = rustix::fs::removexattr(&path, s);
                    }
                }
            }
        }
        for (k, v) in &m.xattrs {
            if let Ok(s) = std::str::from_utf8(k) {
                rustix::fs::setxattr(&path, s, v, rustix::fs::XattrFlags::empty())?;
            }
        }
    }
    let times = Timestamps {
        last_access: ts(m.atime, m.atime_nsec),
        last_modification: ts(m.mtime, m.mtime_nsec),
    };
    rustix::fs::utimensat(parent, os(name), &times, AtFlags::SYMLINK_NOFOLLOW)?;
    set_attrs(fd, kind, m, false)
}

impl Ctx<'_> {
    /// Notes a file about to lose a name while keeping others (see `Report::inodes`).
    pub(super) fn note_links(&mut self, obj: &LiveObj) {
        if obj.kind == Kind::File && obj.stat.st_nlink > 1 {
            self.report.inodes.push(obj.stat.st_ino);
        }
    }

    pub(super) fn begin(
        &mut self,
        op: Op,
        path: &[u8],
        before: Before<'_>,
    ) -> Result<crate::capture::Ticket, String> {
        let t = self
            .recorder
            .begin(
                op,
                path.to_vec(),
                None,
                self.why.actor.clone(),
                before,
                None,
                Some(self.why.note.clone()),
            )
            .map_err(|e| {
                format!(
                    "cannot record its before-image ({})",
                    std::io::Error::from_raw_os_error(e.code())
                )
            })?
            .expect("restore events are always recorded");
        if self.report.first_event.is_none() {
            self.report.first_event = Some(t.seq());
        }
        Ok(t)
    }

    pub(super) fn after_of(
        &self,
        parent: &OwnedFd,
        name: &[u8],
        hash: Option<ContentHash>,
    ) -> After {
        match rustix::fs::openat(
            parent,
            os(name),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let mut s: ObjState = self.recorder.state_of(fd.as_fd());
                if hash.is_some() {
                    s.hash = hash;
                }
                After::State(s)
            }
            Err(_) => After::Absent,
        }
    }

    fn step(&mut self, step: &Step, sources: &Sources) -> Result<(), String> {
        let path = step.path();
        let parent = open_parent(self.root, path)?;
        let (_, name) = split(path);
        match step {
            Step::Remove { dir, .. } => {
                let obj = live::stat(self.root, path).ok_or("it is gone already")?;
                // The object may be kept by a staging link (see `capture::linked`).
                let _content = self.recorder.lock(crate::sys::key_of(&obj.stat));
                self.note_links(&obj);
                let op = if *dir { Op::Rmdir } else { Op::Unlink };
                let before = if *dir {
                    Before::Meta(obj.fd.as_fd())
                } else {
                    Before::Leaving {
                        fd: obj.fd.as_fd(),
                        dir: parent.as_fd(),
                        name: os(name),
                        may_change: false,
                    }
                };
                let t = self.begin(op, path, before)?;
                let flags = if *dir {
                    AtFlags::REMOVEDIR
                } else {
                    AtFlags::empty()
                };
                match rustix::fs::unlinkat(&parent, os(name), flags) {
                    Ok(()) => self.recorder.commit(t, After::Absent),
                    Err(e) => {
                        self.recorder.cancel(t);
                        return Err(std::io::Error::from(e).to_string());
                    }
                }
            }
            Step::Mkdir { meta, .. } => {
                let mode = meta.as_ref().map(|m| m.mode & 0o7777).unwrap_or(0o755);
                self.make(Op::Mkdir, path, &parent, name, meta.as_ref(), || {
                    rustix::fs::mkdirat(&parent, os(name), Mode::from_raw_mode(mode))
                })?;
            }
            Step::Write {
                content,
                meta,
                replace,
                ..
            } => {
                self.write_file(
                    &parent,
                    path,
                    name,
                    content,
                    meta.as_ref(),
                    *replace,
                    sources,
                )?;
            }
            Step::Link { from, replace, .. } => {
                self.link(&parent, path, name, from, *replace)?;
            }
            Step::Symlink { target, meta, .. } => {
                self.make(Op::Symlink, path, &parent, name, meta.as_ref(), || {
                    rustix::fs::symlinkat(os(target), &parent, os(name))
                })?;
            }
            Step::Mknod { meta, .. } => {
                let t = self.begin(Op::Mknod, path, Before::Absent)?;
                let kind = rustix::fs::FileType::from_raw_mode(meta.mode);
                if let Err(e) = rustix::fs::mknodat(
                    &parent,
                    os(name),
                    kind,
                    Mode::from_raw_mode(meta.mode & 0o7777),
                    meta.rdev,
                ) {
                    self.recorder.cancel(t);
                    return Err(std::io::Error::from(e).to_string());
                }
                // Owner, mode (mknod applies none of set-id), xattrs and times, as for any
                // other object the plan brings back.
                let made = live::stat(self.root, path).ok_or("it vanished once made")?;
                let r = set_meta(&made.fd, &parent, name, Kind::Other, meta);
                let after = self.after_of(&parent, name, None);
                self.recorder.commit(t, after);
                r.map_err(|e| e.to_string())?;
            }
            Step::SetMeta { meta, .. } => {
                let obj = live::stat(self.root, path).ok_or("it is gone")?;
                let t = self.begin(Op::Chmod, path, Before::Meta(obj.fd.as_fd()))?;
                let r = set_meta(&obj.fd, &parent, name, obj.kind, meta);
                let after = self.after_of(&parent, name, None);
                self.recorder.commit(t, after);
                r.map_err(|e| e.to_string())?;
            }
        }
        self.report.touched.push(path.to_vec());
        Ok(())
    }

    /// Creates a directory or symlink with `create`, recorded as `op`, owned as `meta` says.
    fn make(
        &mut self,
        op: Op,
        path: &[u8],
        parent: &OwnedFd,
        name: &[u8],
        meta: Option<&Meta>,
        create: impl FnOnce() -> rustix::io::Result<()>,
    ) -> Result<(), String> {
        let t = self.begin(op, path, Before::Absent)?;
        if let Err(e) = create() {
            self.recorder.cancel(t);
            return Err(std::io::Error::from(e).to_string());
        }
        if let Some(m) = meta {
            let _ = rustix::fs::chownat(
                parent,
                os(name),
                Some(Uid::from_raw(m.uid)),
                Some(Gid::from_raw(m.gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            );
        }
        let after = self.after_of(parent, name, None);
        self.recorder.commit(t, after);
        Ok(())
    }
}

/// Carries out `plan` on the tree under `root`. `progress(done, total)` is called as it
/// goes. Failures of single steps are collected, not fatal.
pub fn apply(
    root: &OwnedFd,
    store: &Store,
    recorder: &Recorder,
    plan: &Plan,
    why: &Why,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Report, RestoreError> {
    // Content that comes from live files elsewhere is secured before anything changes.
    let sources = Sources::secure(root, store, plan)?;
    let mut ctx = Ctx {
        root,
        store,
        recorder,
        why,
        report: Report::default(),
        tmp_counter: 0,
        failed: HashSet::new(),
    };
    let total = plan.steps.len();
    for (i, s) in plan.steps.iter().enumerate() {
        match ctx.step(s, &sources) {
            Ok(()) => ctx.report.done += 1,
            Err(e) => {
                ctx.failed.insert(s.path().to_vec());
                ctx.report.failed.push(err(s.path(), e));
            }
        }
        progress(i + 1, total);
    }
    recorder.flush();
    Ok(ctx.report)
}
