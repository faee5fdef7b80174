//! Scratch filesystems of their own for tests that depend on how a filesystem allocates
//! (inode numbers handed out again) or runs out of room: a fresh ext4 image on a loop
//! device, or a small tmpfs. Unmounted (lazily) when dropped, after the agx mount on it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Scratch {
    dir: Option<PathBuf>,
    image: Option<PathBuf>,
}

impl Scratch {
    /// A fresh ext4 (with a journal, so a freed inode number is handed out again at once)
    /// of `mib` MiB mounted on `dir`.
    pub fn ext4(dir: &Path, mib: u64) -> Scratch {
        let image = dir.with_extension("img");
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(mib << 20).unwrap();
        drop(f);
        let ok = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-O", "^metadata_csum"])
            .arg(&image)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfs.ext4 {}", image.display());
        let ok = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -o loop {}", image.display());
        // lost+found is not part of any project.
        let _ = std::fs::remove_dir(dir.join("lost+found"));
        Scratch {
            dir: Some(dir.to_path_buf()),
            image: Some(image),
        }
    }

    /// A tmpfs of `size` (mount's syntax: "8m") on `dir`.
    pub fn tmpfs(dir: &Path, size: &str) -> Scratch {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs on {}", dir.display());
        Scratch {
            dir: Some(dir.to_path_buf()),
            image: None,
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = Command::new("umount").arg("-l").arg(&d).status();
        }
        if let Some(i) = self.image.take() {
            let _ = std::fs::remove_file(i);
        }
    }
}
