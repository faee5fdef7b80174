//! The history commands: log, show, diff (restore is in `restore.rs`). A mounted project
//! is asked through its daemon; one that is not mounted is read directly.

use std::io::{IsTerminal, Write};
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, bail, Result};

use crate::control::engine::Engine;
use crate::control::proto::{hex, unhex, Request};
use crate::control::{self, client};
use crate::restore::diff::{Change, FileDiff};
use crate::timeline::Event;

pub enum Backend {
    Local(Box<Engine>),
    Remote(PathBuf),
}

pub struct Project {
    pub root: PathBuf,
    pub mountpoint: Option<PathBuf>,
    pub backend: Backend,
    /// The branch the command is about: `--branch NAME`, or the branch whose view
    /// (`.agx/branches/NAME/`, or a mount of its own) the command runs in. None: the main
    /// tree.
    pub branch: Option<String>,
    /// Where that branch is mounted on its own, when the command runs there.
    pub branch_mount: Option<PathBuf>,
}

/// `--branch NAME` of the command line (set once by `cli::run`).
static BRANCH_FLAG: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Records `--branch` for every [`Project`] the command opens.
pub fn set_branch_flag(b: Option<String>) {
    let _ = BRANCH_FLAG.set(b);
}

/// `p` with `.` and `..` taken away (not following symlinks: as the shell's `cd` sees it).
fn normalize(p: &Path) -> Result<PathBuf> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    let mut norm = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                norm.pop();
            }
            c => norm.push(c),
        }
    }
    Ok(norm)
}

/// The branch whose view `p` is in, and the path below the view's root.
fn in_branch_view<'a>(p: &'a Path, mountpoint: &Path) -> Option<(String, &'a Path)> {
    let rest = p.strip_prefix(mountpoint.join(".agx/branches")).ok()?;
    let mut parts = rest.components();
    let name = parts.next()?.as_os_str().to_str()?.to_string();
    Some((name, parts.as_path()))
}

impl Project {
    pub fn open(dir: &Path) -> Result<Project> {
        Self::open_with(dir, Default::default())
    }

    /// [`Project::open`]; an unmounted project's engine opens as `how` says.
    pub fn open_with(dir: &Path, how: crate::control::engine::Opening) -> Result<Project> {
        let root = crate::mount::resolve_dir(dir)?;
        let flag = BRANCH_FLAG.get().cloned().flatten();
        if let Some(st) = crate::mount::live_state(&root) {
            let paths = control::paths(&st.project)?;
            // Run inside a branch's view, or a mount of its own: the command is about that
            // branch.
            let cwd = std::env::current_dir()
                .ok()
                .and_then(|c| normalize(&c).ok());
            let mounted = cwd.as_ref().and_then(|c| {
                c.ancestors()
                    .find_map(crate::mount::branchmount::at)
                    .filter(|m| m.project == st.project)
            });
            let here = cwd
                .as_ref()
                .and_then(|c| in_branch_view(c, &st.mountpoint).map(|(b, _)| b))
                .or_else(|| mounted.as_ref().map(|m| m.branch.clone()));
            let branch = flag.or(here).filter(|b| b != "main");
            return Ok(Project {
                root: st.project,
                mountpoint: Some(st.mountpoint),
                backend: Backend::Remote(paths.socket),
                branch_mount: mounted
                    .filter(|m| Some(&m.branch) == branch.as_ref())
                    .map(|m| m.mountpoint),
                branch,
            });
        }
        let engine = Engine::open_path_with(&root, how)?;
        Ok(Project {
            root,
            mountpoint: None,
            backend: Backend::Local(Box::new(engine)),
            branch: flag.filter(|b| b != "main"),
            branch_mount: None,
        })
    }

