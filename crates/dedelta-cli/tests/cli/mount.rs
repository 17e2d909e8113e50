//! `mount` over FUSE (issue 21): the views (`snapshots/`, `hosts/`, `tags/`, `ids/`,
//! `latest`) and files read back through delta decoding, equal to the source. Needs
//! /dev/fuse and the right to mount (root here); elsewhere the test says why and returns.

use super::support::*;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why FUSE cannot be used here, if it cannot.
fn no_fuse() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse");
    }
    None
}

/// Waits until `ready` exists under the mount of `child`; `false` (the test skips, with a
/// message) when the mount exited because mounting is not allowed here.
fn wait_for_mount(child: &mut std::process::Child, ready: &Path) -> bool {
    let start = Instant::now();
    while !ready.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            if [
                "Operation not permitted",
                "Permission denied",
                "No such device",
            ]
            .iter()
            .any(|m| err.contains(m))
            {
                eprintln!("skipped: mount is not allowed here: {err}");
                return false;
            }
            panic!("mount exited with {status}: {err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "mount did not appear"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[test]
fn mount_serves_the_snapshots() {
    if let Some(why) = no_fuse() {
        eprintln!("skipped: mount needs FUSE ({why})");
        return;
    }
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 11);
    let mut c = f.cmd(&["backup", "--tag", "first", src.to_str().unwrap()]);
    assert!(c
        .env("DEDELTA_HOST", "alpha")
        .output()
        .unwrap()
        .status
        .success());
    // A second version close to the first: its files are stored as deltas.
    let mut t = text(1 << 20, 12);
    t[5000..5010].copy_from_slice(b"abcdefghij");
    fs::write(src.join("text.txt"), &t).unwrap();
    let second = f.backup(&[&src]);
    assert!(second["delta_chunks"].as_u64().unwrap_or(0) > 0, "{second}");
    let mp = f.path("mnt");
    fs::create_dir(&mp).unwrap();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
        .args([
            "mount",
            mp.to_str().unwrap(),
            "-r",
            f.repo().to_str().unwrap(),
        ])
        .env("DEDELTA_CACHE_DIR", f.path("cache"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if !wait_for_mount(&mut child, &mp.join("snapshots")) {
        return;
    }
    let check = || {
        let inside = |view: &str| mp.join(view).join(src.strip_prefix("/").unwrap());
        // The newest snapshot, through `latest` and through its host's view.
        assert_same_tree(&src, &inside("latest"));
        assert_same_tree(&src, &inside("snapshots/latest"));
        let host = fs::read_dir(mp.join("hosts")).unwrap().count();
        assert_eq!(host, 2, "alpha and this machine");
        // The first snapshot, by tag: its text.txt is the first version.
        let first = inside("tags/first/latest").join("text.txt");
        assert_eq!(fs::read(first).unwrap(), text(1 << 20, 12));
        assert!(inside("hosts/alpha/latest").join("big.bin").exists());
        let ids: Vec<_> = fs::read_dir(mp.join("ids")).unwrap().flatten().collect();
        assert_eq!(ids.len(), 2);
        let names: Vec<String> = fs::read_dir(mp.join("snapshots"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "two snapshots and latest: {names:?}");
        let target = fs::read_link(mp.join("latest")).unwrap();
        assert!(target.starts_with("snapshots/"), "{target:?}");
        // Read-only.
        assert!(fs::write(inside("latest").join("new"), b"x").is_err());
        // Other commands work while the repository is mounted (the mount has its own copy
        // of the index).
        let ls = f.ok(&["ls", "latest"]);
        assert!(ls.contains("big.bin"), "{ls}");
    };
    let result = std::panic::catch_unwind(check);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(status.success(), "{status}");
    assert!(!mp.join("snapshots").exists(), "unmounted on SIGTERM");
}

/// An encrypted repository mounts too: the mount's private index copy reuses the unlocked
/// repository (it reopened it without the password and failed).
#[test]
fn mount_serves_an_encrypted_repository() {
    if let Some(why) = no_fuse() {
        eprintln!("skipped: mount needs FUSE ({why})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (repo, src, mp, cache) = (
        dir.path().join("repo"),
        dir.path().join("src"),
        dir.path().join("mnt"),
        dir.path().join("cache"),
    );
    make_tree(&src, 21);
    fs::create_dir(&mp).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
            .args(args)
            .env("DEDELTA_PASSWORD", "secret")
            .env("DEDELTA_CACHE_DIR", &cache)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let repo_s = repo.to_str().unwrap();
    run(&["init", "--insecure-kdf", "-r", repo_s]);
    run(&["backup", "-r", repo_s, src.to_str().unwrap()]);
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
        .args(["mount", mp.to_str().unwrap(), "-r", repo_s])
        .env("DEDELTA_PASSWORD", "secret")
        .env("DEDELTA_CACHE_DIR", &cache)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if !wait_for_mount(&mut child, &mp.join("latest")) {
        return;
    }
    let result = std::panic::catch_unwind(|| {
        assert_same_tree(
            &src,
            &mp.join("latest").join(src.strip_prefix("/").unwrap()),
        );
    });
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
