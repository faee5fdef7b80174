//! The tree at a past point, relative to the live tree.
//!
//! Built by undoing events newest first. A path's state is explicit (recorded in an
//! event), a mirror of some live path (the object that is there now, possibly moved since),
//! or absent. Paths no event touched mirror themselves. This is DESIGN.md's "state at a
//! point" rule made to follow renames: a file's content at point s is the before-image of
//! the earliest later event on it, and an object renamed since is found where it went.

use std::collections::BTreeMap;

use crate::ids::{ContentHash, Seq};
use crate::timeline::{Event, Kind, Meta, Op};

/// One path's state in the model.
// Nodes are most entries: boxing them would add an allocation to each for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Absent,
    Node(Node),
}

/// A present object. With `src`, whatever is not recorded here (content, children,
/// metadata) is that of the live object at `src`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// None: the kind of the live object at `src`.
    pub kind: Option<Kind>,
    pub hash: Option<ContentHash>,
    pub meta: Option<Meta>,
    pub src: Option<Vec<u8>>,
    /// False when the content was too large to keep (only its hash is known).
    pub captured: bool,
    /// The content is not the live object's (a change of it was recorded) and agx never
    /// learnt what it was (a change made outside agx to content it had not kept): with
    /// `src`, only the object's identity and the unrecorded metadata come from there.
    pub unknown: bool,
    /// For a recorded object: the event that recorded it. Until then, the path named the
    /// same object it named at the point (a change of what a name refers to is an event
    /// on it), which is what lets `restore/links.rs` tie inode numbers to the point.
    pub seen: Option<Seq>,
}

impl Node {
    pub fn live(p: &[u8]) -> Node {
        Node {
            kind: None,
            hash: None,
            meta: None,
            src: Some(p.to_vec()),
            captured: true,
            unknown: false,
            seen: None,
        }
    }

    fn recorded(
        kind: Kind,
        hash: Option<ContentHash>,
        meta: Option<Meta>,
        captured: bool,
        seen: Seq,
    ) -> Node {
        Node {
            kind: Some(kind),
            hash,
            meta,
            src: None,
            captured,
            unknown: false,
            seen: Some(seen),
        }
    }
}

fn join(a: &[u8], rest: &[u8]) -> Vec<u8> {
    if rest.is_empty() {
        return a.to_vec();
    }
    let mut v = a.to_vec();
    v.push(b'/');
    v.extend_from_slice(rest);
    v
}

/// Ancestors of a path, nearest first, each with the rest of the path below it.
fn ancestors(p: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let cuts: Vec<usize> = p
        .iter()
        .enumerate()
        .filter(|(_, c)| **c == b'/')
        .map(|(i, _)| i)
        .collect();
    cuts.into_iter().rev().map(move |i| (&p[..i], &p[i + 1..]))
}

fn subtree_upper(p: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lo = p.to_vec();
    lo.push(b'/');
    let mut hi = p.to_vec();
    hi.push(b'/' + 1);
    (lo, hi)
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    map: BTreeMap<Vec<u8>, Entry>,
}

impl Model {
    pub fn new() -> Model {
        Model::default()
    }

    /// The state of `p` in the model.
    pub fn lookup(&self, p: &[u8]) -> Entry {
        if let Some(e) = self.map.get(p) {
            return e.clone();
        }
        for (a, rest) in ancestors(p) {
            match self.map.get(a) {
                None => continue,
                Some(Entry::Node(n)) => {
                    let is_dir = n.kind.is_none() || n.kind == Some(Kind::Dir);
                    return match (&n.src, is_dir) {
                        (Some(src), true) => Entry::Node(Node::live(&join(src, rest))),
                        _ => Entry::Absent,
                    };
                }
                Some(Entry::Absent) => return Entry::Absent,
            }
        }
        Entry::Node(Node::live(p))
    }

