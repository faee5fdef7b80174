//! Point 8: history lost from the database is noticed. A deleted or truncated WAL file, or
//! a database put back from an older copy, makes the timeline end before events agx
//! recorded; a damaged page makes it unreadable in part. Mount and verify say so in one
//! line and refuse to carry on silently (sequence numbers are never handed out twice).

use std::os::unix::fs::FileExt;
use std::process::Command;

use crate::common::{agx_bin, sh, Mounted};
use crate::hist;

fn agx(m: &Mounted, args: &[&str]) -> std::process::Output {
    m.agx(args)
}

/// `agx unmount`, then waits until the daemon has let go of the project (its database
/// is checkpointed and closed).
fn unmount(m: &Mounted) {
    let pid = m.daemon_pid();
    let out = Command::new(agx_bin())
        .arg("unmount")
        .arg(&m.project)
        .current_dir("/")
        .output()
        .unwrap();
    hist::ok(out, "agx unmount");
    if let Some(pid) = pid {
        hist::wait_gone(pid);
    }
}

fn mount(m: &Mounted) -> std::process::Output {
    Command::new(agx_bin())
        .arg("mount")
        .arg(&m.project)
        .output()
        .unwrap()
}

#[test]
fn a_deleted_wal_is_refused_until_the_loss_is_accepted() {
    let mut m = Mounted::new();
    sh(m.path(), "for i in 1 2 3 4 5; do echo $i > f$i; done");
    let last = hist::last_seq(&m);
    assert!(last >= 5);
    let pid = m.daemon_pid().unwrap();
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    hist::wait_gone(pid);
    m.forget_mounted();
    let _ = Command::new("umount").arg("-l").arg(&m.project).status();
    let db = m.project.join(".agx/timeline.db");
    std::fs::remove_file(db.with_extension("db-wal")).unwrap();
    let _ = std::fs::remove_file(db.with_extension("db-shm"));

    // (Also said, on a line of its own: the daemon was killed.)
    let refused = |out: std::process::Output, what: &str| {
        assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
        let err = hist::stderr(&out);
        let last = err.lines().last().unwrap_or_default();
        assert!(last.contains("lost recorded history"), "{what}: {err}");
    };
    refused(mount(&m), "agx mount after the WAL went");
    assert!(!hist::is_agx_mount(&m.project), "nothing is mounted");
    refused(agx(&m, &["log"]), "agx log");
    let out = agx(&m, &["verify", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["problems"][0]["kind"], "lost-history", "{v}");

    // --repair accepts the loss (and still reports the problem it found).
    let out = agx(&m, &["verify", "--repair"]);
    assert!(
        hist::stdout(&out).contains("the loss is accepted"),
        "{out:?}"
    );
    hist::ok(mount(&m), "agx mount after --repair");
    sh(m.path(), "echo again > g");
    hist::wait_event(&m, 0, "g");
    let newest = hist::events(&m).pop().unwrap();
    assert!(
        newest["seq"].as_i64().unwrap() > last,
        "sequence numbers of lost events are not handed out again: {newest}"
    );
}

#[test]
fn a_database_put_back_from_an_older_copy_is_refused() {
    let m = Mounted::new();
    sh(m.path(), "echo one > a");
    hist::wait_event(&m, 0, "a");
    unmount(&m);
    // The database is its file and its WAL (which holds what no checkpoint copied yet).
    let agx_dir = m.project.join(".agx");
    let names = ["timeline.db", "timeline.db-wal", "timeline.db-shm"];
    let old: Vec<_> = names
        .iter()
        .map(|n| std::fs::read(agx_dir.join(n)).ok())
        .collect();
    hist::ok(mount(&m), "mount");
    sh(m.path(), "echo two > b && echo three > c");
    hist::wait_event(&m, 0, "c");
    unmount(&m);
    for (n, data) in names.iter().zip(old) {
        let p = agx_dir.join(n);
        match data {
            Some(d) => std::fs::write(&p, d).unwrap(),
            None => {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    let line = hist::user_error(&mount(&m), "mount with an older database");
    assert!(line.contains("lost recorded history"), "{line}");
}

#[test]
fn a_damaged_database_page_is_refused_at_mount() {
    let m = Mounted::new();
    sh(m.path(), "for i in $(seq 1 300); do echo $i > f$i; done");
    hist::wait_event(&m, 0, "f300");
    unmount(&m);
    let db = m.project.join(".agx/timeline.db");
    // Everything into the database file itself (the WAL may hold it all).
    sh(
        &m.project,
        "python3 -c 'import sqlite3; sqlite3.connect(\".agx/timeline.db\").execute(\"PRAGMA wal_checkpoint(TRUNCATE)\")'",
    );
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    let size = f.metadata().unwrap().len();
    assert!(
        size > 8 * 4096,
        "a database of several pages ({size} bytes)"
    );
    // Garbage over a page in the middle (not the header page).
    f.write_all_at(&[0x5a; 4096], (size / 4096 / 2) * 4096)
        .unwrap();
    drop(f);
    let out = mount(&m);
    let line = hist::user_error(&out, "mount with a damaged database");
    assert!(
        line.contains("damaged") || line.contains("malformed"),
        "{line}"
    );
    assert!(!hist::is_agx_mount(&m.project));
}
