//! `SNAPSHOT:SUBFOLDER` (restic's syntax): `restore`, `ls`, `dump` and `diff` on one directory
//! of a snapshot, with paths below it.

use crate::support::*;
use std::fs;

/// A snapshot of `src` (a tree of `make_tree`, with `sub/deep/x.txt` and `top.txt`).
fn fixture() -> (Fixture, std::path::PathBuf) {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src.join("sub"), 3);
    fs::create_dir_all(src.join("sub/deep")).unwrap();
    fs::write(src.join("sub/deep/x.txt"), b"x").unwrap();
    fs::write(src.join("top.txt"), b"top").unwrap();
    f.backup(&[&src]);
    (f, src)
}

#[test]
fn restore_of_a_subfolder_puts_its_content_straight_into_the_target() {
    let (f, src) = fixture();
    let t = f.path("t");
    let spec = format!("latest:{}/sub", src.display());
    f.ok(&["restore", &spec, "--target", t.to_str().unwrap()]);
    assert_same_tree(&src.join("sub"), &t);
    // Patterns are relative to the subfolder; a trailing `/` names the same directory.
    let t2 = f.path("t2");
    let spec = format!("latest:{}/sub/", src.display());
    f.ok(&[
        "restore",
        &spec,
        "--target",
        t2.to_str().unwrap(),
        "--include",
        "/deep",
    ]);
    assert_eq!(fs::read(t2.join("deep/x.txt")).unwrap(), b"x");
    assert_eq!(fs::read_dir(&t2).unwrap().count(), 1);
}

#[test]
fn ls_dump_and_diff_take_a_subfolder() {
    let (f, src) = fixture();
    let spec = format!("latest:{}/sub", src.display());
    let listed = f.ok(&["ls", &spec]);
    assert!(
        listed.lines().any(|l| l.ends_with(" /deep/x.txt")),
        "{listed}"
    );
    assert!(!listed.contains("top.txt"), "{listed}");
    assert_eq!(f.ok(&["dump", &spec, "/deep/x.txt"]), "x");
    // A directory's tar names its entries below the subfolder too.
    let out = f.cmd(&["dump", &spec, "/deep"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut names: Vec<String> = tar::Archive::new(&out.stdout[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names[0], "deep");
    assert!(names.iter().all(|n| n.starts_with("deep")), "{names:?}");
    assert!(names.iter().any(|n| n == "deep/x.txt"), "{names:?}");
    // A second snapshot with one more file below the subfolder.
    fs::write(src.join("sub/deep/y.txt"), b"y").unwrap();
    fs::write(src.join("top2.txt"), b"t").unwrap();
    f.backup(&[&src]);
    let first = f.ok(&["snapshots", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    let old = v[0]["short_id"].as_str().unwrap().to_string();
    let old_spec = format!("{old}:{}/sub", src.display());
    let out = f.ok(&["diff", &old_spec, &spec]);
    let changes: Vec<&str> = out.lines().filter(|l| l.starts_with('+')).collect();
    assert_eq!(changes, ["+    /deep/y.txt"], "{out}");
}

#[test]
fn a_subfolder_that_is_missing_or_not_a_directory_is_an_error() {
    let (f, src) = fixture();
    let t = f.path("t");
    for (sub, says) in [("/nope", "not found"), ("/top.txt", "not a directory")] {
        let spec = format!("latest:{}{sub}", src.display());
        let out = f
            .cmd(&["restore", &spec, "--target", t.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
        assert!(!t.exists());
    }
}
