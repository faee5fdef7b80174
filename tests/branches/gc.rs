//! gc and verify with branches: a live branch keeps its base point restorable and its own
//! history whatever the window; deleting it releases both (the next gc drops its events,
//! its layer and what only it needed); verify checks the layers.

use crate::common::{sh, Mounted};
use crate::{branch, hist, tree};

fn json(o: std::process::Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&hist::ok(o, what)).unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn project(p: &std::path::Path) {
    sh(
        p,
        "mkdir -p src; echo one > src/a; echo two > b; seq 1 3000 > big",
    );
}

#[test]
fn gc_keeps_a_live_branch_whole_and_drops_a_deleted_one() {
    // A separate mountpoint: the layers on disk are seen beside it.
    let m = Mounted::at(project);
    // The base of the branch is a point of the main tree's history: the main tree moves on
    // (the base's versions are before-images now) and a gc with no window runs.
    sh(m.path(), "echo one-v2 > src/a && echo two-v2 > b");
    hist::ok(m.agx(["checkpoint", "old"]), "checkpoint");
    sh(m.path(), "echo one-v3 > src/a && rm b && echo 3001 >> big");
    let kept = branch(&m, "kept", Some("old"));
    let at_base = tree(&kept);
    sh(
        &kept,
        "echo in-kept > src/a && echo again > src/a && echo new > n",
    );
    let kept_now = tree(&kept);
    hist::ok(
        m.agx(["checkpoint", "delete", "old"]),
        "delete the checkpoint",
    );
    let gone = branch(&m, "gone", None);
    sh(&gone, "seq 1 5000 > only-in-gone && echo x >> only-in-gone");
    hist::ok(m.agx(["branch", "delete", "gone"]), "branch delete");

    let r = json(m.agx(["--json", "gc", "--keep", "0s"]), "gc");
    assert_eq!(r["held_by"], "branch kept", "{r}");
    assert_eq!(r["branches_dropped"], serde_json::json!(["gone"]), "{r}");
    // The live branch: its base and its own history are intact.
    hist::assert_same_tree(&kept_now, &tree(&kept), "the live branch after gc");
    let first = json(m.agx(["--json", "--branch", "kept", "log"]), "log")
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["seq"].as_i64())
        .min()
        .unwrap();
    hist::ok(
        m.agx([
            "--branch",
            "kept",
            "restore",
            &format!("event:{first}"),
            "--yes",
        ]),
        "restore in the branch after gc",
    );
    hist::assert_same_tree(
        &at_base,
        &tree(&kept),
        "the branch back at its base after gc",
    );
    // The deleted branch: its layer and history are gone.
    let layers: Vec<String> = std::fs::read_dir(m.project.join(".agx/layers"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        layers.len(),
        1,
        "only the live branch's layer is left: {layers:?}"
    );
    let all = json(m.agx(["--json", "branch", "list", "--all"]), "list --all");
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, ["kept"]);
    let v = json(m.agx(["--json", "verify"]), "verify");
    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
}

#[test]
fn verify_reports_a_damaged_layer() {
    // A separate mountpoint: the layers on disk are seen beside it.
    let m = Mounted::at(project);
    let b = branch(&m, "v", None);
    // Reached: the branch's root is filled, src is made with its marker.
    assert!(b.join("src").is_dir());
    let v = json(m.agx(["--json", "verify"]), "verify");
    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
    // Damage a marker behind agx's back, in the layer on disk.
    let layer = std::fs::read_dir(m.project.join(".agx/layers"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("tree/src");
    let c = std::ffi::CString::new(layer.into_os_string().into_encoded_bytes()).unwrap();
    let name = c"user.agx.lower";
    // SAFETY: valid NUL-terminated strings and a valid buffer.
    let r = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), b"zz".as_ptr().cast(), 2, 0) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let o = m.agx(["--json", "verify"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["layer"], "{v}");
}
