//! backup, snapshots, ls, dump, restore, stats: round trips and output formats.

use crate::support::*;
use std::fs;

#[test]
fn round_trip_tree_with_modes_times_links() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 1);
    let s1 = f.backup(&[&src]);
    assert_eq!(s1["files"], 7);
    assert_eq!(s1["symlinks"], 2);
    // Change a little and back up again: little is added.
    fs::write(src.join("small.txt"), b"changed\n").unwrap();
    let s2 = f.backup(&[&src]);
    assert!(s2["bytes_added"].as_u64().unwrap() < 100_000, "{s2}");
    assert!(s2["dedup_factor"].as_f64().unwrap() > 10.0);
    for (i, id) in [&s1, &s2]
        .iter()
        .map(|s| s["snapshot_id"].as_str().unwrap().to_string())
        .enumerate()
    {
        let target = f.path(&format!("out{i}"));
        f.ok(&["restore", &id[..8], "--target", target.to_str().unwrap()]);
        if i == 1 {
            assert_same_tree(&src, &restored(&target, &src));
        } else {
            let r = restored(&target, &src);
            assert_eq!(fs::read(r.join("small.txt")).unwrap(), b"hello\n");
            assert_eq!(
                fs::read(r.join("big.bin")).unwrap(),
                fs::read(src.join("big.bin")).unwrap()
            );
        }
    }
    f.ok(&["check", "--read-data"]);
}

#[test]
fn snapshots_json_ls_dump_include_tags_exclude() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 2);
    let out = f
        .cmd(&["backup", "--json", "--tag", "nightly", "--exclude", "*.bin"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success());
    let snaps: serde_json::Value = serde_json::from_str(&f.ok(&["snapshots", "--json"])).unwrap();
    let s = &snaps.as_array().unwrap()[0];
    for key in ["id", "time", "paths", "tags", "summary"] {
        assert!(s.get(key).is_some(), "missing {key}");
    }
    assert_eq!(s["tags"][0], "nightly");
    assert!(chrono::DateTime::parse_from_rfc3339(s["time"].as_str().unwrap()).is_ok());
    let ls = f.ok(&["ls", "latest"]);
    assert!(ls.contains("text.txt") && !ls.contains("big.bin"), "{ls}");
    assert!(ls.contains("link -> small.txt"));
    let file = format!("{}/text.txt", src.display());
    // Through each restore cache.
    for cache in [
        &[][..],
        &["--cache", "lru", "--cache-containers", "1"],
        &["--cache", "forward", "--assembly-mib", "1"],
    ] {
        let mut args = vec!["dump", "latest", &file];
        args.extend_from_slice(cache);
        let out = f.cmd(&args).output().unwrap();
        assert!(out.status.success(), "{cache:?}: {out:?}");
        assert_eq!(
            out.stdout,
            fs::read(src.join("text.txt")).unwrap(),
            "{cache:?}"
        );
    }
    // --include restores only the named subtree.
    let target = f.path("out");
    let inc = format!("{}/deep", src.display());
    f.ok(&[
        "restore",
        "latest",
        "--target",
        target.to_str().unwrap(),
        "--include",
        &inc,
    ]);
    let r = restored(&target, &src);
    assert!(r.join("deep/a/b/c/d/e/f/g/leaf").exists());
    assert!(!r.join("text.txt").exists());
}