    /// Sends `req` to the daemon, or answers it with the local engine when the project is
    /// not mounted (attributed to this process).
    pub fn request(
        &self,
        req: Request,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<serde_json::Value> {
        match &self.backend {
            Backend::Remote(sock) => client::call(sock, &req, progress).map_err(|e| anyhow!(e)),
            Backend::Local(engine) => {
                let me = engine.attrib.actor(std::process::id());
                crate::control::dispatch::handle(req, engine, &me, progress).map_err(|e| anyhow!(e))
            }
        }
    }

    pub fn is_mounted(&self) -> bool {
        matches!(self.backend, Backend::Remote(_))
    }

    /// A path given on the command line, relative to the root of the tree the command is
    /// about (the project, or the branch's view it is in).
    pub fn rel(&self, p: &Path) -> Result<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let norm = normalize(p)?;
        if let Some(bm) = &self.branch_mount {
            if let Ok(below) = norm.strip_prefix(bm) {
                return Ok(below.as_os_str().as_bytes().to_vec());
            }
        }
        if let Some(mp) = &self.mountpoint {
            if let Some((b, below)) = in_branch_view(&norm, mp) {
                if self.branch.as_deref() != Some(b.as_str()) {
                    bail!(
                        "{} is in branch {b}'s view: pass --branch {b} (this command is about {})",
                        p.display(),
                        self.branch
                            .as_deref()
                            .map_or("the main tree".to_string(), |x| format!("branch {x}"))
                    );
                }
                return Ok(below.as_os_str().as_bytes().to_vec());
            }
        }
        for base in std::iter::once(&self.root).chain(self.mountpoint.iter()) {
            if let Ok(r) = norm.strip_prefix(base) {
                return Ok(r.as_os_str().as_bytes().to_vec());
            }
        }
        bail!(
            "{} is outside the project {}",
            p.display(),
            self.root.display()
        )
    }
}

