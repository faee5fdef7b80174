//! Which paths are passed through without capture: `.gitignore`d paths (every
//! `.gitignore` from the root down), `.agxignore` at the root, `.git/objects/`, and the
//! config's `exclude` patterns; the config's `include` patterns win over all of them.
//!
//! Matchers are loaded lazily per directory (no scan at mount) and dropped when any
//! ignore file changes through the mount.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

/// Reads a file by its path relative to the project root.
pub type Reader = Box<dyn Fn(&Path) -> Option<String> + Send + Sync>;

pub struct IgnoreRules {
    read: Reader,
    include: Gitignore,
    exclude: Gitignore,
    /// Per directory (relative path, "" for the root): its .gitignore matcher, and the
    /// ignore files it was read from.
    dirs: Mutex<HashMap<PathBuf, Option<Matcher>>>,
    /// Per directory: whether it is ignored as a whole (so is everything below it).
    ignored_dirs: Mutex<HashMap<PathBuf, bool>>,
    /// Per directory (its path's bytes): everything that decides about its entries, so an
    /// entry is judged with one lookup (every creation asks, on the request path).
    entries: Mutex<HashMap<Vec<u8>, Arc<DirRules>>>,
}

/// One directory's rules and the files they come from.
#[derive(Clone)]
struct Matcher {
    rules: Arc<Gitignore>,
    files: Vec<PathBuf>,
}

/// What decides about the entries of one directory.
struct DirRules {
    /// The directory is ignored as a whole.
    ignored: bool,
    /// The .gitignore matchers that apply, deepest first (a deeper file's decision wins,
    /// as in git), each with the length of its directory's path.
    chain: Vec<(usize, Arc<Gitignore>)>,
    /// Every ignore file behind these rules and the directory's own verdict (those of
    /// the directory and all its ancestors).
    files: Arc<Vec<PathBuf>>,
}

/// How the rules judge a path.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// The rules pass it through without capture.
    pub ignored: bool,
    /// Ignored whatever else holds: git's object store (content-addressed objects that
    /// are only ever added; DESIGN.md section 4).
    pub fixed: bool,
    /// The ignore files the verdict rests on, when it rests on some.
    pub files: Arc<Vec<PathBuf>>,
}