#[test]
fn stdin_backup_and_dump() {
    let f = Fixture::new();
    let data = text(500_000, 9);
    let out = f
        .cmd(&["backup", "--stdin", "--stdin-name", "db.sql", "--json"])
        .write_stdin(data.clone())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = f.cmd(&["dump", "latest", "db.sql"]).output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout == data);
    assert!(out.stderr.is_empty());
    // --io-json: the file alone on stdout, its I/O and restore cache counters on stderr.
    let out = f
        .cmd(&["dump", "latest", "db.sql", "--io-json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout == data);
    let v: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    let read = &v["io"]["purposes"]["chunk_data"]["read"];
    assert!(read["requests"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["bytes_written"].as_u64(), Some(data.len() as u64), "{v}");
    let containers = v["restore_cache"]["containers_read"].as_u64().unwrap();
    assert!(containers > 0, "{v}");
    assert_eq!(v["restore_cache"]["cache"], "lru", "{v}");
    let factor = v["speed_factor"].as_f64().unwrap();
    assert!(
        (factor - data.len() as f64 / 1e6 / containers as f64).abs() < 1e-9,
        "{v}"
    );
    assert!(read["bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["io"]["modelled_seconds"]["object_store"]
            .as_f64()
            .unwrap()
            > 0.0
    );
}

/// `--stdin-from-command` stores a command's output, and saves no snapshot when the command
/// fails (a pipe into `--stdin` would store the truncated output as a good snapshot).
#[test]
fn stdin_from_command_saves_only_what_a_command_that_succeeded_wrote() {
    let f = Fixture::new();
    let data = text(400_000, 11);
    let src = f.path("dump.src");
    std::fs::write(&src, &data).unwrap();
    let src = src.to_str().unwrap();
    f.cmd(&[
        "backup",
        "--stdin-from-command",
        "--stdin-filename",
        "db.sql",
    ])
    .args(["--", "cat", src])
    .assert()
    .success();
    assert!(
        f.cmd(&["dump", "latest", "db.sql"])
            .output()
            .unwrap()
            .stdout
            == data
    );

    // The dump fails after writing most of its output: nothing is saved, and the backup says why.
    let failing = format!("cat {src}; echo 'dump failed' >&2; exit 4");
    let out = f
        .cmd(&["backup", "--stdin-from-command", "--stdin-name", "db.sql"])
        .args(["--", "sh", "-c", &failing])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("exit status: 4") && err.contains("no snapshot"),
        "{err}"
    );
    assert!(
        err.contains("dump failed"),
        "the command's stderr is shown: {err}"
    );
    let snaps: Vec<serde_json::Value> =
        serde_json::from_str(&f.ok(&["snapshots", "--json"])).unwrap();
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    assert_eq!(lock_count(&f), 0);
    f.ok(&["check", "--read-data"]);

    // No command, or --stdin beside it: refused before anything runs.
    let out = f.cmd(&["backup", "--stdin-from-command"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs the command"));
    f.cmd(&["backup", "--stdin", "--stdin-from-command", "--", "true"])
        .assert()
        .failure();
}

/// `--skip-if-unchanged` (restic's): no snapshot when the tree is the parent's, read or not;
/// a change, or a first backup of the paths, is saved.
#[test]
fn skip_if_unchanged_saves_only_a_changed_tree() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 21);
    let s = src.to_str().unwrap();
    let count = |f: &Fixture| {
        serde_json::from_str::<serde_json::Value>(&f.ok(&["snapshots", "--json"]))
            .unwrap()
            .as_array()
            .unwrap()
            .len()
    };
    let run = |extra: &[&str]| {
        summary(
            &f.cmd(&[&["backup", "--skip-if-unchanged", "--json", s], extra].concat())
                .output()
                .unwrap()
                .stdout,
        )
    };
    let first = run(&[]);
    assert_eq!(first["skipped"], false, "no parent: saved");
    assert_eq!(count(&f), 1);
    for extra in [&[][..], &["--force"][..]] {
        let again = run(extra);
        assert_eq!(again["skipped"], true, "{extra:?}: {again}");
        assert_eq!(again["snapshot_id"], serde_json::Value::Null);
        assert_eq!(again["parent_snapshot_id"], first["snapshot_id"]);
        assert_eq!(count(&f), 1, "{extra:?}");
    }
    let out = f.ok(&["backup", "--skip-if-unchanged", s]);
    assert!(out.contains("no snapshot saved"), "{out}");
    fs::write(src.join("changed.txt"), b"new").unwrap();
    assert_eq!(run(&[])["skipped"], false);
    assert_eq!(count(&f), 2);
    f.ok(&["check"]);
}

#[test]
fn stats_json_and_repair_index() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 3);
    f.backup(&[&src]);
    f.backup(&[&src]);
    let s: serde_json::Value = serde_json::from_str(&f.ok(&["stats", "--json"])).unwrap();
    for key in [
        "logical_bytes",
        "stored_bytes",
        "chunks",
        "containers",
        "dedup_factor",
        "compression_factor",
        "repository_bytes",
        "cache_bytes",
        "index_bytes",
    ] {
        assert!(s.get(key).is_some(), "missing {key}");
    }
    assert!(s["dedup_factor"].as_f64().unwrap() > 1.9);
    // The repository's files: containers, two snapshots, the config; the index is in the
    // client cache, counted apart.
    let (repo_bytes, stored) = (
        s["repository_bytes"].as_u64().unwrap(),
        s["stored_bytes"].as_u64().unwrap(),
    );
    assert!(repo_bytes > stored, "{s}");
    assert_eq!(
        s["index_bytes"].as_u64().unwrap(),
        std::iter::once(f.index_file())
            .chain(f.index_runs())
            .map(|p| fs::metadata(p).unwrap().len())
            .sum::<u64>()
    );
    assert!(s["cache_bytes"].as_u64().unwrap() >= s["index_bytes"].as_u64().unwrap());
    // Where the bytes go: the parts add up to the repository, and this tree has all kinds.
    let b = &s["breakdown"];
    let part = |k: &str| {
        b[k].as_u64()
            .unwrap_or_else(|| panic!("breakdown.{k}: {s}"))
    };
    let keys = [
        "full_chunks",
        "deltas",
        "trees",
        "container_metadata",
        "snapshots",
        "other",
    ];
    assert_eq!(keys.iter().map(|k| part(k)).sum::<u64>(), repo_bytes, "{s}");
    for k in [
        "full_chunks",
        "trees",
        "container_metadata",
        "snapshots",
        "other",
    ] {
        assert!(part(k) > 0, "{k}: {s}");
    }
    let stored: u64 = f
        .containers()
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(s["stored_bytes"].as_u64().unwrap(), stored);
    // The index is a client cache, outside the repository: remove it, rebuild it,
    // everything still checks.
    assert!(!f.repo().join("index").exists());
    fs::remove_file(f.index_file()).unwrap();
    f.ok(&["repair", "index"]);
    f.ok(&["check", "--read-data"]);
    let target = f.path("out");
    f.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_same_tree(&src, &restored(&target, &src));
}

