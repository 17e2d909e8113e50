//! A backup killed at any point leaves a repository that checks and restores.

use crate::support::*;
use std::fs;
use std::time::Duration;

#[test]
fn killed_backup_leaves_consistent_repository() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("first.txt"), text(2 << 20, 1)).unwrap();
    let first = f.backup(&[&src]);
    // Lots of new data so that the next backup is still running when killed.
    for i in 0..6 {
        fs::write(src.join(format!("big{i}.bin")), bytes(24 << 20, 100 + i)).unwrap();
    }
    for delay_ms in [30u64, 120, 300, 700] {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
            .args(["backup", "-r"])
            .arg(f.repo())
            .env("DEDELTA_CACHE_DIR", f.path("cache"))
            .arg(&src)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SIGKILL: no chance to clean up.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGKILL);
        }
        child.wait().unwrap();
        f.ok(&["check", "--read-data"]);
        let target = f.path(&format!("out{delay_ms}"));
        let id = first["snapshot_id"].as_str().unwrap();
        f.ok(&["restore", id, "--target", target.to_str().unwrap()]);
        let r = restored(&target, &src);
        assert!(fs::read(r.join("first.txt")).unwrap() == fs::read(src.join("first.txt")).unwrap());
    }
    // The stale lock of the killed process does not block the next backup.
    f.backup(&[&src]);
    f.ok(&["check"]);
}

#[test]
fn killed_prune_loses_nothing_and_the_next_prune_finishes() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    // Versions that share most data, so that forgetting old ones leaves partly-live containers.
    let base = bytes(24 << 20, 3);
    for v in 0..4u8 {
        let mut d = base.clone();
        for k in 0..(v as usize * 64) {
            let i = (k * 104_729 + v as usize * 7) % d.len();
            d[i] = d[i].wrapping_add(1);
        }
        fs::write(src.join("data.bin"), &d).unwrap();
        fs::write(
            src.join(format!("extra{v}.bin")),
            bytes(4 << 20, 50 + u64::from(v)),
        )
        .unwrap();
        f.backup(&[&src]);
    }
    let expected = fs::read(src.join("data.bin")).unwrap();
    f.ok(&["forget", "--keep-last", "1"]);
    for delay_ms in [15u64, 60, 150, 400] {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
            .args(["prune", "--max-unused", "0", "-r"])
            .arg(f.repo())
            .env("DEDELTA_CACHE_DIR", f.path("cache"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        unsafe {
            libc::kill(child.id() as i32, libc::SIGKILL);
        }
        child.wait().unwrap();
        f.ok(&["check", "--read-data"]);
        let target = f.path(&format!("out{delay_ms}"));
        f.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
        assert!(fs::read(restored(&target, &src).join("data.bin")).unwrap() == expected);
    }
    f.ok(&["prune", "--max-unused", "0"]);
    f.ok(&["check", "--read-data"]);
    // Nothing is left to do.
    let out = f.ok(&["prune", "--max-unused", "0", "--json"]);
    let st: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(st["plan"]["delete"].as_array().unwrap().len(), 0, "{st}");
    assert_eq!(st["plan"]["rewrite"].as_array().unwrap().len(), 0, "{st}");
}
