//! restore: never writes outside its target, restores what it can of a damaged repository
//! (exit 3, each lost file on stderr), never leaves a partial file, and takes any bytes as a
//! path.

use crate::support::*;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Every entry below `dir` with its mode, size, mtime and content (symlinks not followed).
fn state(dir: &Path) -> Vec<(PathBuf, u32, u64, i64, Vec<u8>)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let md = fs::symlink_metadata(&p).unwrap();
        let content = if md.is_file() {
            fs::read(&p).unwrap()
        } else {
            Vec::new()
        };
        out.push((p.clone(), md.mode(), md.size(), md.mtime(), content));
        if md.is_dir() {
            out.extend(state(&p));
        }
    }
    out.sort();
    out
}

/// The original report: back up a symlink to a directory and, as a second source, a file
/// reached through it; point the link elsewhere; restore into a fresh directory. Whatever
/// backup chose to store, nothing outside the target may change.
#[test]
fn restore_never_writes_outside_the_target() {
    let f = Fixture::new();
    let live = f.path("live");
    fs::create_dir_all(&live).unwrap();
    fs::write(live.join("file"), b"backed up").unwrap();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    std::os::unix::fs::symlink(&live, src.join("link")).unwrap();
    let out = f
        .cmd(&["backup"])
        .arg(src.join("link"))
        .arg(src.join("link/file"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Live data changes after the backup, and so does the link.
    fs::write(live.join("file"), b"live data").unwrap();
    let other = f.path("other");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("file"), b"other live data").unwrap();
    fs::remove_file(src.join("link")).unwrap();
    std::os::unix::fs::symlink(&other, src.join("link")).unwrap();
    let before = (state(&live), state(&other), state(&src));
    let target = f.path("out");
    let out = f
        .cmd(&["restore", "latest", "--target", target.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        (state(&live), state(&other), state(&src)),
        before,
        "restore changed files outside its target"
    );
    // If the snapshot holds the file below the link, that file is reported, not written.
    let ls = f.ok(&["ls", "latest"]);
    let below = format!("{}/file", src.join("link").display());
    if ls.lines().any(|l| l.ends_with(&below)) {
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(
            err.contains(&format!("error: {below}: ")) && err.contains("symlink"),
            "{err}"
        );
    }
}

/// Flips a byte in the first region of the largest container: the chunks of the first file
/// backed up (the largest, alone in that region) are damaged, the rest is intact.
fn damage_first_region(f: &Fixture) {
    let c = f
        .containers()
        .into_iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(&c).unwrap();
    bytes[1000] ^= 0xff;
    fs::write(&c, bytes).unwrap();
}

#[test]
fn restore_of_a_damaged_repository_restores_the_rest_and_exits_3() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a.bin"), bytes(2 << 20, 11)).unwrap();
    fs::write(src.join("b.txt"), b"small and intact\n").unwrap();
    fs::write(src.join("c.txt"), text(10_000, 12)).unwrap();
    f.backup(&[&src]);
    damage_first_region(&f);
    let target = f.path("out");
    // A file already at the damaged file's path keeps its content: no partial file.
    let restored_src = restored(&target, &src);
    fs::create_dir_all(&restored_src).unwrap();
    fs::write(restored_src.join("a.bin"), b"previous").unwrap();
    let out = f
        .cmd(&[
            "restore",
            "latest",
            "--json",
            "--target",
            target.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let bad = format!("{}/a.bin", src.display());
    // With --json, the one error is restic's `error` message on stderr.
    assert_eq!(err.lines().count(), 1, "{err}");
    let e: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(e["message_type"], "error", "{err}");
    assert_eq!(e["item"], bad.as_str(), "{err}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("corrupt chunk"),
        "{err}"
    );
    let v: serde_json::Value = summary(&out.stdout);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{v}");
    assert_eq!(errors[0]["path"], bad.as_str());
    assert_eq!(v["files"], 2);
    assert_eq!(fs::read(restored_src.join("a.bin")).unwrap(), b"previous");
    for name in ["b.txt", "c.txt"] {
        assert_eq!(
            fs::read(restored_src.join(name)).unwrap(),
            fs::read(src.join(name)).unwrap()
        );
    }
    let leftovers: Vec<_> = fs::read_dir(&restored_src)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.as_bytes().starts_with(b".dedelta-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Without --json: the same error line, and the summary says how many were lost.
    let out = f
        .cmd(&[
            "restore",
            "latest",
            "--target",
            f.path("out2").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("1 could not be restored"), "{summary}");
}

#[test]
fn restore_and_dump_accept_paths_that_are_not_utf8() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    let name = OsStr::from_bytes(b"caf\xff.bin");
    let data = text(50_000, 13);
    fs::write(src.join(name), &data).unwrap();
    fs::write(src.join("other.txt"), b"other").unwrap();
    f.backup(&[&src]);
    let path = src.join(name);
    let out = f.cmd(&["dump", "latest"]).arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout == data);
    let target = f.path("out");
    let out = f
        .cmd(&["restore", "latest", "--target", target.to_str().unwrap()])
        .arg("--include")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = restored(&target, &src);
    assert!(fs::read(r.join(name)).unwrap() == data);
    assert!(!r.join("other.txt").exists());
}

#[test]
fn restore_into_a_target_given_through_a_symlink() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("x"), b"x").unwrap();
    f.backup(&[&src]);
    let real = f.path("real");
    fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(&real, f.path("via")).unwrap();
    f.cmd(&[
        "restore",
        "latest",
        "--target",
        f.path("via").to_str().unwrap(),
    ])
    .assert()
    .success();
    assert_eq!(fs::read(restored(&real, &src).join("x")).unwrap(), b"x");
}
