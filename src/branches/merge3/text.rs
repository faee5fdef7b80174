//! Three-way merge of text, line by line, with the semantics of
//! `git merge-file --diff3` (which is git's "eager" merge level):
//!
//! - each side is diffed against the base with git's diff ([`super::xdiff`]);
//! - a change of one side that neither overlaps nor touches a change of the other is
//!   taken; changes *touching* (one ends on the line where the other starts, or both
//!   insert at the same place) count as overlapping, as in git;
//! - overlapping changes are a conflict unless they are the same change (same base
//!   lines replaced by the same lines), which is taken once; a run of overlapping
//!   changes becomes one conflict hunk;
//! - lines are compared as bytes with their terminators, so "x" without a final newline
//!   differs from "x\n", and CRLF lines differ from LF ones;
//! - marker lines end in CRLF when the lines around the conflict do (git's rule), and a
//!   conflict side whose last line has no newline gets one before the next marker.

use std::collections::HashMap;

use super::xdiff::{self, Change};
use super::Side;

/// The labels after the conflict markers: `<<<<<<< ours`, `||||||| base`,
/// `>>>>>>> theirs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labels {
    pub ours: String,
    pub base: String,
    pub theirs: String,
}

impl Default for Labels {
    fn default() -> Labels {
        Labels {
            ours: "ours".into(),
            base: "base".into(),
            theirs: "theirs".into(),
        }
    }
}

/// The outcome of [`merge_text`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextMerge {
    /// Merged without conflicts.
    Clean(Vec<u8>),
    /// At least one conflict hunk.
    Conflicted(TextConflict),
}

impl TextMerge {
    pub fn is_clean(&self) -> bool {
        matches!(self, TextMerge::Clean(_))
    }
}

/// A merge with conflicts: the merged text as a sequence of settled parts and conflict
/// hunks, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextConflict {
    pub chunks: Vec<Chunk>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chunk {
    /// Lines both sides agree on after the merge (possibly empty only if never built).
    Merged(Vec<u8>),
    Conflict(ConflictHunk),
}

/// One conflict: what base, ours and theirs have in the overlapping region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConflictHunk {
    pub base: Region,
    pub ours: Region,
    pub theirs: Region,
    /// Marker lines end in "\r\n" (the surrounding lines do).
    pub crlf: bool,
}

/// Lines `start..start + lines.len()` (0-based) of one file; each line keeps its
/// terminator (the file's last line may have none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: usize,
    pub lines: Vec<Vec<u8>>,
}

impl Region {
    /// The line numbers, 0-based, end exclusive.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.lines.len()
    }

    fn bytes(&self) -> Vec<u8> {
        self.lines.concat()
    }
}

impl TextConflict {
    pub fn hunks(&self) -> impl Iterator<Item = &ConflictHunk> {
        self.chunks.iter().filter_map(|c| match c {
            Chunk::Conflict(h) => Some(h),
            Chunk::Merged(_) => None,
        })
    }

    /// The merged text with each conflict written out between git's diff3-style
    /// markers, byte for byte what `git merge-file -p --diff3 -L ours -L base -L
    /// theirs` prints.
    pub fn with_markers(&self, labels: &Labels) -> Vec<u8> {
        let mut out = Vec::new();
        for c in &self.chunks {
            match c {
                Chunk::Merged(b) => out.extend_from_slice(b),
                Chunk::Conflict(h) => {
                    let eol: &[u8] = if h.crlf { b"\r\n" } else { b"\n" };
                    let marker = |out: &mut Vec<u8>, ch: u8, label: Option<&str>| {
                        out.extend_from_slice(&[ch; 7]);
                        if let Some(l) = label {
                            out.push(b' ');
                            out.extend_from_slice(l.as_bytes());
                        }
                        out.extend_from_slice(eol);
                    };
                    let section = |out: &mut Vec<u8>, r: &Region| {
                        for l in &r.lines {
                            out.extend_from_slice(l);
                        }
                        // A last line without newline would run into the marker.
                        if let Some(last) = r.lines.last() {
                            if last.last() != Some(&b'\n') {
                                out.extend_from_slice(eol);
                            }
                        }
                    };
                    marker(&mut out, b'<', Some(&labels.ours));
                    section(&mut out, &h.ours);
                    marker(&mut out, b'|', Some(&labels.base));
                    section(&mut out, &h.base);
                    marker(&mut out, b'=', None);
                    section(&mut out, &h.theirs);
                    marker(&mut out, b'>', Some(&labels.theirs));
                }
            }
        }
        out
    }

