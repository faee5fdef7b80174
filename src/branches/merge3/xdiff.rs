//! A line diff that gives the same edit script as git's default (Myers) diff, so that
//! three-way merges agree with `git merge-file` hunk for hunk.
//!
//! Which of several equally short scripts a diff picks decides where a merge sees
//! overlapping changes, so "some minimal diff" (the `similar` crate's) is not enough:
//! merges of files with repeated lines (blank lines, braces) would conflict where git's
//! don't and the other way round. This is an independent implementation of the same
//! algorithm and heuristics git uses (Myers' O(ND) bisection with git's cost cut-offs,
//! git's pre-pass that sets aside lines without a match, and its sliding of change
//! groups), checked against git by the property tests in tests/merge3_git.rs.
//!
//! Lines are given as class numbers: two lines have the same class iff their bytes
//! (terminator included) are equal.

/// `a[a_start..a_start + a_len]` is replaced by `b[b_start..b_start + b_len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub a_start: usize,
    pub a_len: usize,
    pub b_start: usize,
    pub b_len: usize,
}

/// Longest run of equal lines that makes a search path "interesting" to the cost cut-off.
const SNAKE_CNT: isize = 20;
/// The cut-off looks for interesting paths only past this edit cost...
const HEUR_MIN_COST: isize = 256;
/// ...and gives up on an optimal split at max(this, ~sqrt(diagonals)).
const MAX_COST_MIN: isize = 256;
/// Factor of the edit cost a path's progress must beat to be interesting.
const K_HEUR: isize = 4;
/// A line that occurs at least ~sqrt(n) times in the other file (at most this) is a
/// candidate for being set aside before the search.
const MAX_EQ_LIMIT: usize = 1024;
/// Lines looked at on each side when deciding whether to set such a line aside.
const SIMSCAN_WINDOW: isize = 100;
/// Set aside when fewer than 1 in this many lines of its run have matches.
const KPDIS_RUN: isize = 4;

/// Change flags of one file with a `false` sentinel before the first and after the last
/// line, so group walks need no bounds checks of their own (index -1 and n are valid).
struct Flags(Vec<bool>);

impl Flags {
    fn new(n: usize) -> Flags {
        Flags(vec![false; n + 2])
    }
    fn get(&self, i: isize) -> bool {
        usize::try_from(i + 1)
            .ok()
            .and_then(|i| self.0.get(i).copied())
            .unwrap_or(false)
    }
    fn set(&mut self, i: isize, v: bool) {
        // The sentinels stay false: only real lines are ever set.
        if i >= 0 && (i as usize) + 2 < self.0.len() {
            self.0[i as usize + 1] = v;
        }
    }
}

/// Integer "square root" as git computes it (a power of two near sqrt(n)).
fn bogosqrt(mut n: usize) -> usize {
    let mut i = 1;
    while n > 0 {
        i <<= 1;
        n >>= 2;
    }
    i
}

/// The edit script turning `a` into `b`, in order, as git's diff would give it.
pub(crate) fn diff(a: &[u32], b: &[u32]) -> Vec<Change> {
    let (n1, n2) = (a.len(), b.len());
    let mut ch1 = Flags::new(n1);
    let mut ch2 = Flags::new(n2);

    // Common head and tail are never part of the search.
    let lim = n1.min(n2);
    let mut start = 0;
    while start < lim && a[start] == b[start] {
        start += 1;
    }
    let mut tail = 0;
    while tail < lim - start && a[n1 - 1 - tail] == b[n2 - 1 - tail] {
        tail += 1;
    }

    let classes = a
        .iter()
        .chain(b)
        .map(|&c| c as usize + 1)
        .max()
        .unwrap_or(0);
    let mut count_a = vec![0usize; classes];
    let mut count_b = vec![0usize; classes];
    for &c in a {
        count_a[c as usize] += 1;
    }
    for &c in b {
        count_b[c as usize] += 1;
    }
    let keep1 = set_aside(a, start, n1 - tail, &count_b, &mut ch1);
    let keep2 = set_aside(b, start, n2 - tail, &count_a, &mut ch2);
    let h1: Vec<u32> = keep1.iter().map(|&i| a[i]).collect();
    let h2: Vec<u32> = keep2.iter().map(|&i| b[i]).collect();
    myers(&h1, &h2, &keep1, &keep2, &mut ch1, &mut ch2);

    compact(a, &mut ch1, &ch2);
    compact(b, &mut ch2, &ch1);
    script(&ch1, n1, &ch2, n2)
}