#[test]
fn env_var_names_the_repository() {
    let f = Fixture::new();
    let out = dedelta()
        .arg("snapshots")
        .env("DEDELTA_REPO", f.repo())
        .output()
        .unwrap();
    assert!(out.status.success());
}

/// Versions before the index moved to the client cache kept it in `<repo>/index/`: the first
/// command that takes the lock removes it, and says so.
#[test]
fn a_legacy_index_in_the_repository_is_removed() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 4);
    f.backup(&[&src]);
    let legacy = f.repo().join("index");
    fs::create_dir_all(&legacy).unwrap();
    fs::write(legacy.join("chunks.redb"), vec![7u8; 4096]).unwrap();
    // Readers leave it alone.
    f.ok(&["snapshots"]);
    assert!(legacy.exists());
    let out = f.cmd(&["backup", src.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("client cache"), "{err}");
    assert!(!legacy.exists());
    f.ok(&["check", "--read-data"]);
}

/// `backup --fingerprint-index locality` (issue 16 item 1) reports its lookups in `--json`,
/// keeps its filter beside the index, and finds old data with one index lookup per container;
/// an unknown strategy or an empty cache is refused before anything is written.
#[test]
fn locality_fingerprint_index_reports_its_lookups() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 4);
    f.backup(&[&src]);
    let args = |extra: &[&str]| {
        let mut a = vec!["backup", "--json", "--fingerprint-index", "locality"];
        a.extend_from_slice(extra);
        a.push(src.to_str().unwrap());
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        serde_json::from_str::<serde_json::Value>(&f.ok(&a)).unwrap()
    };
    let v = run(args(&["--fingerprint-cache-containers", "2"]));
    let l = &v["lookups"];
    assert_eq!(l["strategy"], "locality", "{v}");
    assert!(l["cache_hits"].as_u64().unwrap() > 0, "{l}");
    assert!(
        l["index_lookups"].as_u64().unwrap()
            <= l["prefetches"].as_u64().unwrap() + l["filter_false_positives"].as_u64().unwrap(),
        "{l}"
    );
    assert!(l["cached_containers_max"].as_u64().unwrap() <= 2, "{l}");
    assert!(l["index_lookups_per_gb"].is_number(), "{l}");
    assert!(f.index_file().with_file_name("chunks.idx.filter").exists());
    for bad in [
        vec!["--fingerprint-index", "bloom"],
        vec!["--fingerprint-cache-containers", "0"],
    ] {
        let out = f
            .cmd(&[&["backup"][..], &bad[..], &[src.to_str().unwrap()]].concat())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--fingerprint"));
    }
}

