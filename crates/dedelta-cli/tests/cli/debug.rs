//! `cat` (decoded objects for debugging), `cache` (`--cleanup` of caches of repositories
//! gone) and `generate` (completions and man pages from clap), issue 21.

use super::support::*;
use serde_json::Value;
use std::fs;

#[test]
fn cat_prints_decoded_objects() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 4);
    let id = f.backup(&[&src])["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    let config: Value = serde_json::from_str(&f.ok(&["cat", "config"])).unwrap();
    assert!(
        config["id"].is_string() && config["delta"].is_object(),
        "{config}"
    );
    let snap: Value = serde_json::from_str(&f.ok(&["cat", "snapshot", "latest"])).unwrap();
    assert_eq!(snap["id"], id.as_str());
    assert!(snap["tree"]["chunks"].is_array());
    // The tree: one node per line, files with their recipes.
    let tree = f.ok(&["cat", "tree", &id[..8]]);
    let nodes: Vec<Value> = tree
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let small = nodes
        .iter()
        .find(|n| n["path"].as_str().unwrap().ends_with("/small.txt"))
        .unwrap();
    assert_eq!(small["size"], 6);
    let chunk = small["chunks"][0]["id"].as_str().unwrap();
    // The chunk's bytes, rebuilt and verified.
    assert_eq!(f.ok(&["cat", "chunk", chunk]), "hello\n");
    // The index names the chunk's container, whose metadata lists it.
    let index = f.ok(&["cat", "index"]);
    let entry: Value = index
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["id"] == chunk)
        .unwrap();
    let container = entry["container"].as_str().unwrap();
    let meta: Value = serde_json::from_str(&f.ok(&["cat", "container", &container[..10]])).unwrap();
    let e = &meta["entries"][entry["entry"].as_u64().unwrap() as usize];
    assert_eq!(e["id"], chunk);
    assert_eq!(e["original_len"], 6);
    // Errors: no id, a bad id, an unknown kind.
    for bad in [
        &["cat", "snapshot"][..],
        &["cat", "chunk", "xyz"],
        &["cat", "blob", "x"],
    ] {
        let out = f.cmd(bad).output().unwrap();
        assert!(!out.status.success(), "{bad:?}");
    }
}

/// Each cache records its repository; `cache --cleanup` removes the cache of a repository
/// that was deleted and keeps the others.
#[test]
fn cache_cleanup_removes_caches_of_deleted_repositories() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"a").unwrap();
    f.backup(&[&src]);
    // A second repository with the same cache root, then deleted.
    let other = f.path("other");
    let cache = f.path("cache");
    let run = |args: &[&str]| {
        dedelta()
            .args(args)
            .env("DEDELTA_CACHE_DIR", &cache)
            .output()
            .unwrap()
    };
    assert!(run(&[
        "init",
        "--insecure-no-password",
        "-r",
        other.to_str().unwrap()
    ])
    .status
    .success());
    assert!(run(&[
        "backup",
        "-r",
        other.to_str().unwrap(),
        src.to_str().unwrap()
    ])
    .status
    .success());
    let listed = |args: &[&str]| -> Value {
        let out = run(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = listed(&["cache", "--json"]);
    let caches = v["caches"].as_array().unwrap();
    assert_eq!(caches.len(), 2, "{v}");
    assert!(caches.iter().all(|c| c["state"] == "current"), "{v}");
    fs::remove_dir_all(&other).unwrap();
    let v = listed(&["cache", "--json"]);
    let gone: Vec<&Value> = v["caches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["state"] == "gone")
        .collect();
    assert_eq!(gone.len(), 1, "{v}");
    assert_eq!(gone[0]["location"], other.to_str().unwrap());
    let gone_dir = gone[0]["path"].as_str().unwrap().to_string();
    let v = listed(&["cache", "--cleanup", "--json"]);
    assert_eq!(v["removed"].as_array().unwrap().len(), 1, "{v}");
    assert!(!std::path::Path::new(&gone_dir).exists());
    // The remaining repository still works with its cache.
    assert!(f.index_file().exists());
    f.ok(&["snapshots"]);
}

#[test]
fn generate_completions_and_man_pages() {
    for (shell, marker) in [
        ("bash", "_dedelta()"),
        ("zsh", "#compdef dedelta"),
        ("fish", "complete -c dedelta"),
    ] {
        let out = dedelta()
            .args(["generate", "--completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}");
        assert!(
            script.contains("snapshots") && script.contains("find"),
            "{shell}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("man");
    let out = dedelta()
        .args(["generate", "--man", man.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let page = fs::read_to_string(man.join("dedelta.1")).unwrap();
    assert!(page.contains(".TH dedelta"), "{page}");
    let find = fs::read_to_string(man.join("dedelta-find.1")).unwrap();
    assert!(find.contains("ignore\\-case"), "{find}");
    let out = dedelta().arg("generate").output().unwrap();
    assert!(!out.status.success());
}