/// Lines of `lines[start..end]` that take part in the search; the others (no match in
/// the other file, or one of many matches amid unmatched lines) are marked changed now.
fn set_aside(
    lines: &[u32],
    start: usize,
    end: usize,
    other_count: &[usize],
    changed: &mut Flags,
) -> Vec<usize> {
    let mlim = bogosqrt(lines.len()).min(MAX_EQ_LIMIT);
    // 0: no match in the other file, 1: some, 2: many.
    let dis: Vec<u8> = lines[start..end]
        .iter()
        .map(
            |&c| match other_count.get(c as usize).copied().unwrap_or(0) {
                0 => 0,
                n if n >= mlim => 2,
                _ => 1,
            },
        )
        .collect();
    let mut keep = Vec::with_capacity(dis.len());
    for (j, &d) in dis.iter().enumerate() {
        if d == 1 || (d == 2 && !mostly_unmatched_run(&dis, j as isize)) {
            keep.push(start + j);
        } else {
            changed.set((start + j) as isize, true);
        }
    }
    keep
}

/// Whether the many-matches line `i` sits in a run (before and after it) of unmatched or
/// many-matches lines in which fewer than 1 in KPDIS_RUN lines are many-matches ones.
fn mostly_unmatched_run(dis: &[u8], i: isize) -> bool {
    let s = (i - SIMSCAN_WINDOW).max(0);
    let e = (i + SIMSCAN_WINDOW).min(dis.len() as isize - 1);
    let at = |k: isize| dis[k as usize];
    let (mut none_before, mut many_before) = (0isize, 1isize);
    let mut k = i - 1;
    while k >= s {
        match at(k) {
            0 => none_before += 1,
            2 => many_before += 1,
            _ => break,
        }
        k -= 1;
    }
    if none_before == 0 {
        return false;
    }
    let (mut none_after, mut many_after) = (0isize, 1isize);
    let mut k = i + 1;
    while k <= e {
        match at(k) {
            0 => none_after += 1,
            2 => many_after += 1,
            _ => break,
        }
        k += 1;
    }
    if none_after == 0 {
        return false;
    }
    let none = none_before + none_after;
    let many = many_before + many_after;
    many * KPDIS_RUN < many + none
}

/// Cost limits of one search.
struct Limits {
    mxcost: isize,
}

/// Where a box is split, and whether each half must be searched without the cost cut-off.
struct Split {
    i1: isize,
    i2: isize,
    min_lo: bool,
    min_hi: bool,
}

/// Diagonal-indexed vectors (k = i1 - i2) for the forward and the backward search.
struct Diagonals {
    fwd: Vec<isize>,
    bwd: Vec<isize>,
    /// Index of diagonal 0.
    zero: isize,
}

impl Diagonals {
    fn ix(&self, d: isize) -> usize {
        // Diagonals searched lie in [-n2 - 1, n1 + 1], which the vectors cover.
        (d + self.zero) as usize
    }
}

