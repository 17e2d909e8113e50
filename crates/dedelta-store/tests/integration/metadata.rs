//! Complete file metadata (issue 18 part 2): every kind of node is backed up and restored
//! with what `stat` says of it. Owners other than the test's own and devices need root: as
//! another user those parts are left out (the CLI tests restore as a user, not root).

use crate::support::*;
use dedelta_store::commands::backup::SourceOptions;
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::tree::NodeKind;
use dedelta_store::read::walk_tree;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

fn is_root() -> bool {
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// What restore must reproduce of a node: type, permissions, owner, size, times (atime too),
/// device number, the link count within the tree, extended attributes, and holes.
fn stat_line(p: &Path) -> String {
    let m = fs::symlink_metadata(p).unwrap();
    let ft = m.file_type();
    let kind = if ft.is_dir() {
        "dir"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "chardev"
    } else if ft.is_block_device() {
        "blockdev"
    } else {
        "file"
    };
    let mut xattrs: Vec<String> = Vec::new();
    if !ft.is_symlink() {
        for name in xattr_names(p) {
            let v = getxattr(p, &name);
            xattrs.push(format!("{}={v:?}", String::from_utf8_lossy(&name)));
        }
    }
    let times = if ft.is_dir() || ft.is_symlink() {
        // Not recorded: a directory's atime moves whenever it is listed, a symlink's when it
        // is read.
        format!("m{}.{}", m.mtime(), m.mtime_nsec())
    } else {
        format!(
            "m{}.{} a{}.{}",
            m.mtime(),
            m.mtime_nsec(),
            m.atime(),
            m.atime_nsec()
        )
    };
    let size = if ft.is_dir() { 0 } else { m.len() };
    // Sparse: fewer blocks than the length needs.
    let sparse = ft.is_file() && m.blocks() * 512 < m.len();
    format!(
        "{kind} {:o} {}:{} size {size} {times} rdev {} nlink {} sparse {sparse} {xattrs:?}",
        m.mode(),
        m.uid(),
        m.gid(),
        m.rdev(),
        m.nlink(),
    )
}

fn xattr_names(p: &Path) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 65536];
    let n = rustix::fs::llistxattr(p, &mut buf[..]).unwrap_or(0);
    let mut names: Vec<Vec<u8>> = buf[..n]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    // SELinux labels are the target file system's, not the snapshot's.
    names.retain(|n| !n.starts_with(b"security."));
    names.sort();
    names
}

fn getxattr(p: &Path, name: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 65536];
    let n = rustix::fs::lgetxattr(p, OsStr::from_bytes(name), &mut buf[..]).unwrap();
    buf.truncate(n);
    buf
}

/// Every node below `root` by relative path, with its [`stat_line`].
fn stat_tree(root: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = walk(root)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (rel, stat_line(&p))
        })
        .collect();
    out.sort();
    out
}

