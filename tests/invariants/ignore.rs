//! Points 3 and 10: ignore rules. Every way an ignore file changes (through the mount, a
//! restore, an oops, a directory moved) drops what depends on it; and an ignore rule never
//! exempts a path that has history or that git tracks, nor a session's own later changes.

use std::process::Command;

use crate::common::{agx_bin, sh, Mounted};
use crate::hist;

/// `agx run -- sh -c SCRIPT` in the mount.
fn run(m: &Mounted, script: &str) {
    let out = Command::new(agx_bin())
        .args(["run", "--agent", "test", "--", "sh", "-c", script])
        .current_dir(m.path())
        .output()
        .unwrap();
    hist::ok(out, &format!("agx run -- sh -c {script:?}"));
}

fn paths(m: &Mounted) -> Vec<String> {
    hist::events(m)
        .iter()
        .map(|e| e["path"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_rule_removed_by_an_oops_stops_applying_at_once() {
    let m = Mounted::with(|p| std::fs::create_dir(p.join("sub")).unwrap());
    run(&m, "echo '*.txt' >> .gitignore; echo agent > sub/a.txt");
    hist::ok(m.agx(["oops", "--yes"]), "agx oops");
    assert!(
        !m.p(".gitignore").exists(),
        "the oops removed the rule file"
    );
    sh(m.path(), "echo USER > top.txt");
    hist::wait_event(&m, 0, "top.txt");
}

#[test]
fn a_rule_removed_by_a_restore_stops_applying_at_once() {
    let m = Mounted::new();
    hist::ok(m.agx(["checkpoint", "clean"]), "checkpoint");
    sh(m.path(), "echo '*.log' > .gitignore; echo one > a.log");
    assert!(
        !paths(&m).contains(&"a.log".to_string()),
        "a.log is ignored"
    );
    hist::restore(&m, "clean", &[".gitignore"]);
    sh(m.path(), "echo two > b.log");
    hist::wait_event(&m, 0, "b.log");
}

#[test]
fn a_directory_moved_away_takes_its_rules_with_it() {
    let m = Mounted::new();
    sh(
        m.path(),
        "mkdir d && echo '*' > d/.gitignore && echo x > d/x",
    );
    assert!(!paths(&m).contains(&"d/x".to_string()), "d/x is ignored");
    sh(m.path(), "mv d e && mkdir d && echo y > d/y");
    hist::wait_event(&m, 0, "d/y");
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", hist::stderr(&out));
}

/// A project whose src/lib.rs git tracks, and a notes file it does not.
fn repo(p: &std::path::Path) {
    std::fs::create_dir(p.join("src")).unwrap();
    std::fs::write(p.join("src/lib.rs"), "pub fn precious() {}\n").unwrap();
    std::fs::write(p.join("notes.txt"), "mine\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "src/lib.rs"]);
    git(p, &["commit", "-q", "-m", "init"]);
}

#[test]
fn an_agent_cannot_ignore_its_way_out_of_capture() {
    let m = Mounted::with(repo);
    hist::ok(m.agx(["checkpoint", "before"]), "checkpoint");
    run(
        &m,
        "echo '*' > .agxignore; rm src/lib.rs; echo scratch > tmp.txt; rm tmp.txt; rm notes.txt",
    );
    let ps = paths(&m);
    for p in ["src/lib.rs", "tmp.txt", "notes.txt"] {
        assert!(ps.contains(&p.to_string()), "{p} is captured: {ps:?}");
    }
    hist::restore(&m, "before", &[]);
    assert_eq!(
        std::fs::read(m.p("src/lib.rs")).unwrap(),
        b"pub fn precious() {}\n"
    );
    assert_eq!(std::fs::read(m.p("notes.txt")).unwrap(), b"mine\n");
    assert!(!m.p(".agxignore").exists());
}

#[test]
fn a_persons_rule_does_not_exempt_tracked_files_or_files_with_history() {
    let m = Mounted::with(repo);
    // notes.txt gets history; then a person ignores both kinds of file.
    sh(m.path(), "echo more >> notes.txt");
    sh(m.path(), "printf 'src/\\n*.txt\\n' > .gitignore");
    hist::ok(m.agx(["checkpoint", "ruled"]), "checkpoint");
    sh(m.path(), "rm src/lib.rs notes.txt; echo new > new.txt");
    let ps = paths(&m);
    assert!(ps.contains(&"src/lib.rs".to_string()), "tracked: {ps:?}");
    assert!(ps.contains(&"notes.txt".to_string()), "history: {ps:?}");
    assert!(
        !ps.contains(&"new.txt".to_string()),
        "the rule still works: {ps:?}"
    );
    hist::restore(&m, "ruled", &["src/lib.rs", "notes.txt"]);
    assert!(m.p("src/lib.rs").exists() && m.p("notes.txt").exists());
}

/// A directory an agent moves into an ignored directory keeps its history there.
#[test]
fn a_directory_moved_into_an_ignored_one_stays_captured() {
    let m = Mounted::with(|p| {
        std::fs::create_dir_all(p.join(".venv")).unwrap();
        std::fs::write(p.join(".venv/.gitignore"), "*\n").unwrap();
        std::fs::create_dir(p.join("src")).unwrap();
        std::fs::write(p.join("src/main.c"), "int main;\n").unwrap();
    });
    hist::ok(m.agx(["checkpoint", "before"]), "checkpoint");
    run(&m, "mv src .venv/src && rm .venv/src/main.c");
    hist::restore(&m, "before", &[]);
    assert_eq!(std::fs::read(m.p("src/main.c")).unwrap(), b"int main;\n");
}

/// A file with several names may have its history under a name other than the one a
/// change uses: a person's rule that matches the name used exempts nothing then (found by
/// the model property test: the write was recorded under `d/e`, the last name looked up,
/// and `mv a b` under `*` went unrecorded, so `a` was gone from every past point).
#[test]
fn a_persons_rule_does_not_hide_a_change_of_a_file_with_several_names() {
    let m = Mounted::with(|p| {
        std::fs::create_dir(p.join("d")).unwrap();
        std::fs::write(p.join("a"), "one\n").unwrap();
        std::fs::hard_link(p.join("a"), p.join("d/e")).unwrap();
    });
    // The last name looked up is d/e: the write is recorded under it.
    sh(m.path(), "cat a d/e > /dev/null");
    hist::ok(m.agx(["checkpoint", "k0"]), "checkpoint");
    sh(m.path(), "echo two >> a; echo '*' > .gitignore; mv a b");
    assert_eq!(hist::show(&m, "k0", "a"), b"one\n");
    assert_eq!(std::fs::read(m.p(".agx/at/k0/a")).unwrap(), b"one\n");
    hist::restore(&m, "k0", &[]);
    assert_eq!(std::fs::read(m.p("a")).unwrap(), b"one\n");
    assert_eq!(std::fs::read(m.p("d/e")).unwrap(), b"one\n");
}
