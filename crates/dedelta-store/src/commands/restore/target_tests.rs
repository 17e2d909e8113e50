//! Tests of the restore target.

use super::*;

#[test]
fn split_refuses_paths_that_leave_the_target() {
    for bad in [
        &b""[..],
        b"/a",
        b"a/",
        b"a//b",
        b"..",
        b"a/../b",
        b"./a",
        b"a/.",
        b"a\0b",
    ] {
        assert!(split(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(split(b"a").unwrap(), (&b""[..], &b"a"[..]));
    assert_eq!(split(b"a/b/c\xff").unwrap(), (&b"a/b"[..], &b"c\xff"[..]));
}

#[test]
fn deep_trees_keep_few_handles_open() {
    let tmp = tempfile::tempdir().unwrap();
    let mut t = Target::open(tmp.path(), 1).unwrap();
    let depth = KEEP_OPEN * 3;
    let mut path = Vec::new();
    for i in 0..depth {
        if i > 0 {
            path.push(b'/');
        }
        path.extend_from_slice(format!("d{i}").as_bytes());
        t.make_dir(&path).unwrap();
    }
    let open = t.chain.iter().filter(|l| l.fd.is_some()).count();
    assert!(open <= KEEP_OPEN + 1, "{open} handles open");
    // Climbing back up reopens dropped levels; modes and times land on the right dirs.
    let mut p = path.clone();
    let node = |path: &[u8]| Node {
        path: path.to_vec(),
        kind: NodeKind::Dir,
        mode: 0o755,
        mtime_secs: 1_000_000,
        mtime_nanos: 5,
        size: 0,
        target: Vec::new(),
        meta: Default::default(),
    };
    loop {
        t.set_dir_meta(&node(&p)).unwrap();
        match p.iter().rposition(|b| *b == b'/') {
            Some(i) => p.truncate(i),
            None => break,
        }
    }
    let mid: std::path::PathBuf = (0..KEEP_OPEN + 5).map(|i| format!("d{i}")).collect();
    let md = std::fs::metadata(tmp.path().join(mid)).unwrap();
    assert_eq!(
        filetime::FileTime::from_last_modification_time(&md).unix_seconds(),
        1_000_000
    );
}
