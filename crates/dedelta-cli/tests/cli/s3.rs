//! Repositories on S3: the commands against a real S3 server (moto, started by each test on
//! 127.0.0.1; skipped with a message when `moto_server` is absent, unless
//! `DEDELTA_REQUIRE_S3=1`, which `scripts/test.sh` sets after installing it).

use crate::support::{assert_same_tree, bytes, dedelta, make_tree, restored, summary, text};
use assert_cmd::Command;
use dedelta_store::backend::s3::test_server::{moto_or_skip, MotoServer};
use std::fs;
use std::path::{Path, PathBuf};

/// A repository in a fresh bucket of a moto server, and a directory for sources, restores
/// and each client's cache.
struct S3Repo {
    _server: MotoServer,
    url: String,
    dir: tempfile::TempDir,
}

impl S3Repo {
    fn new() -> Option<S3Repo> {
        let server = moto_or_skip()?;
        let url = server.new_repo_url("backups", "repo").unwrap();
        let r = S3Repo {
            _server: server,
            url,
            dir: tempfile::tempdir().unwrap(),
        };
        r.ok("a", &["init", "--insecure-no-password"]);
        Some(r)
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `dedelta <args> -r s3:...` as client `who` (its own cache directory).
    fn cmd(&self, who: &str, args: &[&str]) -> Command {
        let mut c = dedelta();
        c.args(args)
            .arg("-r")
            .arg(&self.url)
            .envs(MotoServer::env())
            .env("DEDELTA_CACHE_DIR", self.path(&format!("cache-{who}")));
        c
    }

    fn ok(&self, who: &str, args: &[&str]) -> String {
        let out = self.cmd(who, args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Backs `src` up as `who`; returns the snapshot id.
    fn backup(&self, who: &str, src: &Path) -> String {
        let out = self.ok(who, &["backup", "--json", src.to_str().unwrap()]);
        let v = summary(out.as_bytes());
        v["snapshot_id"].as_str().unwrap().to_string()
    }

    /// Restores `id` as `who` and compares it with `src`.
    fn assert_restores(&self, who: &str, id: &str, src: &Path) {
        let target = self.path(&format!("out-{who}-{id}"));
        self.ok(who, &["restore", id, "--target", target.to_str().unwrap()]);
        assert_same_tree(src, &restored(&target, src));
    }
}

/// An encrypted repository on S3: made by `init` with a password, backed up and restored
/// with it (also by a client with an empty cache); without it or with a wrong one, refused.
#[test]
fn encrypted_repository_over_s3() {
    let Some(server) = moto_or_skip() else { return };
    let url = server.new_repo_url("backups", "sealed").unwrap();
    let r = S3Repo {
        _server: server,
        url,
        dir: tempfile::tempdir().unwrap(),
    };
    let with_pw = |who: &str, pw: &str, args: &[&str]| {
        r.cmd(who, args)
            .env("DEDELTA_PASSWORD", pw)
            .output()
            .unwrap()
    };
    let out = with_pw("a", "s3cret", &["init", "--insecure-kdf", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["encrypted"], true, "{v}");
    let src = r.path("src");
    make_tree(&src, 1);
    let out = with_pw("a", "s3cret", &["backup", "--json", src.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = summary(&out.stdout)["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    for who in ["a", "b"] {
        let target = r.path(&format!("out-{who}"));
        let out = with_pw(
            who,
            "s3cret",
            &["restore", &id, "--target", target.to_str().unwrap()],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_same_tree(&src, &restored(&target, &src));
    }
    let out = with_pw("c", "wrong", &["snapshots"]);
    assert_eq!(out.status.code(), Some(12));
    let out = r.cmd("c", &["snapshots"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("encrypted"), "{err}");
    // A second init finds the repository.
    let out = with_pw("a", "s3cret", &["init", "--insecure-kdf"]);
    assert!(!out.status.success());
}

/// Backup, restore bit-exact (also by a client with an empty cache), check --read-data,
/// forget --prune and restore again, all over S3.
#[test]
fn backup_restore_check_and_prune_over_s3() {
    let Some(r) = S3Repo::new() else { return };
    let src = r.path("src");
    make_tree(&src, 1);
    let first = r.backup("a", &src);
    // A second version: most of the data again, some edited (deltas against the first).
    let mut t = fs::read(src.join("text.txt")).unwrap();
    t[1000..1100].copy_from_slice(&text(100, 9));
    fs::write(src.join("text.txt"), t).unwrap();
    fs::write(src.join("new.bin"), bytes(500_000, 7)).unwrap();
    let second = r.backup("a", &src);
    r.ok("a", &["check", "--read-data"]);
    r.assert_restores("a", &second, &src);
    // A client that never saw the repository.
    r.assert_restores("b", &second, &src);
    let snaps = r.ok("b", &["snapshots", "--json"]);
    assert!(snaps.contains(&first) && snaps.contains(&second), "{snaps}");
    r.ok("a", &["forget", &first, "--prune"]);
    r.ok("b", &["check", "--read-data"]);
    r.assert_restores("b", &second, &src);
    let out = r.ok("a", &["unlock", "--json"]);
    assert!(out.contains("\"removed\":[]"), "{out}");
}

/// Several clients back up different data into one repository at the same time; every
/// snapshot restores bit-exact and the repository checks clean.
#[test]
fn concurrent_backups_from_several_clients() {
    let Some(r) = S3Repo::new() else { return };
    let clients = ["a", "b", "c"];
    let srcs: Vec<PathBuf> = clients
        .iter()
        .enumerate()
        .map(|(i, who)| {
            let src = r.path(&format!("src-{who}"));
            make_tree(&src, 10 + i as u64);
            // Data shared by all clients too: deduplicated, whoever stores it first.
            fs::write(src.join("shared.bin"), bytes(1 << 20, 99)).unwrap();
            src
        })
        .collect();
    let ids: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = clients
            .iter()
            .zip(&srcs)
            .map(|(who, src)| s.spawn(|| r.backup(who, src)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    r.ok("d", &["check", "--read-data"]);
    for ((who, src), id) in clients.iter().zip(&srcs).zip(&ids) {
        r.assert_restores(who, id, src);
        r.assert_restores("d", id, src);
    }
    // Each client's next backup takes in the others' containers.
    let again = r.backup("a", &srcs[1]);
    r.assert_restores("a", &again, &srcs[1]);
}

/// Errors are clear: no repository in an empty prefix (exit 10), and a bucket that does not
/// exist is named.
#[test]
fn missing_repository_and_bucket_are_named() {
    let Some(server) = moto_or_skip() else { return };
    let url = server.new_repo_url("empty", "nothing").unwrap();
    let out = dedelta()
        .args(["snapshots", "-r", &url])
        .envs(MotoServer::env())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(10), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let out = dedelta()
        .args([
            "snapshots",
            "-r",
            &format!("s3:{}/nobucket/x", server.endpoint),
        ])
        .envs(MotoServer::env())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nobucket"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A TCP proxy on 127.0.0.1 to `upstream` that cuts every `nth` connection once `after`
/// bytes went through it (in either direction): network errors in the middle of requests.
/// Returns its address and the count of connections cut.
fn flaky_proxy(
    upstream: &str,
    nth: usize,
    after: usize,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let upstream = upstream.trim_start_matches("http://").to_string();
    let cuts = Arc::new(AtomicUsize::new(0));
    let counted = cuts.clone();
    std::thread::spawn(move || {
        for (i, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&upstream) else {
                continue;
            };
            let cut = (i % nth == nth - 1).then(|| Arc::new(AtomicUsize::new(0)));
            let cuts = counted.clone();
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server, client),
            ] {
                let cut = cut.clone();
                let cuts = cuts.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    loop {
                        let n = match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if let Some(c) = &cut {
                            if c.fetch_add(n, Ordering::Relaxed) + n > after {
                                cuts.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                });
            }
        }
    });
    (format!("http://{addr}"), cuts)
}

/// Connections cut in the middle of uploads and downloads: the retries carry backup,
/// restore and check through, and the data is intact.
#[test]
fn network_errors_are_retried() {
    let Some(server) = moto_or_skip() else { return };
    server.create_bucket("flaky").unwrap();
    let (proxy, cuts) = flaky_proxy(&server.endpoint, 3, 300_000);
    let url = format!("s3:{proxy}/flaky/repo");
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = dedelta()
            .args(args)
            .args(["-r", &url, "--connections", "2"])
            .envs(MotoServer::env())
            .env("DEDELTA_CACHE_DIR", dir.path().join("cache"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let src = dir.path().join("src");
    make_tree(&src, 3);
    run(&["init", "--insecure-no-password"]);
    run(&["backup", src.to_str().unwrap()]);
    fs::remove_dir_all(dir.path().join("cache")).unwrap();
    let target = dir.path().join("out");
    run(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_same_tree(&src, &restored(&target, &src));
    run(&["check", "--read-data"]);
    assert!(
        cuts.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no connection was cut"
    );
}
