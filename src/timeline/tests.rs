use super::*;

fn ev(seq: i64, op: Op, path: &str, to: Option<&str>) -> Event {
    Event {
        seq: Seq(seq),
        time_ns: 1_700_000_000_000_000_000 + seq * 1_000_000_000,
        op,
        path: path.as_bytes().to_vec(),
        to_path: to.map(|t| t.as_bytes().to_vec()),
        before: ObjState::absent(),
        after: ObjState {
            kind: Kind::File,
            hash: Some(ContentHash::of(path.as_bytes())),
            meta: Some(Meta {
                size: 3,
                ..Meta::default()
            }),
        },
        target_before: None,
        captured: true,
        actor: Actor {
            pid: 42,
            process: "sh".into(),
            exe: "/bin/sh".into(),
            ..Actor::default()
        },
        session: None,
        tool_call: None,
        note: None,
        branch: None,
    }
}

#[test]
fn insert_query_and_reopen() {
    let t = tempfile::tempdir().unwrap();
    let db = t.path().join("timeline.db");
    {
        let mut tl = Timeline::open_path(&db).unwrap();
        assert_eq!(tl.schema_version().unwrap(), SCHEMA_VERSION);
        tl.insert(&[
            ev(1, Op::Create, "a/x", None),
            ev(2, Op::Write, "a/y", None),
            ev(3, Op::Rename, "b", Some("a/z")),
            ev(4, Op::Write, "ab", None),
        ])
        .unwrap();
    }
    let tl = Timeline::open_path(&db).unwrap();
    assert_eq!(tl.max_seq().unwrap(), Seq(4));
    let all = tl.log(&Filter::default()).unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        vec![4, 3, 2, 1]
    );
    assert_eq!(all[1], ev(3, Op::Rename, "b", Some("a/z")));
    // A directory filter matches paths below it (and rename targets), not "ab".
    let under_a = tl
        .log(&Filter {
            path: Some(b"a".to_vec()),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(
        under_a.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        vec![3, 2, 1]
    );
    let limited = tl
        .log(&Filter {
            after: Some(Seq(1)),
            limit: Some(2),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(
        limited.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        vec![4, 3]
    );
    assert_eq!(tl.events_after(Seq(2)).unwrap().len(), 2);
    assert_eq!(
        tl.seq_at_time(1_700_000_000_000_000_000 + 2_500_000_000)
            .unwrap(),
        Seq(2)
    );
}

#[test]
fn non_utf8_paths_round_trip() {
    let t = tempfile::tempdir().unwrap();
    let mut tl = Timeline::open_path(&t.path().join("t.db")).unwrap();
    let mut e = ev(1, Op::Create, "x", None);
    e.path = vec![b'a', 0xff, b'\n', b' '];
    tl.insert(std::slice::from_ref(&e)).unwrap();
    assert_eq!(tl.get(Seq(1)).unwrap().unwrap(), e);
}

#[test]
fn newer_schema_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let db = t.path().join("t.db");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
    }
    match Timeline::open_path(&db) {
        Err(TimelineError::TooNew { found: 99, .. }) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
}

/// Through a descriptor, the database and its -wal and -shm files land in the directory the
/// descriptor names, even when its path is reached through a symlink.
#[test]
fn open_in_keeps_files_where_the_descriptor_points() {
    use rustix::fs::{Mode, OFlags};
    let t = tempfile::tempdir().unwrap();
    let real = t.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, t.path().join("alias")).unwrap();
    let fd = rustix::fs::open(
        t.path().join("alias"),
        OFlags::PATH | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let mut tl = Timeline::open_in(&fd).unwrap();
    tl.insert(&[ev(1, Op::Create, "f", None)]).unwrap();
    let second = Timeline::open_in(&fd).unwrap();
    assert_eq!(second.max_seq().unwrap(), Seq(1));
    assert!(real.join("timeline.db").exists());
    assert!(real.join("timeline.db-wal").exists());
    assert!(real.join("timeline.db-shm").exists());
}
