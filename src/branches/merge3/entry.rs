//! One path's three states to a decision.
//!
//! Rules, in order:
//! - ours and theirs equal (kind, content, mode, target): ours (nothing to do);
//! - only one side differs from base: that side (its deletion included);
//! - both differ, one deleted: `DeleteModify`;
//! - both present but of different kinds: `TypeChange` (`AddAdd` without a base);
//! - two files: content and mode merge separately. Content: equal or changed on one side
//!   only → that side's; changed on both → a line merge if all three are text, else
//!   `Binary`. Mode: equal or changed on one side only → that; else a mode clash;
//! - two symlinks with different targets: `Symlink` (`AddAdd` without a base); two
//!   other objects (fifo, device...) that differ: `Special` (`AddAdd` without a base).

use crate::ids::ContentHash;

use super::text::{merge_text, TextConflict, TextMerge};
use super::{is_binary, Side};

/// A file's content: the bytes, or only their hash (enough to see what changed; a
/// three-way line merge needs the bytes of all three).
#[derive(Clone, Debug)]
pub enum Content {
    Bytes(Vec<u8>),
    Hash(ContentHash),
}

impl Content {
    pub fn hash(&self) -> ContentHash {
        match self {
            Content::Bytes(b) => ContentHash::of(b),
            Content::Hash(h) => *h,
        }
    }

    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Content::Bytes(b) => Some(b),
            Content::Hash(_) => None,
        }
    }

    pub fn same(&self, other: &Content) -> bool {
        match (self, other) {
            (Content::Bytes(a), Content::Bytes(b)) => a == b,
            _ => self.hash() == other.hash(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Content::Bytes(b) => b.is_empty(),
            Content::Hash(h) => *h == ContentHash::of(b""),
        }
    }
}

/// The state of a path on one side (absence is `None` where an entry is expected).
#[derive(Clone, Debug)]
pub enum Entry {
    /// A regular file; `mode` is its permission bits (st_mode & 0o7777).
    File {
        content: Content,
        mode: u32,
    },
    Symlink {
        target: Vec<u8>,
    },
    Dir,
    /// A fifo, socket or device node: `mode` is the whole st_mode.
    Other {
        mode: u32,
        rdev: u64,
    },
}

impl Entry {
    pub fn same(&self, other: &Entry) -> bool {
        match (self, other) {
            (
                Entry::File { content, mode },
                Entry::File {
                    content: c2,
                    mode: m2,
                },
            ) => mode == m2 && content.same(c2),
            (Entry::Symlink { target }, Entry::Symlink { target: t2 }) => target == t2,
            (Entry::Dir, Entry::Dir) => true,
            (Entry::Other { mode, rdev }, Entry::Other { mode: m2, rdev: r2 }) => {
                mode == m2 && rdev == r2
            }
            _ => false,
        }
    }

    pub fn is_dir(&self) -> bool {
        matches!(self, Entry::Dir)
    }

    pub fn file_mode(&self) -> Option<u32> {
        match self {
            Entry::File { mode, .. } => Some(*mode),
            _ => None,
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Entry::File { .. } => 0,
            Entry::Symlink { .. } => 1,
            Entry::Dir => 2,
            Entry::Other { .. } => 3,
        }
    }
}

fn same(a: Option<&Entry>, b: Option<&Entry>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => x.same(y),
        _ => false,
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    /// A file changed on both sides was given by hash only: its bytes are needed.
    #[error("{path}: both sides changed it, and merging needs the bytes of {side:?}'s version (only its hash was given)")]
    MissingContent { path: String, side: String },
}

/// Why a path cannot be merged without a choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConflictKind {
    /// Text changed on both sides in overlapping places: see the hunks.
    BothModified,
    /// Content changed on both sides and one of the versions is binary.
    Binary,
    /// One side deleted what the other changed (or renamed).
    DeleteModify { deleted_by: Side },
    /// Both sides created the path, differently.
    AddAdd,
    /// Both sides changed the path, one to another kind (file, symlink, directory...).
    TypeChange,
    /// Content merged, but both sides changed the file's mode, differently.
    Mode,
    /// Both sides retargeted the symlink, differently.
    Symlink,
    /// Both sides changed a fifo, socket or device node, differently.
    Special,
    /// The same file was renamed to different names on the two sides.
    RenameRename {
        base: String,
        ours: String,
        theirs: String,
    },
    /// The path is a file (or symlink...) in the merge while paths below it remain.
    DirectoryFile,
}

