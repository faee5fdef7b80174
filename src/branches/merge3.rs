//! Three-way merge for `agx merge`: base = the branch's base point, ours = the main tree
//! now, theirs = the branch now. Pure data in, pure data out: nothing here touches the
//! filesystem.
//!
//! - [`merge_text`]: line merge of one file's bytes, as `git merge-file --diff3` does it
//!   (same diff, same conflict hunks, same markers), checked against git by
//!   tests/merge3_git.rs.
//! - [`merge_entry`]: one path's three states (absent, file, symlink, directory, other)
//!   to an [`Outcome`]: one side, merged content, or a [`Conflict`] of some
//!   [`ConflictKind`]. File modes merge on their own, apart from content.
//! - [`plan`]: whole trees (path → [`Entry`]) to a [`Plan`] of per-path [`Action`]s,
//!   following renames on either side ([`find_renames`]).
//! - [`resolve`]: a plan with conflicts plus the user's [`Choices`] (`--ours`,
//!   `--theirs`, `--markers`, for the run or per path) to conflict-free actions.
//!
//! ```
//! use agx::branches::merge3::{merge_text, Labels, TextMerge};
//! match merge_text(b"a\nb\nc\n", b"A\nb\nc\n", b"a\nb\nC\n") {
//!     TextMerge::Clean(m) => assert_eq!(m, b"A\nb\nC\n"),
//!     TextMerge::Conflicted(c) => {
//!         let _with_markers = c.with_markers(&Labels::default());
//!         unreachable!()
//!     }
//! }
//! ```

mod entry;
mod plan;
mod text;
mod xdiff;

pub use entry::{merge_entry, Conflict, ConflictKind, Content, Entry, MergeError, Outcome};
pub use plan::{
    find_renames, plan, resolve, Action, Choice, Choices, Options, PathConflict, Plan, Tree,
    Unresolved,
};
pub use text::{merge_text, Chunk, ConflictHunk, Labels, Region, TextConflict, TextMerge};

/// One of the two sides of a merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The main tree.
    Ours,
    /// The branch.
    Theirs,
}

/// Whether content is merged as binary (never line by line): a NUL in the first 8000
/// bytes, or not UTF-8. The same rule as `agx diff` (restore::diff), so what diff shows
/// as text is what merge merges as text.
pub fn is_binary(b: &[u8]) -> bool {
    b[..b.len().min(8000)].contains(&0) || std::str::from_utf8(b).is_err()
}
