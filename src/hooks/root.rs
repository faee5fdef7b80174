//! Which process is the agent behind a hook: agents run hooks either directly or through
//! a shell (`sh -c "agx hook claude"`), so the agent is the nearest ancestor that is not
//! a shell. That process roots the agent's session: everything it starts belongs to it.

use crate::attribution::proc;

/// Process names that only stand between an agent and its hook.
pub const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "fish", "env"];

/// How far up the tree the agent is looked for.
const MAX_DEPTH: usize = 16;

/// The agent process of a hook whose parent is `parent`: `parent` or its nearest
/// ancestor that is not a shell; `parent` itself when every ancestor is a shell.
pub fn agent_process(parent: u32) -> u32 {
    let mut p = parent;
    for _ in 0..MAX_DEPTH {
        match proc::comm(p) {
            Some(c) if SHELLS.contains(&c.as_str()) => {}
            Some(_) => return p,
            None => return parent,
        }
        match proc::parent_and_start(p) {
            Some((pp, _)) if pp > 1 => p = pp,
            _ => return parent,
        }
    }
    parent
}

#[cfg(test)]
mod tests {
    #[test]
    fn skips_shells_up_to_the_agent() {
        // This test process is not a shell: a hook run by it directly finds it.
        let me = std::process::id();
        assert_eq!(super::agent_process(me), me);
        // A shell child of ours (kept a shell by the command after sleep) finds us.
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg("sleep 5; :")
            .spawn()
            .unwrap();
        // Under load its name can still be this process's for a moment after spawn.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while crate::attribution::proc::comm(child.id()).as_deref() != Some("sh")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let found = super::agent_process(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, me);
        // A pid that does not exist is its own answer.
        assert_eq!(super::agent_process(u32::MAX / 2), u32::MAX / 2);
    }
}