impl ConflictKind {
    /// A short name for listings: `both-modified`, `delete-modify`, ...
    pub fn name(&self) -> &'static str {
        match self {
            ConflictKind::BothModified => "both-modified",
            ConflictKind::Binary => "binary",
            ConflictKind::DeleteModify { .. } => "delete-modify",
            ConflictKind::AddAdd => "add-add",
            ConflictKind::TypeChange => "type-change",
            ConflictKind::Mode => "mode",
            ConflictKind::Symlink => "symlink",
            ConflictKind::Special => "special",
            ConflictKind::RenameRename { .. } => "rename-rename",
            ConflictKind::DirectoryFile => "directory-file",
        }
    }
}

/// A conflict at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub kind: ConflictKind,
    /// For text merges with conflicts (`BothModified`, or `AddAdd` of text): the hunks
    /// and the rendering with markers.
    pub text: Option<TextConflict>,
    /// File modes of base, ours and theirs (None: not a file there).
    pub modes: [Option<u32>; 3],
    /// The merged mode, when both are files and their modes do not clash.
    pub mode: Option<u32>,
    /// For `Mode` conflicts: the content both sides' changes merged to.
    pub content: Option<Merged>,
}

/// Content settled by the merge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Merged {
    /// One side's content as it is.
    Side(Side),
    /// Content combined from both sides.
    Bytes(Vec<u8>),
}

/// What a path becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Ours as it is (absent included).
    Ours,
    /// Theirs as it is (absent included).
    Theirs,
    /// A file with one side's content and the given (merged) mode.
    WithMode {
        content: Side,
        mode: u32,
    },
    /// A file with merged content.
    Merged {
        bytes: Vec<u8>,
        mode: u32,
    },
    Conflict(Conflict),
}

fn conflict(
    kind: ConflictKind,
    b: Option<&Entry>,
    o: Option<&Entry>,
    t: Option<&Entry>,
) -> Outcome {
    Outcome::Conflict(Conflict {
        kind,
        text: None,
        modes: [b, o, t].map(|e| e.and_then(Entry::file_mode)),
        mode: None,
        content: None,
    })
}

/// Decides one path from its base, ours and theirs states (None: absent). `path` is only
/// used in errors.
pub fn merge_entry(
    path: &str,
    base: Option<&Entry>,
    ours: Option<&Entry>,
    theirs: Option<&Entry>,
) -> Result<Outcome, MergeError> {
    if same(ours, theirs) || same(theirs, base) {
        return Ok(Outcome::Ours);
    }
    if same(ours, base) {
        return Ok(Outcome::Theirs);
    }
    let (o, t) = match (ours, theirs) {
        (None, _) => {
            let k = ConflictKind::DeleteModify {
                deleted_by: Side::Ours,
            };
            return Ok(conflict(k, base, ours, theirs));
        }
        (_, None) => {
            let k = ConflictKind::DeleteModify {
                deleted_by: Side::Theirs,
            };
            return Ok(conflict(k, base, ours, theirs));
        }
        (Some(o), Some(t)) => (o, t),
    };
    let added = base.is_none();
    let kind = match (o, t) {
        (Entry::File { .. }, Entry::File { .. }) => return merge_files(path, base, o, t),
        _ if o.kind() != t.kind() || added => {
            if added {
                ConflictKind::AddAdd
            } else {
                ConflictKind::TypeChange
            }
        }
        (Entry::Symlink { .. }, _) => ConflictKind::Symlink,
        (Entry::Other { .. }, _) => ConflictKind::Special,
        // Two directories are always the same entry (handled above); be safe anyway.
        _ => return Ok(Outcome::Ours),
    };
    Ok(conflict(kind, base, ours, theirs))
}

