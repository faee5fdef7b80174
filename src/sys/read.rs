//! Reading files whole: hashing them, and positional reads that leave a shared
//! descriptor's offset alone.

use std::os::fd::AsFd;

use crate::ids::ContentHash;

/// A read buffer for a file of `size` bytes: no larger than needed (zeroing a large buffer
/// for every small file costs more than reading it), at most 1 MiB.
pub fn buffer_for(size: u64) -> Vec<u8> {
    vec![0u8; (size as usize).saturating_add(1).clamp(4096, 1 << 20)]
}

/// Reads a file from offset 0 with positional reads: the descriptor's own offset (shared
/// with its duplicates, e.g. a released handle's) is neither used nor moved.
pub struct PositionalReader<F> {
    fd: F,
    off: u64,
}

impl<F: AsFd> PositionalReader<F> {
    pub fn new(fd: F) -> Self {
        PositionalReader { fd, off: 0 }
    }
}

impl<F: AsFd> std::io::Read for PositionalReader<F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = rustix::io::pread(&self.fd, buf, self.off)?;
        self.off += n as u64;
        Ok(n)
    }
}

/// Hashes a readable file without keeping it (new files' after-images, files too large to
/// capture).
pub fn hash_file(src: impl AsFd) -> std::io::Result<(ContentHash, u64)> {
    let size = rustix::fs::fstat(&src)?.st_size as u64;
    hash_sized(src, size)
}

/// As [`hash_file`], for a file whose size was just taken: a read that comes back short at
/// or past that size is the end (no further read to see it), so a small file takes one.
pub fn hash_sized(src: impl AsFd, size: u64) -> std::io::Result<(ContentHash, u64)> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = buffer_for(size);
    let mut off = 0u64;
    loop {
        let n = rustix::io::pread(&src, &mut buf, off)?;
        hasher.update(&buf[..n]);
        off += n as u64;
        if n == 0 || (n < buf.len() && off >= size) {
            break;
        }
    }
    Ok((ContentHash(*hasher.finalize().as_bytes()), off))
}