/// Marks the lines not on a shortest (or, past the cost cut-off, short) path of the
/// reduced sequences `h1`/`h2` as changed, mapping back through `r1`/`r2`.
fn myers(h1: &[u32], h2: &[u32], r1: &[usize], r2: &[usize], ch1: &mut Flags, ch2: &mut Flags) {
    let ndiags = h1.len() + h2.len() + 3;
    let mut kv = Diagonals {
        fwd: vec![0; ndiags],
        bwd: vec![0; ndiags],
        zero: h2.len() as isize + 1,
    };
    let lim = Limits {
        mxcost: (bogosqrt(ndiags) as isize).max(MAX_COST_MIN),
    };
    let eq = |i1: isize, i2: isize| -> bool {
        match (usize::try_from(i1), usize::try_from(i2)) {
            (Ok(i1), Ok(i2)) => matches!((h1.get(i1), h2.get(i2)), (Some(x), Some(y)) if x == y),
            _ => false,
        }
    };
    // Boxes still to do; the order does not matter, each marks its own lines only.
    let mut todo = vec![(0isize, h1.len() as isize, 0isize, h2.len() as isize, false)];
    while let Some((mut off1, mut lim1, mut off2, mut lim2, need_min)) = todo.pop() {
        while off1 < lim1 && off2 < lim2 && eq(off1, off2) {
            off1 += 1;
            off2 += 1;
        }
        while off1 < lim1 && off2 < lim2 && eq(lim1 - 1, lim2 - 1) {
            lim1 -= 1;
            lim2 -= 1;
        }
        if off1 == lim1 {
            for k in off2..lim2 {
                ch2.set(r2[k as usize] as isize, true);
            }
        } else if off2 == lim2 {
            for k in off1..lim1 {
                ch1.set(r1[k as usize] as isize, true);
            }
        } else {
            let s = split(&eq, (off1, lim1, off2, lim2), &mut kv, need_min, &lim);
            todo.push((s.i1, lim1, s.i2, lim2, s.min_hi));
            todo.push((off1, s.i1, off2, s.i2, s.min_lo));
        }
    }
}

