//! Tools that walk the project through the mount (find, grep -r, tar, du) see the project
//! as it is now and nothing of the past: `.agx/at/` lists no view, while every view still
//! opens by name (a checkpoint's name, `cp:ID`, `event:N`, a relative time).

mod common;
mod hist;

use std::path::Path;

use common::{sh, Mounted};
use hist::ok;

/// 1 MiB: large enough that `du` would show a checkpoint's copy of it.
const BIG: usize = 1 << 20;

fn project(p: &Path) {
    std::fs::create_dir(p.join("src")).unwrap();
    std::fs::write(p.join("src/lib.rs"), "// needle: old\n").unwrap();
    std::fs::write(p.join("big.bin"), vec![7u8; BIG]).unwrap();
}

/// Lines of `out` naming anything below `.agx/at/` (the directory itself is listed).
fn under_at(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| {
            l.split_once(".agx/at/")
                .is_some_and(|(_, rest)| !rest.is_empty())
        })
        .collect()
}

#[test]
fn walkers_skip_views_that_still_open_by_name() {
    let m = Mounted::with(project);
    ok(m.agx(["checkpoint", "before"]), "agx checkpoint before");
    std::fs::write(m.p("src/lib.rs"), "// needle: new\n").unwrap();
    std::fs::remove_file(m.p("big.bin")).unwrap();
    ok(m.agx(["checkpoint", "after"]), "agx checkpoint after");
    // Looked up once, so the kernel knows the names: still not listed.
    assert_eq!(
        std::fs::read_to_string(m.p(".agx/at/before/src/lib.rs")).unwrap(),
        "// needle: old\n"
    );

    let find = sh(m.path(), "find .");
    assert!(
        under_at(&find).is_empty(),
        "find walked into views:\n{find}"
    );
    assert!(find.lines().any(|l| l == "./src/lib.rs"), "{find}");

    let grep = sh(m.path(), "grep -r needle . || true");
    assert_eq!(grep, "./src/lib.rs:// needle: new\n");

    let tar = sh(m.path(), "tar cf - . | tar tf -");
    assert!(under_at(&tar).is_empty(), "tar archived views:\n{tar}");
    assert!(tar.lines().any(|l| l == "./src/lib.rs"), "{tar}");
    assert!(!tar.contains("big.bin"), "{tar}");

    let du = sh(m.path(), "du -a .");
    assert!(under_at(&du).is_empty(), "du counted views:\n{du}");
    let total: usize = sh(m.path(), "du -s --apparent-size -B1 .")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(total < BIG, "du counts the checkpoint's big.bin: {total}");

    assert_eq!(sh(m.path(), "ls -A .agx/at"), "");
    // Every kind of REF still opens by name.
    // event:N is the point just before event N: the first one, the edit.
    let first = hist::events(&m)[0]["seq"].as_i64().unwrap();
    let list = ok(m.agx(["checkpoint", "list", "--json"]), "checkpoint list");
    let list: serde_json::Value = serde_json::from_slice(&list).unwrap();
    let first_cp = format!("cp:{}", list[0]["id"]);
    for r in ["before", first_cp.as_str(), &format!("event:{first}"), "1h"] {
        let v = m.p(".agx/at").join(r);
        assert_eq!(
            std::fs::read_to_string(v.join("src/lib.rs")).unwrap(),
            "// needle: old\n",
            "{r}"
        );
        assert_eq!(
            std::fs::metadata(v.join("big.bin")).unwrap().len(),
            BIG as u64,
            "{r}"
        );
    }
    let after = m.p(".agx/at/after");
    assert_eq!(
        std::fs::read_to_string(after.join("src/lib.rs")).unwrap(),
        "// needle: new\n"
    );
    assert!(!after.join("big.bin").exists());
    // Walking a view explicitly is still possible.
    let inside = sh(&m.p(".agx/at/before"), "find . | LC_ALL=C sort");
    assert_eq!(inside, ".\n./big.bin\n./src\n./src/lib.rs\n");
}
