//! Finding processes that hold a directory: by working directory, or by open descriptors.

use std::path::Path;

#[derive(Clone, Debug, serde::Serialize)]
pub struct ProcRef {
    pub pid: u32,
    pub comm: String,
}

impl std::fmt::Display for ProcRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.pid, self.comm)
    }
}

fn inside(p: &Path, dir: &Path) -> bool {
    p == dir || p.starts_with(dir)
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn pids() -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|p| *p != me)
                .collect()
        })
        .unwrap_or_default()
}

/// Processes whose working directory is `dir` or below it.
pub fn with_cwd_inside(dir: &Path) -> Vec<ProcRef> {
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map(|c| inside(&c, dir))
                .unwrap_or(false)
        })
        .map(|pid| ProcRef {
            pid,
            comm: comm(pid),
        })
        .collect()
}

/// Whether process `pid` has an open descriptor whose path satisfies `wanted`. An error:
/// its descriptors cannot be read (NotFound: the process is gone).
pub fn holds(pid: u32, wanted: impl Fn(&Path) -> bool) -> std::io::Result<bool> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?;
    Ok(fds
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| wanted(&t))))
}

/// Processes with their working directory or an open descriptor inside `dir`.
pub fn using(dir: &Path) -> Vec<ProcRef> {
    pids()
        .into_iter()
        .filter(|pid| {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map(|c| inside(&c, dir))
                .unwrap_or(false);
            cwd || holds(*pid, |t| inside(t, dir)).unwrap_or(false)
        })
        .map(|pid| ProcRef {
            pid,
            comm: comm(pid),
        })
        .collect()
}

pub fn list(procs: &[ProcRef]) -> String {
    procs
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