impl DirRules {
    /// Whether the entry `rel` of this directory is ignored by a matcher of the chain.
    fn matches(&self, rel: &[u8], is_dir: bool) -> bool {
        for (len, m) in &self.chain {
            let below = match *len {
                0 => rel,
                n => rel.get(n + 1..).unwrap_or(rel),
            };
            match m.matched(Path::new(OsStr::from_bytes(below)), is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}

fn build(base: &Path, lines: &str) -> Option<Gitignore> {
    let mut b = GitignoreBuilder::new(base);
    let mut any = false;
    for l in lines.lines() {
        if b.add_line(None, l).is_ok() && !l.trim().is_empty() && !l.starts_with('#') {
            any = true;
        }
    }
    if !any {
        return None;
    }
    b.build().ok()
}

fn patterns(lines: &[String]) -> Gitignore {
    build(Path::new(""), &lines.join("\n")).unwrap_or_else(Gitignore::empty)
}

/// Whether a file name is one whose change must reset the matchers.
pub fn is_ignore_file(name: &[u8]) -> bool {
    name == b".gitignore" || name == b".agxignore"
}

impl IgnoreRules {
    pub fn new(read: Reader, include: &[String], exclude: &[String]) -> IgnoreRules {
        IgnoreRules {
            read,
            include: patterns(include),
            exclude: patterns(exclude),
            dirs: Mutex::new(HashMap::new()),
            ignored_dirs: Mutex::new(HashMap::new()),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets every loaded matcher (an ignore file changed).
    pub fn reset(&self) {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.ignored_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    fn matcher(&self, dir: &Path) -> Option<Matcher> {
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = dirs.get(dir) {
            return m.clone();
        }
        let mut files = Vec::new();
        let gitignore = dir.join(".gitignore");
        let mut text = match (self.read)(&gitignore) {
            Some(t) => {
                files.push(gitignore);
                t
            }
            None => String::new(),
        };
        if dir.as_os_str().is_empty() {
            if let Some(a) = (self.read)(Path::new(".agxignore")) {
                files.push(PathBuf::from(".agxignore"));
                text.push('\n');
                text.push_str(&a);
            }
        }
        let m = build(dir, &text).map(|rules| Matcher {
            rules: Arc::new(rules),
            files,
        });
        dirs.insert(dir.to_path_buf(), m.clone());
        m
    }

    /// Whether `rel` (relative to the project root) is passed through without capture.
    pub fn is_ignored(&self, rel: &Path, is_dir: bool) -> bool {
        self.verdict(rel, is_dir).ignored
    }

    /// How the rules judge `rel` (relative to the project root, normalized: "a/b", no
    /// "." or trailing "/").
    pub fn verdict(&self, rel: &Path, is_dir: bool) -> Verdict {
        if self
            .include
            .matched_path_or_any_parents(rel, is_dir)
            .is_ignore()
        {
            return Verdict::default();
        }
        let bytes = rel.as_os_str().as_bytes();
        let fixed = Verdict {
            ignored: true,
            fixed: true,
            files: Arc::default(),
        };
        if bytes == b".git/objects" || bytes.starts_with(b".git/objects/") {
            return fixed;
        }
        if self
            .exclude
            .matched_path_or_any_parents(rel, is_dir)
            .is_ignore()
        {
            // The config's own rules: nothing through the mount can write them.
            return Verdict {
                ignored: true,
                fixed: false,
                files: Arc::default(),
            };
        }
        if bytes == b".git" {
            return Verdict::default();
        }
        let parent = match bytes.iter().rposition(|&c| c == b'/') {
            Some(i) => &bytes[..i],
            None => &[][..],
        };
        let rules = self.entry_rules(parent);
        Verdict {
            ignored: rules.ignored || rules.matches(bytes, is_dir),
            fixed: false,
            files: rules.files.clone(),
        }
    }

    /// What decides about the entries of directory `dir` (cached).
    fn entry_rules(&self, dir: &[u8]) -> Arc<DirRules> {
        if let Some(r) = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
        {
            return r.clone();
        }
        let path = Path::new(OsStr::from_bytes(dir));
        let ignored = !dir.is_empty() && self.dir_ignored(path);
        let mut chain = Vec::new();
        let mut files = Vec::new();
        let mut at = Some(path);
        while let Some(d) = at {
            if let Some(m) = self.matcher(d) {
                chain.push((d.as_os_str().len(), m.rules.clone()));
                files.extend(m.files.iter().cloned());
            }
            at = if d.as_os_str().is_empty() {
                None
            } else {
                d.parent()
            };
        }
        let r = Arc::new(DirRules {
            ignored,
            chain,
            files: Arc::new(files),
        });
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir.to_vec(), r.clone());
        r
    }

    /// Whether `rel` itself (not its parents) is ignored by the .gitignore files of the
    /// directories above it, deepest first (a deeper file's decision wins, as in git).
    fn own_match(&self, rel: &Path, is_dir: bool) -> bool {
        let mut dir = rel.parent();
        while let Some(d) = dir {
            if let Some(m) = self.matcher(d) {
                let rel_to_d = rel.strip_prefix(d).unwrap_or(rel);
                match m.rules.matched(rel_to_d, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            dir = if d.as_os_str().is_empty() {
                None
            } else {
                d.parent()
            };
        }
        false
    }

    /// Whether the directory `dir` is ignored as a whole (itself or an ancestor is).
    /// Cached per directory: every path below it asks.
    fn dir_ignored(&self, dir: &Path) -> bool {
        if let Some(v) = self
            .ignored_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
        {
            return *v;
        }
        let parent = dir.parent().unwrap_or(Path::new(""));
        let v = dir != Path::new(".git")
            && ((!parent.as_os_str().is_empty() && self.dir_ignored(parent))
                || self.own_match(dir, true));
        self.ignored_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir.to_path_buf(), v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(files: &[(&str, &str)], include: &[&str]) -> IgnoreRules {
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        IgnoreRules::new(
            Box::new(move |p| files.get(p).cloned()),
            &include.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            &[],
        )
    }

    #[test]
    fn gitignore_hierarchy_and_defaults() {
        let r = rules(
            &[
                (".gitignore", "target/\n*.log\nnode_modules\n"),
                ("sub/.gitignore", "gen.rs\n!keep.log\n"),
                (".agxignore", "scratch/\n"),
            ],
            &[],
        );
        let ig = |p: &str, d: bool| r.is_ignored(Path::new(p), d);
        assert!(ig("target/debug/foo", false));
        assert!(ig("target", true));
        assert!(!ig("src/main.rs", false));
        assert!(ig("a.log", false));
        assert!(ig("sub/gen.rs", false));
        assert!(!ig("gen.rs", false));
        assert!(!ig("sub/keep.log", false));
        assert!(ig("node_modules/x/index.js", false));
        assert!(ig("scratch/t", false));
        assert!(ig(".git/objects/ab/cdef", false));
        assert!(!ig(".git/index", false));
        assert!(!ig(".git/refs/heads/main", false));
    }

    #[test]
    fn include_wins() {
        let r = rules(&[(".gitignore", "node_modules\n")], &["node_modules/"]);
        assert!(!r.is_ignored(Path::new("node_modules/x/index.js"), false));
    }
}