    /// The merge with every conflict settled for one side's lines (the non-conflicting
    /// changes of both sides stay): what `git merge-file -p --ours` / `--theirs` gives.
    pub fn resolve(&self, side: Side) -> Vec<u8> {
        let mut out = Vec::new();
        for c in &self.chunks {
            match c {
                Chunk::Merged(b) => out.extend_from_slice(b),
                Chunk::Conflict(h) => out.extend_from_slice(&match side {
                    Side::Ours => h.ours.bytes(),
                    Side::Theirs => h.theirs.bytes(),
                }),
            }
        }
        out
    }
}

/// Splits into lines, each with its "\n" (the last may have none). Empty input: no lines.
fn lines(b: &[u8]) -> Vec<&[u8]> {
    b.split_inclusive(|&c| c == b'\n').collect()
}

/// Numbers lines so that equal lines (bytes and terminator) get equal numbers.
#[derive(Default)]
struct Classes<'a>(HashMap<&'a [u8], u32>);

impl<'a> Classes<'a> {
    fn of(&mut self, ls: &[&'a [u8]]) -> Vec<u32> {
        ls.iter()
            .map(|l| {
                let next = self.0.len() as u32;
                *self.0.entry(l).or_insert(next)
            })
            .collect()
    }
}

/// How alike two texts are, in percent: the bytes of the lines the diff keeps over the
/// larger size (git's rename score measures shared bytes the same way, by chunks).
pub(crate) fn similarity(a: &[u8], b: &[u8]) -> u32 {
    let big = a.len().max(b.len());
    if big == 0 {
        return 100;
    }
    let (la, lb) = (lines(a), lines(b));
    let mut classes = Classes::default();
    let (ca, cb) = (classes.of(&la), classes.of(&lb));
    let changed: usize = xdiff::diff(&ca, &cb)
        .iter()
        .flat_map(|c| slice(&la, c.a_start as isize, c.a_len as isize))
        .map(|l| l.len())
        .sum();
    ((a.len() - changed.min(a.len())) as u128 * 100 / big as u128) as u32
}

/// How a region of the result is made (git's merge record kinds).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Conflict,
    /// Ours' lines (nothing to copy from theirs).
    Ours,
    /// Theirs' lines.
    Theirs,
}

/// A region of the merge: base lines `i0..i0+c0`, ours `i1..i1+c1`, theirs `i2..i2+c2`.
#[derive(Clone, Copy, Debug)]
struct Rec {
    mode: Mode,
    i0: isize,
    c0: isize,
    i1: isize,
    c1: isize,
    i2: isize,
    c2: isize,
}

/// Adds a region, folding it into the previous one when they overlap or touch in ours'
/// or theirs' lines; a fold of two kinds is a conflict.
fn append(recs: &mut Vec<Rec>, r: Rec) {
    if let Some(m) = recs.last_mut() {
        if r.i1 <= m.i1 + m.c1 || r.i2 <= m.i2 + m.c2 {
            if r.mode != m.mode {
                m.mode = Mode::Conflict;
            }
            m.c0 = r.i0 + r.c0 - m.i0;
            m.c1 = r.i1 + r.c1 - m.i1;
            m.c2 = r.i2 + r.c2 - m.i2;
            return;
        }
    }
    recs.push(r);
}

