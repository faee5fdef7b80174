//! A branch's layer on disk, `.agx/layers/<id>/`: `tree/` is the branch's own tree (its
//! directories are filled from the base as they are first reached, see `fill.rs`) and
//! `work/` holds objects being made before they are renamed into the tree, so the tree only
//! ever shows whole objects. Both are reached through descriptors of the project's `.agx`
//! directory, never through the mount.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::ids::BranchId;
use crate::sys::path::{layer_dir, layer_tree};

pub const LAYERS: &str = "layers";

/// The descriptors of an open layer.
pub struct Layer {
    /// `tree/` (`O_PATH`).
    pub tree: OwnedFd,
    /// `work/` (`O_PATH`).
    pub work: OwnedFd,
}

fn mkdir(at: impl AsFd, path: &str) -> rustix::io::Result<()> {
    match rustix::fs::mkdirat(at, path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e),
    }
}

fn open_dir(at: impl AsFd, path: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        at,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Opens branch `id`'s layer in the `.agx` directory `agx`, making its directories when
/// missing. A missing `tree/` is made by `make_root` (given `work/` and a name in it to make
/// the root at, which is then renamed into place): a branch's layer is made the first time
/// it is opened, so a crash between recording a branch and making its layer loses nothing.
pub fn open(
    agx: impl AsFd,
    id: BranchId,
    make_root: impl FnOnce(&OwnedFd, &str) -> std::io::Result<()>,
) -> std::io::Result<Layer> {
    let agx = agx.as_fd();
    let dir = layer_dir(id.0);
    mkdir(agx, LAYERS)?;
    mkdir(agx, &dir)?;
    mkdir(agx, &format!("{dir}/work"))?;
    let work = open_dir(agx, &format!("{dir}/work"))?;
    let tree = match open_dir(agx, &layer_tree(id.0)) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => {
            let tmp = "root";
            let _ = crate::branches::fill::remove_tree(&work, tmp);
            make_root(&work, tmp)?;
            rustix::fs::renameat(&work, tmp, agx, layer_tree(id.0).as_str())?;
            open_dir(agx, &layer_tree(id.0))?
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Layer { tree, work })
}

/// Removes branch `id`'s layer (gc, once the branch is deleted and its history dropped).
/// Returns the bytes it took.
pub fn remove(agx: impl AsFd, id: BranchId) -> std::io::Result<u64> {
    let layers = match open_dir(agx.as_fd(), LAYERS) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let name = id.0.to_string();
    let freed = match crate::branches::fill::remove_tree(&layers, name.as_str()) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => 0,
        Err(e) => return Err(e),
    };
    Ok(freed)
}

/// Branches whose layer is on disk but that `known` (every branch row) does not have any
/// more: what a gc left behind when it stopped between forgetting a branch and removing
/// its layer, and what it removes next.
pub fn orphans(agx: impl AsFd, known: &[crate::timeline::branches::Branch]) -> Vec<BranchId> {
    let Ok(layers) = open_dir(agx.as_fd(), LAYERS) else {
        return Vec::new();
    };
    let Ok(listed) = rustix::fs::openat(
        &layers,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    let Ok(entries) = rustix::fs::Dir::read_from(&listed) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().ok()?.parse::<i64>().ok())
        .map(BranchId)
        .filter(|id| !known.iter().any(|b| b.id == *id))
        .collect()
}

/// Checks branch `id`'s layer (when it was made): every directory and regular file of its
/// tree readable, with a marker that is absent or decodes, and a file's marker only on a
/// file, a directory's only on a directory. Returns (path, what is wrong) for each problem.
pub fn check(agx: impl AsFd, id: BranchId) -> Vec<(Vec<u8>, String)> {
    use super::marker::{self, Marker};
    fn walk(dir: &OwnedFd, rel: &[u8], out: &mut Vec<(Vec<u8>, String)>) {
        let listed = match rustix::fs::openat(
            dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(l) => l,
            Err(e) => return out.push((rel.to_vec(), format!("cannot list: {e}"))),
        };
        let Ok(entries) = rustix::fs::Dir::read_from(&listed) else {
            return out.push((rel.to_vec(), "cannot list".into()));
        };
        for e in entries.flatten() {
            let name = e.file_name().to_bytes().to_vec();
            if name == b"." || name == b".." {
                continue;
            }
            let path = crate::sys::path::join(rel, &name);
            let Ok(fd) = rustix::fs::openat(
                dir,
                e.file_name(),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                out.push((path, "cannot open".into()));
                continue;
            };
            let Ok(st) = rustix::fs::fstat(&fd) else {
                out.push((path, "cannot stat".into()));
                continue;
            };
            let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
            if ft.is_dir() || ft.is_file() {
                match marker::read(&fd) {
                    Ok(Some(Marker::Dir(_))) if !ft.is_dir() => {
                        out.push((path.clone(), "a directory's marker on a file".into()))
                    }
                    Ok(Some(Marker::File(_))) if !ft.is_file() => {
                        out.push((path.clone(), "a file's marker on a directory".into()))
                    }
                    Ok(None) if agx_value(&fd) => {
                        out.push((path.clone(), "a marker that does not decode".into()))
                    }
                    Ok(_) => {}
                    Err(e) => out.push((path.clone(), format!("cannot read its marker: {e}"))),
                }
            }
            if ft.is_dir() {
                walk(&fd, &path, out);
            }
        }
    }
    /// Whether an object carries agx's xattr at all (a marker that did not decode).
    fn agx_value(fd: &OwnedFd) -> bool {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 1];
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        !matches!(
            rustix::fs::getxattr(&path, super::marker::NAME, &mut buf),
            Err(rustix::io::Errno::NODATA)
        )
    }
    let mut out = Vec::new();
    if let Ok(tree) = open_dir(agx.as_fd(), &layer_tree(id.0)) {
        walk(&tree, b"", &mut out);
    }
    out
}

/// Bytes the layer of branch `id` takes on disk (its tree and work directories).
pub fn disk_usage(agx: impl AsFd, id: BranchId) -> u64 {
    fn walk(dir: &OwnedFd) -> u64 {
        let Ok(listed) = rustix::fs::openat(
            dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return 0;
        };
        let Ok(entries) = rustix::fs::Dir::read_from(&listed) else {
            return 0;
        };
        let mut n = 0;
        for e in entries.flatten() {
            let name = e.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            n += st.st_blocks as u64 * 512;
            if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() {
                if let Ok(sub) = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    n += walk(&sub);
                }
            }
        }
        n
    }
    match open_dir(agx.as_fd(), &layer_dir(id.0)) {
        Ok(d) => walk(&d),
        Err(_) => 0,
    }
}
