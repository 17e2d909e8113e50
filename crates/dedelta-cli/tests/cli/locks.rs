//! Locks: readers take shared locks, so that `forget --prune` cannot delete what a restore
//! or dump is reading; `unlock`; `--retry-lock`.

use crate::support::{bytes, lock_count, wait_for, BlockedDump, Fixture};
use std::fs;
use std::process::Stdio;
use std::time::Duration;

/// Issue 19: `forget --prune` during a restore made the restore fail with "corrupt chunk ...:
/// No such file or directory". A dump blocked on its output holds a shared lock: the prune
/// is refused (exit 11) while it runs, waits for it with `--retry-lock`, and the dump's
/// output is whole.
#[test]
fn forget_prune_waits_for_a_running_dump() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    let data = bytes(8 << 20, 5);
    fs::write(src.join("big.bin"), &data).unwrap();
    let first = f.backup(&[&src])["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    fs::write(src.join("big.bin"), bytes(1 << 20, 6)).unwrap();
    f.backup(&[&src]);

    // The dump writes 8 MiB into a pipe nobody reads yet: it blocks holding its lock.
    let file = format!("{}/big.bin", src.display());
    let dump = BlockedDump::spawn(&f, &first, &file, &f.path("cache-dump"), &[]);
    wait_for("the dump's lock", || lock_count(&f) == 1);

    let out = f.cmd(&["forget", &first, "--prune"]).output().unwrap();
    assert_eq!(out.status.code(), Some(11), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("shared lock"));
    // `unlock` leaves a live lock alone.
    assert!(f.ok(&["unlock"]).contains("removed 0 stale locks"));

    // With --retry-lock the prune waits for the dump to finish, then runs.
    let forget = {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("dedelta"));
        c.args(["forget", &first, "--prune", "--retry-lock", "2m", "-r"])
            .arg(f.repo())
            .env_remove("DEDELTA_REPO")
            .env("DEDELTA_CACHE_DIR", f.path("cache"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    std::thread::sleep(Duration::from_millis(1500));
    assert!(dump.finish() == data, "the dump is not the file backed up");
    let out = forget.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    f.ok(&["check", "--read-data"]);
    assert_eq!(lock_count(&f), 0);
}

#[test]
fn unlock_removes_stale_locks_and_remove_all_every_lock() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"x").unwrap();
    let host = hostname::get().unwrap().to_string_lossy().into_owned();
    let now = chrono::Utc::now().timestamp() as u64;
    let lock = |pid: u32, host: &str, age: u64| {
        serde_json::json!({"pid": pid, "host": host, "time": "t", "command": "backup",
            "exclusive": true, "refreshed": now - age, "refresh_secs": 300, "stale_secs": 1800})
        .to_string()
    };
    let plant_stale = || {
        // A dead process on this host; another host's lock not refreshed for an hour.
        fs::write(f.repo().join("locks/a"), lock(4_000_000_000, &host, 0)).unwrap();
        fs::write(f.repo().join("locks/b"), lock(1, "elsewhere", 3600)).unwrap();
    };
    plant_stale();
    // Live: another host's lock refreshed a minute ago.
    fs::write(f.repo().join("locks/c"), lock(1, "elsewhere", 60)).unwrap();
    let out = f.cmd(&["backup"]).arg(&src).output().unwrap();
    assert_eq!(out.status.code(), Some(11), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("elsewhere"));
    // The attempt removed the stale locks it met on its way.
    assert_eq!(lock_count(&f), 1);
    plant_stale();
    assert!(f.ok(&["unlock"]).contains("removed 2 stale locks"));
    assert_eq!(lock_count(&f), 1);
    assert!(f.ok(&["unlock", "--remove-all"]).contains("removed 1 lock"));
    f.backup(&[&src]);
    assert_eq!(lock_count(&f), 0);
}

