//! File metadata and unchanged files from the command line (issue 18): a stdin backup's
//! size, a restore by a user who cannot set owners (a warning, not a failure), and an
//! unchanged file that is not opened (as a user, a file made unreadable after the first
//! backup). The last two need root, to run the binary as another user; elsewhere they return
//! early.

use super::support::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// `ls --json` shows a stdin backup's real size.
#[test]
fn a_stdin_backup_lists_its_size() {
    let f = Fixture::new();
    let data = text(123_456, 3);
    f.cmd(&["backup", "--stdin", "--stdin-name", "db.sql", "--json"])
        .write_stdin(data)
        .assert()
        .success();
    let out = f.ok(&["ls", "latest", "--json"]);
    // The first line describes the snapshot (restic's `ls --json`), the nodes follow.
    let node: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert_eq!(node["size"], 123_456, "{out}");
    assert_eq!(node["type"], "file");
}

/// A user restoring files of other owners gets them with their content, mode and times, and
/// one warning saying how many owners could not be set; the exit code is 0.
#[test]
fn a_restore_by_a_user_warns_about_owners() {
    if !is_root() {
        return;
    }
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 5);
    std::os::unix::fs::chown(src.join("text.txt"), Some(1234), Some(5678)).unwrap();
    f.backup(&[&src]);
    give_to_user(&f);
    let target = f.path("target");
    let out = as_user(
        &f,
        &["restore", "latest", "--target", target.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: owner not restored on") && stderr.contains("only root"),
        "{stderr}"
    );
    let restored = restored(&target, &src);
    assert_eq!(
        fs::read(restored.join("text.txt")).unwrap(),
        fs::read(src.join("text.txt")).unwrap()
    );
    assert_eq!(fs::metadata(restored.join("text.txt")).unwrap().uid(), USER);
}

/// A file made unreadable after the first backup is not opened by the next one while its
/// size, mtime and inode are unchanged (`--ignore-ctime`: `chmod` sets the ctime); without
/// the option its ctime says it changed since the first backup, it is read again, and the
/// read fails (exit 3).
#[test]
fn an_unchanged_file_is_not_opened() {
    if !is_root() {
        return;
    }
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 6);
    give_to_user(&f);
    let backup = |extra: &[&str]| {
        let mut args = vec!["backup", "--json"];
        args.extend_from_slice(extra);
        args.push(src.to_str().unwrap());
        as_user(&f, &args)
    };
    let first = backup(&[]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let locked = src.join("text.txt");
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    let second = backup(&["--ignore-ctime"]);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(v["files_unmodified"], v["files"], "{v}");
    assert_eq!(v["bytes_unmodified"], v["bytes_read"], "{v}");
    // Against the first snapshot (the second recorded the new ctime): read, and refused.
    let first: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let first_id = first["snapshot_id"].as_str().unwrap();
    let third = backup(&["--parent", first_id]);
    assert_eq!(third.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&third.stdout).unwrap();
    let warnings = v["warning_messages"].to_string();
    assert!(
        warnings.contains("text.txt") && warnings.contains("ermission denied"),
        "{v}"
    );
}
