//! Delta options on init and backup, and the statistics they produce.

use crate::support::*;
use std::fs;

fn versioned(path: &std::path::Path, v: u8) {
    let mut data = text(400_000, 77);
    for k in 0..(v as usize * 10) {
        let i = (k * 35_317) % data.len();
        data[i] = b'@';
    }
    fs::write(path, data).unwrap();
}

#[test]
fn delta_options_and_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    dedelta()
        .args([
            "init",
            "--insecure-no-password",
            "--sketch",
            "odess",
            "--sketch-index",
            "stream",
            "--delta",
            "edelta",
            "--dupadj",
            "off",
            "-r",
        ])
        .arg(&repo)
        .assert()
        .success();
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let mut last = serde_json::Value::Null;
    for v in 0..3 {
        versioned(&src.join("f.txt"), v);
        let out = dedelta()
            .args(["backup", "--json", "-r"])
            .arg(&repo)
            .arg(&src)
            .output()
            .unwrap();
        assert!(out.status.success());
        last = summary(&out.stdout);
    }
    assert!(last["delta_chunks"].as_u64().unwrap() > 0, "{last}");
    // DupAdj is off: no data delta comes from it; `dupadj_deltas` counts only tree chunks
    // whose base is the parent's tree chunk at the same place (one or two here).
    assert!(last["dupadj_deltas"].as_u64().unwrap() <= 2, "{last}");
    assert!(last["dcr"].as_f64().unwrap() > 1.5, "{last}");
    // DCE as the papers define it: the fraction saved on the delta chunks; the old figure
    // (original / delta bytes) is `delta_ratio`, and the two agree.
    let dce = last["dce"].as_f64().unwrap();
    let delta_ratio = last["delta_ratio"].as_f64().unwrap();
    assert!(dce > 0.5 && dce < 1.0, "{last}");
    assert!(delta_ratio > 2.0, "{last}");
    assert!((delta_ratio - 1.0 / (1.0 - dce)).abs() < 1e-6, "{last}");
    // Detection and acceptance apart: every kept delta was detected; the rest were dropped
    // for a reason.
    let n = |k: &str| {
        last[k]
            .as_u64()
            .unwrap_or_else(|| panic!("missing {k}: {last}"))
    };
    assert!(n("delta_detected") >= n("delta_chunks"), "{last}");
    assert_eq!(
        n("delta_detected"),
        n("delta_chunks")
            + n("delta_rejected_min_saving")
            + n("delta_rejected_reanchor")
            + n("delta_rejected_tree_bound"),
        "{last}"
    );
    assert_eq!(n("delta_rejected"), n("delta_detected") - n("delta_chunks"));
    assert!(
        last["detected_dce"].as_f64().unwrap() <= dce + 1e-12,
        "{last}"
    );
    for stage in [
        "chunk",
        "hash",
        "index",
        "sketch",
        "base_read",
        "delta",
        "compress",
        "write",
    ] {
        assert!(
            last["stage_seconds"][stage].is_number(),
            "missing stage {stage}: {last}"
        );
    }
    for key in [
        "base_cache_hits",
        "base_cache_misses",
        "base_requests_ahead",
        "bytes_after_delta",
    ] {
        assert!(last[key].is_number(), "missing {key}");
    }
    let out = dedelta()
        .args(["stats", "--json", "-r"])
        .arg(&repo)
        .output()
        .unwrap();
    let stats: serde_json::Value = summary(&out.stdout);
    assert!(stats["delta_chunks"].as_u64().unwrap() > 0);
    assert!(stats["dcr"].as_f64().unwrap() > 1.0);
    assert!(stats["delta_detected"].as_u64().unwrap() >= stats["delta_chunks"].as_u64().unwrap());
    assert!(stats["detected_dce"].is_number(), "{stats}");
    // A per-backup override: no sketches for this one.
    versioned(&src.join("f.txt"), 9);
    let out = dedelta()
        .args(["backup", "--json", "--sketch", "none", "-r"])
        .arg(&repo)
        .arg(&src)
        .output()
        .unwrap();
    let s: serde_json::Value = summary(&out.stdout);
    assert_eq!(s["delta_chunks"], 0, "{s}");
    // Everything restores.
    dedelta()
        .args(["check", "--read-data", "-r"])
        .arg(&repo)
        .assert()
        .success();
    // The papers' restore speed factor, from the restore cache's own container reads: an
    // LRU of LoopDelta's 512 containers by default (also `--cache-containers` without N), of
    // N with it, or forward assembly.
    for (args, cache, n) in [
        (&["--cache-containers"][..], "lru", 512),
        (&["--cache-containers", "1"], "lru", 1),
        (&[], "lru", 512),
        (&["--cache", "forward", "--assembly-mib", "1"], "forward", 0),
    ] {
        let target = dir.path().join(format!("out-{}", args.join("")));
        let out = dedelta()
            .args(["restore", "latest", "--json", "-r"])
            .arg(&repo)
            .arg("--target")
            .arg(&target)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let r: serde_json::Value = summary(&out.stdout);
        let c = &r["restore_cache"];
        assert_eq!(c["cache"], cache, "{r}");
        assert_eq!(c["cache_containers"], n, "{r}");
        if cache == "forward" {
            assert_eq!(c["assembly_bytes"], 1 << 20, "{r}");
            assert!(c["areas"].as_u64().unwrap() >= 1, "{r}");
        }
        let read = c["containers_read"].as_u64().unwrap();
        assert!(read >= 1, "{r}");
        let want = r["bytes_written"].as_f64().unwrap() / 1e6 / read as f64;
        assert!(
            (r["speed_factor"].as_f64().unwrap() - want).abs() < 1e-9,
            "{r}"
        );
    }
}