/// Walks the two scripts (base→ours, base→theirs) in base order and lists the regions
/// where the result differs from ours: theirs' changes and conflicts (and ours' changes,
/// which matter for folding).
fn regions(s1: &[Change], s2: &[Change], ours: &[&[u8]], theirs: &[&[u8]], n0: usize) -> Vec<Rec> {
    let mut recs: Vec<Rec> = Vec::new();
    let (mut a, mut b) = (0, 0);
    let sz = |c: &Change| {
        (
            c.a_start as isize,
            c.a_len as isize,
            c.b_start as isize,
            c.b_len as isize,
        )
    };
    while a < s1.len() && b < s2.len() {
        let (x1, xc1, x2, xc2) = sz(&s1[a]);
        let (y1, yc1, y2, yc2) = sz(&s2[b]);
        if x1 + xc1 < y1 {
            // Ours' change ends before theirs' next one starts (with a line between).
            append(
                &mut recs,
                Rec {
                    mode: Mode::Ours,
                    i0: x1,
                    c0: xc1,
                    i1: x2,
                    c1: xc2,
                    i2: y2 - y1 + x1,
                    c2: xc1,
                },
            );
            a += 1;
            continue;
        }
        if y1 + yc1 < x1 {
            append(
                &mut recs,
                Rec {
                    mode: Mode::Theirs,
                    i0: y1,
                    c0: yc1,
                    i1: x2 - x1 + y1,
                    c1: yc1,
                    i2: y2,
                    c2: yc2,
                },
            );
            b += 1;
            continue;
        }
        let same =
            x1 == y1 && xc1 == yc1 && xc2 == yc2 && slice(ours, x2, xc2) == slice(theirs, y2, yc2);
        if !same {
            // The union of the two changes, in each file's lines.
            let off = x1 - y1;
            let ffo = off + xc1 - yc1;
            let (mut i0, mut i1, mut i2) = (x1, x2, y2);
            if off > 0 {
                i0 -= off;
                i1 -= off;
            } else {
                i2 += off;
            }
            let mut c0 = x1 + xc1 - i0;
            let mut c1 = x2 + xc2 - i1;
            let mut c2 = y2 + yc2 - i2;
            if ffo < 0 {
                c0 -= ffo;
                c1 -= ffo;
            } else {
                c2 += ffo;
            }
            append(
                &mut recs,
                Rec {
                    mode: Mode::Conflict,
                    i0,
                    c0,
                    i1,
                    c1,
                    i2,
                    c2,
                },
            );
        }
        // Move past whichever change ends first in base (both if together).
        let (e1, e2) = (x1 + xc1, y1 + yc1);
        if e1 >= e2 {
            b += 1;
        }
        if e2 >= e1 {
            a += 1;
        }
    }
    let (n0, n1, n2) = (n0 as isize, ours.len() as isize, theirs.len() as isize);
    for c in &s1[a..] {
        let (x1, xc1, x2, xc2) = sz(c);
        append(
            &mut recs,
            Rec {
                mode: Mode::Ours,
                i0: x1,
                c0: xc1,
                i1: x2,
                c1: xc2,
                i2: x1 + n2 - n0,
                c2: xc1,
            },
        );
    }
    for c in &s2[b..] {
        let (y1, yc1, y2, yc2) = sz(c);
        append(
            &mut recs,
            Rec {
                mode: Mode::Theirs,
                i0: y1,
                c0: yc1,
                i1: y1 + n1 - n0,
                c1: yc1,
                i2: y2,
                c2: yc2,
            },
        );
    }
    recs
}

/// Whether line `i` of `file` ends in CRLF; for a last line without newline, the line
/// before decides. None: cannot tell (empty file, or a single line without newline).
fn eol_crlf(file: &[&[u8]], i: usize) -> Option<bool> {
    let ends_crlf = |l: &[u8]| l.len() > 1 && l[l.len() - 2] == b'\r';
    let line = file.get(i)?;
    if i + 1 < file.len() || line.last() == Some(&b'\n') {
        return Some(ends_crlf(line));
    }
    if i == 0 {
        return None;
    }
    Some(ends_crlf(file[i - 1]))
}

/// git's choice of marker line ends: CRLF if the lines before the conflict in ours and
/// in theirs (or their first lines) and base's first line all end in CRLF, as far as
/// each can tell.
fn needs_crlf(base: &[&[u8]], ours: &[&[u8]], theirs: &[&[u8]], r: &Rec) -> bool {
    let before = |i: isize| if i > 0 { i as usize - 1 } else { 0 };
    let mut v = eol_crlf(ours, before(r.i1));
    if v != Some(false) {
        v = eol_crlf(theirs, before(r.i2));
    }
    if v != Some(false) {
        v = eol_crlf(base, 0);
    }
    v.unwrap_or(false)
}

