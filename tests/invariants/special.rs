//! Point 5: special files (fifos, sockets, device nodes) come back with their owner, mode
//! and times.

use std::os::unix::fs::{FileTypeExt, MetadataExt};

use crate::common::{sh, Mounted};
use crate::hist;

#[test]
fn restored_special_files_keep_owner_mode_and_times() {
    let m = Mounted::new();
    sh(
        m.path(),
        "mkfifo -m 640 fifo && mknod -m 600 null c 1 3 && \
         python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind(\"sock\")' && \
         chown 1234:5678 fifo null sock && chmod 0711 sock && touch -h -d 2001-02-03 fifo null sock",
    );
    let before: Vec<_> = ["fifo", "null", "sock"]
        .iter()
        .map(|n| {
            let md = std::fs::symlink_metadata(m.p(n)).unwrap();
            (md.uid(), md.gid(), md.mode(), md.rdev(), md.mtime())
        })
        .collect();
    hist::ok(m.agx(["checkpoint", "c"]), "checkpoint");
    sh(m.path(), "rm fifo null sock");
    hist::restore(&m, "c", &[]);
    for (n, want) in ["fifo", "null", "sock"].iter().zip(&before) {
        let md = std::fs::symlink_metadata(m.p(n)).unwrap();
        let got = (md.uid(), md.gid(), md.mode(), md.rdev(), md.mtime());
        assert_eq!(&got, want, "{n}: (uid, gid, mode, rdev, mtime)");
    }
    let ft = std::fs::symlink_metadata(m.p("fifo")).unwrap().file_type();
    assert!(ft.is_fifo());
    assert!(std::fs::symlink_metadata(m.p("null"))
        .unwrap()
        .file_type()
        .is_char_device());
}
