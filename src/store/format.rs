//! The on-disk format of an object:
//!
//! ```text
//! "AGXO" | version (1) | kind | [base hash, 32 bytes, for patches] | zstd frame
//! ```
//! kind 0: the frame is the whole content; kind 1: the frame was compressed with the base
//! object's content as a raw dictionary.

use crate::ids::ContentHash;

const MAGIC: &[u8; 4] = b"AGXO";
const VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Whole = 0,
    Patch = 1,
}

pub enum Decoded<'a> {
    Whole(&'a [u8]),
    Patch { base: ContentHash, body: &'a [u8] },
}

pub fn header(kind: Kind) -> [u8; 6] {
    [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], VERSION, kind as u8]
}

pub fn encode_whole(z: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(z.len() + 6);
    v.extend_from_slice(&header(Kind::Whole));
    v.extend_from_slice(z);
    v
}

pub fn encode_patch(base: &ContentHash, z: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(z.len() + 38);
    v.extend_from_slice(&header(Kind::Patch));
    v.extend_from_slice(&base.0);
    v.extend_from_slice(z);
    v
}

pub fn decode(raw: &[u8]) -> Result<Decoded<'_>, String> {
    if raw.len() < 6 || &raw[..4] != MAGIC {
        return Err("not an agx object (bad magic)".into());
    }
    if raw[4] != VERSION {
        return Err(format!("unknown object version {}", raw[4]));
    }
    match raw[5] {
        0 => Ok(Decoded::Whole(&raw[6..])),
        1 => {
            if raw.len() < 38 {
                return Err("truncated patch header".into());
            }
            let mut b = [0u8; 32];
            b.copy_from_slice(&raw[6..38]);
            Ok(Decoded::Patch {
                base: ContentHash(b),
                body: &raw[38..],
            })
        }
        k => Err(format!("unknown object kind {k}")),
    }
}

/// Window large enough for the base plus the new content (like `zstd --patch-from`).
fn window_log(len: usize) -> u32 {
    let mut w = 10;
    while (1usize << w) < len && w < 30 {
        w += 1;
    }
    w
}

fn zerr(code: usize) -> std::io::Error {
    std::io::Error::other(zstd::zstd_safe::get_error_name(code))
}

/// Compresses `data` with `base` as a referenced prefix (`zstd --patch-from`): matches may
/// point anywhere into the base, so a small edit of a large file costs little.
pub fn compress_patch(data: &[u8], base: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    use zstd::zstd_safe::{CCtx, CParameter};
    let mut c = CCtx::create();
    let w = window_log(data.len() + base.len());
    c.set_parameter(CParameter::CompressionLevel(level))
        .map_err(zerr)?;
    c.set_parameter(CParameter::WindowLog(w)).map_err(zerr)?;
    // Long-distance matching finds the base's matches however far back they lie (the
    // regular match finder's tables would keep only part of a large base).
    c.set_parameter(CParameter::EnableLongDistanceMatching(true))
        .map_err(zerr)?;
    c.set_pledged_src_size(Some(data.len() as u64))
        .map_err(zerr)?;
    c.ref_prefix(base).map_err(zerr)?;
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    c.compress2(&mut out, data).map_err(zerr)?;
    Ok(out)
}

pub fn decompress_patch(body: &[u8], base: &[u8]) -> std::io::Result<Vec<u8>> {
    use zstd::zstd_safe::{DCtx, DParameter};
    let cap = zstd::zstd_safe::get_frame_content_size(body)
        .ok()
        .flatten()
        .ok_or_else(|| std::io::Error::other("patch frame without content size"))?;
    if cap > (1 << 32) {
        return Err(std::io::Error::other("patch frame too large"));
    }
    let mut d = DCtx::create();
    d.set_parameter(DParameter::WindowLogMax(31))
        .map_err(zerr)?;
    d.ref_prefix(base).map_err(zerr)?;
    let mut out = Vec::with_capacity(cap as usize);
    d.decompress(&mut out, body).map_err(zerr)?;
    Ok(out)
}
