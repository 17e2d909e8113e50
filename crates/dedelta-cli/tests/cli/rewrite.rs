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

/// Without `--forget` a rewritten snapshot ties with its original in time: `latest` names the
/// rewritten one (it named either, by id, before). A rewrite that would leave nothing writes
/// nothing and deletes nothing.
#[test]
fn latest_names_the_rewritten_snapshot_and_nothing_is_rewritten_empty() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("big.bin"), bytes(300_000, 3)).unwrap();
    fs::write(src.join("small.txt"), b"small").unwrap();
    f.backup(&[&src]);
    let original = ids(&f);
    // Several tries, since the old order depended on the new snapshot's random-looking id.
    for round in 0..4 {
        fs::write(src.join("small.txt"), format!("small {round}")).unwrap();
        f.backup(&[&src]);
        f.ok(&["rewrite", "latest", "--exclude", "big.bin"]);
        let listed = f.ok(&["ls", "latest"]);
        assert!(
            !listed.contains("big.bin") && listed.contains("small.txt"),
            "round {round}: {listed}"
        );
    }
    let before = ids(&f);
    assert!(before.contains(&original[0]));

    let out = f.ok(&["rewrite", "latest", "--exclude", "/*"]);
    assert!(
        out.contains("left as it is") && out.contains("0 snapshots rewritten"),
        "{out}"
    );
    let v: Value =
        serde_json::from_str(&f.ok(&["rewrite", "latest", "--exclude", "*", "--forget", "--json"]))
            .unwrap();
    assert_eq!(v["would_be_empty"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(ids(&f), before, "nothing written or deleted");
}
