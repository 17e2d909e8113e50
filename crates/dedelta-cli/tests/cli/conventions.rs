//! Conventions every command follows: global options before or after the command, -q/-v,
//! the message for a missing repository option, other tools' repositories named, restic-style
//! JSON messages (one test per message type), `ls --json`, and `--help` grouping.

use crate::support::*;
use std::fs;

#[test]
fn global_options_go_before_or_after_the_command() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "a").unwrap();
    let cache = f.path("cache");
    // Before the command, as restic users type it.
    dedelta()
        .arg("-r")
        .arg(f.repo())
        .arg("--cache-dir")
        .arg(&cache)
        .args(["backup", "-q"])
        .arg(&src)
        .assert()
        .success()
        .stdout("");
    // After it, and from the environment.
    let out = dedelta()
        .args(["snapshots", "--repo"])
        .arg(f.repo())
        .output()
        .unwrap();
    assert!(out.status.success());
    dedelta()
        .env("DEDELTA_REPO", f.repo())
        .args(["snapshots"])
        .assert()
        .success();
}

#[test]
fn a_missing_repository_option_says_how_to_give_one() {
    let out = dedelta().args(["snapshots"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-r") && err.contains("DEDELTA_REPO"), "{err}");
    assert_eq!(err.matches("error:").count(), 1, "{err}");
}

#[test]
fn restic_and_borg_repositories_are_named() {
    let d = tempfile::tempdir().unwrap();
    let restic = d.path().join("restic");
    for sub in ["keys", "data", "snapshots", "index", "locks"] {
        fs::create_dir_all(restic.join(sub)).unwrap();
    }
    fs::write(restic.join("config"), [0u8; 32]).unwrap();
    let borg = d.path().join("borg");
    fs::create_dir_all(borg.join("data")).unwrap();
    fs::write(borg.join("README"), "This is a Borg Backup repository.\n").unwrap();
    fs::write(borg.join("config"), "[repository]\nversion = 1\n").unwrap();
    for (path, name) in [(&restic, "restic"), (&borg, "borg")] {
        let out = dedelta()
            .args(["snapshots", "-r"])
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("is a {name} repository")), "{err}");
    }
}

/// Parses JSON lines.
fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The JSON lines of standard error (which also carries plain `note:` and `warning:` lines).
fn json_lines_of_stderr(err: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(err)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn of_type<'a>(lines: &'a [serde_json::Value], t: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|v| v["message_type"] == t).collect()
}

/// A source big enough for a few status lines at a high rate.
fn big_source(f: &Fixture) -> std::path::PathBuf {
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("big"), bytes(6 << 20, 1)).unwrap();
    fs::write(src.join("small"), "s").unwrap();
    src
}

#[test]
fn json_status_and_summary_messages() {
    let f = Fixture::new();
    let src = big_source(&f);
    for (args, during) in [
        (vec!["backup", "--json", src.to_str().unwrap()], "backup"),
        (vec!["check", "--json", "--read-data"], "check"),
        (
            vec![
                "restore",
                "latest",
                "--json",
                "-t",
                f.path("t").to_str().unwrap().to_owned().leak(),
            ],
            "restore",
        ),
    ] {
        let out = f
            .cmd(&args)
            .env("DEDELTA_PROGRESS_FPS", "100000")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{during}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = json_lines(&out.stdout);
        let status = of_type(&lines, "status");
        assert!(!status.is_empty(), "{during}: no status line");
        for s in &status {
            for key in [
                "percent_done",
                "total_bytes",
                "bytes_done",
                "seconds_elapsed",
            ] {
                assert!(s.get(key).is_some(), "{during}: status without {key}: {s}");
            }
        }
        let last = lines.last().unwrap();
        assert_eq!(last["message_type"], "summary", "{during}: {last}");
        assert_eq!(of_type(&lines, "summary").len(), 1);
    }
}

#[test]
fn json_verbose_status_per_file_with_v() {
    let f = Fixture::new();
    let src = big_source(&f);
    let out = f.ok(&["backup", "--json", "-v", src.to_str().unwrap()]);
    let lines = json_lines(out.as_bytes());
    let verbose = of_type(&lines, "verbose_status");
    assert_eq!(verbose.len(), 2, "{out}");
    assert!(verbose.iter().all(|v| v["action"] == "new"), "{out}");
    let out = f.ok(&["backup", "--json", "-v", src.to_str().unwrap()]);
    let lines = json_lines(out.as_bytes());
    assert!(of_type(&lines, "verbose_status")
        .iter()
        .all(|v| v["action"] == "unchanged"));
    let t = f.path("t");
    let out = f.ok(&[
        "restore",
        "latest",
        "--json",
        "-v",
        "-t",
        t.to_str().unwrap(),
    ]);
    let lines = json_lines(out.as_bytes());
    let restored = of_type(&lines, "verbose_status");
    assert_eq!(restored.len(), 2, "{out}");
    assert!(restored.iter().all(|v| v["action"] == "restored"));
}

