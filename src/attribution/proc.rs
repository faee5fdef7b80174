//! What attribution reads about a process from /proc.

/// Fields of /proc/PID/stat after the command name: (ppid, start time).
pub fn parent_and_start(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let ppid = f.nth(1)?.parse().ok()?;
    let start = f.nth(17)?.parse().ok()?;
    Some((ppid, start))
}

/// The start time of a process (field 22 of /proc/PID/stat), which tells a recycled pid
/// from the process that had it before.
pub fn start_time(pid: u32) -> Option<u64> {
    parent_and_start(pid).map(|(_, s)| s)
}

/// The value of `name` in the environment the process was started with.
pub fn env_var(pid: u32, name: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    env.split(|b| *b == 0).find_map(|kv| {
        kv.strip_prefix(prefix.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// The process's command line, arguments joined by spaces.
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let parts: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// The process's name (comm).
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let (ppid, start) = super::parent_and_start(me).unwrap();
        assert_eq!(ppid, std::os::unix::process::parent_id());
        assert!(start > 0);
        assert!(super::cmdline(me).is_some());
        std::env::var("PATH").unwrap();
        assert!(super::env_var(me, "PATH").is_some());
    }
}
