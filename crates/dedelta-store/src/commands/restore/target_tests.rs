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

/// A file node at `path` with `mode`, owned by `uid`/`gid` (a recorded node: link count 1).
fn file_node(path: &str, mode: u32, uid: u32, gid: u32, size: u64) -> Node {
    Node {
        path: path.as_bytes().to_vec(),
        kind: NodeKind::File,
        mode,
        mtime_secs: 1_500_000_000,
        mtime_nanos: 7,
        size,
        target: Vec::new(),
        meta: crate::format::tree::NodeMeta {
            uid,
            gid,
            nlink: 1,
            ..Default::default()
        },
    }
}

/// Names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Where the file system has unnamed files (ext4, tmpfs: where tests run), a file being
/// written has no name at all: a restore killed mid-file leaves nothing, neither a truncated
/// file under the real name nor a temporary one. Once committed it has its content, mode,
/// owner and times.
#[test]
#[cfg(target_os = "linux")]
fn a_file_has_no_name_until_it_is_committed() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    let mut t = Target::open(tmp.path(), 1).unwrap();
    assert!(
        t.writes_unnamed(),
        "no unnamed files on the test's file system"
    );
    let (uid, gid) = (uzers::get_effective_uid(), uzers::get_effective_gid());
    for (name, mode) in [
        ("ro", 0o444),
        ("exe", 0o755),
        ("private", 0o600),
        ("odd", 0o617),
    ] {
        let node = file_node(name, mode, uid, gid, 5);
        let before = names(tmp.path());
        let mut f = t.create_file(&node).unwrap();
        f.write(b"hello").unwrap();
        assert_eq!(names(tmp.path()), before);
        t.commit_file(f, &node).unwrap();
        let md = std::fs::symlink_metadata(tmp.path().join(name)).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, mode, "{name}");
        assert_eq!((md.uid(), md.gid()), (uid, gid));
        assert_eq!(md.mtime(), 1_500_000_000);
        assert_eq!(std::fs::read(tmp.path().join(name)).unwrap(), b"hello");
    }
    // A file given up on leaves nothing.
    let node = file_node("lost", 0o644, uid, gid, 5);
    let mut f = t.create_file(&node).unwrap();
    f.write(b"he").unwrap();
    t.discard_file(f);
    assert_eq!(names(tmp.path()), ["exe", "odd", "private", "ro"]);
}

/// A file whose name is taken (a file, a symlink to something outside) replaces the entry
/// itself, never writing through the link, and leaves no temporary name behind.
#[test]
fn a_file_replaces_what_is_at_its_name_and_never_follows_it() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("t");
    std::fs::create_dir(&target).unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, target.join("link")).unwrap();
    std::fs::write(target.join("old"), b"old content").unwrap();
    let mut t = Target::open(&target, 1).unwrap();
    let (uid, gid) = (uzers::get_effective_uid(), uzers::get_effective_gid());
    for name in ["link", "old"] {
        let node = file_node(name, 0o640, uid, gid, 3);
        let mut f = t.create_file(&node).unwrap();
        f.write(b"new").unwrap();
        t.commit_file(f, &node).unwrap();
        let md = std::fs::symlink_metadata(target.join(name)).unwrap();
        assert!(md.is_file(), "{name}");
        assert_eq!(md.permissions().mode() & 0o7777, 0o640);
        assert_eq!(std::fs::read(target.join(name)).unwrap(), b"new");
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(names(&target), ["link", "old"]);
}

/// Run as root: a file of another owner gets that owner, and its set-user-id bit survives
/// the change of owner (the mode is set after it).
#[test]
fn a_file_of_another_owner_gets_its_owner_and_special_bits() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if uzers::get_effective_uid() != 0 {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut t = Target::open(tmp.path(), 1).unwrap();
    let node = file_node("suid", 0o4755, 4321, 8765, 1);
    let mut f = t.create_file(&node).unwrap();
    f.write(b"x").unwrap();
    t.commit_file(f, &node).unwrap();
    let md = std::fs::symlink_metadata(tmp.path().join("suid")).unwrap();
    assert_eq!((md.uid(), md.gid()), (4321, 8765));
    assert_eq!(md.permissions().mode() & 0o7777, 0o4755);
}

/// Both ways of naming an unnamed file work where they may (tests run as root, which
/// [`Target::open`] probes first; `/proc` is what a user without the capability gets), and
/// neither replaces what is at the name.
#[test]
#[cfg(target_os = "linux")]
fn both_ways_of_naming_an_unnamed_file_refuse_a_taken_name() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Target::open(tmp.path(), 1).unwrap();
    std::fs::write(tmp.path().join("taken"), b"keep").unwrap();
    let mut ways = vec![LinkUnnamed::ProcFd];
    if uzers::get_effective_uid() == 0 {
        ways.push(LinkUnnamed::EmptyPath);
    }
    for how in ways {
        let file = t.open_unnamed(0o644).unwrap();
        rustix::io::write(&file, b"data").unwrap();
        let name = format!("{how:?}");
        how.link(file.as_fd(), t.top(), name.as_bytes()).unwrap();
        assert_eq!(std::fs::read(tmp.path().join(&name)).unwrap(), b"data");
        assert_eq!(
            how.link(file.as_fd(), t.top(), b"taken"),
            Err(Errno::EXIST),
            "{how:?}"
        );
        assert_eq!(std::fs::read(tmp.path().join("taken")).unwrap(), b"keep");
    }
}
