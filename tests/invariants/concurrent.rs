//! Point 1: writers racing on one file. The before-image of the first change after a
//! point must be the content at that point, whatever the interleaving of opens,
//! truncations and releases on several handles.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Barrier};

use crate::common::Mounted;
use crate::hist;

/// Trials of the race. Before the fix the point's content was lost in one trial of a few
/// with a 1 MiB file (about 3% with 11-byte ones: a larger file widens the window).
const TRIALS: usize = 8;
const WRITERS: usize = 6;

fn content(trial: usize) -> Vec<u8> {
    let mut v = format!("trial {trial}\n").into_bytes();
    v.extend((0..(1 << 20)).map(|i: u32| (i % 251) as u8));
    v
}

#[test]
fn writers_truncating_one_file_at_once_keep_the_point_s_content() {
    let m = Mounted::new();
    let f = m.p("f");
    for trial in 0..TRIALS {
        std::fs::write(&f, content(trial)).unwrap();
        // A change of metadata moves the file's ctime: its content is no longer one agx
        // knows is stored, so each writer copies its before-image (the window of the race).
        let mode = if trial % 2 == 0 { 0o640 } else { 0o644 };
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        let cp = format!("t{trial}");
        hist::ok(m.agx(["checkpoint", &cp]), "agx checkpoint");
        let go = Arc::new(Barrier::new(WRITERS));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (f, go) = (f.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    for k in 0..3 {
                        let mut h = std::fs::OpenOptions::new()
                            .write(true)
                            .truncate(true)
                            .custom_flags(0)
                            .open(&f)
                            .unwrap();
                        h.write_all(format!("writer {w} round {k}\n").as_bytes())
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(
            hist::show(&m, &cp, "f"),
            content(trial),
            "trial {trial}: agx show {cp} f is not the content at the checkpoint"
        );
    }
    let last = format!("t{}", TRIALS - 1);
    hist::restore(&m, &last, &[]);
    assert_eq!(std::fs::read(&f).unwrap(), content(TRIALS - 1));
}
