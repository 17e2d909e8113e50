//! Locks: readers take shared locks, so that `forget --prune` cannot delete what a restore
//! or dump is reading; `unlock`; `--retry-lock`.

use crate::support::{bytes, Fixture};
use std::fs;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn lock_count(f: &Fixture) -> usize {
    fs::read_dir(f.repo().join("locks")).unwrap().count()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

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
    let mut dump = Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
        .args(["dump", &first, &file, "-r"])
        .arg(f.repo())
        .env_remove("DEDELTA_REPO")
        .env("DEDELTA_CACHE_DIR", f.path("cache-dump"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
    let mut dumped = Vec::new();
    dump.stdout
        .take()
        .unwrap()
        .read_to_end(&mut dumped)
        .unwrap();
    let st = dump.wait_with_output().unwrap();
    assert!(st.status.success(), "{st:?}");
    assert!(dumped == data, "the dump is not the file backed up");
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
