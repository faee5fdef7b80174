//! `merge_text` against `git merge-file -p --diff3` on random inputs: the outcome (clean,
//! or the number of conflict hunks) and the bytes (merged text, or the text with
//! markers) must be identical; so must `--ours`/`--theirs` resolutions. Inputs are random
//! edits of a random base over a small set of lines (so diffs are ambiguous and git's
//! choices matter), with CRLF lines and missing final newlines mixed in; a second
//! property uses long files with many changes, past the diff's cost cut-offs.
//!
//! AGX_PROP_CASES=N runs N cases per property (default 200; the long-file property
//! runs N/10).

use std::path::Path;
use std::process::Command;

use agx::branches::merge3::{merge_text, Labels, Side, TextMerge};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

fn cases(default: u32) -> u32 {
    std::env::var("AGX_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Lines the inputs are made of: few, so that they repeat. The last ones only come in
/// by insertion.
const LINES: [&str; 10] = [
    "a\n", "b\n", "c\n", "\n", "}\n", "a\r\n", "d\n", "x\n", "y\n", "z\n",
];

/// One edit of a line list: (0 delete | 1 insert | 2 replace, position, line).
type Edit = (u8, usize, usize);

fn apply(base: &[usize], edits: &[Edit]) -> Vec<usize> {
    let mut v = base.to_vec();
    for &(op, pos, line) in edits {
        match op {
            0 if !v.is_empty() => {
                let i = pos % v.len();
                v.remove(i);
            }
            1 => {
                let i = pos % (v.len() + 1);
                v.insert(i, line);
            }
            _ if !v.is_empty() => {
                let i = pos % v.len();
                v[i] = line;
            }
            _ => {}
        }
    }
    v
}

fn render(lines: &[usize], table: &[String], no_final_newline: bool) -> Vec<u8> {
    let mut out: Vec<u8> = lines.iter().flat_map(|&l| table[l].bytes()).collect();
    if no_final_newline && out.last() == Some(&b'\n') {
        out.pop();
        if out.last() == Some(&b'\r') {
            out.pop();
        }
    }
    out
}

struct Git {
    dir: tempfile::TempDir,
}

struct GitOut {
    /// Conflict hunks (git's exit code), or 0.
    conflicts: i32,
    text: Vec<u8>,
}

impl Git {
    fn new() -> Git {
        Git {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn merge(&self, base: &[u8], ours: &[u8], theirs: &[u8], extra: &[&str]) -> GitOut {
        let d = self.dir.path();
        std::fs::write(d.join("ours"), ours).unwrap();
        std::fs::write(d.join("base"), base).unwrap();
        std::fs::write(d.join("theirs"), theirs).unwrap();
        let out = Command::new("git")
            .current_dir(d)
            // No user or system configuration (merge.conflictStyle...), no repository.
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", d)
            .env(
                "GIT_CEILING_DIRECTORIES",
                d.parent().unwrap_or(Path::new("/")),
            )
            .args(["merge-file", "-p", "--diff3"])
            .args(extra)
            .args(["-L", "ours", "-L", "base", "-L", "theirs"])
            .args(["ours", "base", "theirs"])
            .output()
            .expect("git runs");
        let code = out.status.code().expect("git exited");
        assert!(
            (0..128).contains(&code),
            "git merge-file failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        GitOut {
            conflicts: code,
            text: out.stdout,
        }
    }
}

fn show(b: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(b))
}

/// Compares one merge with git's; Err describes the difference.
fn check(git: &Git, base: &[u8], ours: &[u8], theirs: &[u8]) -> Result<(), TestCaseError> {
    let want = git.merge(base, ours, theirs, &[]);
    let got = merge_text(base, ours, theirs);
    let ctx = || {
        format!(
            "base {}\nours {}\ntheirs {}\ngit ({} conflicts) {}",
            show(base),
            show(ours),
            show(theirs),
            want.conflicts,
            show(&want.text)
        )
    };
    match &got {
        TextMerge::Clean(m) => {
            prop_assert_eq!(want.conflicts, 0, "clean here, conflicts in git\n{}", ctx());
            prop_assert!(
                m == &want.text,
                "merged text differs: {}\n{}",
                show(m),
                ctx()
            );
        }
        TextMerge::Conflicted(c) => {
            let n = c.hunks().count().min(127) as i32;
            prop_assert_eq!(want.conflicts, n, "conflict count differs\n{}", ctx());
            let marked = c.with_markers(&Labels::default());
            prop_assert!(
                marked == want.text,
                "markers differ: {}\n{}",
                show(&marked),
                ctx()
            );
            for (side, flag) in [(Side::Ours, "--ours"), (Side::Theirs, "--theirs")] {
                let w = git.merge(base, ours, theirs, &[flag]);
                let r = c.resolve(side);
                prop_assert!(r == w.text, "{} differs: {}\n{}", flag, show(&r), ctx());
            }
        }
    }
    Ok(())
}

fn small_input() -> impl Strategy<Value = (Vec<usize>, Vec<Edit>, Vec<Edit>, [bool; 3])> {
    let edit = (0u8..3, 0usize..64, 0usize..LINES.len());
    (
        proptest::collection::vec(0usize..7, 0..12),
        proptest::collection::vec(edit.clone(), 0..6),
        proptest::collection::vec(edit, 0..6),
        // Missing final newline: rarer than not.
        [
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.15),
        ],
    )
}

#[test]
fn merge_text_matches_git_on_small_inputs() {
    let git = Git::new();
    let table: Vec<String> = LINES.iter().map(|s| s.to_string()).collect();
    let mut runner = TestRunner::new(Config {
        cases: cases(200),
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    let stats = std::cell::Cell::new((0u32, 0u32));
    runner
        .run(&small_input(), |(base, eo, et, nl)| {
            let b = render(&base, &table, nl[0]);
            let o = render(&apply(&base, &eo), &table, nl[1]);
            let t = render(&apply(&base, &et), &table, nl[2]);
            check(&git, &b, &o, &t)?;
            let (c, n) = stats.get();
            let clean = merge_text(&b, &o, &t).is_clean();
            stats.set((c + clean as u32, n + 1));
            Ok(())
        })
        .unwrap();
    let (clean, n) = stats.get();
    eprintln!(
        "small inputs: {n} cases, {clean} clean, {} with conflicts",
        n - clean
    );
}

/// Long files from a larger line set, sides heavily rewritten: edit costs in the
/// hundreds, where git's diff stops looking for the shortest script.
fn long_input() -> impl Strategy<Value = (u64, usize, usize)> {
    (any::<u64>(), 200usize..1500, 20usize..60)
}

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn rewrite(base: &[usize], seed: &mut u64, alphabet: usize, rate: u64) -> Vec<usize> {
    let mut out = Vec::new();
    for &l in base {
        match xorshift(seed) % 100 {
            r if r < rate / 3 => {}
            r if r < 2 * rate / 3 => out.push((xorshift(seed) % alphabet as u64) as usize),
            r if r < rate => {
                out.push(l);
                out.push((xorshift(seed) % alphabet as u64) as usize);
            }
            _ => out.push(l),
        }
    }
    out
}

#[test]
fn merge_text_matches_git_on_long_rewrites() {
    let git = Git::new();
    let mut runner = TestRunner::new(Config {
        cases: (cases(200) / 10).max(1),
        max_shrink_iters: 50,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&long_input(), |(seed, n, alphabet)| {
            let table: Vec<String> = (0..alphabet).map(|i| format!("line {i}\n")).collect();
            let mut s = seed | 1;
            let base: Vec<usize> = (0..n)
                .map(|_| (xorshift(&mut s) % alphabet as u64) as usize)
                .collect();
            let ours = rewrite(&base, &mut s, alphabet, 60);
            let theirs = rewrite(&base, &mut s, alphabet, 30);
            check(
                &git,
                &render(&base, &table, false),
                &render(&ours, &table, false),
                &render(&theirs, &table, false),
            )
        })
        .unwrap();
}

/// Cases found while building this, kept as plain examples.
#[test]
fn merge_text_matches_git_on_examples() {
    let git = Git::new();
    let examples: [(&str, &str, &str); 8] = [
        ("a\nb\n", "A\nb\n", "a\nB\n"),
        ("a\nb\nc\n", "a\nc\n", "a\nb\nx\nc\n"),
        ("", "x\n", "y\n"),
        ("a\n", "a\nx", "a\ny"),
        ("a\r\nb\r\n", "a\r\nX\r\n", "a\r\nY\r\n"),
        ("a\nb\nc", "A\nb\nc", "a\nb\nc\n"),
        ("a\na\na\n", "a\na\n", "a\nb\na\na\n"),
        ("}\n\n}\n\n", "}\n\nx\n}\n\n", "}\n\n}\ny\n\n"),
    ];
    for (b, o, t) in examples {
        check(&git, b.as_bytes(), o.as_bytes(), t.as_bytes()).unwrap();
    }
}
