//! Project-relative paths as raw bytes ("a/b", "" for the root): joining, splitting, and
//! the names that are agx's own or git's object store.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// The name of agx's state directory at the top of the project.
pub const AGX_DIR_NAME: &str = ".agx";

/// Extended attributes agx keeps on its own objects (a branch's not yet copied
/// directories and files carry `user.agx.lower`): never shown through the mount, never
/// set through it, never recorded as part of an object's metadata.
pub const AGX_XATTR_PREFIX: &str = "user.agx.";

/// Whether the xattr `name` is in agx's own namespace.
pub fn is_agx_xattr(name: &[u8]) -> bool {
    name.starts_with(AGX_XATTR_PREFIX.as_bytes())
}

/// The directory of branch `id`'s layer, relative to `.agx` (see `crate::branches`).
pub fn layer_dir(id: i64) -> String {
    format!("layers/{id}")
}

/// The root of branch `id`'s tree, relative to `.agx`.
pub fn layer_tree(id: i64) -> String {
    format!("layers/{id}/tree")
}

/// "a" + "b" -> "a/b"; "" + "b" -> "b".
pub fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() {
        return b.to_vec();
    }
    let mut v = a.to_vec();
    v.push(b'/');
    v.extend_from_slice(b);
    v
}

/// Splits "a/b/c" into ("a/b", "c"); a top-level name has parent "".
pub fn split(p: &[u8]) -> (&[u8], &[u8]) {
    match p.iter().rposition(|c| *c == b'/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (&[], p),
    }
}

pub fn os(p: &[u8]) -> &OsStr {
    OsStr::from_bytes(p)
}

/// `.agx` at the top of the project, or anything in it.
pub fn is_agx(p: &[u8]) -> bool {
    p == AGX_DIR_NAME.as_bytes() || p.starts_with(b".agx/")
}

/// git's object store, or anything in it.
pub fn is_git_objects(p: &[u8]) -> bool {
    p == b".git/objects" || p.starts_with(b".git/objects/")
}

/// Paths history never shows: agx's state and git's object store.
pub fn protected(p: &[u8]) -> bool {
    is_agx(p) || is_git_objects(p)
}