#[test]
fn bad_delta_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["--sketch", "minhash"][..],
        &["--delta", "bsdiff"],
        &["--sketch-index", "bloom"],
        &["--dupadj", "maybe"],
        &["--sketch-keep", "first"],
        &["--sketch-dupadj-misses", "yes"],
        &["--sf", "0"],
        &["--reanchor-percent", "150"],
        &["--reanchor-percent=-5"],
    ] {
        let out = dedelta()
            .arg("init")
            .args(args)
            .arg("-r")
            .arg(dir.path().join("r"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{err}");
        assert!(!dir.path().join("r").join("config").exists());
    }
}

/// `init` with `args` of a repository `name` in `dir`; its path and its config as text.
fn init_config(dir: &std::path::Path, name: &str, args: &[&str]) -> (std::path::PathBuf, String) {
    let repo = dir.join(name);
    dedelta()
        .arg("init")
        .arg("--insecure-no-password")
        .args(args)
        .arg("-r")
        .arg(&repo)
        .assert()
        .success();
    let config = String::from_utf8_lossy(&fs::read(repo.join("config")).unwrap()).into_owned();
    (repo, config)
}

/// `init` records re-anchoring in the config: 60 % by default (30 % with one-level deltas),
/// what `--reanchor-percent P` says, and nothing (the papers' rule) for 0; and the second
/// candidate's bound, 10 % by default (kept, unused, with one candidate).
#[test]
fn reanchor_percent_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (args, want)) in [
        (&[][..], Some("\"reanchor\": 0.6")),
        // One-level deltas drift further: their default bound is 30 %.
        (&["--max-depth", "1"][..], Some("\"reanchor\": 0.3")),
        (
            &["--max-depth", "1", "--reanchor-percent", "45"][..],
            Some("\"reanchor\": 0.45"),
        ),
        (&["--reanchor-percent", "25"], Some("\"reanchor\": 0.25")),
        (&["--reanchor-percent", "0"], None),
        (
            &["--candidates-enough-percent", "25"],
            Some("\"candidates_enough\": 0.25"),
        ),
        (&["--candidates", "1"], Some("\"candidates_enough\": 0.1")),
    ]
    .into_iter()
    .enumerate()
    {
        let (_, config) = init_config(dir.path(), &format!("r{i}"), args);
        match want {
            Some(w) => assert!(config.contains(w), "{args:?}: {config}"),
            None => assert!(!config.contains("reanchor"), "{args:?}: {config}"),
        }
    }
}

/// `init` records `--sketch-keep newest` in the config and writes no key for the default
/// (absent = oldest); it sketches only DupAdj's misses by default (recorded, since absent
/// means every chunk sketched, as in repositories made before 2026-11-30) and records
/// `--sketch-dupadj-misses off` by leaving the key out. A backup sketching the misses only
/// sketches fewer chunks and stores the same.
#[test]
fn sketch_keep_and_dupadj_misses_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let init = |name: &str, args: &[&str]| init_config(dir.path(), name, args);
    let (plain, config) = init("plain", &[]);
    assert!(!config.contains("sketch_keep"), "{config}");
    assert!(
        config.contains("\"sketch_dupadj_misses\": true"),
        "{config}"
    );
    let (all, config) = init("all", &["--sketch-dupadj-misses", "off"]);
    assert!(!config.contains("sketch_dupadj_misses"), "{config}");
    let (_, config) = init("newest", &["--sketch-keep", "newest"]);
    assert!(config.contains("\"sketch_keep\": \"newest\""), "{config}");
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let mut sketched = Vec::new();
    let mut stored = Vec::new();
    // Each version written once and backed up into both repositories, so that their trees
    // (the file's times) are the same bytes too: written apart, a tree's varint-coded times
    // made the stored bytes differ by a few bytes on a loaded machine.
    let mut last = [serde_json::Value::Null, serde_json::Value::Null];
    for v in 0..2 {
        versioned(&src.join("f.txt"), v);
        for (repo, last) in [&plain, &all].into_iter().zip(&mut last) {
            let out = dedelta()
                .args(["backup", "--json", "-r"])
                .arg(repo)
                .arg(&src)
                .output()
                .unwrap();
            assert!(out.status.success());
            *last = summary(&out.stdout);
        }
    }
    for last in &last {
        assert!(last["dupadj_deltas"].as_u64().unwrap() > 0, "{last}");
        sketched.push(last["sketched_chunks"].as_u64().unwrap());
        stored.push((
            last["bytes_after_delta"].as_u64().unwrap(),
            last["delta_chunks"].as_u64().unwrap(),
        ));
    }
    assert!(sketched[0] < sketched[1], "{sketched:?}");
    assert_eq!(stored[0], stored[1]);
}