#[test]
fn json_error_messages_go_to_stderr() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "a").unwrap();
    let locked = src.join("locked");
    fs::write(&locked, "secret").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    if fs::read(&locked).is_ok() {
        return; // root reads anything: no error to report
    }
    let out = f
        .cmd(&["backup", "--json", src.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let errors = json_lines_of_stderr(&out.stderr);
    let e = errors
        .iter()
        .find(|v| v["message_type"] == "error")
        .expect("an error line");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("locked"),
        "{e}"
    );
    assert_eq!(e["during"], "archival");
    assert!(e["item"].as_str().unwrap().ends_with("/locked"), "{e}");
    let last = json_lines(&out.stdout).pop().unwrap();
    assert_eq!(last["message_type"], "summary");
}

#[test]
fn ls_json_has_struct_type_rfc3339_times_and_octal_modes() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "a").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(src.join("a"), fs::Permissions::from_mode(0o640)).unwrap();
    f.backup(&[&src]);
    let lines = json_lines(f.ok(&["ls", "latest", "--json"]).as_bytes());
    assert_eq!(lines[0]["struct_type"], "snapshot");
    let snaps: serde_json::Value = serde_json::from_str(&f.ok(&["snapshots", "--json"])).unwrap();
    // One path convention: absolute, as the snapshot's paths are.
    let root = snaps[0]["paths"][0].as_str().unwrap();
    assert_eq!(lines[0]["paths"][0], root);
    let a = lines
        .iter()
        .find(|v| v["struct_type"] == "node" && v["name"] == "a")
        .unwrap();
    assert_eq!(a["path"], format!("{root}/a"));
    assert_eq!(a["mode"], "0640");
    assert_eq!(a["permissions"], "-rw-r-----");
    assert_eq!(a["type"], "file");
    for t in ["mtime", "atime", "ctime"] {
        let s = a[t].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(s).is_ok(), "{t}: {s}");
    }
}

#[test]
fn help_puts_everyday_options_first() {
    let out = dedelta().args(["backup", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let pos = |s: &str| {
        help.find(s)
            .unwrap_or_else(|| panic!("{s} missing:\n{help}"))
    };
    assert!(pos("--tag") < pos("Algorithm options:"), "{help}");
    assert!(pos("Selection:") < pos("Algorithm options:"));
    assert!(pos("Algorithm options:") < pos("--sketch "), "{help}");
    assert!(help.contains("--repo"), "global options are listed: {help}");
    let out = dedelta().args(["restore", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.find("--include").unwrap() < help.find("Restore cache:").unwrap());
}

#[test]
fn json_error_messages_of_check_and_restore() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("data.bin"), bytes(1 << 20, 5)).unwrap();
    f.backup(&[&src]);
    for c in f.containers() {
        let mut b = fs::read(&c).unwrap();
        b[100] ^= 0xff;
        fs::write(&c, b).unwrap();
    }
    let out = f.cmd(&["check", "--read-data", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let errors = json_lines_of_stderr(&out.stderr);
    let checks: Vec<_> = errors
        .iter()
        .filter(|v| v["message_type"] == "error")
        .collect();
    assert!(
        !checks.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(checks
        .iter()
        .all(|e| e["during"] == "check" && e["error"]["message"].is_string()));
    let last = json_lines(&out.stdout).pop().unwrap();
    assert_eq!(last["message_type"], "summary");
    assert_eq!(last["num_errors"].as_u64().unwrap(), checks.len() as u64);
    let t = f.path("t");
    let out = f
        .cmd(&["restore", "latest", "--json", "-t", t.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let e = json_lines_of_stderr(&out.stderr)
        .into_iter()
        .find(|v| v["message_type"] == "error")
        .expect("an error message");
    assert_eq!(e["during"], "restore");
    assert!(e["item"].as_str().unwrap().ends_with("/data.bin"), "{e}");
}