/// Lines `[start, start + len)` of `file`, clamped to the file (never out of range).
fn slice<'a>(file: &'a [&'a [u8]], start: isize, len: isize) -> &'a [&'a [u8]] {
    let s = start.clamp(0, file.len() as isize) as usize;
    let e = (start + len).clamp(s as isize, file.len() as isize) as usize;
    &file[s..e]
}

fn region(file: &[&[u8]], start: isize, len: isize) -> Region {
    Region {
        start: start.max(0) as usize,
        lines: slice(file, start, len).iter().map(|l| l.to_vec()).collect(),
    }
}

/// Three-way merge of `base` into `ours` and `theirs`; see the module doc for the rules.
pub fn merge_text(base: &[u8], ours: &[u8], theirs: &[u8]) -> TextMerge {
    let (l0, l1, l2) = (lines(base), lines(ours), lines(theirs));
    let mut classes = Classes::default();
    let (c0, c1, c2) = (classes.of(&l0), classes.of(&l1), classes.of(&l2));
    let s1 = xdiff::diff(&c0, &c1);
    let s2 = xdiff::diff(&c0, &c2);
    if s1.is_empty() {
        return TextMerge::Clean(theirs.to_vec());
    }
    if s2.is_empty() {
        return TextMerge::Clean(ours.to_vec());
    }

    let recs = regions(&s1, &s2, &l1, &l2, l0.len());
    let mut chunks = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut i: isize = 0;
    for r in &recs {
        match r.mode {
            Mode::Ours => cur.extend(slice(&l1, i, r.i1 + r.c1 - i).concat()),
            Mode::Theirs => {
                cur.extend(slice(&l1, i, r.i1 - i).concat());
                cur.extend(slice(&l2, r.i2, r.c2).concat());
            }
            Mode::Conflict => {
                cur.extend(slice(&l1, i, r.i1 - i).concat());
                if !cur.is_empty() {
                    chunks.push(Chunk::Merged(std::mem::take(&mut cur)));
                }
                chunks.push(Chunk::Conflict(ConflictHunk {
                    base: region(&l0, r.i0, r.c0),
                    ours: region(&l1, r.i1, r.c1),
                    theirs: region(&l2, r.i2, r.c2),
                    crlf: needs_crlf(&l0, &l1, &l2, r),
                }));
            }
        }
        i = r.i1 + r.c1;
    }
    cur.extend(slice(&l1, i, l1.len() as isize - i).concat());
    if chunks.is_empty() {
        return TextMerge::Clean(cur);
    }
    if !cur.is_empty() {
        chunks.push(Chunk::Merged(cur));
    }
    TextMerge::Conflicted(TextConflict { chunks })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(b: &str, o: &str, t: &str) -> String {
        match merge_text(b.as_bytes(), o.as_bytes(), t.as_bytes()) {
            TextMerge::Clean(v) => String::from_utf8(v).unwrap(),
            TextMerge::Conflicted(c) => panic!(
                "unexpected conflict:\n{}",
                String::from_utf8_lossy(&c.with_markers(&Labels::default()))
            ),
        }
    }

    fn conflicted(b: &str, o: &str, t: &str) -> TextConflict {
        match merge_text(b.as_bytes(), o.as_bytes(), t.as_bytes()) {
            TextMerge::Clean(v) => panic!("unexpectedly clean: {:?}", String::from_utf8_lossy(&v)),
            TextMerge::Conflicted(c) => c,
        }
    }

    fn marked(c: &TextConflict) -> String {
        String::from_utf8(c.with_markers(&Labels::default())).unwrap()
    }

    #[test]
    fn one_side_only() {
        assert_eq!(clean("a\nb\n", "a\nB\n", "a\nb\n"), "a\nB\n");
        assert_eq!(clean("a\nb\n", "a\nb\n", "a\nB\n"), "a\nB\n");
        assert_eq!(clean("a\nb\n", "a\nb\n", "a\nb\n"), "a\nb\n");
    }

    #[test]
    fn separate_changes_combine() {
        assert_eq!(
            clean("1\n2\n3\n4\n5\n", "one\n2\n3\n4\n5\n", "1\n2\n3\n4\nfive\n"),
            "one\n2\n3\n4\nfive\n"
        );
        // One untouched line between the changes is enough.
        assert_eq!(
            clean("1\n2\n3\n", "one\n2\n3\n", "1\n2\nthree\n"),
            "one\n2\nthree\n"
        );
    }

    #[test]
    fn identical_changes_are_taken_once() {
        assert_eq!(clean("a\nb\nc\n", "a\nX\nc\n", "a\nX\nc\n"), "a\nX\nc\n");
        assert_eq!(
            clean(
                "a\nb\nc\nd\ne\nf\n",
                "a\nX\nc\nd\ne\nF\n",
                "a\nX\nc\nD\ne\nf\n"
            ),
            "a\nX\nc\nD\ne\nF\n"
        );
        // The same change next to a change of one side only: they touch, a conflict
        // (as in git).
        conflicted("a\nb\nc\nd\ne\n", "a\nX\nc\nd\nE\n", "a\nX\nc\nD\ne\n");
    }

    #[test]
    fn adjacent_changes_conflict_like_git() {
        // Ours changes line 1, theirs line 2: they touch, and git calls that a conflict.
        let c = conflicted("a\nb\n", "A\nb\n", "a\nB\n");
        assert_eq!(
            marked(&c),
            "<<<<<<< ours\nA\nb\n||||||| base\na\nb\n=======\na\nB\n>>>>>>> theirs\n"
        );
        // Two insertions at the same place.
        conflicted("a\nb\n", "a\nx\nb\n", "a\ny\nb\n");
        // An insertion right after a changed line.
        conflicted("a\nb\n", "A\nb\n", "a\ny\nb\n");
    }

    #[test]
    fn overlap_hunk_has_ranges_and_lines() {
        let c = conflicted("1\n2\n3\n4\n", "1\nX\n3\n4\n", "1\nY\nZ\n3\n4\n");
        let h: Vec<_> = c.hunks().collect();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].base.range(), 1..2);
        assert_eq!(h[0].ours.range(), 1..2);
        assert_eq!(h[0].theirs.range(), 1..3);
        assert_eq!(h[0].theirs.lines, vec![b"Y\n".to_vec(), b"Z\n".to_vec()]);
        assert_eq!(c.resolve(Side::Ours), b"1\nX\n3\n4\n");
        assert_eq!(c.resolve(Side::Theirs), b"1\nY\nZ\n3\n4\n");
    }

    #[test]
    fn missing_final_newline() {
        // Both add different last lines without newline: conflict, and the markers
        // still start on their own lines.
        let c = conflicted("a\n", "a\nx", "a\ny");
        assert_eq!(
            marked(&c),
            "a\n<<<<<<< ours\nx\n||||||| base\n=======\ny\n>>>>>>> theirs\n"
        );
        // One side adds the newline, the other changes an earlier line.
        assert_eq!(clean("a\nb\nc", "A\nb\nc", "a\nb\nc\n"), "A\nb\nc\n");
        // Resolving keeps the missing newline.
        assert_eq!(c.resolve(Side::Theirs), b"a\ny");
    }

    #[test]
    fn crlf_markers() {
        let c = conflicted("a\r\nb\r\n", "a\r\nX\r\n", "a\r\nY\r\n");
        assert_eq!(
            marked(&c),
            "a\r\n<<<<<<< ours\r\nX\r\n||||||| base\r\nb\r\n=======\r\nY\r\n>>>>>>> theirs\r\n"
        );
        // CRLF versus LF lines are different lines.
        conflicted("a\nb\n", "a\r\nb\n", "a\nb\r\n");
    }

    #[test]
    fn empty_files() {
        assert_eq!(clean("", "", ""), "");
        assert_eq!(clean("", "x\n", ""), "x\n");
        assert_eq!(clean("a\n", "", "a\n"), "");
        let c = conflicted("", "x\n", "y\n");
        assert_eq!(
            marked(&c),
            "<<<<<<< ours\nx\n||||||| base\n=======\ny\n>>>>>>> theirs\n"
        );
        // Deleting everything against a change: conflict with an empty ours.
        let c = conflicted("a\nb\n", "", "a\nB\n");
        let h: Vec<_> = c.hunks().collect();
        assert!(h[0].ours.lines.is_empty());
    }

    #[test]
    fn all_changed() {
        let c = conflicted("a\nb\nc\n", "x\ny\nz\n", "p\nq\n");
        assert_eq!(c.hunks().count(), 1);
        assert_eq!(c.chunks.len(), 1);
    }

    #[test]
    fn labels_are_parameters() {
        let c = conflicted("a\n", "b\n", "c\n");
        let l = Labels {
            ours: "main".into(),
            base: "base at 42".into(),
            theirs: "branch x".into(),
        };
        assert_eq!(
            String::from_utf8(c.with_markers(&l)).unwrap(),
            "<<<<<<< main\nb\n||||||| base at 42\na\n=======\nc\n>>>>>>> branch x\n"
        );
    }

    #[test]
    fn never_panics_on_odd_bytes() {
        let inputs: [&[u8]; 6] = [b"", b"\n", b"\r", b"\0\n\xff", b"\n\n\n", b"a"];
        for b in inputs {
            for o in inputs {
                for t in inputs {
                    let _ = merge_text(b, o, t);
                }
            }
        }
    }
}
