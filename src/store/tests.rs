use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};

use super::*;

fn store() -> (tempfile::TempDir, Store) {
    let t = tempfile::tempdir().unwrap();
    let fd: OwnedFd =
        rustix::fs::open(t.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let s = Store::open(&fd, false).unwrap();
    (t, s)
}

fn object_path(t: &tempfile::TempDir, h: &ContentHash) -> std::path::PathBuf {
    t.path().join("objects").join(rel(h))
}

#[test]
fn round_trip_and_dedup() {
    let (_t, s) = store();
    let p = s.put(b"hello world\n", None).unwrap();
    assert!(p.new);
    assert_eq!(p.hash, ContentHash::of(b"hello world\n"));
    assert_eq!(s.get(&p.hash).unwrap(), b"hello world\n");
    let again = s.put(b"hello world\n", None).unwrap();
    assert!(!again.new);
    assert_eq!(s.list().unwrap(), vec![p.hash]);
}

#[test]
fn empty_content_is_an_object() {
    let (_t, s) = store();
    let p = s.put(b"", None).unwrap();
    assert_eq!(s.get(&p.hash).unwrap(), b"");
}

#[test]
fn flipped_bit_is_reported_not_returned() {
    let (t, s) = store();
    let data: Vec<u8> = (0..10_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let p = s.put(&data, None).unwrap();
    let path = object_path(&t, &p.hash);
    let mut raw = std::fs::read(&path).unwrap();
    let mid = raw.len() / 2;
    raw[mid] ^= 0x10;
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &raw).unwrap();
    match s.get(&p.hash) {
        Err(StoreError::Corrupt { hash, .. }) => assert_eq!(hash, p.hash),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn truncated_and_missing_objects_are_errors() {
    let (t, s) = store();
    let p = s.put(&vec![7u8; 50_000], None).unwrap();
    let path = object_path(&t, &p.hash);
    let raw = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &raw[..raw.len() / 2]).unwrap();
    assert!(matches!(s.get(&p.hash), Err(StoreError::Corrupt { .. })));
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(s.get(&p.hash), Err(StoreError::Missing(_))));
}

#[test]
fn small_edit_of_a_large_file_is_stored_as_a_small_patch() {
    let (_t, s) = store();
    // 2 MB of incompressible-ish text lines.
    let mut v1 = Vec::new();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for i in 0..40_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v1.extend_from_slice(format!("line {i} {x:016x} {:x}\n", x.rotate_left(17)).as_bytes());
    }
    let base = s.put(&v1, None).unwrap();
    let mut v2 = v1.clone();
    v2.splice(1000..1000, b"an inserted line\n".iter().copied());
    let p = s.put(&v2, Some(&base.hash)).unwrap();
    assert!(p.new);
    assert!(
        p.stored < base.stored / 50,
        "patch {} vs whole {}",
        p.stored,
        base.stored
    );
    assert_eq!(s.get(&p.hash).unwrap(), v2);
}

#[test]
fn patch_whose_base_is_missing_is_corrupt() {
    let (t, s) = store();
    let v1: Vec<u8> = (0..300_000u64)
        .map(|i| (i.wrapping_mul(0x9e3779b97f4a7c15) >> 56) as u8)
        .collect();
    let mut v2 = v1.clone();
    v2[5] = b'b';
    let b = s.put(&v1, None).unwrap();
    let p = s.put(&v2, Some(&b.hash)).unwrap();
    assert!(p.stored < b.stored / 10, "stored as a patch");
    std::fs::remove_file(object_path(&t, &b.hash)).unwrap();
    assert!(matches!(s.get(&p.hash), Err(StoreError::Corrupt { .. })));
}

#[test]
fn streamed_large_content() {
    let (_t, s) = store();
    let big: Vec<u8> = (0..(PATCH_LIMIT as usize + 4096))
        .map(|i| (i % 251) as u8)
        .collect();
    let p = s.put_reader(&big[..], None).unwrap();
    assert_eq!(p.size, big.len() as u64);
    assert_eq!(p.hash, ContentHash::of(&big));
    assert_eq!(s.get(&p.hash).unwrap(), big);
}