/// The local base cache lives where `DEDELTA_CACHE_DIR` says, serves the next backup's bases,
/// is rebuilt with a notice when damaged, and is not written with `--no-cache` (which keeps
/// the chunk index there all the same).
#[test]
fn local_base_cache_is_used_rebuilt_and_optional() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    versioned(&src.join("f.txt"), 0);
    f.backup(&[&src]);
    let id = fs::read_dir(f.path("cache"))
        .unwrap()
        .next()
        .expect("a cache directory per repository")
        .unwrap()
        .path();
    let file = id.join("bases.idx");
    assert!(file.is_file());
    versioned(&src.join("f.txt"), 1);
    let s = f.backup(&[&src]);
    assert!(s["base_cache_local_hits"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["notices"], serde_json::json!([]));
    fs::write(&file, b"garbage").unwrap();
    versioned(&src.join("f.txt"), 2);
    let s = f.backup(&[&src]);
    assert!(
        s["notices"][0]
            .as_str()
            .unwrap()
            .contains("local base cache"),
        "{s}"
    );
    assert!(fs::read(&file).unwrap().starts_with(b"DDBCACHE"), "rebuilt");
    f.ok(&["check", "--read-data"]);
    fs::remove_dir_all(f.path("cache")).unwrap();
    versioned(&src.join("f.txt"), 3);
    f.ok(&["backup", "--no-cache", src.to_str().unwrap()]);
    // Only the chunk index is back in the cache directory, no base cache.
    assert!(f.index_file().is_file());
    assert!(!file.exists());
}

/// `--preset loopdelta` and `--preset loopdelta-cap` (issue 17): init records the prefetch
/// sketch index and `--dense-threshold`; backups prefetch the last backup's dense containers,
/// read no base on their own, cap with the `-cap` preset, and every version restores
/// bit-exact with `check --read-data` passing. An unknown preset is refused.
#[test]
fn loopdelta_presets_round_trip_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (_, config) = init_config(
        dir.path(),
        "t",
        &["--preset", "loopdelta", "--dense-threshold", "0.25"],
    );
    assert!(
        config.contains("\"sketch_index\": \"prefetch\""),
        "{config}"
    );
    assert!(config.contains("\"dense_threshold\": 0.25"), "{config}");
    for preset in ["loopdelta", "loopdelta-cap"] {
        let (repo, _) = init_config(dir.path(), preset, &["--preset", preset]);
        let src = dir.path().join(format!("src-{preset}"));
        fs::create_dir_all(&src).unwrap();
        for v in 0..3u8 {
            versioned(&src.join("a.txt"), v);
            let out = dedelta()
                .args(["backup", "--json", "--preset", preset, "-r"])
                .arg(&repo)
                .args(["--capping-segment-mib", "1"])
                .arg(&src)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            let v_json: serde_json::Value = summary(&out.stdout);
            let io = &v_json["io"]["purposes"];
            assert_eq!(io["base_reads"]["requests"], 0, "{v_json}");
            // Capping runs (decides segments) with the -cap preset only.
            let segments = v_json["capping_segments"].as_u64().unwrap();
            assert_eq!(segments > 0, preset.ends_with("-cap"), "{v_json}");
            if v > 0 {
                assert!(v_json["prefetch"]["dense_loaded"].as_u64().unwrap() > 0);
                assert!(v_json["delta_chunks"].as_u64().unwrap() > 0, "{v_json}");
            }
            let target = dir.path().join(format!("restore-{preset}-{v}"));
            dedelta()
                .args(["restore", "latest", "--target"])
                .arg(&target)
                .arg("-r")
                .arg(&repo)
                .assert()
                .success();
            assert_eq!(
                fs::read(restored(&target, &src).join("a.txt")).unwrap(),
                fs::read(src.join("a.txt")).unwrap()
            );
        }
        dedelta()
            .args(["check", "--read-data", "-r"])
            .arg(&repo)
            .assert()
            .success();
    }
    dedelta()
        .args(["init", "--preset", "nope", "-r"])
        .arg(dir.path().join("bad"))
        .assert()
        .failure();
}
