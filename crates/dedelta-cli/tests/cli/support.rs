//! Shared helpers: running the binary, generating trees, comparing trees.

#![allow(dead_code)]

use assert_cmd::Command;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The binary under test with `DEDELTA_REPO` and the password variables cleared and its
/// local cache kept under the build's temporary directory (never the user's `~/.cache`).
/// Tests make repositories without encryption (`init --insecure-no-password`, see
/// [`Fixture::new`]) unless they test encryption (encryption.rs), so that the tests of
/// damage see the plain format they damage.
pub fn dedelta() -> Command {
    let mut c = Command::cargo_bin("dedelta").expect("binary built");
    c.env_remove("DEDELTA_REPO")
        .env_remove("DEDELTA_PASSWORD")
        .env_remove("DEDELTA_PASSWORD_FILE")
        .env_remove("DEDELTA_PASSWORD_COMMAND")
        .env_remove("DEDELTA_FROM_REPO")
        .env_remove("DEDELTA_FROM_PASSWORD")
        .env_remove("DEDELTA_FROM_PASSWORD_FILE")
        .env_remove("DEDELTA_FROM_PASSWORD_COMMAND")
        .env("DEDELTA_CACHE_DIR", test_cache_dir());
    c
}

/// The local cache directory of tests that do not choose their own.
pub fn test_cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("dedelta-cache")
}

/// A fresh directory with an initialised repository at `<dir>/repo`.
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Self {
        let f = Fixture {
            dir: tempfile::tempdir().unwrap(),
        };
        f.cmd(&["init", "--insecure-no-password"])
            .assert()
            .success();
        f
    }

    /// A fresh directory with an encrypted repository at `<dir>/repo`, whose password
    /// [`Self::cmd`] does not give (set `DEDELTA_PASSWORD` on the command).
    pub fn encrypted(password: &str) -> Self {
        let f = Fixture {
            dir: tempfile::tempdir().unwrap(),
        };
        f.cmd(&["init", "--insecure-kdf"])
            .env("DEDELTA_PASSWORD", password)
            .assert()
            .success();
        f
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn repo(&self) -> PathBuf {
        self.path("repo")
    }

    /// `dedelta <args> -r repo`.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = dedelta();
        c.args(args)
            .arg("-r")
            .arg(self.repo())
            .env("DEDELTA_CACHE_DIR", self.path("cache"));
        c
    }

    /// Runs a command expecting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Backs up `paths` with `--json`; returns the summary.
    pub fn backup(&self, paths: &[&Path]) -> serde_json::Value {
        let mut c = self.cmd(&["backup", "--json"]);
        c.args(paths);
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "backup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        summary(&out.stdout)
    }

    /// The chunk index's manifest: a client cache, in `<cache>/<repository id>/chunks.idx`.
    pub fn index_file(&self) -> PathBuf {
        let bytes = fs::read(self.repo().join("config")).unwrap();
        let config = dedelta_store::format::config::RepoConfig::from_bytes(&bytes).unwrap();
        self.path("cache").join(&config.id).join("chunks.idx")
    }

    /// The chunk index's run files (`chunks.idx.<number>.run` beside the manifest).
    pub fn index_runs(&self) -> Vec<PathBuf> {
        let manifest = self.index_file();
        let mut v: Vec<PathBuf> = fs::read_dir(manifest.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                n.starts_with("chunks.idx.") && n.ends_with(".run")
            })
            .collect();
        v.sort();
        v
    }

    /// Paths of the container files.
    pub fn containers(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        for shard in fs::read_dir(self.repo().join("containers")).unwrap() {
            for f in fs::read_dir(shard.unwrap().path()).unwrap() {
                v.push(f.unwrap().path());
            }
        }
        v.sort();
        v
    }
}

