//! "Nothing is lost", as a property: random mixes of what independent testing broke
//! (hard links, renames over files, writers racing on one file, owners, ignore-file edits,
//! edits made while nothing is mounted, restores in the middle) are applied through a real
//! mount, with checkpoints in between. The model of the tree at each checkpoint is the tree
//! itself, read (content, kind, mode, owner, which names are links of one file) just
//! before the checkpoint is taken. At the end, for every checkpoint: the `.agx/at/` view
//! and `agx show` give that tree, `agx restore` makes the live tree that tree (read
//! through the mount and on the disk), and undoing the restore gives back the tree it
//! replaced (DESIGN.md invariants 1, 2 and 4).
//!
//! What agx cannot know is left out of the comparison, path by path: a change that an
//! ignore rule lets pass uncaptured (the path matched a rule of the person's `.gitignore`
//! and had no history yet), or an edit made while unmounted to a path agx never recorded
//! (there is no before-image anywhere). Such a path is not compared at a checkpoint taken
//! before that change. Everything else must match byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Barrier};

use proptest::prelude::*;

use crate::common::Mounted;
use crate::hist;

const FILES: &[&str] = &["a", "b", "c", "x", "d/e", "d/g", "s/t"];
const DIRS: &[&str] = &["d", "s"];
/// Rules the person's `.gitignore` may hold (one at a time, or none).
const RULES: &[&str] = &["x", "g", "d/", "t", "*"];
const OWNERS: &[(u32, u32)] = &[(0, 0), (1000, 100), (4242, 4242)];
const MODES: &[u32] = &[0o644, 0o600, 0o755, 0o640];

#[derive(Clone, Debug)]
enum Op {
    /// Rewritten with O_TRUNC (made if missing).
    Write {
        f: usize,
        tag: u8,
    },
    Append {
        f: usize,
        tag: u8,
    },
    /// `to` becomes another name of `from`.
    Link {
        from: usize,
        to: usize,
    },
    /// A rename, over `to` when it exists.
    Rename {
        f: usize,
        to: usize,
    },
    /// An editor's save: a new file renamed over the name.
    Replace {
        f: usize,
        tag: u8,
    },
    Unlink {
        f: usize,
    },
    Chmod {
        e: usize,
        mode: usize,
    },
    Chown {
        e: usize,
        owner: usize,
    },
    /// Four writers each rewriting the file three times (O_TRUNC), released together.
    Race {
        f: usize,
    },
    /// The root `.gitignore` holds this rule (None: removed).
    Ignore {
        rule: Option<usize>,
    },
    /// Unmount, edit the bare files, mount again.
    Outside {
        f: usize,
        tag: u8,
        also_rm: Option<usize>,
    },
    /// `rm -rf` of a directory, or `mkdir` of one that is missing.
    Dir {
        d: usize,
    },
    Checkpoint,
    /// Restore to an earlier checkpoint now (its index modulo those taken).
    Restore {
        k: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let f = || 0usize..FILES.len();
    let e = || 0usize..(FILES.len() + DIRS.len());
    prop_oneof![
        4 => (f(), any::<u8>()).prop_map(|(f, tag)| Op::Write { f, tag }),
        2 => (f(), any::<u8>()).prop_map(|(f, tag)| Op::Append { f, tag }),
        2 => (f(), f()).prop_map(|(from, to)| Op::Link { from, to }),
        2 => (f(), f()).prop_map(|(f, to)| Op::Rename { f, to }),
        2 => (f(), any::<u8>()).prop_map(|(f, tag)| Op::Replace { f, tag }),
        1 => f().prop_map(|f| Op::Unlink { f }),
        1 => (e(), 0..MODES.len()).prop_map(|(e, mode)| Op::Chmod { e, mode }),
        1 => (e(), 0..OWNERS.len()).prop_map(|(e, owner)| Op::Chown { e, owner }),
        1 => f().prop_map(|f| Op::Race { f }),
        1 => proptest::option::of(0..RULES.len()).prop_map(|rule| Op::Ignore { rule }),
        1 => (f(), any::<u8>(), proptest::option::of(f()))
            .prop_map(|(f, tag, also_rm)| Op::Outside { f, tag, also_rm }),
        1 => (0..DIRS.len()).prop_map(|d| Op::Dir { d }),
        3 => Just(Op::Checkpoint),
        1 => any::<usize>().prop_map(|k| Op::Restore { k }),
    ]
}

/// What one path is: kind and content, permission bits, owner, and which other names of
/// the tree are the same file (its link group, by the group's first name).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    what: hist::Obj,
    mode: Option<u32>,
    owner: (u32, u32),
    group: Option<String>,
}