/// `backup --json` and `restore --json` report their I/O (issue 16 item 4): every purpose and
/// direction, nonzero container writes, metadata and data reads, and modelled seconds that
/// follow the model flags; the text output has one `I/O:` line.
#[test]
fn backup_and_restore_report_io() {
    let f = Fixture::new();
    let src = f.path("src");
    make_tree(&src, 3);
    let b = f.backup(&[&src]);
    let io = &b["io"];
    let purposes = [
        "container_metadata",
        "chunk_data",
        "base_reads",
        "prefetch",
        "index",
        "snapshots",
        "other",
    ];
    for p in purposes {
        for d in ["read", "write", "query"] {
            assert!(io["purposes"][p][d]["requests"].is_u64(), "{p} {d}: {io}");
        }
    }
    assert!(
        io["purposes"]["chunk_data"]["write"]["requests"]
            .as_u64()
            .unwrap()
            > 0,
        "{io}"
    );
    assert_eq!(
        io["purposes"]["chunk_data"]["write"]["bytes"], b["bytes_added"],
        "{io}"
    );
    assert_eq!(io["purposes"]["snapshots"]["write"]["requests"], 1, "{io}");
    let sum: u64 = purposes
        .iter()
        .map(|p| io["purposes"][p]["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(io["requests"].as_u64().unwrap(), sum, "{io}");
    assert!(
        io["modelled_seconds"]["disk"].as_f64().unwrap() > 0.0,
        "{io}"
    );

    let restore = |target: &str, extra: &[&str]| -> serde_json::Value {
        let t = f.path(target);
        let mut args = vec![
            "restore",
            "latest",
            "--json",
            "--target",
            t.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        serde_json::from_str(&f.ok(&args)).unwrap()
    };
    let r = restore("out", &[]);
    let io = &r["io"];
    for p in ["container_metadata", "chunk_data"] {
        let read = &io["purposes"][p]["read"];
        assert!(read["requests"].as_u64().unwrap() > 0, "{p}: {io}");
        assert!(read["bytes"].as_u64().unwrap() > 0, "{p}: {io}");
    }
    assert_eq!(io["write"]["requests"], 0, "{io}");
    assert_eq!(io["purposes"]["base_reads"]["requests"], 0, "{io}");
    // A model of 1 s per request and 1 MB/s: seconds = requests (+ reads and writes for the
    // disk) + MB.
    let r = restore(
        "out2",
        &[
            "--model-disk-seek-ms",
            "1000",
            "--model-disk-mb-s",
            "1",
            "--model-object-store-request-ms",
            "1000",
            "--model-object-store-mb-s",
            "1",
        ],
    );
    let io = &r["io"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap() as f64;
    let mb = n(&io["bytes"]) / 1e6;
    let os = io["modelled_seconds"]["object_store"].as_f64().unwrap();
    assert!((os - (n(&io["requests"]) + mb)).abs() < 1e-9, "{io}");
    let disk = io["modelled_seconds"]["disk"].as_f64().unwrap();
    let moves = n(&io["read"]["requests"]) + n(&io["write"]["requests"]);
    assert!((disk - (moves + mb)).abs() < 1e-9, "{io}");

    let out = f.ok(&[
        "restore",
        "latest",
        "--target",
        f.path("out3").to_str().unwrap(),
    ]);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("I/O: ")).count(),
        1,
        "{out}"
    );
    let bad = f
        .cmd(&[
            "restore",
            "latest",
            "--target",
            "x",
            "--model-disk-mb-s",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--model-disk-mb-s"));
}

/// `backup --capping-level T --capping-segment-mib S` (issue 16 item 2): a stream whose every
/// MiB takes slices of three old containers is capped at one; `--json` counts the duplicates
/// stored again, the stream reads back, `check --read-data` passes, and after the first
/// snapshot is forgotten a prune reclaims the replaced copies.
#[test]
fn capping_rewrites_duplicates_and_prune_reclaims_them() {
    let f = Fixture::new();
    let old = bytes(12 << 20, 41);
    let slice = 128 << 10;
    let mut mixed = Vec::new();
    for k in 0..32 {
        let at = (k % 3) * (4 << 20) + (k / 3) * slice;
        mixed.extend_from_slice(&old[at..at + slice]);
    }
    let backup = |name: &str, data: &[u8], extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["backup", "--stdin", "--stdin-name", name, "--json"];
        args.extend_from_slice(extra);
        let out = f.cmd(&args).write_stdin(data.to_vec()).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        summary(&out.stdout)
    };
    let first = backup("old.bin", &old, &[]);
    assert_eq!(first["rewritten_chunks"], 0, "{first}");
    let plain = backup("plain.bin", &mixed, &[]);
    assert_eq!(plain["rewritten_chunks"], 0, "{plain}");
    let capped = backup(
        "mixed.bin",
        &mixed,
        &["--capping-level", "1", "--capping-segment-mib", "1"],
    );
    let id = |v: &serde_json::Value| v["snapshot_id"].as_str().unwrap().to_string();
    let rewritten = capped["rewritten_chunks"].as_u64().unwrap();
    assert!(rewritten > 0, "{capped}");
    assert!(
        capped["rewritten_bytes"].as_u64().unwrap() >= 1 << 20,
        "{capped}"
    );
    assert_eq!(capped["capping_segments"], 4, "{capped}");
    let out = f
        .cmd(&["dump", &id(&capped), "mixed.bin"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout == mixed);
    f.ok(&["check", "--read-data"]);
    f.ok(&["forget", &id(&first), &id(&plain)]);
    let pruned: serde_json::Value =
        serde_json::from_str(&f.ok(&["prune", "--max-unused", "0", "--json"])).unwrap();
    assert!(
        pruned["bytes_freed"].as_i64().unwrap() > 0,
        "the old copies are reclaimed: {pruned}"
    );
    f.ok(&["check", "--read-data"]);
    let out = f
        .cmd(&["dump", &id(&capped), "mixed.bin"])
        .output()
        .unwrap();
    assert!(out.stdout == mixed);
    let bad = f
        .cmd(&[
            "backup",
            "--stdin",
            "--capping-level",
            "1",
            "--capping-segment-mib",
            "0",
        ])
        .write_stdin(b"x".to_vec())
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

/// `backup --cache-aware-filter` and `--inversed-delta` (issue 17 items 3-4) say what they
/// need when it is missing, and run with it: the filter's and inversion's counts are in
/// `--json`, and the stream reads back.
#[test]
fn loopdelta_options_say_what_they_need_and_run() {
    let f = Fixture::new();
    let data = bytes(1 << 20, 7);
    let backup = |extra: &[&str]| {
        let mut args = vec!["backup", "--stdin", "--stdin-name", "d.bin", "--json"];
        args.extend_from_slice(extra);
        f.cmd(&args).write_stdin(data.clone()).output().unwrap()
    };
    let out = backup(&["--cache-aware-filter"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fingerprint-index locality"));
    let out = backup(&["--inversed-delta"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--capping-level"));
    let out = backup(&[
        "--cache-aware-filter",
        "--fingerprint-index",
        "locality",
        "--inversed-delta",
        "--capping-level",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = summary(&out.stdout);
    assert_eq!(v["inversed_chunks"], 0, "{v}");
    assert_eq!(v["cache_aware_filter"]["base_not_cached"], 0, "{v}");
    let id = v["snapshot_id"].as_str().unwrap().to_string();
    let out = f.cmd(&["dump", &id, "d.bin"]).output().unwrap();
    assert!(out.stdout == data);
    f.ok(&["check", "--read-data"]);
}
