//! Issue 12: the failures an adversarial campaign found, each reproduced.

use crate::support::*;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;

fn ls_paths(f: &Fixture) -> Vec<(String, String)> {
    let out = f.ok(&["ls", "latest", "--json"]);
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["struct_type"] == "node")
        .map(|v| {
            (
                v["path"].as_str().unwrap().to_string(),
                v["type"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A symlink given as a source is stored as the symlink (not followed), and a source inside
/// another source is stored once: restic's resolution of overlapping sources.
#[test]
fn symlink_and_overlapping_sources_are_resolved() {
    let f = Fixture::new();
    let real = f.path("real");
    fs::create_dir_all(&real).unwrap();
    fs::write(real.join("file"), b"live data\n").unwrap();
    let link = f.path("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // `link` and `link/file`: the second resolves to real/file.
    let mut c = f.cmd(&["backup", "--json"]);
    c.arg(&link).arg(link.join("file"));
    assert!(c.output().unwrap().status.success());
    let paths = ls_paths(&f);
    let link_s = format!("{}", link.display());
    assert!(
        paths.iter().any(|(p, t)| *p == link_s && t == "symlink"),
        "{paths:?}"
    );
    assert!(
        !paths
            .iter()
            .any(|(p, _)| p.starts_with(&format!("{link_s}/"))),
        "something stored under the symlink: {paths:?}"
    );
    // Overlapping sources: `real` and `real/file` store the file once.
    let mut c = f.cmd(&["backup", "--json"]);
    c.arg(&real).arg(real.join("file"));
    assert!(c.output().unwrap().status.success());
    let files: Vec<_> = ls_paths(&f)
        .into_iter()
        .filter(|(p, _)| p.ends_with("/real/file"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    // Restoring into a fresh directory never touches the live files.
    fs::write(real.join("file"), b"changed live data\n").unwrap();
    let target = f.path("out");
    f.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_eq!(fs::read(real.join("file")).unwrap(), b"changed live data\n");
}

/// A file whose size changes while it is read is stored as read, with a warning and exit 3;
/// its recorded size is the bytes read, so check and restore agree. /proc files report size
/// 0 and hold more: the same situation, reproducibly.
#[test]
fn file_changing_while_read_is_recorded_as_read() {
    let f = Fixture::new();
    let out = f
        .cmd(&["backup", "--json", "/proc/self/status"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = summary(&out.stdout);
    let warnings = v["warning_messages"].to_string();
    assert!(
        warnings.contains("changed while it was being read"),
        "{warnings}"
    );
    let ls = f.ok(&["ls", "latest", "--json"]);
    let size = ls
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["struct_type"] == "node")
        .find(|v| v["path"].as_str().unwrap().ends_with("/status"))
        .unwrap()["size"]
        .as_u64()
        .unwrap();
    assert!(size > 0, "recorded the stat size, not the bytes read");
    f.ok(&["check", "--read-data"]);
}

/// One stray and one damaged file in snapshots/ must not block the repository; prune refuses
/// (it would delete the damaged snapshot's data), and forget removes both.
#[test]
fn damaged_and_stray_snapshot_files_are_skipped_and_removable() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), text(100_000, 1)).unwrap();
    let first = f.backup(&[&src]);
    fs::write(src.join("b"), text(100_000, 2)).unwrap();
    f.backup(&[&src]);
    let snaps = f.repo().join("snapshots");
    let first_id = first["snapshot_id"].as_str().unwrap();
    let mut b = fs::read(snaps.join(first_id)).unwrap();
    b[20] ^= 1;
    fs::write(snaps.join(first_id), b).unwrap();
    fs::write(snaps.join("notes.txt"), b"stray").unwrap();

    // A client that has not read the snapshot before (a fresh cache) finds it damaged; this
    // client's snapshot cache still holds the good copy it read, as restic's cache does, so
    // its listing shows both (check, prune and forget below read the repository's files).
    let out = f
        .cmd(&["snapshots"])
        .env("DEDELTA_CACHE_DIR", f.path("fresh-cache"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(first_id) && err.contains("notes.txt"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 snapshots"));
    let out = f.cmd(&["snapshots"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 snapshots"));
    f.ok(&["stats"]);
    f.ok(&["ls", "latest"]);
    f.backup(&[&src]);
    let target = f.path("out");
    f.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    let out = f.cmd(&["prune"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("forget"));
    let out = f.cmd(&["check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    f.ok(&["forget", &first_id[..8]]);
    f.ok(&["forget", "notes.txt"]);
    f.ok(&["prune"]);
    f.ok(&["check", "--read-data"]);
    assert_eq!(fs::read_dir(&snaps).unwrap().count(), 2);
}

/// An empty lock file (a disk that filled up while the lock was written) is stale.
#[test]
fn empty_lock_file_does_not_block_the_repository() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"x").unwrap();
    fs::write(f.repo().join("locks/exclusive"), b"").unwrap();
    f.backup(&[&src]);
    f.ok(&["check"]);
}

/// `--threads 100000` used to create threads for minutes, then panic.
#[test]
fn huge_thread_count_is_capped() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), text(10_000, 3)).unwrap();
    let out = f
        .cmd(&["backup", "--json", "--threads", "100000"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = summary(&out.stdout);
    assert!(v["notices"].to_string().contains("capped"), "{v}");
}

/// `dedelta snapshots | true` used to panic on the broken pipe.
#[test]
fn closed_stdout_exits_quietly() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"x").unwrap();
    for _ in 0..3 {
        f.backup(&[&src]);
    }
    for args in [&["snapshots"][..], &["ls", "latest"], &["stats"]] {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
            .args(args)
            .arg("-r")
            .arg(f.repo())
            .env("DEDELTA_CACHE_DIR", f.path("cache"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away before anything is written
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// Errors used to repeat their cause ("...: No space left on device (os error 28): No space
/// left on device (os error 28)").
#[test]
fn errors_state_their_cause_once() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"x").unwrap();
    f.backup(&[&src]);
    let target = f.path("target-is-a-file");
    fs::File::create(&target).unwrap().write_all(b"x").unwrap();
    let out = f
        .cmd(&["restore", "latest", "--target", target.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
}

/// A damaged index is discarded and rebuilt; no command panics on it.
#[test]
fn damaged_index_is_rebuilt_not_a_panic() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), text(300_000, 4)).unwrap();
    f.backup(&[&src]);
    // The manifest (torn and overwritten) in one round, the run files in the other.
    for round in 0..2 {
        let files = if round == 0 {
            vec![f.index_file()]
        } else {
            f.index_runs()
        };
        assert!(!files.is_empty());
        for index in files {
            let mut b = fs::read(&index).unwrap();
            let mid = b.len() / 2;
            b[mid..].fill(0xff);
            b.truncate(mid + 8192);
            fs::write(&index, b).unwrap();
        }
        commands_survive_a_damaged_index(&f);
    }
    f.backup(&[&src]);
    let target = f.path("out");
    f.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_eq!(
        fs::read(restored(&target, &src).join("a")).unwrap(),
        fs::read(src.join("a")).unwrap()
    );
}

/// Every command either works or says the index is damaged (and the next one works).
fn commands_survive_a_damaged_index(f: &Fixture) {
    for args in [
        &["snapshots"][..],
        &["ls", "latest"],
        &["check", "--read-data"],
        &["repair", "index"],
    ] {
        let out = f.cmd(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(101), "{args:?} panicked: {err}");
        if !out.status.success() {
            // A command that met the damage mid-way says so; the next one works.
            assert!(err.contains("index is damaged"), "{args:?}: {err}");
            f.ok(args);
        }
    }
}

/// After `check` found damage, the next backup stores the damaged chunks again: backups made
/// after damage restore, and the old snapshot heals.
#[test]
fn backups_after_damage_restore() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("data.bin"), bytes(1 << 20, 5)).unwrap();
    f.backup(&[&src]);
    for c in f.containers() {
        let mut b = fs::read(&c).unwrap();
        b[100] ^= 0xff;
        fs::write(&c, b).unwrap();
    }
    let out = f.cmd(&["check", "--read-data"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    f.backup(&[&src]);
    f.ok(&["check", "--read-data"]);
    let target = f.path("out");
    f.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert!(same_file(
        &restored(&target, &src).join("data.bin"),
        &src.join("data.bin")
    ));
    f.ok(&["repair", "packs"]);
    f.ok(&["check", "--read-data"]);
}

fn same_file(a: &Path, b: &Path) -> bool {
    fs::read(a).unwrap() == fs::read(b).unwrap()
}