    /// Explicit entries, in path order.
    pub fn entries(&self) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.map.iter()
    }

    /// Removes and returns the explicit entries at and below `p` (relative paths; "" is
    /// `p` itself).
    fn take_subtree(&mut self, p: &[u8]) -> Vec<(Vec<u8>, Entry)> {
        let mut out = Vec::new();
        if let Some(e) = self.map.remove(p) {
            out.push((Vec::new(), e));
        }
        let (lo, hi) = subtree_upper(p);
        let keys: Vec<Vec<u8>> = self.map.range(lo..hi).map(|(k, _)| k.clone()).collect();
        for k in keys {
            let e = self.map.remove(&k).expect("key listed");
            out.push((k[p.len() + 1..].to_vec(), e));
        }
        out
    }

    fn put_subtree(&mut self, p: &[u8], top: Entry, below: Vec<(Vec<u8>, Entry)>) {
        self.map.insert(p.to_vec(), top);
        for (rest, e) in below {
            if !rest.is_empty() {
                self.map.insert(join(p, &rest), e);
            }
        }
    }

    /// Moves the object at `from` (with everything below it) to `to`.
    fn move_subtree(&mut self, from: &[u8]) -> (Entry, Vec<(Vec<u8>, Entry)>) {
        let top = self.lookup(from);
        let below = self.take_subtree(from);
        (top, below)
    }

    /// Undoes one event: the model becomes the tree as it was just before it.
    pub fn undo(&mut self, e: &Event) {
        let p = e.path.as_slice();
        match e.op {
            Op::Write | Op::Truncate | Op::Fallocate => {
                let now = self.lookup(p);
                // A restore writes a new file and renames it into place: its write
                // replaces the object. Every other content change is made in place.
                let inode = |s: &crate::timeline::ObjState| s.meta.as_ref().and_then(|m| m.id());
                let replaced = matches!(
                    (inode(&e.before), inode(&e.after)),
                    (Some(b), Some(a)) if a != b
                );
                if !replaced && Self::elsewhere(&now, &e.before) {
                    return;
                }
                let mut n = Node::recorded(
                    Kind::File,
                    e.before.hash,
                    e.before.meta.clone(),
                    e.captured,
                    e.seq,
                );
                // Changed in place, it is still the object the model has there (live, and
                // maybe moved since): `plan::resolve` checks the inode of that one. Its
                // content before the change is the recorded one, never the live one: where
                // the event knows none, it is unknown.
                if let (Entry::Node(live), false) = (now, replaced) {
                    n.src = live.src;
                    n.unknown = e.before.hash.is_none();
                }
                self.map.insert(p.to_vec(), Entry::Node(n));
            }
            Op::Chmod | Op::Chown | Op::Utimens | Op::Setxattr | Op::Removexattr | Op::Chattr => {
                let now = self.lookup(p);
                if Self::elsewhere(&now, &e.before) {
                    return;
                }
                if let Entry::Node(mut n) = now {
                    n.meta = e.before.meta.clone();
                    if n.kind.is_none() && e.before.kind != Kind::Absent {
                        n.kind = Some(e.before.kind);
                    }
                    self.map.insert(p.to_vec(), Entry::Node(n));
                }
            }
            Op::Create | Op::Mkdir | Op::Mknod | Op::Symlink => {
                self.take_subtree(p);
                self.map.insert(p.to_vec(), Entry::Absent);
            }
            // A link made by a restore may replace a file (recorded as its before-state);
            // one made through the mount never does (its before-state is absent).
            Op::Unlink | Op::Rmdir | Op::Link => {
                self.take_subtree(p);
                self.map
                    .insert(p.to_vec(), Self::recorded(&e.before, e.captured, e.seq));
            }
            Op::Rename => {
                let Some(b) = e.to_path.as_deref() else {
                    return;
                };
                let (top, below) = self.move_subtree(b);
                self.take_subtree(p);
                self.put_subtree(p, top, below);
                let target = e
                    .target_before
                    .clone()
                    .unwrap_or_else(crate::timeline::ObjState::absent);
                self.map
                    .insert(b.to_vec(), Self::recorded(&target, true, e.seq));
            }
            Op::Exchange => {
                let Some(b) = e.to_path.as_deref() else {
                    return;
                };
                let (ta, ba) = self.move_subtree(p);
                let (tb, bb) = self.move_subtree(b);
                self.put_subtree(p, tb, bb);
                self.put_subtree(b, ta, ba);
            }
        }
    }

    /// Whether an event changing an object in place (content, metadata) was recorded of
    /// another object than the one the model has at its path. FUSE names such a change by
    /// the path the kernel last reached the file under; for a file with several names that
    /// may be another of its names, or, once that name went to another file, a name of
    /// that other file. Such an event is left out of the path model (whose entry there
    /// belongs to another object); `links::History` still counts it for its inode. A
    /// mirrored live object's inode is checked in `plan::resolve`.
    fn elsewhere(now: &Entry, before: &crate::timeline::ObjState) -> bool {
        let Some(was) = before.meta.as_ref().and_then(|m| m.id()) else {
            return false;
        };
        match now {
            Entry::Absent => true,
            Entry::Node(n) => n
                .meta
                .as_ref()
                .and_then(|m| m.id())
                .is_some_and(|i| i != was),
        }
    }

    fn recorded(s: &crate::timeline::ObjState, captured: bool, seen: Seq) -> Entry {
        match s.kind {
            Kind::Absent => Entry::Absent,
            k => Entry::Node(Node::recorded(k, s.hash, s.meta.clone(), captured, seen)),
        }
    }

    /// The model at the point just after `events` were applied to it... undone: applies
    /// `undo` to each, newest first.
    pub fn undo_all<'a>(&mut self, events: impl DoubleEndedIterator<Item = &'a Event>) {
        for e in events.rev() {
            self.undo(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Actor, ObjState};

    fn file(h: &str) -> ObjState {
        ObjState {
            kind: Kind::File,
            hash: Some(ContentHash::of(h.as_bytes())),
            meta: None,
        }
    }

    fn ev(op: Op, p: &str, to: Option<&str>, before: ObjState, target: Option<ObjState>) -> Event {
        Event {
            seq: Seq(0),
            time_ns: 0,
            op,
            path: p.as_bytes().to_vec(),
            to_path: to.map(|t| t.as_bytes().to_vec()),
            before,
            after: ObjState::absent(),
            target_before: target,
            captured: true,
            actor: Actor::default(),
            session: None,
            tool_call: None,
            note: None,
            branch: None,
        }
    }

    fn hash_at(m: &Model, p: &str) -> Option<ContentHash> {
        match m.lookup(p.as_bytes()) {
            Entry::Node(n) => n.hash,
            Entry::Absent => None,
        }
    }

    #[test]
    fn untouched_paths_mirror_themselves() {
        let m = Model::new();
        assert_eq!(m.lookup(b"a/b"), Entry::Node(Node::live(b"a/b")));
    }

    #[test]
    fn write_then_rename_over() {
        // a was "A1", written to "A2"; b was "B"; then a renamed over b.
        let mut m = Model::new();
        let events = [
            ev(Op::Write, "a", None, file("A1"), None),
            ev(
                Op::Rename,
                "a",
                Some("b"),
                ObjState::absent(),
                Some(file("B")),
            ),
        ];
        m.undo_all(events.iter());
        assert_eq!(hash_at(&m, "a"), Some(ContentHash::of(b"A1")));
        assert_eq!(hash_at(&m, "b"), Some(ContentHash::of(b"B")));
    }

    #[test]
    fn directory_rename_moves_children_back() {
        // d/x existed; d renamed to e; then e/y created.
        let mut m = Model::new();
        let events = [
            ev(
                Op::Rename,
                "d",
                Some("e"),
                ObjState::absent(),
                Some(ObjState::absent()),
            ),
            ev(Op::Create, "e/y", None, ObjState::absent(), None),
        ];
        m.undo_all(events.iter());
        assert_eq!(m.lookup(b"d/x"), Entry::Node(Node::live(b"e/x")));
        assert_eq!(m.lookup(b"d/y"), Entry::Absent);
        assert_eq!(m.lookup(b"e"), Entry::Absent);
        assert_eq!(m.lookup(b"e/x"), Entry::Absent);
    }

    #[test]
    fn unlink_and_rmdir_bring_back_recorded_state() {
        let mut m = Model::new();
        let dir = ObjState {
            kind: Kind::Dir,
            hash: None,
            meta: None,
        };
        let events = [
            ev(Op::Unlink, "d/f", None, file("F"), None),
            ev(Op::Rmdir, "d", None, dir, None),
        ];
        m.undo_all(events.iter());
        assert_eq!(hash_at(&m, "d/f"), Some(ContentHash::of(b"F")));
        assert!(matches!(
            m.lookup(b"d"),
            Entry::Node(Node {
                kind: Some(Kind::Dir),
                src: None,
                ..
            })
        ));
        assert_eq!(m.lookup(b"d/other"), Entry::Absent);
    }

    #[test]
    fn exchange_swaps() {
        let mut m = Model::new();
        m.undo(&ev(Op::Exchange, "a", Some("b"), ObjState::absent(), None));
        assert_eq!(m.lookup(b"a"), Entry::Node(Node::live(b"b")));
        assert_eq!(m.lookup(b"b/c"), Entry::Node(Node::live(b"a/c")));
    }
}