/// Deterministic pseudo-random bytes.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// Compressible text-like bytes.
pub fn text(len: usize, seed: u64) -> Vec<u8> {
    let words = [
        "alpha ", "beta ", "gamma ", "delta\n", "epsilon ", "zeta ", "eta\n", "theta ",
    ];
    let r = bytes(len / 4 + 1, seed);
    let mut out = Vec::with_capacity(len + 8);
    let mut i = 0;
    while out.len() < len {
        out.extend_from_slice(words[(r[i % r.len()] % 8) as usize].as_bytes());
        out.extend_from_slice(format!("{} ", r[(i * 7) % r.len()]).as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Builds a varied tree under `root`.
pub fn make_tree(root: &Path, seed: u64) {
    fs::create_dir_all(root.join("deep/a/b/c/d/e/f/g")).unwrap();
    fs::create_dir_all(root.join("ünïcødé dir/日本語")).unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("small.txt"), b"hello\n").unwrap();
    fs::write(root.join("big.bin"), bytes(3 << 20, seed)).unwrap();
    fs::write(root.join("text.txt"), text(1 << 20, seed + 1)).unwrap();
    fs::write(root.join("deep/a/b/c/d/e/f/g/leaf"), text(70_000, seed + 2)).unwrap();
    fs::write(
        root.join("ünïcødé dir/日本語/ファイル.txt"),
        text(5000, seed + 3),
    )
    .unwrap();
    fs::write(root.join("exec.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(root.join("exec.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(root.join("small.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("small.txt", root.join("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
    filetime::set_file_mtime(
        root.join("text.txt"),
        filetime::FileTime::from_unix_time(1_000_000_000, 123),
    )
    .unwrap();
}

/// Asserts that two trees have the same names, kinds, contents, modes, mtimes and link targets.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let list = |root: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = walk(root)
            .into_iter()
            .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
            .collect();
        v.sort();
        v
    };
    let la = list(a);
    assert_eq!(la, list(b), "file lists differ");
    for rel in la {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let (ma, mb) = (
            fs::symlink_metadata(&pa).unwrap(),
            fs::symlink_metadata(&pb).unwrap(),
        );
        assert_eq!(ma.file_type(), mb.file_type(), "{rel:?}");
        if ma.file_type().is_symlink() {
            assert_eq!(
                fs::read_link(&pa).unwrap(),
                fs::read_link(&pb).unwrap(),
                "{rel:?}"
            );
            continue;
        }
        assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "mode of {rel:?}");
        assert_eq!(ma.mtime(), mb.mtime(), "mtime of {rel:?}");
        assert_eq!(ma.mtime_nsec(), mb.mtime_nsec(), "mtime ns of {rel:?}");
        if ma.is_file() {
            assert!(
                fs::read(&pa).unwrap() == fs::read(&pb).unwrap(),
                "content of {rel:?}"
            );
        }
    }
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        out.push(p.clone());
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

/// Where `restore` puts an absolute source path under `target`.
pub fn restored(target: &Path, source: &Path) -> PathBuf {
    target.join(source.strip_prefix("/").unwrap())
}

/// The user the tests run the binary as (`nobody` on most systems).
pub const USER: u32 = 65534;

pub fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Runs `dedelta <args> -r repo` as [`USER`], with the fixture's cache.
pub fn as_user(f: &Fixture, args: &[&str]) -> std::process::Output {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("dedelta"))
        .args(args)
        .arg("-r")
        .arg(f.repo())
        .env_remove("DEDELTA_REPO")
        .env("DEDELTA_CACHE_DIR", f.path("cache"))
        .uid(USER)
        .gid(USER)
        .output()
        .unwrap()
}

/// Gives everything in the fixture to [`USER`].
pub fn give_to_user(f: &Fixture) {
    let ok = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{USER}:{USER}"))
        .arg(f.dir.path())
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// The result object of a command's `--json` output: its restic-style `summary` line when it
/// streams messages (`status` lines come before it when the command runs long enough), else
/// its one JSON document.
pub fn summary(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    let mut last = None;
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        if v["message_type"] == "summary" {
            return v;
        }
        last = Some(v);
    }
    last.unwrap_or_else(|| serde_json::from_str(&text).expect("JSON"))
}

/// Locks in `f`'s repository, not counting a lock being written (a temporary file renamed
/// into place: counted, it let a test go on before the lock existed, and the command racing
/// the half-taken lock backed off instead of the one the test expected).
pub fn lock_count(f: &Fixture) -> usize {
    fs::read_dir(f.repo().join("locks"))
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with(".tmp-"))
        .count()
}

/// Polls `cond` every 50 ms for up to a minute.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A `dump` of a large file into a pipe nobody reads yet: it blocks holding its lock (and its
/// chunk index) until [`BlockedDump::finish`] reads its output.
pub struct BlockedDump(pub std::process::Child);

impl BlockedDump {
    /// Dumps `file` of `snapshot` of `f`'s repository with its cache in `cache`, with the
    /// environment `envs`.
    pub fn spawn(
        f: &Fixture,
        snapshot: &str,
        file: &str,
        cache: &Path,
        envs: &[(&str, &str)],
    ) -> Self {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("dedelta"));
        c.args(["dump", snapshot, file, "-r"])
            .arg(f.repo())
            .env_remove("DEDELTA_REPO")
            .env("DEDELTA_CACHE_DIR", cache)
            .envs(envs.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        BlockedDump(c.spawn().unwrap())
    }

    /// Reads the whole output, and checks that the dump succeeded.
    pub fn finish(mut self) -> Vec<u8> {
        use std::io::Read;
        let mut dumped = Vec::new();
        self.0
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut dumped)
            .unwrap();
        let st = self.0.wait_with_output().unwrap();
        assert!(st.status.success(), "{st:?}");
        dumped
    }
}
