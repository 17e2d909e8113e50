//! `restore`'s options (restic's names): --include/--exclude globs, --overwrite, --delete,
//! --verify, --dry-run; and `dump` of a directory as tar.

use crate::support::*;
use std::fs;
use std::path::Path;

/// A snapshot of `src` with `a.txt`, `b.rs`, `sub/c.txt`, `sub/d.rs`.
fn fixture() -> (Fixture, std::path::PathBuf) {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for name in ["a.txt", "b.rs", "sub/c.txt", "sub/d.rs"] {
        fs::write(src.join(name), name).unwrap();
    }
    f.backup(&[&src]);
    (f, src)
}

fn restore(f: &Fixture, target: &Path, extra: &[&str]) -> std::process::Output {
    f.cmd(&["restore", "latest", "--target", target.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn include_and_exclude_globs_select_what_is_restored() {
    let (f, src) = fixture();
    let t = f.path("t1");
    let out = restore(&f, &t, &["--include", "*.txt", "--exclude", "sub"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = restored(&t, &src);
    assert!(r.join("a.txt").exists());
    assert!(!r.join("b.rs").exists());
    assert!(!r.join("sub").exists());
    // Anchored at the root: the directory and everything below it.
    let t = f.path("t2");
    let anchored = format!("{}/sub", src.display());
    assert!(restore(&f, &t, &["--include", &anchored]).status.success());
    let r = restored(&t, &src);
    assert!(r.join("sub/c.txt").exists() && r.join("sub/d.rs").exists());
    assert!(!r.join("a.txt").exists());
    // Ignoring case.
    let t = f.path("t3");
    assert!(restore(&f, &t, &["--iinclude", "A.TXT"]).status.success());
    assert!(restored(&t, &src).join("a.txt").exists());
    assert!(!restore(&f, &f.path("t4"), &["--include", "A.TXT"])
        .status
        .success());
}

#[test]
fn an_include_that_matches_nothing_is_an_error() {
    let (f, _) = fixture();
    let t = f.path("t");
    let out = restore(&f, &t, &["--include", "*.txt", "--include", "*.nothing"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("*.nothing") && err.contains("matches nothing"),
        "{err}"
    );
    assert!(
        !t.exists(),
        "nothing is written when a pattern matches nothing"
    );
}

#[test]
fn dry_run_counts_and_writes_nothing() {
    let (f, _) = fixture();
    let t = f.path("t");
    let out = restore(&f, &t, &["--dry-run", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["files"], 4);
    assert!(!t.exists());
}

#[test]
fn overwrite_policies_and_delete() {
    let (f, src) = fixture();
    let t = f.path("t");
    assert!(restore(&f, &t, &[]).status.success());
    let r = restored(&t, &src);
    // A local change of the same size and time is kept by if-changed...
    fs::write(r.join("a.txt"), "A.TXT").unwrap();
    let mtime =
        filetime::FileTime::from_last_modification_time(&fs::metadata(src.join("a.txt")).unwrap());
    filetime::set_file_mtime(r.join("a.txt"), mtime).unwrap();
    fs::write(r.join("b.rs"), "changed, longer").unwrap();
    fs::write(r.join("extra"), "not in the snapshot").unwrap();
    fs::create_dir_all(r.join("sub/junk")).unwrap();
    let out = restore(&f, &t, &["--overwrite", "if-changed"]);
    assert!(out.status.success());
    assert_eq!(fs::read(r.join("a.txt")).unwrap(), b"A.TXT");
    assert_eq!(fs::read(r.join("b.rs")).unwrap(), b"b.rs");
    assert!(r.join("extra").exists(), "no --delete, nothing removed");
    // ... replaced by always; never keeps even a different file.
    fs::write(r.join("b.rs"), "changed again").unwrap();
    assert!(restore(&f, &t, &["--overwrite", "never"]).status.success());
    assert_eq!(fs::read(r.join("b.rs")).unwrap(), b"changed again");
    assert!(restore(&f, &t, &["--overwrite", "always", "--delete"])
        .status
        .success());
    assert_eq!(fs::read(r.join("a.txt")).unwrap(), b"a.txt");
    assert!(!r.join("extra").exists() && !r.join("sub/junk").exists());
    assert_same_tree(&src, &r);
}

#[test]
fn delete_stays_within_the_selection() {
    let (f, src) = fixture();
    let t = f.path("t");
    assert!(restore(&f, &t, &[]).status.success());
    let r = restored(&t, &src);
    fs::write(r.join("sub/extra.txt"), "x").unwrap();
    fs::write(r.join("outside"), "x").unwrap();
    let sub = format!("{}/sub", src.display());
    assert!(restore(&f, &t, &["--include", &sub, "--delete"])
        .status
        .success());
    assert!(!r.join("sub/extra.txt").exists());
    assert!(r.join("outside").exists(), "outside the --include: kept");
}

#[test]
fn verify_reads_back_what_was_restored() {
    let (f, src) = fixture();
    let t = f.path("t");
    let out = restore(&f, &t, &["--verify"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verified 4 files"), "{text}");
    // A file changed in the target after the restore (kept by --overwrite never) is
    // reported by --verify.
    let r = restored(&t, &src);
    fs::write(r.join("a.txt"), "tampered").unwrap();
    let out = restore(&f, &t, &["--overwrite", "never", "--verify"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a.txt") && err.contains("verify"), "{err}");
}

/// `--verify` on an encrypted repository, whose chunk ids are keyed hashes: it compared the
/// restored files with plain BLAKE3 and reported every file as differing.
#[test]
fn verify_passes_on_an_encrypted_repository() {
    let f = Fixture::encrypted("pw");
    let src = f.path("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("a.txt"), "a.txt").unwrap();
    fs::write(src.join("sub/big"), bytes(300_000, 7)).unwrap();
    f.cmd(&["backup", src.to_str().unwrap()])
        .env("DEDELTA_PASSWORD", "pw")
        .assert()
        .success();
    let t = f.path("t");
    let run = |extra: &[&str]| {
        f.cmd(&[
            "restore",
            "latest",
            "--target",
            t.to_str().unwrap(),
            "--verify",
        ])
        .args(extra)
        .env("DEDELTA_PASSWORD", "pw")
        .output()
        .unwrap()
    };
    let out = run(&[]);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{text}{err}");
    assert!(text.contains("verified 2 files"), "{text}");
    // A tampered file is still found.
    fs::write(restored(&t, &src).join("sub/big"), "tampered").unwrap();
    let out = run(&["--overwrite", "never"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("big") && err.contains("verify"), "{err}");
    assert!(!err.contains("a.txt"), "{err}");
}

#[test]
fn dump_of_a_directory_is_a_tar_stream() {
    let (f, src) = fixture();
    let out = f
        .cmd(&["dump", "latest", &format!("{}/sub", src.display())])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names = Vec::new();
    let mut archive = tar::Archive::new(&out.stdout[..]);
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        if name.ends_with("c.txt") {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            assert_eq!(s, "sub/c.txt");
        }
        names.push(name);
    }
    assert_eq!(names.len(), 3, "{names:?}"); // sub, sub/c.txt, sub/d.rs
    assert!(names.iter().all(|n| n.contains("src/sub")), "{names:?}");
    // The whole snapshot with `/`.
    let out = f.cmd(&["dump", "latest", "/"]).output().unwrap();
    assert!(out.status.success());
    let n = tar::Archive::new(&out.stdout[..])
        .entries()
        .unwrap()
        .count();
    assert_eq!(n, 6);
}
