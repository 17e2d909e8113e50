//! `dedelta eval` on a small generated dataset, without peers: the report is written and its
//! numbers match the repositories they came from (`stats --json`).

use assert_cmd::Command;
use std::collections::HashMap;
use std::path::Path;

fn parse_csv(text: &str) -> Vec<HashMap<String, String>> {
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .expect("header")
        .split(',')
        .map(String::from)
        .collect();
    lines
        .map(|l| {
            // The quoted free-text columns come last; the numbers before them have no commas.
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect()
}

fn stats_json(repo: &Path) -> serde_json::Value {
    let out = Command::cargo_bin("dedelta")
        .unwrap()
        .args(["stats", "--json", "-r"])
        .arg(repo)
        .arg("--cache-dir")
        .arg(repo.with_extension("cache"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn eval_small_synthetic_report_matches_repositories() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = tmp.path().join("out");
    let assert = Command::cargo_bin("dedelta")
        .unwrap()
        .args([
            "eval",
            "--dataset",
            "synthetic-small",
            "--no-peers",
            "--threads",
            "2",
            "--min-saving-percent",
            "0",
            "--restore-cache-containers",
            "2",
        ])
        .args(["--config", "dedup,recommended,stream-index,xdelta"])
        .arg("--data-dir")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
    assert!(stdout.contains("report.md"), "{stdout}");

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("dedelta eval --dataset synthetic-small"),
        "{report}"
    );
    assert!(report.contains("peers: skipped"), "{report}");
    for section in [
        "## Storage",
        "## Detection and acceptance",
        "## Speed",
        "## I/O",
        "## Memory",
    ] {
        assert!(report.contains(section), "{section} missing");
    }

    let rows = parse_csv(&std::fs::read_to_string(out.join("results.csv")).unwrap());
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str()).collect();
    assert_eq!(names, ["dedup", "recommended", "stream-index", "xdelta"]);
    for r in &rows {
        let repo = out.join("repos").join(&r["name"]);
        let s = stats_json(&repo);
        let num = |k: &str| {
            r[k].parse::<f64>()
                .unwrap_or_else(|_| panic!("{k}: {:?}", r[k]))
        };
        assert_eq!(
            r["stored_bytes"],
            s["stored_bytes"].to_string(),
            "{}",
            r["name"]
        );
        assert_eq!(
            r["logical_bytes"],
            s["logical_bytes"].to_string(),
            "{}",
            r["name"]
        );
        assert_eq!(
            r["delta_chunks"],
            s["delta_chunks"].to_string(),
            "{}",
            r["name"]
        );
        for k in [
            "total_factor",
            "dedup_factor",
            "delta_factor",
            "compression_factor",
            "dcr",
        ] {
            let want = s[k].as_f64().unwrap();
            assert!(
                (num(k) - want).abs() <= 1e-9 * want.max(1.0),
                "{k}: {} vs {want}",
                num(k)
            );
        }
        assert_eq!(r["versions"], "4");
        assert_eq!(r["versions_restored"], "4");
        assert!(num("backup_mb_s") > 0.0 && num("restore_mb_s") > 0.0);
        assert!(num("restore_speed_factor") > 0.0);
        assert!(num("restore_speed_factor_by_size") > 0.0);
        assert_eq!(r["restore_cache_containers"], "2");
        assert_eq!(r["speed_factor_versions"], "4");
        assert!(num("restore_containers_read") >= 4.0, "{}", r["name"]);
        // Metered I/O: containers written, metadata and regions read back; bases read back
        // only where there are deltas (no local base cache is kept across configurations,
        // but one is across versions: zero is possible, negative is not).
        for k in [
            "backup_io_requests",
            "backup_io_data_requests",
            "restore_io_requests",
            "restore_io_metadata_requests",
            "restore_io_data_requests",
            "backup_modelled_disk_seconds",
            "restore_modelled_object_store_seconds",
        ] {
            assert!(num(k) > 0.0, "{k} of {}: {:?}", r["name"], r[k]);
        }
        assert_eq!(num("restore_io_base_requests"), 0.0, "{}", r["name"]);
        if r["name"] == "dedup" {
            assert_eq!(num("backup_io_base_requests"), 0.0);
        }
        // Every configuration ran with min_saving off; the counts add up, and match the
        // snapshots' (summed by `stats`).
        assert_eq!(num("min_saving_percent"), 0.0);
        let detected = num("delta_detected");
        assert_eq!(
            detected,
            s["delta_detected"].as_f64().unwrap(),
            "{}",
            r["name"]
        );
        assert!(detected >= num("delta_chunks"), "{}", r["name"]);
        assert_eq!(
            num("delta_rejected_min_saving"),
            s["delta_rejected_min_saving"].as_f64().unwrap()
        );
    }
    // Resemblance detection stores less than deduplication alone on this series.
    let stored = |n: &str| {
        rows.iter().find(|r| r["name"] == n).unwrap()["stored_bytes"]
            .parse::<u64>()
            .unwrap()
    };
    assert!(stored("recommended") < stored("dedup"));

    let versions = std::fs::read_to_string(out.join("versions.csv")).unwrap();
    assert_eq!(versions.lines().count(), 1 + 4 * 4);
    let per_version = parse_csv(&versions);
    assert!(per_version
        .iter()
        .all(|v| v["backup_io_requests"].parse::<u64>().unwrap() > 0));
    // Plots are drawn where a font is installed (Debian's fonts-dejavu-core).
    if Path::new(dedelta_eval_font()).exists() {
        for png in [
            "stored.png",
            "cumulative.png",
            "throughput.png",
            "restore_speed_factor.png",
        ] {
            let bytes = std::fs::read(out.join(png)).unwrap();
            assert_eq!(&bytes[1..4], b"PNG", "{png}");
        }
    }
}

fn dedelta_eval_font() -> &'static str {
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
}

#[test]
fn eval_rejects_unknown_configuration_and_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("dedelta")
        .unwrap()
        .args([
            "eval",
            "--dataset",
            "synthetic-small",
            "--config",
            "bogus",
            "--no-peers",
        ])
        .arg("--data-dir")
        .arg(tmp.path())
        .arg("--out")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown configuration"));
    let out = Command::cargo_bin("dedelta")
        .unwrap()
        .args(["eval", "--dataset", "no-such-dataset", "--no-peers"])
        .arg("--data-dir")
        .arg(tmp.path())
        .arg("--out")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither a directory"));
}

