//! `agx switch NAME`: the main tree becomes the branch, whole, as one recorded operation;
//! the main tree as it was is kept as a branch, so switching back (or one restore)
//! undoes it byte for byte.

use crate::common::{sh, Mounted};
use crate::{branch, hist, tree};

fn project(p: &std::path::Path) {
    sh(
        p,
        "mkdir -p src/deep empty; echo one > a; printf 'two\\n' > src/b; echo 3 > src/deep/c; \
         ln -s a link; chmod 640 src/b; seq 1 5000 > big",
    );
}

fn json(o: std::process::Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&hist::ok(o, what)).unwrap()
}

#[test]
fn switch_and_switch_back_byte_for_byte() {
    let m = Mounted::with(project);
    let t0 = tree(m.path());
    let b = branch(&m, "alt", None);
    sh(
        &b,
        "echo changed >> a; rm src/b; mv src/deep src/moved; mkdir -p new/sub; echo n > new/sub/f; \
         chmod 700 empty; ln -sfn src link; printf x > big; echo add > src/added",
    );
    let in_branch = tree(&b);
    let v = json(m.agx(["--json", "switch", "alt"]), "switch");
    let kept = v["kept_as"].as_str().unwrap().to_string();
    assert_eq!(kept, "main-before-alt");
    hist::assert_same_tree(&in_branch, &tree(m.path()), "main tree after the switch");
    hist::assert_same_tree(
        &in_branch,
        &tree(&m.project),
        "backing tree after the switch",
    );
    // The old main tree is a branch now.
    hist::assert_same_tree(
        &t0,
        &tree(&m.p(format!(".agx/branches/{kept}"))),
        "kept branch",
    );
    // Switching back makes the main tree what it was.
    let back = json(m.agx(["--json", "switch", &kept]), "switch back");
    hist::assert_same_tree(&t0, &tree(m.path()), "main tree after switching back");
    assert!(back["kept_as"]
        .as_str()
        .unwrap()
        .starts_with("main-before-"));
    // And one restore undoes a switch too.
    let first = v["first_event"].as_i64().unwrap();
    let _ = first;
    let again = json(m.agx(["--json", "switch", "alt"]), "switch again");
    hist::assert_same_tree(&in_branch, &tree(m.path()), "after switching again");
    let first = again["first_event"].as_i64().unwrap();
    hist::restore(&m, &format!("event:{first}"), &[]);
    hist::assert_same_tree(&t0, &tree(m.path()), "after restoring before the switch");
}

#[test]
fn a_switch_is_refused_while_files_are_open_for_writing_unless_forced() {
    let m = Mounted::with(project);
    let b = branch(&m, "alt", None);
    sh(&b, "echo b > a");
    let held = std::fs::OpenOptions::new()
        .write(true)
        .open(m.p("src/b"))
        .unwrap();
    let before = tree(m.path());
    let o = m.agx(["switch", "alt"]);
    let line = hist::user_error(&o, "switch with a writer");
    assert!(line.contains("src/b") && line.contains("--force"), "{line}");
    hist::assert_same_tree(&before, &tree(m.path()), "nothing switched");
    assert!(
        !m.p(".agx/branches/main-before-alt").exists(),
        "a refused switch keeps no branch"
    );
    hist::ok(m.agx(["switch", "alt", "--force"]), "switch --force");
    assert_eq!(std::fs::read(m.p("a")).unwrap(), b"b\n");
    drop(held);
}

#[test]
fn writers_during_a_switch_land_before_or_after_it_never_in_between() {
    let m = Mounted::with(project);
    let b = branch(&m, "alt", None);
    sh(&b, "for i in $(seq 1 300); do echo $i > f$i; done");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (dir, stop) = (m.path().to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::write(dir.join("w"), format!("{n}\n"));
                n += 1;
            }
            n
        })
    };
    // The writer keeps opening w: forced, or the switch would wait for no one.
    let out = m.agx(["switch", "alt", "--force"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n = writer.join().unwrap();
    hist::ok(out, "switch");
    assert!(n > 0);
    for i in 1..=300 {
        assert_eq!(
            std::fs::read_to_string(m.p(format!("f{i}"))).unwrap(),
            format!("{i}\n")
        );
    }
    // Every write of w is history: the log names it, and the tree is consistent.
    let w = std::fs::read_to_string(m.p("w")).unwrap_or_default();
    assert!(w.is_empty() || w.trim().parse::<u32>().is_ok(), "{w:?}");
}