/// A tree with one of each: files (one sparse, one with attributes and an ACL, one with
/// another owner, one with a name that is not UTF-8), a directory with an attribute and a
/// default ACL, hard links, a symlink, a FIFO, a socket, and (as root) a character and a
/// block device.
fn make_tree(src: &Path) {
    write_files(
        src,
        &files([("plain", text(100_000, 1)), ("attrs", text(5_000, 2))]),
    );
    let sub = src.join("sub");
    fs::create_dir(&sub).unwrap();
    fs::write(sub.join("inner"), b"inner").unwrap();
    fs::hard_link(src.join("plain"), sub.join("plain-link")).unwrap();
    fs::hard_link(src.join("plain"), src.join("plain-link2")).unwrap();
    std::os::unix::fs::symlink("plain", src.join("link")).unwrap();
    fs::write(src.join(OsStr::from_bytes(b"not-utf8-\xff\xfe")), b"bytes").unwrap();
    // Sparse: 4 MiB with 1 MiB of data in the middle.
    let f = fs::File::create(src.join("sparse")).unwrap();
    f.set_len(4 << 20).unwrap();
    rustix::io::pwrite(&f, &noise(1 << 20, 3), 1 << 20).unwrap();
    drop(f);
    let attrs = src.join("attrs");
    rustix::fs::setxattr(
        &attrs,
        "user.comment",
        b"a \x00 value",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    // An ACL (as `setfacl -m u:1234:r` writes it): user::rw-, user:1234:r--, group::r--,
    // mask::r--, other::r--.
    let mut acl = vec![2u8, 0, 0, 0];
    for (tag, perm, id) in [
        (1u16, 6u16, u32::MAX),
        (2, 4, 1234),
        (4, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    rustix::fs::setxattr(
        &attrs,
        "system.posix_acl_access",
        &acl,
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    // A default ACL on a directory (inherited by what is created in it).
    rustix::fs::setxattr(
        &sub,
        "system.posix_acl_default",
        &acl,
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    rustix::fs::setxattr(&sub, "user.dir", b"d", rustix::fs::XattrFlags::empty()).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        src.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o640),
        0,
    )
    .unwrap();
    drop(std::os::unix::net::UnixListener::bind(src.join("socket")).unwrap());
    fs::set_permissions(
        src.join("plain"),
        std::os::unix::fs::PermissionsExt::from_mode(0o4751),
    )
    .unwrap();
    if is_root() {
        for (name, ft, dev) in [
            ("null", rustix::fs::FileType::CharacterDevice, (1, 3)),
            ("loop9", rustix::fs::FileType::BlockDevice, (7, 9)),
        ] {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                src.join(name),
                ft,
                rustix::fs::Mode::from_raw_mode(0o600),
                rustix::fs::makedev(dev.0, dev.1),
            )
            .unwrap();
        }
        std::os::unix::fs::lchown(src.join("sub/inner"), Some(1234), Some(5678)).unwrap();
        std::os::unix::fs::lchown(src.join("link"), Some(4321), Some(8765)).unwrap();
        std::os::unix::fs::chown(&sub, Some(1234), Some(5678)).unwrap();
    }
    // Times last: distinct atimes and mtimes, in the past.
    for (i, p) in walk(src).into_iter().enumerate() {
        let t = |s: i64| filetime::FileTime::from_unix_time(1_600_000_000 + s, 123_456_789);
        filetime::set_symlink_file_times(&p, t(i as i64), t(1000 + i as i64)).unwrap();
    }
}

/// Each kind restored compares equal under `stat`, hard links restored as links, holes as
/// holes; a second backup, with nothing changed, restores the same.
#[test]
fn every_kind_restores_with_its_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    make_tree(&src);
    for n in 0..2 {
        // Before each backup: reading a file sets its atime (after its record took it).
        let expected = stat_tree(&src);
        let r = backup_dir(&repo, &src, n, &me()).unwrap();
        assert_eq!(r.warnings, Vec::<String>::new());
        let s = &r.summary;
        assert_eq!(
            s.special_files,
            if is_root() { 4 } else { 2 },
            "fifo, socket (and devices)"
        );
        let (_, snap) = repo.find_snapshot("latest").unwrap();
        let target = tmp.path().join(format!("restored-{n}"));
        let st = files_restored(restore_to(&repo, &snap, &target).unwrap()).unwrap();
        assert_eq!(st.hard_links, 2);
        assert_eq!(st.warnings, Vec::<String>::new());
        let restored = stat_tree(&restored_root(&target, &src));
        assert_eq!(restored, expected);
        // The links are one file.
        let root = restored_root(&target, &src);
        let ino = |p: &str| fs::metadata(root.join(p)).unwrap().ino();
        assert_eq!(ino("plain"), ino("sub/plain-link"));
        assert_eq!(ino("plain"), ino("plain-link2"));
    }
}

/// What the tree records: owner names, ctime, device and inode, the sparse flag.
#[test]
fn the_tree_records_owner_names_and_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    make_tree(&src);
    backup_dir(&repo, &src, 0, &me()).unwrap();
    let (_, snap) = repo.find_snapshot("latest").unwrap();
    let mut seen = 0;
    walk_tree(&repo, &snap, |node, _| {
        let p = Path::new(OsStr::from_bytes(&node.path));
        let full = Path::new("/").join(p);
        let m = fs::symlink_metadata(&full).unwrap();
        assert_eq!(node.meta.uid, m.uid());
        assert_eq!(node.meta.ino, m.ino());
        assert_eq!(node.meta.dev, m.dev());
        assert_eq!(
            (node.meta.ctime.secs, node.meta.ctime.nanos as i64),
            (m.ctime(), m.ctime_nsec())
        );
        if m.uid() == 0 {
            assert_eq!(node.meta.user, "root");
        }
        if node.path.ends_with(b"/sparse") {
            assert!(node.meta.sparse());
        }
        if node.path.ends_with(b"/fifo") {
            assert_eq!(node.kind, NodeKind::Fifo);
        }
        seen += 1;
        Ok(())
    })
    .unwrap();
    assert!(seen >= 10);
}

/// `one_file_system` keeps a mount point below the source but not what is mounted there: a
/// tmpfs mounted under the source (skipped where mounting is not allowed).
#[test]
fn one_file_system_stops_at_mount_points() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    write_files(&src, &files([("here", text(1000, 1))]));
    let mnt = src.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    fs::write(mnt.join("there"), b"other file system").unwrap();
    let run = |n: u64, one_file_system: bool| {
        locked(&repo, &me(), |lock| {
            let mut opts = backup_options(vec![src.clone()], time_of(n));
            opts.sources = SourceOptions {
                one_file_system,
                ..Default::default()
            };
            backup_with(&repo, lock, opts)
        })
    };
    let crossing = run(0, false);
    let staying = run(1, true);
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    let (crossing, staying) = (crossing.unwrap(), staying.unwrap());
    assert_eq!((crossing.summary.files, crossing.summary.dirs), (2, 2));
    // The mount point is kept, its file is not.
    assert_eq!((staying.summary.files, staying.summary.dirs), (1, 2));
}
