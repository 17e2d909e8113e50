//! `rewrite --exclude` (restic's): files removed from existing snapshots, the rest restored
//! bit-exact, and `prune` then frees what only the removed files used.

use crate::support::*;
use serde_json::Value;
use std::fs;

fn ids(f: &Fixture) -> Vec<String> {
    let v: Value = serde_json::from_str(&f.ok(&["snapshots", "--json"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn rewrite_removes_files_from_every_snapshot_and_prune_frees_them() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src.join("keep"), 4);
    fs::write(src.join("secret.txt"), b"password=hunter2").unwrap();
    fs::create_dir_all(src.join("cache")).unwrap();
    fs::write(src.join("cache/big.bin"), bytes(1 << 20, 9)).unwrap();
    f.backup(&[&src]);
    fs::write(src.join("keep/new.txt"), b"new").unwrap();
    f.backup(&[&src]);
    let before = ids(&f);
    let anchored = format!("{}/cache", src.display());
    let args = ["rewrite", "--exclude", "secret.txt", "--exclude", &anchored];

    // A dry run names what would go and writes nothing.
    let out = f.ok(&[&args[..], &["--dry-run"]].concat());
    assert!(
        out.contains("secret.txt") && out.contains("2 snapshots would be rewritten"),
        "{out}"
    );
    assert_eq!(ids(&f), before);

    let out = f.ok(&[&args[..], &["--forget"]].concat());
    assert!(out.contains("2 snapshots rewritten, 0 unchanged"), "{out}");
    assert!(out.contains(" MiB)") && !out.contains("MiB MiB"), "{out}");
    let after = ids(&f);
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|id| !before.contains(id)));
    let listed = f.ok(&["ls", "latest"]);
    assert!(
        !listed.contains("secret.txt") && !listed.contains("/cache"),
        "{listed}"
    );

    // The rest restores as it was.
    let t = f.path("t");
    f.ok(&["restore", "latest", "--target", t.to_str().unwrap()]);
    fs::remove_file(src.join("secret.txt")).unwrap();
    fs::remove_dir_all(src.join("cache")).unwrap();
    assert_same_tree(&src, &restored(&t, &src));

    // Nothing matches any more; prune frees the removed file's data; the repository checks.
    assert!(f.ok(&args).contains("0 snapshots rewritten, 2 unchanged"));
    let pruned: Value = serde_json::from_str(&f.ok(&["prune", "--json"])).unwrap();
    assert!(
        pruned["bytes_freed"].as_i64().unwrap() > 1 << 20,
        "{pruned}"
    );
    f.ok(&["check", "--read-data"]);

    // No pattern is an error.
    let out = f.cmd(&["rewrite"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}
