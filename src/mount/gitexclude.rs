//! Keeping agx's state out of `git status`: `.agx/` goes into `.git/info/exclude` once.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags};

const LINE: &str = "/.agx/";

fn mentions_agx(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .any(|l| matches!(l, ".agx" | ".agx/" | "/.agx" | "/.agx/"))
}

/// Whether [`ensure`] would change anything: the project is a git repository (with a
/// `.git` directory) whose `.git/info/exclude` does not mention `.agx` yet.
pub fn wanted(root: &OwnedFd) -> bool {
    let is_repo = matches!(
        rustix::fs::statat(root, ".git", AtFlags::SYMLINK_NOFOLLOW),
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir()
    );
    if !is_repo {
        return false;
    }
    let text = rustix::fs::openat(
        root,
        ".git/info/exclude",
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
    .and_then(|fd| {
        let mut s = String::new();
        std::fs::File::from(fd).read_to_string(&mut s).ok()?;
        Some(s)
    })
    .unwrap_or_default();
    !mentions_agx(&text)
}

/// Adds `/.agx/` to `.git/info/exclude` when the project is a git repository (with a
/// `.git` directory) and the file does not mention it yet. Touches nothing else.
pub fn ensure(root: &OwnedFd) -> std::io::Result<bool> {
    let git = match rustix::fs::statat(root, ".git", AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => rustix::fs::openat(
            root,
            ".git",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?,
        _ => return Ok(false),
    };
    match rustix::fs::mkdirat(&git, "info", Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = rustix::fs::openat(
        &git,
        "info/exclude",
        OFlags::RDWR | OFlags::CREATE | OFlags::APPEND | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o644),
    )?;
    let mut f = std::fs::File::from(fd);
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    if mentions_agx(&text) {
        return Ok(false);
    }
    let mut add = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        add.push('\n');
    }
    add.push_str("# agx keeps its history here (added by agx mount)\n");
    add.push_str(LINE);
    add.push('\n');
    f.write_all(add.as_bytes())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::mentions_agx;

    #[test]
    fn recognises_existing_entries() {
        assert!(mentions_agx("target\n/.agx/\n"));
        assert!(mentions_agx(" .agx \n"));
        assert!(!mentions_agx("# .agx\n.agxfoo\n"));
    }
}