fn fmt_time(ns: i64) -> String {
    use chrono::{Local, TimeZone};
    Local
        .timestamp_nanos(ns)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

pub fn rfc3339(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn size(n: i64) -> String {
    let a = n.unsigned_abs() as f64;
    let s = if a < 1024.0 {
        format!("{} B", n.unsigned_abs())
    } else if a < 1024.0 * 1024.0 {
        format!("{:.1} KiB", a / 1024.0)
    } else {
        format!("{:.1} MiB", a / 1024.0 / 1024.0)
    };
    if n < 0 {
        format!("-{s}")
    } else {
        format!("+{s}")
    }
}

/// The JSON form of an event in `agx log --json` (stable field names).
pub fn event_json(e: &Event) -> serde_json::Value {
    serde_json::json!({
        "seq": e.seq.0,
        "time": rfc3339(e.time_ns),
        "op": e.op.as_str(),
        "path": e.path_str(),
        "to_path": e.to_path_str(),
        "session": e.session,
        "tool_call": e.tool_call,
        "pid": e.actor.pid,
        "process": e.actor.process,
        "exe": e.actor.exe,
        "before": e.before.hash.map(|h| h.to_hex()),
        "after": e.after.hash.map(|h| h.to_hex()),
        "before_kind": e.before.kind,
        "after_kind": e.after.kind,
        "size_before": e.before.size(),
        "size_after": e.after.size(),
        "captured": e.captured,
        "note": e.note,
    })
}

pub fn log(
    dir: &Path,
    path: Option<&Path>,
    since: Option<&str>,
    limit: Option<usize>,
    json: bool,
) -> Result<()> {
    let p = Project::open(dir)?;
    let rel = path.map(|x| p.rel(x)).transpose()?;
    let events: Vec<Event> = serde_json::from_value(p.request(
        Request::Log {
            path: rel.map(|r| hex(&r)),
            since: since.map(String::from),
            limit,
            branch: p.branch.clone(),
        },
        &mut |_, _| {},
    )?)?;
    let mut out = std::io::stdout().lock();
    if json {
        let v: Vec<_> = events.iter().map(event_json).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    for e in &events {
        let paths = match e.to_path_str() {
            Some(t) => format!("{} -> {}", e.path_str(), t),
            None => e.path_str(),
        };
        let change = match (e.before.size(), e.after.size()) {
            (Some(a), Some(b)) if a != b => size(b as i64 - a as i64),
            (None, Some(b)) if b > 0 => size(b as i64),
            (Some(a), None) if a > 0 && e.after.kind == crate::timeline::Kind::Absent => {
                size(-(a as i64))
            }
            _ => String::new(),
        };
        let mut extra = String::new();
        if !e.captured {
            extra.push_str("  [too large: hashes only, no before-image]");
        }
        if let Some(n) = &e.note {
            extra.push_str(&format!("  [{n}]"));
        }
        let session = e
            .session
            .as_ref()
            .map(|s| format!(" s{s}"))
            .unwrap_or_default();
        writeln!(
            out,
            "{:>6}  {}  {:<8} {}  {}[{}]{}  {}{}",
            e.seq.0,
            fmt_time(e.time_ns),
            e.op.as_str(),
            paths,
            if e.actor.process.is_empty() {
                "?"
            } else {
                &e.actor.process
            },
            e.actor.pid,
            session,
            change,
            extra
        )?;
    }
    Ok(())
}

pub fn show(dir: &Path, at: &str, path: &Path) -> Result<()> {
    let p = Project::open(dir)?;
    let rel = p.rel(path)?;
    let v = p.request(
        Request::Show {
            at: at.to_string(),
            path: hex(&rel),
            branch: p.branch.clone(),
        },
        &mut |_, _| {},
    )?;
    let bytes = unhex(v.as_str().unwrap_or_default()).map_err(|e| anyhow!(e))?;
    std::io::stdout().lock().write_all(&bytes)?;
    Ok(())
}

fn colour(line: &str, tty: bool) -> String {
    if !tty {
        return line.to_string();
    }
    if line.starts_with("+++") || line.starts_with("---") {
        format!("\x1b[1m{line}\x1b[0m")
    } else if line.starts_with('+') {
        format!("\x1b[32m{line}\x1b[0m")
    } else if line.starts_with('-') {
        format!("\x1b[31m{line}\x1b[0m")
    } else if line.starts_with("@@") {
        format!("\x1b[36m{line}\x1b[0m")
    } else {
        line.to_string()
    }
}

pub fn diff(dir: &Path, refs: &[String], paths: &[PathBuf], stat: bool, json: bool) -> Result<()> {
    if refs.len() > 2 {
        bail!("diff takes at most two REFs (FROM and TO); put paths after --");
    }
    let p = Project::open(dir)?;
    let rels: Vec<Vec<u8>> = paths.iter().map(|x| p.rel(x)).collect::<Result<_>>()?;
    let from = refs.first().map(String::as_str);
    let to = refs.get(1).map(String::as_str);
    let diffs: Vec<FileDiff> = serde_json::from_value(p.request(
        Request::Diff {
            from: from.map(String::from),
            to: to.map(String::from),
            paths: rels.iter().map(|r| hex(r)).collect(),
            branch: p.branch.clone(),
        },
        &mut |_, _| {},
    )?)?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&diffs)?)?;
        return Ok(());
    }
    let tty = std::io::stdout().is_terminal();
    if stat {
        let (mut add, mut del) = (0, 0);
        for d in &diffs {
            let name = match &d.to_path {
                Some(t) => format!("{} => {}", d.path, t),
                None => d.path.clone(),
            };
            let bar = if d.binary {
                "Bin".to_string()
            } else {
                format!(
                    "{} {}{}",
                    d.added + d.removed,
                    "+".repeat(d.added.min(30)),
                    "-".repeat(d.removed.min(30))
                )
            };
            writeln!(out, " {name} | {bar}")?;
            add += d.added;
            del += d.removed;
        }
        writeln!(
            out,
            " {} file{} changed, {add} insertion{}(+), {del} deletion{}(-)",
            diffs.len(),
            if diffs.len() == 1 { "" } else { "s" },
            if add == 1 { "" } else { "s" },
            if del == 1 { "" } else { "s" }
        )?;
        return Ok(());
    }
    for d in &diffs {
        let new = d.to_path.as_deref().unwrap_or(&d.path);
        writeln!(
            out,
            "{}",
            colour(&format!("diff --agx a/{} b/{}", d.path, new), tty)
        )?;
        match d.change {
            Change::Renamed => {
                writeln!(out, "rename from {}\nrename to {}", d.path, new)?;
            }
            Change::Added => {
                if let Some(m) = d.new_mode {
                    writeln!(out, "new file mode {:o}", m)?;
                }
            }
            Change::Deleted => {
                if let Some(m) = d.old_mode {
                    writeln!(out, "deleted file mode {:o}", m)?;
                }
            }
            Change::Mode | Change::Modified => {
                if d.old_mode != d.new_mode {
                    if let (Some(a), Some(b)) = (d.old_mode, d.new_mode) {
                        writeln!(out, "old mode {:o}\nnew mode {:o}", a, b)?;
                    }
                }
            }
        }
        if d.binary {
            writeln!(out, "Binary files a/{} and b/{} differ", d.path, new)?;
        } else {
            for l in d.text.lines() {
                writeln!(out, "{}", colour(l, tty))?;
            }
        }
    }
    Ok(())
}
