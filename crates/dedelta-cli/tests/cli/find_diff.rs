//! `find` and `diff` (issue 21): glob matching on names and paths across snapshots, and the
//! changes between two snapshots with what each added to the repository.

use super::support::*;
use serde_json::Value;
use std::fs;

/// Two snapshots of a small tree, the second with a file changed, one added, one removed and
/// one only chmod-ed.
fn two_versions() -> (Fixture, String, String) {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(src.join("lib/sub")).unwrap();
    fs::write(src.join("main.rs"), text(50_000, 1)).unwrap();
    fs::write(src.join("lib/util.rs"), text(20_000, 2)).unwrap();
    fs::write(src.join("lib/sub/deep.rs"), b"deep").unwrap();
    fs::write(src.join("README.md"), b"read me").unwrap();
    fs::write(src.join("gone.txt"), b"soon gone").unwrap();
    let a = f.backup(&[&src])["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut changed = text(50_000, 1);
    changed[100..110].copy_from_slice(b"0123456789");
    fs::write(src.join("main.rs"), changed).unwrap();
    fs::write(src.join("lib/new.rs"), text(30_000, 9)).unwrap();
    fs::remove_file(src.join("gone.txt")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(src.join("README.md"), fs::Permissions::from_mode(0o600)).unwrap();
    let b = f.backup(&[&src])["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    (f, a, b)
}

/// The paths (relative to the source) `find --json` reports per snapshot.
fn found(f: &Fixture, args: &[&str]) -> Vec<(String, Vec<String>)> {
    let mut all = vec!["find", "--json"];
    all.extend_from_slice(args);
    let v: Value = serde_json::from_str(&f.ok(&all)).unwrap();
    let src = format!("{}/", f.path("src").display());
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["hits"], s["matches"].as_array().unwrap().len());
            let paths = s["matches"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["path"].as_str().unwrap().replace(&src, ""))
                .collect();
            (s["snapshot"].as_str().unwrap().to_string(), paths)
        })
        .collect()
}

#[test]
fn find_matches_names_and_paths() {
    let (f, a, b) = two_versions();
    let hits = found(&f, &["*.rs"]);
    assert_eq!(hits.len(), 2);
    assert_eq!(
        hits[0],
        (
            a.clone(),
            vec![
                "lib/sub/deep.rs".into(),
                "lib/util.rs".into(),
                "main.rs".into()
            ]
        )
    );
    assert_eq!(hits[1].0, b);
    assert!(hits[1].1.contains(&"lib/new.rs".to_string()));
    // A pattern with `/` matches paths at any depth; `**` crosses directories.
    let lib = found(&f, &["lib/*.rs", "--snapshot", &a[..8]]);
    assert_eq!(lib, [(a.clone(), vec!["lib/util.rs".into()])]);
    let deep = found(&f, &["lib/**/*.rs", "--snapshot", "latest"]);
    assert_eq!(deep[0].1, ["lib/new.rs", "lib/sub/deep.rs", "lib/util.rs"]);
    // Rooted patterns start at the snapshot's root.
    assert!(found(&f, &["/lib/*.rs"]).is_empty());
    let rooted = format!("{}/lib/*.rs", f.path("src").display());
    assert_eq!(found(&f, &[&rooted, "-s", &b]).len(), 1);
    // Case-insensitive, and several patterns.
    assert_eq!(found(&f, &["readme.MD", "-i"]).len(), 2);
    assert_eq!(found(&f, &["readme.MD"]).len(), 0);
    assert_eq!(found(&f, &["gone.txt", "new.rs"]).len(), 2);
    // Modification time range: nothing was modified in 2000.
    assert!(found(&f, &["*", "--newest", "2000-01-01"]).is_empty());
    assert_eq!(found(&f, &["main.rs", "--oldest", "2000-01-01"]).len(), 2);
    // Text output names the snapshot; a bad pattern or time is an error.
    let text = f.ok(&["find", "deep.rs"]);
    assert!(
        text.contains(&format!("Found matching entries in snapshot {}", &a[..8])),
        "{text}"
    );
    assert!(
        text.contains("-rw-") && text.contains("/lib/sub/deep.rs"),
        "{text}"
    );
    for bad in [&["find", "a["][..], &["find", "x", "--oldest", "yesterday"]] {
        let out = f.cmd(bad).output().unwrap();
        assert!(!out.status.success(), "{bad:?}");
    }
}

#[test]
fn diff_lists_changes_and_repository_bytes() {
    let (f, a, b) = two_versions();
    let out = f.ok(&["diff", &a[..8], &b[..8], "--json", "--metadata"]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let src = f.path("src");
    let change = |rel: &str| {
        let p = format!("{}/{rel}", src.display());
        lines
            .iter()
            .find(|l| l["path"] == p.as_str())
            .map(|l| l["modifier"].as_str().unwrap().to_string())
    };
    assert_eq!(change("main.rs").as_deref(), Some("M"));
    assert_eq!(change("lib/new.rs").as_deref(), Some("+"));
    assert_eq!(change("gone.txt").as_deref(), Some("-"));
    assert_eq!(change("README.md").as_deref(), Some("U"));
    assert_eq!(change("lib/util.rs"), None);
    let stats = lines.last().unwrap();
    assert_eq!(stats["message_type"], "statistics");
    assert_eq!(stats["source_snapshot"], a.as_str());
    assert_eq!(stats["changed_files"], 1);
    assert_eq!(stats["added"]["files"], 1);
    assert_eq!(stats["added"]["file_bytes"], 30_000);
    assert_eq!(stats["removed"]["files"], 1);
    assert!(stats["added"]["chunks"].as_u64().unwrap() >= 2, "{stats}");
    // Each side's bytes added to the repository are what its backup recorded.
    let snaps: Value = serde_json::from_str(&f.ok(&["snapshots", "--json"])).unwrap();
    for (side, i) in [("source", 0), ("target", 1)] {
        let recorded = &snaps[i]["summary"]["bytes_added"];
        assert_eq!(
            &stats["repository"][side]["bytes_added"], recorded,
            "{side}"
        );
    }
    let target = &stats["repository"]["target"];
    assert!(
        target["containers_only_here"].as_u64().unwrap() >= 1,
        "{stats}"
    );
    assert!(
        target["container_bytes_only_here"].as_u64().unwrap() > 0,
        "{stats}"
    );
    // Without --metadata the chmod is not listed; text has restic's letters.
    let text = f.ok(&["diff", &a, &b]);
    assert!(
        text.contains(&format!("M    {}/main.rs", src.display())),
        "{text}"
    );
    assert!(!text.contains("README.md"), "{text}");
    assert!(text.contains("added:    1 files"), "{text}");
    // A snapshot compared with itself has no changes.
    let same = f.ok(&["diff", &a, &a, "--json"]);
    assert_eq!(same.lines().count(), 1, "{same}");
}
