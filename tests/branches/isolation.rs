//! Nothing written in a branch reaches the main tree or another branch, and nothing done
//! in the main tree after the base point shows in the branch.

use std::io::{Read, Seek, Write};

use crate::common::{sh, Mounted};
use crate::{branch, hist, tree};

fn project(p: &std::path::Path) {
    sh(
        p,
        "mkdir -p src/sub keep; echo one > a; printf 'two\\n' > src/b; echo three > src/sub/c; \
         echo k > keep/k; ln -s a link; seq 1 20000 > big",
    );
}

#[test]
fn changes_in_a_branch_stay_in_it() {
    let m = Mounted::with(project);
    let before = tree(m.path());
    let b = branch(&m, "b1", None);
    let other = branch(&m, "b2", None);
    sh(
        &b,
        "echo more >> a; rm src/b; mv src/sub src/moved; mkdir new; echo n > new/f; ln new/f new/g; \
         ln -sf src link2; chmod 700 keep; printf x > big; mkfifo p; mv keep/k keep/k2; \
         echo over > o; mv o src/moved/c",
    );
    hist::assert_same_tree(&before, &tree(m.path()), "main tree after branch writes");
    hist::assert_same_tree(&before, &tree(&other), "other branch after branch writes");
    assert_eq!(std::fs::read(b.join("a")).unwrap(), b"one\nmore\n");
    assert!(!b.join("src/b").exists());
    assert_eq!(std::fs::read(b.join("src/moved/c")).unwrap(), b"over\n");
    assert_eq!(std::fs::read(b.join("big")).unwrap(), b"x");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(b.join("new/g")).unwrap().nlink(), 2);
    assert_eq!(
        std::fs::metadata(b.join("new/f")).unwrap().ino(),
        std::fs::metadata(b.join("new/g")).unwrap().ino()
    );
    let show: serde_json::Value =
        serde_json::from_slice(&hist::ok(m.agx(["--json", "branch", "show", "b1"]), "show"))
            .unwrap();
    assert!(show["files_changed"].as_i64().unwrap() >= 10, "{show}");
    // The main tree's history has none of it.
    for e in hist::events(&m) {
        assert_ne!(
            e["path"], "new/f",
            "a branch change is in the main tree's log: {e}"
        );
    }
}

#[test]
fn changes_in_the_main_tree_after_the_base_do_not_show_in_the_branch() {
    let m = Mounted::with(project);
    let at_base = tree(m.path());
    let b = branch(&m, "iso", None);
    // Some of the branch is reached before the main tree changes, some after.
    assert_eq!(std::fs::read(b.join("a")).unwrap(), b"one\n");
    sh(
        m.path(),
        "echo changed >> a; : > src/b; rm -rf src/sub; mv keep kept; chmod 600 big; \
         echo new > fresh; printf 'X' | dd of=big bs=1 seek=100 conv=notrunc 2>/dev/null",
    );
    hist::assert_same_tree(&at_base, &tree(&b), "branch after main changes");
}

#[test]
fn a_reader_open_in_the_branch_keeps_the_base_while_the_main_tree_writes() {
    let m = Mounted::with(project);
    let b = branch(&m, "r", None);
    let mut f = std::fs::File::open(b.join("big")).unwrap();
    let mut head = [0u8; 10];
    f.read_exact(&mut head).unwrap();
    // The main tree rewrites the file in place while the branch holds it open.
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .open(m.p("big"))
        .unwrap();
    w.write_all(&vec![b'Z'; 200_000]).unwrap();
    drop(w);
    let mut rest = Vec::new();
    f.seek(std::io::SeekFrom::Start(0)).unwrap();
    // Past what the kernel may have cached of it.
    let mut all = Vec::new();
    std::fs::File::open(b.join("big"))
        .unwrap()
        .read_to_end(&mut all)
        .unwrap();
    f.read_to_end(&mut rest).unwrap();
    let want = sh(m.path(), "seq 1 20000").into_bytes();
    assert_eq!(all, want, "a new open in the branch reads the base");
    assert_eq!(rest, want, "the open reader reads the base");
}

#[test]
fn a_branch_from_an_old_checkpoint_shows_the_tree_then() {
    let m = Mounted::with(project);
    let then = tree(m.path());
    hist::ok(m.agx(["checkpoint", "then"]), "checkpoint");
    sh(
        m.path(),
        "echo later >> a; rm -rf src; mkdir src; echo other > src/z; mv big big2",
    );
    let now = tree(m.path());
    let b = branch(&m, "retry", Some("then"));
    hist::assert_same_tree(&then, &tree(&b), "branch from the checkpoint");
    sh(&b, "echo retry >> a");
    hist::assert_same_tree(&now, &tree(m.path()), "main tree");
    assert_eq!(std::fs::read(b.join("a")).unwrap(), b"one\nretry\n");
}

#[test]
fn two_branches_and_the_main_tree_written_at_once_stay_apart() {
    let m = Mounted::with(project);
    let b1 = branch(&m, "one", None);
    let b2 = branch(&m, "two", None);
    let write = |dir: std::path::PathBuf, tag: &'static str| {
        std::thread::spawn(move || {
            for i in 0..150 {
                std::fs::write(dir.join(format!("f{i}")), format!("{tag} {i}\n"))
                    .unwrap_or_else(|e| panic!("{tag}: write f{i}: {e}"));
                let mut a = std::fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join("a"))
                    .unwrap_or_else(|e| panic!("{tag}: open a at {i}: {e}"));
                writeln!(a, "{tag} {i}").unwrap();
                if i % 10 == 0 {
                    std::fs::rename(dir.join(format!("f{i}")), dir.join(format!("r{i}"))).unwrap();
                }
            }
        })
    };
    let ts = [
        write(b1.clone(), "one"),
        write(b2.clone(), "two"),
        write(m.path().to_path_buf(), "main"),
    ];
    for t in ts {
        t.join().unwrap();
    }
    for (dir, tag) in [
        (&b1, "one"),
        (&b2, "two"),
        (&m.path().to_path_buf(), "main"),
    ] {
        let a = String::from_utf8(std::fs::read(dir.join("a")).unwrap()).unwrap();
        assert_eq!(a.lines().count(), 151, "{tag}: {a}");
        assert!(
            a.lines().skip(1).all(|l| l.starts_with(tag)),
            "{tag} got another's lines"
        );
        for i in 0..150 {
            let name = if i % 10 == 0 {
                format!("r{i}")
            } else {
                format!("f{i}")
            };
            assert_eq!(
                std::fs::read_to_string(dir.join(&name)).unwrap(),
                format!("{tag} {i}\n")
            );
        }
    }
    for (name, n) in [("one", "one"), ("two", "two")] {
        let show: serde_json::Value =
            serde_json::from_slice(&hist::ok(m.agx(["--json", "branch", "show", name]), "show"))
                .unwrap();
        assert!(show["events"].as_i64().unwrap() >= 300, "{n}: {show}");
    }
}