/// Finds the middle of a shortest path through the box by searching from both corners
/// at once (Myers' bisection); with `need_min` unset, gives up on optimality past the
/// cost limits the same way git does.
fn split(
    eq: &impl Fn(isize, isize) -> bool,
    (off1, lim1, off2, lim2): (isize, isize, isize, isize),
    kv: &mut Diagonals,
    need_min: bool,
    lim: &Limits,
) -> Split {
    let dmin = off1 - lim2;
    let dmax = lim1 - off2;
    let fmid = off1 - off2;
    let bmid = lim1 - lim2;
    let odd = (fmid - bmid) & 1 != 0;
    let (mut fmin, mut fmax, mut bmin, mut bmax) = (fmid, fmid, bmid, bmid);
    let i = kv.ix(fmid);
    kv.fwd[i] = off1;
    let i = kv.ix(bmid);
    kv.bwd[i] = lim1;

    let mut ec: isize = 0;
    loop {
        ec += 1;
        let mut got_snake = false;

        // Widen the forward range by one diagonal each way, or narrow it at the box's
        // edge; the diagonal just outside gets a value that never wins.
        if fmin > dmin {
            fmin -= 1;
            let i = kv.ix(fmin - 1);
            kv.fwd[i] = -1;
        } else {
            fmin += 1;
        }
        if fmax < dmax {
            fmax += 1;
            let i = kv.ix(fmax + 1);
            kv.fwd[i] = -1;
        } else {
            fmax -= 1;
        }
        let mut d = fmax;
        while d >= fmin {
            let (lo, hi) = (kv.fwd[kv.ix(d - 1)], kv.fwd[kv.ix(d + 1)]);
            let mut i1 = if lo >= hi { lo + 1 } else { hi };
            let prev = i1;
            let mut i2 = i1 - d;
            while i1 < lim1 && i2 < lim2 && eq(i1, i2) {
                i1 += 1;
                i2 += 1;
            }
            if i1 - prev > SNAKE_CNT {
                got_snake = true;
            }
            let i = kv.ix(d);
            kv.fwd[i] = i1;
            if odd && bmin <= d && d <= bmax && kv.bwd[kv.ix(d)] <= i1 {
                return Split {
                    i1,
                    i2,
                    min_lo: true,
                    min_hi: true,
                };
            }
            d -= 2;
        }

        if bmin > dmin {
            bmin -= 1;
            let i = kv.ix(bmin - 1);
            kv.bwd[i] = isize::MAX;
        } else {
            bmin += 1;
        }
        if bmax < dmax {
            bmax += 1;
            let i = kv.ix(bmax + 1);
            kv.bwd[i] = isize::MAX;
        } else {
            bmax -= 1;
        }
        let mut d = bmax;
        while d >= bmin {
            let (lo, hi) = (kv.bwd[kv.ix(d - 1)], kv.bwd[kv.ix(d + 1)]);
            let mut i1 = if lo < hi { lo } else { hi - 1 };
            let prev = i1;
            let mut i2 = i1 - d;
            while i1 > off1 && i2 > off2 && eq(i1 - 1, i2 - 1) {
                i1 -= 1;
                i2 -= 1;
            }
            if prev - i1 > SNAKE_CNT {
                got_snake = true;
            }
            let i = kv.ix(d);
            kv.bwd[i] = i1;
            if !odd && fmin <= d && d <= fmax && i1 <= kv.fwd[kv.ix(d)] {
                return Split {
                    i1,
                    i2,
                    min_lo: true,
                    min_hi: true,
                };
            }
            d -= 2;
        }

        if need_min {
            continue;
        }

        // Past the trigger cost, a path that has come far (measured from the corner,
        // less its distance from the middle diagonal) and ends in a long run of equal
        // lines is taken as the split, optimal or not.
        if got_snake && ec > HEUR_MIN_COST {
            let mut best = 0;
            let mut at = (0, 0);
            let mut d = fmax;
            while d >= fmin {
                let dd = (d - fmid).abs();
                let i1 = kv.fwd[kv.ix(d)];
                let i2 = i1 - d;
                let v = (i1 - off1) + (i2 - off2) - dd;
                if v > K_HEUR * ec
                    && v > best
                    && off1 + SNAKE_CNT <= i1
                    && i1 < lim1
                    && off2 + SNAKE_CNT <= i2
                    && i2 < lim2
                {
                    let mut k = 1;
                    while eq(i1 - k, i2 - k) {
                        if k == SNAKE_CNT {
                            best = v;
                            at = (i1, i2);
                            break;
                        }
                        k += 1;
                    }
                }
                d -= 2;
            }
            if best > 0 {
                return Split {
                    i1: at.0,
                    i2: at.1,
                    min_lo: true,
                    min_hi: false,
                };
            }
            let mut best = 0;
            let mut d = bmax;
            while d >= bmin {
                let dd = (d - bmid).abs();
                let i1 = kv.bwd[kv.ix(d)];
                let i2 = i1 - d;
                let v = (lim1 - i1) + (lim2 - i2) - dd;
                if v > K_HEUR * ec
                    && v > best
                    && off1 < i1
                    && i1 <= lim1 - SNAKE_CNT
                    && off2 < i2
                    && i2 <= lim2 - SNAKE_CNT
                {
                    let mut k = 0;
                    while eq(i1 + k, i2 + k) {
                        if k == SNAKE_CNT - 1 {
                            best = v;
                            at = (i1, i2);
                            break;
                        }
                        k += 1;
                    }
                }
                d -= 2;
            }
            if best > 0 {
                return Split {
                    i1: at.0,
                    i2: at.1,
                    min_lo: false,
                    min_hi: true,
                };
            }
        }

        // Too expensive: split at whichever of the two searches got furthest.
        if ec >= lim.mxcost {
            let (mut fbest, mut fbest1) = (-1, -1);
            let mut d = fmax;
            while d >= fmin {
                let mut i1 = kv.fwd[kv.ix(d)].min(lim1);
                let mut i2 = i1 - d;
                if lim2 < i2 {
                    i1 = lim2 + d;
                    i2 = lim2;
                }
                if fbest < i1 + i2 {
                    fbest = i1 + i2;
                    fbest1 = i1;
                }
                d -= 2;
            }
            let (mut bbest, mut bbest1) = (isize::MAX, isize::MAX);
            let mut d = bmax;
            while d >= bmin {
                let mut i1 = kv.bwd[kv.ix(d)].max(off1);
                let mut i2 = i1 - d;
                if i2 < off2 {
                    i1 = off2 + d;
                    i2 = off2;
                }
                if i1 + i2 < bbest {
                    bbest = i1 + i2;
                    bbest1 = i1;
                }
                d -= 2;
            }
            return if (lim1 + lim2) - bbest < fbest - (off1 + off2) {
                Split {
                    i1: fbest1,
                    i2: fbest - fbest1,
                    min_lo: true,
                    min_hi: false,
                }
            } else {
                Split {
                    i1: bbest1,
                    i2: bbest - bbest1,
                    min_lo: false,
                    min_hi: true,
                }
            };
        }
    }
}

