//! Encryption at rest: what is stored is sealed, passwords come from every source, a wrong
//! one exits 12, keys rotate, and a changed byte in any sealed object is found and named.

use crate::support::*;
use std::fs;
use std::path::{Path, PathBuf};

const PW: &str = "correct horse";

/// An encrypted fixture with a backup of a small tree holding a recognisable file name and
/// content.
fn backed_up() -> (Fixture, PathBuf) {
    let f = Fixture::encrypted(PW);
    let src = f.path("src");
    make_tree(&src, 3);
    fs::write(
        src.join("secret-plans.txt"),
        "the treasure is buried under the old oak tree\n".repeat(200),
    )
    .unwrap();
    let out = f
        .cmd(&["backup"])
        .arg(&src)
        .env("DEDELTA_PASSWORD", PW)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (f, src)
}

/// Runs `args` with password `pw`.
fn with_pw(f: &Fixture, pw: &str, args: &[&str]) -> std::process::Output {
    f.cmd(args).env("DEDELTA_PASSWORD", pw).output().unwrap()
}

fn ok_with(f: &Fixture, pw: &str, args: &[&str]) -> String {
    let out = with_pw(f, pw, args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The id of a key other than the one `pw` opens.
fn other_key(f: &Fixture, pw: &str) -> String {
    let list = ok_with(f, pw, &["key", "list", "--json"]);
    let keys: serde_json::Value = serde_json::from_str(&list).unwrap();
    keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["current"] == false)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn encrypted_backup_restores_bit_exact_and_stores_no_plaintext() {
    let (f, src) = backed_up();
    for p in files(&f.repo()) {
        let bytes = fs::read(&p).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for needle in [
            "treasure",
            "secret-plans",
            "blake3",
            "fastcdc",
            "DDCF",
            "DDSN",
        ] {
            assert!(!text.contains(needle), "{} holds {needle:?}", p.display());
        }
    }
    let target = f.path("out");
    ok_with(
        &f,
        PW,
        &["restore", "latest", "--target", target.to_str().unwrap()],
    );
    assert_same_tree(&src, &restored(&target, &src));
    let report = ok_with(&f, PW, &["check", "--read-data"]);
    assert!(report.contains("no errors"), "{report}");
    // An unchanged second backup deduplicates against the keyed ids.
    let out = ok_with(&f, PW, &["backup", "--json", src.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["bytes_added"].as_u64().unwrap() < 4096, "{v}");
}

#[test]
fn wrong_or_missing_password_is_a_clear_error() {
    let (f, _) = backed_up();
    let out = with_pw(&f, "wrong", &["snapshots"]);
    assert_eq!(out.status.code(), Some(12));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: wrong password"), "{err}");
    let out = f.cmd(&["snapshots"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("encrypted") && err.contains("--password-file"),
        "{err}"
    );
    // The other sources.
    let file = f.path("pw.txt");
    fs::write(&file, format!("{PW}\nnot part of it\n")).unwrap();
    f.ok(&["snapshots", "--password-file", file.to_str().unwrap()]);
    f.cmd(&["snapshots"])
        .env("DEDELTA_PASSWORD_FILE", &file)
        .assert()
        .success();
    f.ok(&["snapshots", "--password-command", &format!("echo '{PW}'")]);
    let out = f
        .cmd(&["snapshots", "--password-command", "echo nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(12));
    let out = f
        .cmd(&["snapshots", "--password-command", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // `init` without any password and no terminal refuses, naming the way out.
    let out = dedelta()
        .args(["init", "-r"])
        .arg(f.path("other"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--insecure-no-password") || err.contains("password"),
        "{err}"
    );
    assert!(!f.path("other").join("config").exists());
}

#[test]
fn keys_rotate() {
    let (f, src) = backed_up();
    let new_pw = |name: &str, pw: &str| {
        let p = f.path(name);
        fs::write(&p, format!("{pw}\n")).unwrap();
        p
    };
    let second = new_pw("second", "second password");
    ok_with(
        &f,
        PW,
        &[
            "key",
            "add",
            "--insecure-kdf",
            "--new-password-file",
            second.to_str().unwrap(),
        ],
    );
    let list = ok_with(&f, "second password", &["key", "list", "--json"]);
    let keys: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(keys["keys"].as_array().unwrap().len(), 2, "{keys}");
    let current: Vec<&str> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["current"] == true)
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    assert_eq!(current.len(), 1);
    // The key in use cannot be removed.
    let out = with_pw(&f, "second password", &["key", "remove", current[0]]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use")
            || String::from_utf8_lossy(&out.stderr).contains("opened")
    );
    // passwd: the second password is replaced by a third.
    let third = new_pw("third", "third password");
    ok_with(
        &f,
        "second password",
        &[
            "key",
            "passwd",
            "--insecure-kdf",
            "--new-password-file",
            third.to_str().unwrap(),
        ],
    );
    assert_eq!(
        with_pw(&f, "second password", &["snapshots"]).status.code(),
        Some(12)
    );
    ok_with(&f, "third password", &["snapshots"]);
    ok_with(&f, PW, &["snapshots"]);
    // Remove the first key with the third password: the first stops working.
    let other = other_key(&f, "third password");
    ok_with(&f, "third password", &["key", "remove", &other[..10]]);
    assert_eq!(with_pw(&f, PW, &["snapshots"]).status.code(), Some(12));
    // The data is still readable with the remaining key.
    let target = f.path("out");
    ok_with(
        &f,
        "third password",
        &["restore", "latest", "--target", target.to_str().unwrap()],
    );
    assert_same_tree(&src, &restored(&target, &src));
}

/// Key commands lock the repository: while a dump holds a shared lock, `key list` and
/// `key add` run, and `key passwd` and `key remove` (which delete a key file a running
/// command may have opened the repository with) are refused with exit code 11.
#[test]
fn key_commands_take_locks() {
    let f = Fixture::encrypted(PW);
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    let data = bytes(8 << 20, 7);
    fs::write(src.join("big.bin"), &data).unwrap();
    ok_with(&f, PW, &["backup", src.to_str().unwrap()]);
    // The dump writes 8 MiB into a pipe nobody reads yet: it blocks holding its lock.
    let file = format!("{}/big.bin", src.display());
    let dump = BlockedDump::spawn(
        &f,
        "latest",
        &file,
        &f.path("cache-dump"),
        &[("DEDELTA_PASSWORD", PW)],
    );
    wait_for("the dump's lock", || lock_count(&f) == 1);
    let second = f.path("second");
    fs::write(&second, "second password\n").unwrap();
    let new_pw = [
        "--insecure-kdf",
        "--new-password-file",
        second.to_str().unwrap(),
    ];
    ok_with(&f, PW, &["key", "list"]);
    let add: Vec<&str> = ["key", "add"].iter().chain(&new_pw).copied().collect();
    ok_with(&f, PW, &add);
    let passwd: Vec<&str> = ["key", "passwd"].iter().chain(&new_pw).copied().collect();
    let out = with_pw(&f, PW, &passwd);
    assert_eq!(out.status.code(), Some(11), "{out:?}");
    let other = other_key(&f, PW);
    let out = with_pw(&f, PW, &["key", "remove", &other]);
    assert_eq!(out.status.code(), Some(11), "{out:?}");
    assert!(dump.finish() == data);
    // Alone, they run.
    ok_with(&f, PW, &["key", "remove", &other]);
}

/// Runs `dedelta ARGS -r REPO` on a terminal (util-linux `script` gives it a pseudo-terminal)
/// typing `input`; returns the exit code and what the terminal showed.
fn on_terminal(f: &Fixture, args: &str, input: &str) -> (Option<i32>, String) {
    use std::io::Write;
    let bin = assert_cmd::cargo::cargo_bin("dedelta");
    let line = format!("{} {args} -r {}", bin.display(), f.repo().display());
    let mut child = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("DEDELTA_REPO")
        .env_remove("DEDELTA_PASSWORD")
        .env("DEDELTA_CACHE_DIR", f.path("cache"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let shown =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), shown)
}

/// Without a password from a file, the environment or a command, `init` asks on the terminal
/// twice (two different answers are refused), and later commands ask once; a wrong answer
/// exits 12.
#[test]
fn passwords_are_asked_on_a_terminal() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    }
    let f = Fixture {
        dir: tempfile::tempdir().unwrap(),
    };
    let (code, shown) = on_terminal(&f, "init --insecure-kdf", "one\ntwo\n");
    assert_eq!(code, Some(1), "{shown}");
    assert!(shown.contains("do not match"), "{shown}");
    let (code, shown) = on_terminal(&f, "init --insecure-kdf", "typed pw\ntyped pw\n");
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.contains("enter password for the new repository"),
        "{shown}"
    );
    let (code, shown) = on_terminal(&f, "snapshots", "typed pw\n");
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("enter password for repository"), "{shown}");
    let (code, shown) = on_terminal(&f, "snapshots", "not it\n");
    assert_eq!(code, Some(12), "{shown}");
    // The typed password is the repository's: the environment's works too.
    ok_with(&f, "typed pw", &["snapshots"]);
}

/// Flips a byte of `path` at `at` (from the end when negative).
fn flip(path: &Path, at: isize) {
    let mut b = fs::read(path).unwrap();
    let i = if at < 0 {
        (b.len() as isize + at) as usize
    } else {
        at as usize
    };
    b[i] ^= 0x20;
    fs::write(path, b).unwrap();
}

/// The output of `args` must be a failure (not a panic) naming `what`.
fn fails_naming(f: &Fixture, args: &[&str], what: &str) {
    let out = with_pw(f, PW, args);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{args:?} succeeded: {all}");
    assert!(!all.contains("panicked"), "{all}");
    assert!(all.contains(what), "{args:?} does not name {what:?}: {all}");
}

#[test]
fn a_changed_byte_in_any_sealed_object_is_found_and_named() {
    // The config.
    let (f, _) = backed_up();
    flip(&f.repo().join("config"), 10);
    fails_naming(&f, &["snapshots"], "corrupt config");

    // A snapshot.
    let (f, _) = backed_up();
    let snap = files(&f.repo().join("snapshots")).pop().unwrap();
    let name = snap.file_name().unwrap().to_string_lossy().into_owned();
    flip(&snap, 5);
    fails_naming(&f, &["check"], &name);

    // A container's data (a region) and its metadata.
    for at in [100, -40] {
        let (f, _) = backed_up();
        let c = f
            .containers()
            .into_iter()
            .max_by_key(|p| fs::metadata(p).unwrap().len())
            .unwrap();
        let name = c.file_name().unwrap().to_string_lossy().into_owned();
        flip(&c, at);
        // Restore first: check records the damage, after which restore names the chunks.
        let target = f.path("out");
        fails_naming(
            &f,
            &["restore", "latest", "--target", target.to_str().unwrap()],
            &name,
        );
        fails_naming(&f, &["check", "--read-data"], &name);
    }

    // A damage record (written by check on finding damage): reading it fails by name.
    let (f, _) = backed_up();
    let c = f.containers().pop().unwrap();
    flip(&c, 100);
    let out = with_pw(&f, PW, &["check", "--read-data"]);
    assert!(
        f.repo().join("damage").exists(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let records = files(&f.repo().join("damage"));
    assert!(!records.is_empty(), "check wrote no damage record");
    let record = records[0].clone();
    let name = record.file_name().unwrap().to_string_lossy().into_owned();
    flip(&record, 3);
    let out = with_pw(&f, PW, &["check"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains(&name), "damage record not named: {all}");

    // A key file: unreadable JSON is named; a changed sealed key is a wrong password.
    let (f, _) = backed_up();
    let key = files(&f.repo().join("keys")).pop().unwrap();
    let name = key.file_name().unwrap().to_string_lossy().into_owned();
    let original = fs::read(&key).unwrap();
    fs::write(&key, b"{not json").unwrap();
    fails_naming(&f, &["snapshots"], &format!("key file {name}"));
    let text = String::from_utf8(original).unwrap();
    let at = text.find("\"data\": \"").unwrap() + 12;
    let mut changed = text.into_bytes();
    changed[at] = if changed[at] == b'0' { b'1' } else { b'0' };
    fs::write(&key, changed).unwrap();
    assert_eq!(with_pw(&f, PW, &["snapshots"]).status.code(), Some(12));
}

/// LoopDelta's dense container lists are sealed too.
#[test]
fn dense_lists_are_sealed_and_checked() {
    let f = Fixture::encrypted(PW);
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), text(3 << 20, 1)).unwrap();
    ok_with(
        &f,
        PW,
        &["backup", "--preset", "loopdelta", src.to_str().unwrap()],
    );
    fs::write(src.join("b"), text(1 << 20, 2)).unwrap();
    ok_with(
        &f,
        PW,
        &["backup", "--preset", "loopdelta", src.to_str().unwrap()],
    );
    let lists = files(&f.repo().join("dense"));
    assert!(!lists.is_empty(), "no dense list was written");
    let list = lists[0].clone();
    assert!(!String::from_utf8_lossy(&fs::read(&list).unwrap()).contains("DDDL"));
    let name = list.file_name().unwrap().to_string_lossy().into_owned();
    flip(&list, 2);
    let out = with_pw(
        &f,
        PW,
        &[
            "backup",
            "--json",
            "--preset",
            "loopdelta",
            src.to_str().unwrap(),
        ],
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains("panicked"), "{all}");
    assert!(all.contains(&name[..8]) || all.contains("dense"), "{all}");
}

/// A plain config put in place of an encrypted repository's (to have the next backup written
/// in clear) is refused; a plain repository still works without any password.
#[test]
fn a_plain_config_over_an_encrypted_repository_is_refused() {
    let (f, src) = backed_up();
    let plain = Fixture::new();
    plain.backup(&[&src]);
    plain.ok(&["check", "--read-data"]);
    fs::copy(plain.repo().join("config"), f.repo().join("config")).unwrap();
    let out = with_pw(&f, PW, &["backup", src.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("key files"), "{err}");
}