/// Both sides have a file and at least one of content and mode changed on both.
fn merge_files(
    path: &str,
    base: Option<&Entry>,
    o: &Entry,
    t: &Entry,
) -> Result<Outcome, MergeError> {
    let (
        Entry::File {
            content: co,
            mode: mo,
        },
        Entry::File {
            content: ct,
            mode: mt,
        },
    ) = (o, t)
    else {
        return Ok(Outcome::Ours);
    };
    let (mo, mt) = (*mo, *mt);
    let (cb, mb) = match base {
        Some(Entry::File { content, mode }) => (Some(content), Some(*mode)),
        _ => (None, None),
    };
    let modes = [mb, Some(mo), Some(mt)];
    let mode = if mo == mt || mb == Some(mt) {
        Some(mo)
    } else if mb == Some(mo) {
        Some(mt)
    } else {
        None
    };

    let content = if co.same(ct) || cb.is_some_and(|b| b.same(ct)) {
        Merged::Side(Side::Ours)
    } else if cb.is_some_and(|b| b.same(co)) {
        Merged::Side(Side::Theirs)
    } else {
        let need = |c: Option<&Content>, side: &str| -> Result<Vec<u8>, MergeError> {
            match c {
                None => Ok(Vec::new()),
                Some(c) => c
                    .bytes()
                    .map(<[u8]>::to_vec)
                    .ok_or(MergeError::MissingContent {
                        path: path.to_string(),
                        side: side.to_string(),
                    }),
            }
        };
        let (b, ob, tb) = (
            need(cb, "base")?,
            need(Some(co), "ours")?,
            need(Some(ct), "theirs")?,
        );
        let both = if base.is_none() {
            ConflictKind::AddAdd
        } else {
            ConflictKind::BothModified
        };
        let (kind, text) = if is_binary(&b) || is_binary(&ob) || is_binary(&tb) {
            let kind = if base.is_none() {
                ConflictKind::AddAdd
            } else {
                ConflictKind::Binary
            };
            (kind, None)
        } else {
            match merge_text(&b, &ob, &tb) {
                TextMerge::Clean(bytes) => {
                    return Ok(match mode {
                        Some(mode) => Outcome::Merged { bytes, mode },
                        None => Outcome::Conflict(Conflict {
                            kind: ConflictKind::Mode,
                            text: None,
                            modes,
                            mode,
                            content: Some(Merged::Bytes(bytes)),
                        }),
                    });
                }
                TextMerge::Conflicted(c) => (both, Some(c)),
            }
        };
        return Ok(Outcome::Conflict(Conflict {
            kind,
            text,
            modes,
            mode,
            content: None,
        }));
    };
    let Merged::Side(side) = content else {
        return Ok(Outcome::Ours);
    };
    let side_mode = match side {
        Side::Ours => mo,
        Side::Theirs => mt,
    };
    Ok(match mode {
        Some(m) if m == side_mode => match side {
            Side::Ours => Outcome::Ours,
            Side::Theirs => Outcome::Theirs,
        },
        Some(mode) => Outcome::WithMode {
            content: side,
            mode,
        },
        None => Outcome::Conflict(Conflict {
            kind: ConflictKind::Mode,
            text: None,
            modes,
            mode,
            content: Some(Merged::Side(side)),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(s: &str, mode: u32) -> Entry {
        Entry::File {
            content: Content::Bytes(s.as_bytes().to_vec()),
            mode,
        }
    }

    fn link(t: &str) -> Entry {
        Entry::Symlink {
            target: t.as_bytes().to_vec(),
        }
    }

    fn m(b: Option<&Entry>, o: Option<&Entry>, t: Option<&Entry>) -> Outcome {
        merge_entry("p", b, o, t).unwrap()
    }

    fn kind(o: Outcome) -> ConflictKind {
        match o {
            Outcome::Conflict(c) => c.kind,
            other => panic!("not a conflict: {other:?}"),
        }
    }

    #[test]
    fn one_side_changes() {
        let b = file("a\n", 0o644);
        let x = file("x\n", 0o644);
        assert_eq!(m(Some(&b), Some(&b), Some(&x)), Outcome::Theirs);
        assert_eq!(m(Some(&b), Some(&x), Some(&b)), Outcome::Ours);
        assert_eq!(m(Some(&b), Some(&x), Some(&x)), Outcome::Ours);
        // Deleted on one side, untouched on the other: the deletion.
        assert_eq!(m(Some(&b), Some(&b), None), Outcome::Theirs);
        assert_eq!(m(Some(&b), None, Some(&b)), Outcome::Ours);
        // Added on one side only, deleted on both.
        assert_eq!(m(None, None, Some(&x)), Outcome::Theirs);
        assert_eq!(m(Some(&b), None, None), Outcome::Ours);
        // Added the same on both.
        assert_eq!(m(None, Some(&x), Some(&x)), Outcome::Ours);
    }

    #[test]
    fn text_both_sides() {
        let b = file("1\n2\n3\n", 0o644);
        let o = file("one\n2\n3\n", 0o644);
        let t = file("1\n2\nthree\n", 0o644);
        assert_eq!(
            m(Some(&b), Some(&o), Some(&t)),
            Outcome::Merged {
                bytes: b"one\n2\nthree\n".to_vec(),
                mode: 0o644
            }
        );
        let t2 = file("uno\n2\n3\n", 0o644);
        let out = m(Some(&b), Some(&o), Some(&t2));
        let Outcome::Conflict(c) = out else { panic!() };
        assert_eq!(c.kind, ConflictKind::BothModified);
        assert_eq!(c.text.unwrap().hunks().count(), 1);
        assert_eq!(c.mode, Some(0o644));
    }

    #[test]
    fn binary_both_sides() {
        let b = file("a\0", 0o644);
        let o = file("b\0", 0o644);
        let t = file("c\0", 0o644);
        assert_eq!(kind(m(Some(&b), Some(&o), Some(&t))), ConflictKind::Binary);
        // Invalid UTF-8 counts as binary too.
        let o = Entry::File {
            content: Content::Bytes(b"\xff\n".to_vec()),
            mode: 0o644,
        };
        let b = file("a\n", 0o644);
        let t = file("c\n", 0o644);
        assert_eq!(kind(m(Some(&b), Some(&o), Some(&t))), ConflictKind::Binary);
        // Binary changed on one side only is just taken.
        let o = file("b\0", 0o644);
        assert_eq!(m(Some(&b), Some(&o), Some(&b)), Outcome::Ours);
    }

    #[test]
    fn delete_modify_both_ways() {
        let b = file("a\n", 0o644);
        let x = file("x\n", 0o644);
        assert_eq!(
            kind(m(Some(&b), None, Some(&x))),
            ConflictKind::DeleteModify {
                deleted_by: Side::Ours
            }
        );
        assert_eq!(
            kind(m(Some(&b), Some(&x), None)),
            ConflictKind::DeleteModify {
                deleted_by: Side::Theirs
            }
        );
        // A mode change is a modification too.
        let bx = file("a\n", 0o755);
        assert_eq!(
            kind(m(Some(&b), Some(&bx), None)),
            ConflictKind::DeleteModify {
                deleted_by: Side::Theirs
            }
        );
    }

    #[test]
    fn add_add() {
        let o = file("x\n", 0o644);
        let t = file("y\n", 0o644);
        let out = m(None, Some(&o), Some(&t));
        let Outcome::Conflict(c) = &out else { panic!() };
        assert_eq!(c.kind, ConflictKind::AddAdd);
        // Text add-add still has hunks (against an empty base) for markers.
        assert!(c.text.is_some());
        assert_eq!(
            kind(m(None, Some(&link("a")), Some(&link("b")))),
            ConflictKind::AddAdd
        );
        assert_eq!(
            kind(m(None, Some(&o), Some(&link("b")))),
            ConflictKind::AddAdd
        );
        // Same content, different modes.
        let t = file("x\n", 0o755);
        assert_eq!(kind(m(None, Some(&o), Some(&t))), ConflictKind::Mode);
    }

    #[test]
    fn type_change() {
        let b = file("a\n", 0o644);
        let x = file("x\n", 0o644);
        assert_eq!(
            kind(m(Some(&b), Some(&x), Some(&link("t")))),
            ConflictKind::TypeChange
        );
        assert_eq!(
            kind(m(Some(&b), Some(&Entry::Dir), Some(&x))),
            ConflictKind::TypeChange
        );
        // Changed to a symlink on one side only: taken.
        assert_eq!(m(Some(&b), Some(&b), Some(&link("t"))), Outcome::Theirs);
    }

    #[test]
    fn modes_merge_apart_from_content() {
        let b = file("1\n2\n3\n", 0o644);
        // Ours changes content, theirs the mode.
        let o = file("one\n2\n3\n", 0o644);
        let t = file("1\n2\n3\n", 0o755);
        assert_eq!(
            m(Some(&b), Some(&o), Some(&t)),
            Outcome::WithMode {
                content: Side::Ours,
                mode: 0o755
            }
        );
        assert_eq!(
            m(Some(&b), Some(&t), Some(&o)),
            Outcome::WithMode {
                content: Side::Theirs,
                mode: 0o755
            }
        );
        // Both change content (mergeable), one the mode.
        let t = file("1\n2\nthree\n", 0o755);
        assert_eq!(
            m(Some(&b), Some(&o), Some(&t)),
            Outcome::Merged {
                bytes: b"one\n2\nthree\n".to_vec(),
                mode: 0o755
            }
        );
        // Both change the mode differently: a mode conflict with the content settled.
        let o = file("one\n2\n3\n", 0o600);
        let t = file("1\n2\n3\n", 0o755);
        let Outcome::Conflict(c) = m(Some(&b), Some(&o), Some(&t)) else {
            panic!()
        };
        assert_eq!(c.kind, ConflictKind::Mode);
        assert_eq!(c.content, Some(Merged::Side(Side::Ours)));
        assert_eq!(c.modes, [Some(0o644), Some(0o600), Some(0o755)]);
        // Same mode change on both sides: fine.
        let o = file("one\n2\n3\n", 0o755);
        assert_eq!(m(Some(&b), Some(&o), Some(&t)), Outcome::Ours);
    }

    #[test]
    fn symlinks() {
        let b = link("a");
        assert_eq!(m(Some(&b), Some(&b), Some(&link("c"))), Outcome::Theirs);
        assert_eq!(
            m(Some(&b), Some(&link("c")), Some(&link("c"))),
            Outcome::Ours
        );
        assert_eq!(
            kind(m(Some(&b), Some(&link("c")), Some(&link("d")))),
            ConflictKind::Symlink
        );
    }

    #[test]
    fn specials_and_dirs() {
        let f1 = Entry::Other {
            mode: 0o10644,
            rdev: 0,
        };
        let f2 = Entry::Other {
            mode: 0o10600,
            rdev: 0,
        };
        let f3 = Entry::Other {
            mode: 0o10640,
            rdev: 0,
        };
        assert_eq!(
            kind(m(Some(&f1), Some(&f2), Some(&f3))),
            ConflictKind::Special
        );
        assert_eq!(
            m(Some(&Entry::Dir), Some(&Entry::Dir), None),
            Outcome::Theirs
        );
        assert_eq!(m(None, Some(&Entry::Dir), Some(&Entry::Dir)), Outcome::Ours);
    }

    #[test]
    fn hashes_stand_in_for_bytes_until_a_merge_needs_them() {
        let b = file("1\n2\n3\n", 0o644);
        let o = Entry::File {
            content: Content::Hash(ContentHash::of(b"1\n2\n3\n")),
            mode: 0o644,
        };
        let t = file("1\n2\nthree\n", 0o644);
        // Ours unchanged (by hash): theirs is taken.
        assert_eq!(m(Some(&b), Some(&o), Some(&t)), Outcome::Theirs);
        let o = Entry::File {
            content: Content::Hash(ContentHash::of(b"one\n2\n3\n")),
            mode: 0o644,
        };
        assert_eq!(
            merge_entry("p", Some(&b), Some(&o), Some(&t)),
            Err(MergeError::MissingContent {
                path: "p".into(),
                side: "ours".into()
            })
        );
    }
}
