//! Issue 15, branches: one test binary (jj's pattern, one link). Every test works on a
//! real mount with ordinary syscalls and real tools, in `.agx/branches/NAME/`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../hist/mod.rs"]
mod hist;
#[path = "../mutations/mod.rs"]
mod mutations;
#[path = "../util/mod.rs"]
mod util;

mod basics;
mod crash;
mod gc;
mod history;
mod isolation;
mod merge;
mod mount;
mod prop;
mod switch;
mod tools;

use std::path::{Path, PathBuf};

use common::Mounted;

/// Makes branch `name` (with `--from REF` when given) and returns its directory.
pub fn branch(m: &Mounted, name: &str, from: Option<&str>) -> PathBuf {
    let mut args = vec!["branch", "create", name];
    if let Some(f) = from {
        args.extend(["--from", f]);
    }
    hist::ok(m.agx(args), "branch create");
    m.p(format!(".agx/branches/{name}"))
}

/// The tree below `root` as `hist::tree` sees it.
pub fn tree(root: &Path) -> std::collections::BTreeMap<PathBuf, hist::Node> {
    hist::tree(root)
}