type Tree = BTreeMap<String, Node>;

/// Every path below `root` (`.agx` at the top left out), each with its metadata.
fn walk(root: &Path, rel: &str, out: &mut Vec<(String, std::fs::Metadata)>) {
    let mut names: Vec<String> = std::fs::read_dir(root.join(rel))
        .unwrap_or_else(|e| panic!("{}/{rel}: {e}", root.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for n in names {
        if rel.is_empty() && n == ".agx" {
            continue;
        }
        let path = if rel.is_empty() {
            n
        } else {
            format!("{rel}/{n}")
        };
        let md = std::fs::symlink_metadata(root.join(&path)).unwrap();
        let dir = md.is_dir();
        out.push((path.clone(), md));
        if dir {
            walk(root, &path, out);
        }
    }
}

/// The tree below `root`. A file that cannot be read (a view of content agx never had)
/// shows as its error.
fn snapshot(root: &Path) -> Tree {
    let mut paths = Vec::new();
    walk(root, "", &mut paths);
    let mut by_ino: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    let mut out = Tree::new();
    for (key, md) in paths {
        let full = root.join(&key);
        let ft = md.file_type();
        let what = if ft.is_file() {
            match std::fs::read(&full) {
                Ok(b) => hist::Obj::File(b),
                Err(e) => hist::Obj::Symlink(format!("unreadable: {e}").into()),
            }
        } else if ft.is_dir() {
            hist::Obj::Dir
        } else if ft.is_symlink() {
            hist::Obj::Symlink(std::fs::read_link(&full).unwrap().into_os_string())
        } else {
            hist::Obj::Other
        };
        if md.is_file() && md.nlink() > 1 {
            by_ino
                .entry((md.dev(), md.ino()))
                .or_default()
                .push(key.clone());
        }
        out.insert(
            key,
            Node {
                what,
                mode: (!ft.is_symlink()).then_some(md.mode() & 0o7777),
                owner: (md.uid(), md.gid()),
                group: None,
            },
        );
    }
    for names in by_ino.into_values().filter(|v| v.len() > 1) {
        for n in &names {
            out.get_mut(n).unwrap().group = Some(names[0].clone());
        }
    }
    out
}

/// `t` without the paths in `skip` (and what is below them); link groups are kept only
/// among the names compared.
fn without(t: &Tree, skip: &BTreeSet<String>) -> Tree {
    let skipped = |p: &str| {
        skip.iter()
            .any(|s| p == s || p.starts_with(&format!("{s}/")))
    };
    let mut out: Tree = t
        .iter()
        .filter(|(p, _)| !skipped(p))
        .map(|(p, n)| (p.clone(), n.clone()))
        .collect();
    // Regroup: the first compared name of each group names it.
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (p, n) in &out {
        if let Some(g) = &n.group {
            groups.entry(g.clone()).or_default().push(p.clone());
        }
    }
    for names in groups.into_values() {
        let g = (names.len() > 1).then(|| names[0].clone());
        for n in names {
            out.get_mut(&n).unwrap().group = g.clone();
        }
    }
    out
}

#[track_caller]
fn assert_same(want: &Tree, got: &Tree, what: &str) {
    let keys: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| want.get(*k) != got.get(*k))
        .map(|k| format!("{k}: want {:?}\n      got  {:?}", want.get(k), got.get(k)))
        .collect();
    assert!(
        diff.is_empty(),
        "{what}: trees differ:\n  {}",
        diff.join("\n  ")
    );
}

/// What the test knows of capture: which paths have history, and when a change of a path
/// went unrecorded (by design).
#[derive(Default)]
struct Known {
    history: BTreeSet<String>,
    /// Path -> the op indices at which a change of it passed unrecorded.
    unrecorded: BTreeMap<String, Vec<usize>>,
    /// Every name each file (by inode: the mount shows the disk's numbers) was seen under.
    names: BTreeMap<u64, BTreeSet<String>>,
    /// Files (inode) whose current content agx keeps: rewritten through the mount
    /// and recorded (a new file's content is only hashed). Emptied by a restore (what it
    /// leaves is not followed here).
    contents: BTreeSet<u64>,
}

fn rule_matches(rule: &str, path: &str) -> bool {
    let comps: Vec<&str> = path.split('/').collect();
    match rule {
        "*" => true,
        r if r.ends_with('/') => {
            let d = r.trim_end_matches('/');
            // A directory named d at any level, and everything below it.
            DIRS.contains(&d) && comps.contains(&d)
        }
        r => comps.contains(&r),
    }
}

impl Known {
    /// A change of `path` at op `i` under the live `.gitignore` rule `rule`.
    /// Returns whether agx records it.
    fn change(&mut self, path: &str, rule: Option<&str>, i: usize) -> bool {
        let ignored = rule.is_some_and(|r| rule_matches(r, path));
        if ignored && !self.history.contains(path) {
            self.unrecorded.entry(path.to_string()).or_default().push(i);
            false
        } else {
            self.history.insert(path.to_string());
            true
        }
    }

    /// A change of content agx has no copy of (nothing can bring it back).
    fn lost(&mut self, path: &str, i: usize) {
        self.unrecorded.entry(path.to_string()).or_default().push(i);
    }

    /// Notes the names of the files now under `root`.
    fn see(&mut self, root: &Path) {
        for f in FILES {
            if let Ok(md) = std::fs::symlink_metadata(root.join(f)) {
                self.names
                    .entry(md.ino())
                    .or_default()
                    .insert(f.to_string());
            }
        }
    }

    /// The content of the file at `path` (through the mount) was recorded: agx has it.
    fn stored(&mut self, path: &Path) {
        if let Ok(md) = std::fs::symlink_metadata(path) {
            self.contents.insert(md.ino());
        }
    }

    /// Paths not comparable at a checkpoint taken before op `i`.
    fn skip_after(&self, i: usize) -> BTreeSet<String> {
        self.unrecorded
            .iter()
            .filter(|(_, at)| at.iter().any(|&t| t >= i))
            .map(|(p, _)| p.clone())
            .collect()
    }
}

fn live_rule(root: &Path) -> Option<String> {
    std::fs::read_to_string(root.join(".gitignore"))
        .ok()
        .and_then(|s| s.lines().next().map(str::to_string))
        .filter(|s| !s.is_empty())
}

fn write_file(p: &Path, data: &[u8]) -> std::io::Result<()> {
    std::fs::write(p, data)
}

/// `agx restore REF --yes --skip-missing` (content agx never had is left as it is, and
/// such paths are not compared); returns the REF that undoes it.
fn restore(m: &Mounted, at: &str) -> Option<String> {
    let o = m.agx(["restore", at, "--yes", "--skip-missing"]);
    let err = hist::stderr(&o);
    hist::ok(o, &format!("agx restore {at}"));
    err.lines()
        .find_map(|l| l.strip_prefix("to undo this restore: agx restore "))
        .map(|s| s.trim().to_string())
}

struct Cp {
    name: String,
    /// The op index at which it was taken.
    at: usize,
    tree: Tree,
}

/// The project before the mount: every name a file, `d/e` a second name of `a`.
fn setup(p: &Path) {
    for d in DIRS {
        std::fs::create_dir(p.join(d)).unwrap();
    }
    for (i, f) in FILES.iter().enumerate().filter(|(_, f)| **f != "d/e") {
        std::fs::write(p.join(f), format!("{f} setup {i}\n")).unwrap();
    }
    std::fs::hard_link(p.join("a"), p.join("d/e")).unwrap();
}

fn run(ops: &[Op]) {
    let mut m = Mounted::with(setup);
    let root = m.path().to_path_buf();
    let p = |rel: &str| root.join(rel);
    let mut known = Known::default();
    let mut cps: Vec<Cp> = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        known.see(&root);
        let rule = live_rule(&root);
        let rule = rule.as_deref();
        match o {
            Op::Write { f, tag } => {
                // A rewrite's new content is stored; a creation's only hashed.
                let existed = p(FILES[*f]).is_file();
                if write_file(&p(FILES[*f]), format!("w{tag}\n").as_bytes()).is_ok()
                    && known.change(FILES[*f], rule, i)
                    && existed
                {
                    known.stored(&p(FILES[*f]));
                }
            }
            Op::Append { f, tag } => {
                let r = std::fs::OpenOptions::new()
                    .append(true)
                    .open(p(FILES[*f]))
                    .and_then(|mut h| h.write_all(format!("+{tag}\n").as_bytes()));
                if r.is_ok() && known.change(FILES[*f], rule, i) {
                    known.stored(&p(FILES[*f]));
                }
            }
            Op::Link { from, to } => {
                if std::fs::hard_link(p(FILES[*from]), p(FILES[*to])).is_ok() {
                    known.change(FILES[*to], rule, i);
                }
            }
            Op::Rename { f, to } => {
                if f != to && std::fs::rename(p(FILES[*f]), p(FILES[*to])).is_ok() {
                    known.change(FILES[*f], rule, i);
                    known.change(FILES[*to], rule, i);
                }
            }
            Op::Replace { f, tag } => {
                let name = FILES[*f];
                let dir = Path::new(name)
                    .parent()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let tmp = if dir.is_empty() {
                    ".save.tmp".to_string()
                } else {
                    format!("{dir}/.save.tmp")
                };
                if write_file(&p(&tmp), format!("r{tag}\n").as_bytes()).is_ok() {
                    known.change(&tmp, rule, i);
                    if std::fs::rename(p(&tmp), p(name)).is_ok() {
                        known.change(name, rule, i);
                    }
                }
            }
            Op::Unlink { f } => {
                if std::fs::remove_file(p(FILES[*f])).is_ok() {
                    known.change(FILES[*f], rule, i);
                }
            }
            Op::Chmod { e, mode } => {
                let name = FILES.iter().chain(DIRS).nth(*e).unwrap();
                let r = std::fs::set_permissions(
                    p(name),
                    std::fs::Permissions::from_mode(MODES[*mode]),
                );
                if r.is_ok() {
                    known.change(name, rule, i);
                }
            }
            Op::Chown { e, owner } => {
                let name = FILES.iter().chain(DIRS).nth(*e).unwrap();
                let (u, g) = OWNERS[*owner];
                if std::os::unix::fs::lchown(p(name), Some(u), Some(g)).is_ok() {
                    known.change(name, rule, i);
                }
            }
            Op::Race { f } => {
                let path = p(FILES[*f]);
                if !path.is_file() {
                    continue;
                }
                known.change(FILES[*f], rule, i);
                let go = Arc::new(Barrier::new(4));
                let writers: Vec<_> = (0..4)
                    .map(|w| {
                        let (path, go) = (path.clone(), go.clone());
                        std::thread::spawn(move || {
                            go.wait();
                            for round in 0..3 {
                                let _ = std::fs::write(&path, format!("race {w}.{round}\n"));
                            }
                        })
                    })
                    .collect();
                for w in writers {
                    w.join().unwrap();
                }
                // Which racing writer's content is last is not known to agx: its
                // after-image may be only a hash (never another change's content), so the
                // file's content is not counted as kept (`Known::stored` is not called).
            }
            Op::Ignore { rule: r } => {
                let res = match r {
                    Some(r) => write_file(&p(".gitignore"), format!("{}\n", RULES[*r]).as_bytes()),
                    None => std::fs::remove_file(p(".gitignore")),
                };
                if res.is_ok() {
                    known.change(".gitignore", rule, i);
                }
            }
            Op::Outside { f, tag, also_rm } => {
                m.unmount();
                let bare = &m.project;
                // Every name of the file written changes with it.
                let names = |path: &Path| -> Vec<String> {
                    let Ok(md) = std::fs::symlink_metadata(path) else {
                        return Vec::new();
                    };
                    FILES
                        .iter()
                        .filter(|n| {
                            std::fs::symlink_metadata(bare.join(n))
                                .is_ok_and(|o| o.ino() == md.ino() && o.dev() == md.dev())
                        })
                        .map(|n| n.to_string())
                        .collect()
                };
                let kept = |k: &Known, path: &Path| {
                    std::fs::symlink_metadata(path).is_ok_and(|md| k.contents.contains(&md.ino()))
                };
                // The old content comes back only if agx has it, and only through a name
                // with history (the others are one file with it at the point).
                let target = bare.join(FILES[*f]);
                let linked = names(&target);
                let back =
                    kept(&known, &target) && linked.iter().any(|n| known.history.contains(n));
                if let Ok(md) = std::fs::symlink_metadata(&target) {
                    known.contents.remove(&md.ino());
                }
                let ever: BTreeSet<String> = std::fs::symlink_metadata(&target)
                    .ok()
                    .and_then(|md| known.names.get(&md.ino()).cloned())
                    .unwrap_or_default();
                if write_file(&target, format!("o{tag}\n").as_bytes()).is_ok() {
                    if !back {
                        // Every name that held this content at some point loses it.
                        known.lost(FILES[*f], i);
                        for n in linked.into_iter().chain(ever) {
                            known.lost(&n, i);
                        }
                    }
                    known
                        .contents
                        .remove(&std::fs::symlink_metadata(&target).unwrap().ino());
                }
                if let Some(r) = also_rm {
                    let gone = bare.join(FILES[*r]);
                    let back = kept(&known, &gone) && known.history.contains(FILES[*r]);
                    let ever: BTreeSet<String> = std::fs::symlink_metadata(&gone)
                        .ok()
                        .and_then(|md| known.names.get(&md.ino()).cloned())
                        .unwrap_or_default();
                    if std::fs::remove_file(&gone).is_ok() && !back {
                        // Every name that held this content at some point loses it.
                        known.lost(FILES[*r], i);
                        for n in ever {
                            known.lost(&n, i);
                        }
                    }
                }
                m.remount();
            }
            Op::Dir { d } => {
                let dir = p(DIRS[*d]);
                if dir.is_dir() {
                    let inside: Vec<String> = hist::tree(&dir)
                        .keys()
                        .map(|k| format!("{}/{}", DIRS[*d], k.display()))
                        .collect();
                    if std::fs::remove_dir_all(&dir).is_ok() {
                        for n in inside {
                            known.change(&n, rule, i);
                        }
                        known.change(DIRS[*d], rule, i);
                    }
                } else if std::fs::create_dir(&dir).is_ok() {
                    known.change(DIRS[*d], rule, i);
                }
            }
            Op::Checkpoint => {
                // The walk looks every path up, so a change made while unmounted is
                // noticed (and recorded) before the point is named.
                let tree = snapshot(&root);
                let name = format!("k{}", cps.len());
                hist::ok(m.agx(["checkpoint", &name]), "agx checkpoint");
                cps.push(Cp { name, at: i, tree });
            }
            Op::Restore { k } => {
                if cps.is_empty() {
                    continue;
                }
                let cp = &cps[k % cps.len()];
                let skip = known.skip_after(cp.at);
                restore(&m, &cp.name);
                known.contents.clear();
                let what = format!("op {i}: live tree after restore {}", cp.name);
                assert_same(
                    &without(&cp.tree, &skip),
                    &without(&snapshot(&root), &skip),
                    &what,
                );
            }
        }
    }
    // Every checkpoint, newest first: view, show, restore, undo.
    for cp in cps.iter().rev() {
        let skip = known.skip_after(cp.at);
        let want = without(&cp.tree, &skip);
        // A view shows each name's content, owner and mode; it does not show which names
        // are one file (every file of a view has one link).
        let unlinked = |t: &Tree| -> Tree {
            t.iter()
                .map(|(p, n)| {
                    (
                        p.clone(),
                        Node {
                            group: None,
                            ..n.clone()
                        },
                    )
                })
                .collect()
        };
        let view = root.join(".agx/at").join(&cp.name);
        assert_same(
            &unlinked(&want),
            &unlinked(&without(&snapshot(&view), &skip)),
            &format!("view of {}", cp.name),
        );
        for (path, n) in &want {
            if let hist::Obj::File(bytes) = &n.what {
                assert_eq!(
                    &hist::show(&m, &cp.name, path),
                    bytes,
                    "agx show {} {path}",
                    cp.name
                );
            }
        }
        let before = snapshot(&root);
        let undo = restore(&m, &cp.name);
        let what = format!("live tree after restore {}", cp.name);
        assert_same(&want, &without(&snapshot(&root), &skip), &what);
        assert_same(
            &want,
            &without(&snapshot(&m.project), &skip),
            &format!("{what} (disk)"),
        );
        if let Some(undo) = undo {
            restore(&m, &undo);
            assert_same(
                &before,
                &snapshot(&root),
                &format!("after undoing restore {} with {undo}", cp.name),
            );
        }
    }
    let v = hist::ok(m.agx(["verify", "--json"]), "agx verify");
    let v: serde_json::Value = serde_json::from_slice(&v).expect("verify --json");
    assert_eq!(v["problems"], serde_json::json!([]), "verify: {v}");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: hist::prop_cases(6),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn restores_views_and_show_agree_with_the_tree_at_every_checkpoint(
        ops in proptest::collection::vec(op(), 1..28)
    ) {
        run(&ops);
    }
}
