//! check: damage is found and traced to snapshots and files; restore refuses damaged data.

use crate::support::*;
use std::fs;

/// A repository with one snapshot of `src/data.bin` (2 MiB of noise).
fn one_file_backed_up() -> Fixture {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("data.bin"), bytes(2 << 20, 5)).unwrap();
    f.backup(&[&src]);
    f
}

/// `--read-data-subset`: a subset that holds every container finds the damage; a
/// malformed subset is refused.
#[test]
fn a_read_data_subset_reads_its_containers() {
    let f = one_file_backed_up();
    let out = f.ok(&["check", "--read-data-subset", "1/1"]);
    assert!(out.contains("chunks read: no errors"), "{out}");
    let c = f
        .containers()
        .into_iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut b = fs::read(&c).unwrap();
    b[1000] ^= 0xff;
    fs::write(&c, b).unwrap();
    let out = f
        .cmd(&["check", "--read-data-subset", "100%"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = f
        .cmd(&["check", "--read-data-subset", "0/3"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("between 1 and t"));
}

#[test]
fn corrupt_container_is_named_and_restore_fails() {
    let f = one_file_backed_up();
    f.ok(&["check", "--read-data"]);
    // Flip a byte in the data of the largest container (not its metadata).
    let c = f
        .containers()
        .into_iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let name = c.file_name().unwrap().to_string_lossy().into_owned();
    let mut bytes = fs::read(&c).unwrap();
    bytes[1000] ^= 0xff;
    fs::write(&c, bytes).unwrap();
    // Without --read-data the metadata still checks out.
    f.ok(&["check"]);

    let out = f.cmd(&["check", "--read-data"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains(&name), "{report}");
    assert!(report.contains("data.bin"), "file not named: {report}");
    assert!(report.contains("corrupt chunk"), "{report}");
    let out = f
        .cmd(&[
            "restore",
            "latest",
            "--target",
            f.path("out").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    // The damaged file is reported and skipped: restore completed, but not everything (3).
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&name) && err.contains("corrupt chunk"),
        "{err}"
    );
    let out = f
        .cmd(&["dump", "latest"])
        .arg(f.path("src/data.bin"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn missing_container_is_reported_per_file() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("one.bin"), bytes(1 << 20, 6)).unwrap();
    f.backup(&[&src]);
    fs::write(src.join("two.bin"), bytes(1 << 20, 7)).unwrap();
    f.backup(&[&src]);
    // The newest container (holding two.bin and the second tree) goes missing.
    let newest = f
        .containers()
        .into_iter()
        .max_by_key(|p| fs::metadata(p).unwrap().modified().unwrap())
        .unwrap();
    fs::remove_file(newest).unwrap();
    let out = f.cmd(&["check", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = summary(&out.stdout);
    let problems = report["problems"].as_array().unwrap();
    assert!(!problems.is_empty());
    assert!(
        problems.iter().all(|p| p["snapshot"].is_string()),
        "{report}"
    );
}

#[test]
fn corrupt_metadata_is_reported() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a.bin"), bytes(300_000, 8)).unwrap();
    f.backup(&[&src]);
    for c in f.containers() {
        let mut b = fs::read(&c).unwrap();
        let n = b.len();
        b[n - 40] ^= 1; // inside the metadata section
        fs::write(&c, b).unwrap();
    }
    let out = f.cmd(&["check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("metadata checksum"));
}
