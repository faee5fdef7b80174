//! Real tools in a branch: git, make, tar, cargo. A branch has its own copy-on-write
//! `.git` state: what git does in it changes only the branch.

use crate::common::{sh, Mounted};
use crate::util::{git, git_ok};
use crate::{branch, hist, tree};

fn repo(p: &std::path::Path) {
    git_ok(p, &["init", "-q", "-b", "main"]);
    sh(p, "mkdir -p src; echo 'fn main() {}' > src/main.rs; echo hello > README; echo 'target/' > .gitignore");
    git_ok(p, &["add", "."]);
    git_ok(p, &["commit", "-q", "-m", "first"]);
}

#[test]
fn git_in_a_branch_changes_only_the_branch() {
    let m = Mounted::with(repo);
    let main_head = git_ok(m.path(), &["rev-parse", "HEAD"]);
    let b = branch(&m, "g", None);
    assert_eq!(
        git_ok(&b, &["status", "--porcelain"]),
        "",
        "a clean branch is clean"
    );
    assert_eq!(git_ok(&b, &["rev-parse", "HEAD"]), main_head);
    sh(&b, "echo more >> README; echo new > NEW");
    git_ok(&b, &["add", "."]);
    git_ok(&b, &["commit", "-q", "-m", "in the branch"]);
    git_ok(&b, &["checkout", "-q", "-b", "side"]);
    sh(&b, "git rm -q src/main.rs");
    git_ok(&b, &["commit", "-q", "-m", "removed"]);
    git_ok(&b, &["gc", "-q"]);
    assert_eq!(
        git_ok(&b, &["log", "--format=%s"]),
        "removed\nin the branch\nfirst\n"
    );
    // The main tree's repository is as it was.
    assert_eq!(git_ok(m.path(), &["rev-parse", "HEAD"]), main_head);
    assert_eq!(git_ok(m.path(), &["status", "--porcelain"]), "");
    assert_eq!(
        git_ok(m.path(), &["branch", "--format=%(refname:short)"]),
        "main\n"
    );
    let fsck = git(m.path(), &["fsck", "--no-progress"]);
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    // And git in the main tree moves on without the branch seeing it.
    sh(m.path(), "echo main >> README");
    git_ok(m.path(), &["commit", "-qam", "main moves"]);
    assert_eq!(git_ok(&b, &["log", "-1", "--format=%s"]), "removed\n");
    let fsck = git(&b, &["fsck", "--no-progress"]);
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
}

#[test]
fn make_tar_and_sh_in_a_branch() {
    let m = Mounted::with(|p| {
        sh(
            p,
            "mkdir -p src; for i in 1 2 3; do echo \"int f$i(void){return $i;}\" > src/f$i.c; done; \
             printf 'all: out.txt\\nout.txt: src/f1.c src/f2.c src/f3.c\\n\\tcat $^ > $@\\n' > Makefile",
        );
    });
    let before = tree(m.path());
    let b = branch(&m, "mk", None);
    sh(
        &b,
        "make -s && test -s out.txt && tar cf - . | tar tf - | grep -q out.txt",
    );
    assert!(b.join("out.txt").exists());
    sh(
        &b,
        "mkdir x && cd x && tar cf - -C .. src | tar xf - && cmp src/f1.c ../src/f1.c",
    );
    hist::assert_same_tree(
        &before,
        &tree(m.path()),
        "main tree after make in the branch",
    );
}

#[test]
fn cargo_builds_in_a_branch() {
    if std::process::Command::new("cargo")
        .arg("--version")
        .output()
        .is_err()
    {
        return;
    }
    let m = Mounted::with(|p| {
        sh(
            p,
            "mkdir -p src; printf '[package]\\nname = \"tiny\"\\nversion = \"0.1.0\"\\nedition = \"2021\"\\n' > Cargo.toml; \
             echo 'fn main() { println!(\"tiny {}\", 6 * 7); }' > src/main.rs",
        );
    });
    let b = branch(&m, "cargo", None);
    let out = std::process::Command::new("cargo")
        .args(["run", "-q", "--offline"])
        .current_dir(&b)
        .env("CARGO_TARGET_DIR", b.join("target"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo run in a branch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "tiny 42\n");
    assert!(!m.p("target").exists(), "the build reached the main tree");
}
