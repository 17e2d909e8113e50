//! Every error is one clear line on stderr with the documented exit code, never a panic.

use crate::support::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;

fn assert_clean_error(out: &std::process::Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "stderr {err:?} lacks {needle:?}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
}

#[test]
fn missing_repository_exits_10() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["snapshots", "stats", "check"] {
        let out = dedelta()
            .arg(cmd)
            .arg("-r")
            .arg(dir.path().join("nope"))
            .output()
            .unwrap();
        assert_clean_error(&out, 10, "does not exist");
    }
    let out = dedelta()
        .args(["backup", "-r"])
        .arg(dir.path().join("nope"))
        .arg(dir.path())
        .output()
        .unwrap();
    assert_clean_error(&out, 10, "does not exist");
}

#[test]
fn locked_repository_exits_11() {
    let f = Fixture::new();
    // A live process on this host holds the lock: this test process.
    let host = hostname::get().unwrap().to_string_lossy().into_owned();
    let lock = serde_json::json!({"pid": std::process::id(), "host": host, "time": "now", "command": "backup"});
    fs::write(f.repo().join("locks/exclusive"), lock.to_string()).unwrap();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    let out = f.cmd(&["backup"]).arg(&src).output().unwrap();
    assert_clean_error(&out, 11, "locked");
    // A stale lock (dead pid on this host) is removed.
    let lock = serde_json::json!({"pid": 4_000_000_000u32, "host": host, "time": "now", "command": "backup"});
    fs::write(f.repo().join("locks/exclusive"), lock.to_string()).unwrap();
    f.cmd(&["backup"]).arg(&src).assert().success();
}

#[test]
fn unsupported_version_is_refused() {
    let f = Fixture::new();
    let cfg_path = f.repo().join("config");
    let mut cfg = fs::read(&cfg_path).unwrap();
    cfg[4] = 9; // format version field of the envelope
    let n = cfg.len();
    let crc = crc32c(&cfg[..n - 4]);
    cfg[n - 4..].copy_from_slice(&crc.to_le_bytes());
    fs::write(&cfg_path, cfg).unwrap();
    let out = f.cmd(&["snapshots"]).output().unwrap();
    assert_clean_error(&out, 1, "unsupported format version 9");
}

/// CRC32C (Castagnoli), bitwise: enough for a test.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn nonexistent_source_unknown_snapshot_unwritable_target() {
    let f = Fixture::new();
    let out = f
        .cmd(&["backup"])
        .arg(f.path("no/such/dir"))
        .output()
        .unwrap();
    assert_clean_error(&out, 1, "does not exist");
    let out = f
        .cmd(&[
            "restore",
            "deadbeef",
            "--target",
            f.path("t").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_clean_error(&out, 1, "no snapshot matches");
    let out = f.cmd(&["ls", "latest"]).output().unwrap();
    assert_clean_error(&out, 1, "no snapshot matches");
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"a").unwrap();
    f.backup(&[&src]);
    // A target below a regular file cannot be created.
    fs::write(f.path("file"), b"x").unwrap();
    let out = f
        .cmd(&[
            "restore",
            "latest",
            "--target",
            f.path("file/sub").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_clean_error(&out, 1, "restore target");
    let out = f
        .cmd(&["dump", "latest", "/no/such/file"])
        .output()
        .unwrap();
    assert_clean_error(&out, 1, "not found in snapshot");
    let out = f.cmd(&["init"]).output().unwrap();
    assert_clean_error(&out, 1, "already exists");
}

#[test]
fn unreadable_source_gives_warning_and_exit_3() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("ok.txt"), b"fine").unwrap();
    // A file that cannot be opened is reported and skipped (root opens anything: run as
    // another user then).
    fs::write(src.join("secret"), b"hidden").unwrap();
    fs::set_permissions(src.join("secret"), fs::Permissions::from_mode(0o000)).unwrap();
    let out = if is_root() {
        give_to_user(&f);
        as_user(&f, &["backup", src.to_str().unwrap()])
    } else {
        f.cmd(&["backup"]).arg(&src).output().unwrap()
    };
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("secret"));
    let ls = f.ok(&["ls", "latest"]);
    assert!(ls.contains("ok.txt"));
    assert!(!ls.contains("secret"));
}

#[test]
fn bad_init_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dedelta()
        .args(["init", "-r"])
        .arg(dir.path().join("r"))
        .args(["--chunk-min", "9000", "--chunk-avg", "8192"])
        .output()
        .unwrap();
    assert_clean_error(&out, 1, "invalid");
    let out = dedelta()
        .args(["init", "-r"])
        .arg(dir.path().join("r"))
        .args(["--compression", "lz4"])
        .output()
        .unwrap();
    assert_clean_error(&out, 1, "compression");
}