/// A run of changed lines `[start, end)` of one file (empty: the gap above line `start`).
/// Every gap between two unchanged lines is a group, so the groups of the two files
/// correspond one to one, in order.
#[derive(Clone, Copy)]
struct Group {
    start: isize,
    end: isize,
}

impl Group {
    fn first(ch: &Flags) -> Group {
        let mut g = Group { start: 0, end: 0 };
        while ch.get(g.end) {
            g.end += 1;
        }
        g
    }

    fn next(&mut self, ch: &Flags, n: isize) -> bool {
        if self.end == n {
            return false;
        }
        self.start = self.end + 1;
        self.end = self.start;
        while ch.get(self.end) {
            self.end += 1;
        }
        true
    }

    fn previous(&mut self, ch: &Flags) -> bool {
        if self.start == 0 {
            return false;
        }
        self.end = self.start - 1;
        self.start = self.end;
        while ch.get(self.start - 1) {
            self.start -= 1;
        }
        true
    }

    /// Moves the group one line down if its first line equals the line after it,
    /// absorbing a group it runs into.
    fn slide_down(&mut self, lines: &[u32], ch: &mut Flags) -> bool {
        let n = lines.len() as isize;
        if self.end < n && self.start >= 0 && lines[self.start as usize] == lines[self.end as usize]
        {
            ch.set(self.start, false);
            self.start += 1;
            ch.set(self.end, true);
            self.end += 1;
            while ch.get(self.end) {
                self.end += 1;
            }
            true
        } else {
            false
        }
    }

    /// Moves the group one line up if its last line equals the line before it,
    /// absorbing a group it runs into.
    fn slide_up(&mut self, lines: &[u32], ch: &mut Flags) -> bool {
        if self.start > 0
            && self.end >= 1
            && (self.end as usize) <= lines.len()
            && lines[self.start as usize - 1] == lines[self.end as usize - 1]
        {
            self.start -= 1;
            ch.set(self.start, true);
            self.end -= 1;
            ch.set(self.end, false);
            while ch.get(self.start - 1) {
                self.start -= 1;
            }
            true
        } else {
            false
        }
    }
}

/// Slides each group of changed lines of `lines` as far down as it goes (merging groups
/// it meets), then back up to line up with a change group of the other file if it
/// passed one on the way. `other` is only read, to keep the two group walks in step.
fn compact(lines: &[u32], ch: &mut Flags, other: &Flags) {
    let n = lines.len() as isize;
    let n_other = other.0.len() as isize - 2;
    let mut g = Group::first(ch);
    let mut go = Group::first(other);
    loop {
        if g.end != g.start {
            let mut earliest_end;
            let mut end_matching_other;
            loop {
                let size = g.end - g.start;
                end_matching_other = -1;
                while g.slide_up(lines, ch) {
                    // In step: a group slid over an unchanged line moves the other
                    // file's corresponding gap back by one. Cannot fail (groups
                    // correspond); stop quietly if it ever did.
                    if !go.previous(other) {
                        return;
                    }
                }
                earliest_end = g.end;
                if go.end > go.start {
                    end_matching_other = g.end;
                }
                while g.slide_down(lines, ch) {
                    if !go.next(other, n_other) {
                        return;
                    }
                    if go.end > go.start {
                        end_matching_other = g.end;
                    }
                }
                if size == g.end - g.start {
                    break;
                }
            }
            if g.end != earliest_end && end_matching_other != -1 {
                while go.end == go.start {
                    if !g.slide_up(lines, ch) || !go.previous(other) {
                        return;
                    }
                }
            }
        }
        if !g.next(ch, n) {
            break;
        }
        if !go.next(other, n_other) {
            return;
        }
    }
}