/// `--chunker`: every configuration once per chunker, each repository cut by its chunker
/// (issue 15: the chunker dimension of Ddelta Table 4 and DARE's setup).
#[test]
fn eval_chunker_dimension_runs_each_configuration_per_chunker() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let assert = Command::cargo_bin("dedelta")
        .unwrap()
        .args([
            "eval",
            "--dataset",
            "synthetic-small",
            "--no-peers",
            "--threads",
            "1",
            "--versions",
            "2",
            "--config",
            "dedup",
            "--chunker",
            "rabin,gear:2k",
            "--max-depth",
            "2",
            // The restore speed factor through forward assembly instead of the LRU.
            "--restore-cache",
            "forward",
            "--assembly-mib",
            "1",
        ])
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .arg("--out")
        .arg(&out)
        .assert();
    let output = assert.get_output();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = parse_csv(&std::fs::read_to_string(out.join("results.csv")).unwrap());
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str()).collect();
    assert_eq!(names, ["dedup@rabin-8k", "dedup@gear-2k"]);
    assert_eq!(rows[0]["chunker"], "rabin-8k");
    assert_eq!(rows[1]["chunker"], "gear-2k");
    assert!(rows.iter().all(|r| r["max_depth"] == "2"), "{rows:?}");
    let mean = |r: &HashMap<String, String>| r["mean_chunk_bytes"].parse::<f64>().unwrap();
    assert!(mean(&rows[1]) < mean(&rows[0]) / 2.0, "{rows:?}");
    for r in &rows {
        let st = stats_json(&out.join("repos").join(&r["name"]));
        assert_eq!(
            st["chunks"].to_string(),
            r["unique_chunks"],
            "{}",
            r["name"]
        );
    }
    assert!(
        rows.iter()
            .all(|r| r["restore_speed_factor"].parse::<f64>().unwrap() > 0.0),
        "{rows:?}"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("dedup@gear-2k"));
    assert!(
        report.contains("forward assembly over areas of 1 MiB"),
        "{report}"
    );
    let bad = Command::cargo_bin("dedelta")
        .unwrap()
        .args(["eval", "--dataset", "synthetic-small", "--no-peers"])
        .args(["--chunker", "gear:6k"])
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .arg("--out")
        .arg(tmp.path().join("bad"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("power of two"));
}
