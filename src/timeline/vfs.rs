//! A SQLite VFS that keeps paths as given. The default unix VFS canonicalises the database
//! path with realpath, which turns `/proc/self/fd/N/timeline.db` (the daemon's handle on
//! the backing `.agx/`) back into the mounted path, i.e. into agx's own mount. This VFS is
//! the default one with `xFullPathname` replaced, so the database and its -wal and -shm
//! files stay on the backing directory.
//!
//! This is the crate's only `unsafe` code: a copy of SQLite's default VFS struct with one
//! function pointer swapped, registered once and never freed.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The name to pass to `Connection::open_with_flags_and_vfs`.
pub const NAME: &CStr = c"agx-literal";

struct BaseVfs(*mut ffi::sqlite3_vfs);
// SAFETY: the pointer is to SQLite's static default VFS, which is immutable and lives for
// the whole process; SQLite's VFS methods are thread-safe in its default threading mode.
unsafe impl Send for BaseVfs {}
unsafe impl Sync for BaseVfs {}

static BASE: OnceLock<BaseVfs> = OnceLock::new();
static REGISTERED: OnceLock<c_int> = OnceLock::new();

/// Absolute paths are returned unchanged; relative ones are left to the default VFS.
unsafe extern "C" fn full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: SQLite passes a NUL-terminated name and an output buffer of n_out bytes.
    unsafe {
        let bytes = CStr::from_ptr(name).to_bytes_with_nul();
        if bytes.first() != Some(&b'/') {
            let base = BASE.get().map(|b| b.0).unwrap_or(std::ptr::null_mut());
            return match base.as_ref().and_then(|b| b.xFullPathname) {
                Some(f) => f(base, name, n_out, out),
                None => {
                    let _ = vfs;
                    ffi::SQLITE_CANTOPEN
                }
            };
        }
        if bytes.len() > n_out as usize {
            return ffi::SQLITE_CANTOPEN;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, out, bytes.len());
        ffi::SQLITE_OK
    }
}

/// Registers the VFS (once per process). Returns SQLite's result code on failure.
pub fn register() -> Result<(), c_int> {
    let rc = *REGISTERED.get_or_init(|| {
        // SAFETY: sqlite3_initialize and sqlite3_vfs_find are safe to call at any time; the
        // default VFS struct is copied (not modified), the copy is leaked so it outlives
        // every connection, and registering it is SQLite's documented way to add a VFS.
        unsafe {
            let rc = ffi::sqlite3_initialize();
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            let base = ffi::sqlite3_vfs_find(std::ptr::null());
            if base.is_null() {
                return ffi::SQLITE_ERROR;
            }
            let _ = BASE.set(BaseVfs(base));
            let mut copy: ffi::sqlite3_vfs = std::ptr::read(base);
            copy.zName = NAME.as_ptr();
            copy.pNext = std::ptr::null_mut();
            copy.xFullPathname = Some(full_pathname);
            let leaked: &'static mut ffi::sqlite3_vfs = Box::leak(Box::new(copy));
            ffi::sqlite3_vfs_register(leaked, 0)
        }
    });
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}