#[test]
fn bad_retry_lock_duration_is_refused() {
    let f = Fixture::new();
    let out = f
        .cmd(&["ls", "latest", "--retry-lock", "5 minutes"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--retry-lock"));
}

/// Issue 19: two processes with one cache directory (a backup from cron while the user
/// restores) failed with "the chunk index ... is in use by another process". A dump blocked
/// on its output holds the index open; a backup and a restore beside it work on private
/// copies of the index, say so, and leave nothing behind; the shared index then catches up
/// with the backup's containers.
#[test]
fn commands_beside_one_holding_the_index_use_a_private_copy() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    let data = bytes(8 << 20, 8);
    fs::write(src.join("big.bin"), &data).unwrap();
    f.backup(&[&src]);
    let file = format!("{}/big.bin", src.display());
    let dump = BlockedDump::spawn(&f, "latest", &file, &f.path("cache"), &[]);
    // The dump takes its repository lock, then opens the index: wait until it has the
    // index's lock file open (its flock; probing the flock itself would take it for a
    // moment and send the dump to a private copy).
    let fds = format!("/proc/{}/fd", dump.0.id());
    wait_for("the dump's index", || {
        fs::read_dir(&fds).unwrap().flatten().any(|e| {
            fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().ends_with("chunks.idx.lock"))
        })
    });

    fs::write(src.join("new.bin"), bytes(1 << 20, 9)).unwrap();
    let out = f.cmd(&["backup"]).arg(&src).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("private copy"),
        "{out:?}"
    );
    let target = f.path("restored");
    let target_arg = format!("--target={}", target.display());
    let out = f.cmd(&["restore", "latest", &target_arg]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let restored = target.join(src.strip_prefix("/").unwrap());
    assert!(fs::read(restored.join("new.bin")).unwrap() == bytes(1 << 20, 9));

    assert!(dump.finish() == data);
    // The private copies are gone; the shared index is used again and catches up.
    let out = f.cmd(&["check", "--read-data"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("private copy"));
    let mut copies = 0;
    for repo_cache in fs::read_dir(f.path("cache")).unwrap().flatten() {
        if let Ok(rd) = fs::read_dir(repo_cache.path().join("chunks.idx.private")) {
            copies += 1;
            assert_eq!(rd.count(), 0, "a private copy was left behind");
        }
    }
    assert_eq!(copies, 1, "no private copy was made");
}

/// Ctrl-C left the lock of a `backup` behind (the process died at the signal): other hosts'
/// `prune` then waited for it to go stale. Now the first SIGINT or SIGTERM stops the writes,
/// removes the lock and exits with 128 + the signal; the repository checks clean.
#[test]
fn an_interrupted_command_removes_its_lock() {
    use std::io::Write;
    let f = Fixture::new();
    // A backup of standard input, fed a first part and then kept waiting for more.
    let mut backup = std::process::Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
        .args(["backup", "--stdin", "--stdin-name", "part.bin", "-r"])
        .arg(f.repo())
        .env_remove("DEDELTA_REPO")
        .env("DEDELTA_CACHE_DIR", f.path("cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = backup.stdin.take().unwrap();
    input.write_all(&bytes(4 << 20, 7)).unwrap();
    wait_for("the backup's lock", || {
        f.repo().join("locks").exists() && lock_count(&f) == 1
    });
    unsafe {
        libc::kill(backup.id() as i32, libc::SIGINT);
    }
    let out = backup.wait_with_output().unwrap();
    drop(input);
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    assert_eq!(lock_count(&f), 0);
    assert!(f.ok(&["snapshots", "--json"]).trim() == "[]");
    f.ok(&["check", "--read-data"]);

    // A reader too (a dump blocked on its output, holding a shared lock), by SIGTERM.
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("big.bin"), bytes(8 << 20, 8)).unwrap();
    let id = f.backup(&[&src])["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    let file = format!("{}/big.bin", src.display());
    let dump = BlockedDump::spawn(&f, &id, &file, &f.path("cache-dump"), &[]);
    wait_for("the dump's lock", || lock_count(&f) == 1);
    unsafe {
        libc::kill(dump.0.id() as i32, libc::SIGTERM);
    }
    let out = dump.0.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{out:?}");
    assert_eq!(lock_count(&f), 0);
}