/// The change groups of the two flag sets, walked in step over unchanged lines.
fn script(ch1: &Flags, n1: usize, ch2: &Flags, n2: usize) -> Vec<Change> {
    let (n1, n2) = (n1 as isize, n2 as isize);
    let mut out = Vec::new();
    let (mut i1, mut i2) = (0isize, 0isize);
    while i1 < n1 || i2 < n2 {
        if ch1.get(i1) || ch2.get(i2) {
            let (s1, s2) = (i1, i2);
            while i1 < n1 && ch1.get(i1) {
                i1 += 1;
            }
            while i2 < n2 && ch2.get(i2) {
                i2 += 1;
            }
            out.push(Change {
                a_start: s1 as usize,
                a_len: (i1 - s1) as usize,
                b_start: s2 as usize,
                b_len: (i2 - s2) as usize,
            });
        } else {
            i1 += 1;
            i2 += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(s: &str) -> Vec<u32> {
        s.bytes().map(|b| b as u32).collect()
    }

    /// Applies the script to `a`, taking inserted lines from `b`: must give `b`.
    fn apply(a: &[u32], b: &[u32], s: &[Change]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut i = 0;
        for c in s {
            out.extend_from_slice(&a[i..c.a_start]);
            out.extend_from_slice(&b[c.b_start..c.b_start + c.b_len]);
            i = c.a_start + c.a_len;
        }
        out.extend_from_slice(&a[i..]);
        out
    }

    #[test]
    fn empty_and_equal() {
        assert!(diff(&[], &[]).is_empty());
        assert!(diff(&classes("abc"), &classes("abc")).is_empty());
        assert_eq!(
            diff(&[], &classes("ab")),
            vec![Change {
                a_start: 0,
                a_len: 0,
                b_start: 0,
                b_len: 2
            }]
        );
    }

    #[test]
    fn insertion_slides_down_like_git() {
        // "a" inserted into "aa": git reports the last line as the new one.
        let s = diff(&classes("xaay"), &classes("xaaay"));
        assert_eq!(
            s,
            vec![Change {
                a_start: 3,
                a_len: 0,
                b_start: 3,
                b_len: 1
            }]
        );
    }

    #[test]
    fn scripts_rebuild_the_target() {
        let cases = [
            ("abcabba", "cbabac"),
            ("", "abc"),
            ("abc", ""),
            ("aaaaabbbbbaaaaa", "bbbbbaaaaabbbbb"),
            ("abcdefghij", "jihgfedcba"),
        ];
        for (a, b) in cases {
            let (a, b) = (classes(a), classes(b));
            let s = diff(&a, &b);
            assert_eq!(apply(&a, &b, &s), b);
        }
    }

    #[test]
    fn long_inputs_with_many_changes_stay_valid() {
        // Past the cost cut-offs (edit cost > 256), on a small alphabet.
        let mut x: u64 = 12345;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3 {
            let a: Vec<u32> = (0..3000).map(|_| (rnd() % 7) as u32).collect();
            let b: Vec<u32> = (0..2500).map(|_| (rnd() % 9) as u32).collect();
            let s = diff(&a, &b);
            assert_eq!(apply(&a, &b, &s), b);
        }
    }
}
