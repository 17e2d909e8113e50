//! `backup`'s selection options (restic's names): --exclude-file, --iexclude(-file),
//! --files-from(-verbatim, -raw), --exclude-caches, --exclude-if-present,
//! --exclude-larger-than, --one-file-system, --dry-run.

use crate::support::*;
use std::fs;

/// The node paths of the latest snapshot, as `ls --json` gives them.
fn ls_paths(f: &Fixture) -> Vec<String> {
    f.ok(&["ls", "latest", "--json"])
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["struct_type"] == "node")
        .map(|v| v["path"].as_str().unwrap().to_string())
        .collect()
}

fn has(paths: &[String], suffix: &str) -> bool {
    paths.iter().any(|p| p.ends_with(suffix))
}

#[test]
fn exclude_file_and_iexclude_leave_out_what_they_match() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for name in ["keep.txt", "a.tmp", "b.LOG", "sub/c.bak", "sub/d.Bak"] {
        fs::write(src.join(name), name).unwrap();
    }
    let list = f.path("excludes");
    // Variables are expanded, as restic does.
    fs::write(&list, "# comment\n\n*.tmp\n  *.${EXCL_EXT}  \n").unwrap();
    let ilist = f.path("iexcludes");
    fs::write(&ilist, "*.BAK\n").unwrap();
    f.cmd(&["backup", "--exclude-file", list.to_str().unwrap()])
        .env("EXCL_EXT", "bak")
        .args(["--iexclude", "*.log"])
        .args(["--iexclude-file", ilist.to_str().unwrap()])
        .arg(&src)
        .assert()
        .success();
    let paths = ls_paths(&f);
    assert!(has(&paths, "/keep.txt"), "{paths:?}");
    for gone in ["/a.tmp", "/b.LOG", "/c.bak", "/d.Bak"] {
        assert!(!has(&paths, gone), "{gone} stored: {paths:?}");
    }
}

#[test]
fn files_from_reads_lines_and_nul_separated_lists() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    for name in ["one", "two", "three", "four"] {
        fs::write(src.join(name), name).unwrap();
    }
    let lines = f.path("lines");
    fs::write(
        &lines,
        format!("# the first\n{}\n\n", src.join("one").display()),
    )
    .unwrap();
    let raw = f.path("raw");
    fs::write(
        &raw,
        format!(
            "{}\0{}\0",
            src.join("two").display(),
            src.join("three").display()
        ),
    )
    .unwrap();
    f.ok(&[
        "backup",
        "--files-from",
        lines.to_str().unwrap(),
        "--files-from-raw",
        raw.to_str().unwrap(),
    ]);
    let paths = ls_paths(&f);
    for kept in ["/one", "/two", "/three"] {
        assert!(has(&paths, kept), "{kept} missing: {paths:?}");
    }
    assert!(!has(&paths, "/four"), "{paths:?}");
}

#[test]
fn cache_dirs_marked_dirs_and_large_files_are_left_out() {
    let f = Fixture::new();
    let src = f.path("src");
    for d in ["cache", "fake-cache", "marked", "plain"] {
        fs::create_dir_all(src.join(d)).unwrap();
        fs::write(src.join(d).join("f"), "x").unwrap();
    }
    fs::write(
        src.join("cache/CACHEDIR.TAG"),
        "Signature: 8a477f597d28d172789f06886806bc55\n# a cache\n",
    )
    .unwrap();
    // Without the signature it is no cache tag.
    fs::write(src.join("fake-cache/CACHEDIR.TAG"), "not a tag\n").unwrap();
    fs::write(src.join("marked/.nobackup"), "").unwrap();
    fs::write(src.join("plain/big"), vec![7u8; 3000]).unwrap();
    fs::write(src.join("plain/small"), vec![7u8; 1000]).unwrap();
    f.cmd(&[
        "backup",
        "--exclude-caches",
        "--exclude-if-present",
        ".nobackup",
    ])
    .args(["--exclude-larger-than", "2k"])
    .arg(&src)
    .assert()
    .success();
    let paths = ls_paths(&f);
    assert!(!has(&paths, "/cache"), "{paths:?}");
    assert!(has(&paths, "/fake-cache/f"), "{paths:?}");
    assert!(!has(&paths, "/marked"), "{paths:?}");
    assert!(has(&paths, "/plain/small"), "{paths:?}");
    assert!(!has(&paths, "/plain/big"), "{paths:?}");
    // A size that is not one is refused by name.
    let out = f
        .cmd(&["backup", "--exclude-larger-than", "2q"])
        .arg(&src)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--exclude-larger-than"));
}

#[test]
fn dry_run_lists_what_would_be_stored_and_writes_nothing() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "aaaa").unwrap();
    fs::write(src.join("b.tmp"), "bb").unwrap();
    let before = f.containers().len();
    let out = f.ok(&[
        "-v",
        "backup",
        "--dry-run",
        "--exclude",
        "*.tmp",
        src.to_str().unwrap(),
    ]);
    assert!(out.contains("would back up") && out.contains("/a"), "{out}");
    assert!(!out.contains("b.tmp"), "{out}");
    assert!(out.contains("1 files"), "{out}");
    assert_eq!(f.containers().len(), before);
    let snaps: serde_json::Value = serde_json::from_str(&f.ok(&["snapshots", "--json"])).unwrap();
    assert_eq!(
        snaps.as_array().unwrap().len(),
        0,
        "a dry run saved a snapshot"
    );
    // As JSON: restic's summary with dry_run set.
    let out = f.ok(&["backup", "-n", "--json", src.to_str().unwrap()]);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["message_type"], "summary");
    assert_eq!(last["dry_run"], true);
    assert_eq!(last["files"], 2);
}

#[test]
fn one_file_system_is_x() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "a").unwrap();
    // Same file system throughout: everything is kept, under either spelling.
    for flag in ["-x", "--one-file-system"] {
        f.cmd(&["backup", flag]).arg(&src).assert().success();
        assert!(has(&ls_paths(&f), "/a"));
    }
}
