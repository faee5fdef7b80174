//! Reading the kernel's mount table and finding agx mounts in it.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
}

impl MountEntry {
    pub fn is_agx(&self) -> bool {
        self.fstype == "fuse.agx"
    }
}

/// Undoes the octal escapes (`\040` for a space) of /proc/self/mountinfo.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                out.push((oct[0] - b'0') * 64 + (oct[1] - b'0') * 8 + (oct[2] - b'0'));
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

pub fn mounts() -> Vec<MountEntry> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let mp = parts.nth(4)?;
            let rest: Vec<&str> = parts.collect();
            let sep = rest.iter().position(|p| *p == "-")?;
            let fstype = rest.get(sep + 1)?;
            let source = rest.get(sep + 2).unwrap_or(&"");
            Some(MountEntry {
                mount_point: PathBuf::from(OsString::from_vec(unescape(mp))),
                fstype: fstype.to_string(),
                source: source.to_string(),
            })
        })
        .collect()
}

/// The topmost mount exactly at `path`, if any.
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    mounts().into_iter().rev().find(|m| m.mount_point == path)
}

/// The topmost agx mount exactly at `path`, if any.
pub fn agx_mount_at(path: &Path) -> Option<MountEntry> {
    mount_at(path).filter(|m| m.is_agx())
}
