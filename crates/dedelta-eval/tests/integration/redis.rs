//! The Redis series against a real `redis-server`: skipped, with a message, where it is not
//! installed (`scripts/install-peers.sh` installs it).

use dedelta_eval::configs;
use dedelta_eval::dataset::Dataset;
use dedelta_eval::peers::which;
use dedelta_eval::redis::{generate, RedisParams};
use dedelta_eval::runner::{run_config, RunOptions};

fn have_redis() -> bool {
    if which("redis-server").is_some() {
        return true;
    }
    eprintln!("SKIPPED: redis-server is not installed (scripts/install-peers.sh installs it)");
    false
}

/// A tiny series: RDB dumps, each a little different from the one before, and no server or
/// socket left behind.
#[test]
fn tiny_series_of_dumps() {
    if !have_redis() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = RedisParams {
        versions: 3,
        keys: 2_000,
        ..RedisParams::small(5)
    };
    let paths = generate(d.path(), &p).unwrap();
    assert_eq!(paths.len(), 3);
    let dumps: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    for (i, b) in dumps.iter().enumerate() {
        assert!(b.starts_with(b"REDIS"), "v{i} is no RDB file");
        assert!(b.len() > 100_000, "v{i}: only {} bytes", b.len());
    }
    assert_ne!(dumps[0], dumps[1]);
    assert_ne!(dumps[1], dumps[2]);
    // The server's work directory is gone; only the versions are left.
    let mut names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["v000.rdb", "v001.rdb", "v002.rdb"]);
}

/// `--dataset redis-small` resolves, and its dumps back up and restore bit-exact with deltas.
#[test]
fn redis_small_backs_up_and_restores() {
    if !have_redis() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let data = Dataset::resolve("redis-small", d.path()).unwrap();
    assert_eq!(data.versions.len(), RedisParams::small(1).versions);
    assert!(data.dir.ends_with(RedisParams::small(1).dir_name()));
    let config = configs::parse("recommended").unwrap().remove(0);
    let opts = RunOptions {
        repos_dir: d.path().join("repos"),
        scratch_dir: d.path().join("scratch"),
        threads: 2,
        restore_sample: None,
        host: "test".into(),
        time: "2026-11-24T00:00:00Z".into(),
        cache_containers: dedelta_store::read::PAPER_CACHE_CONTAINERS,
        assembly_bytes: None,
        speed_factor_versions: dedelta_eval::runner::SPEED_FACTOR_VERSIONS,
        lookup: Default::default(),
        io_models: Default::default(),
        container_size: None,
    };
    std::fs::create_dir_all(&opts.scratch_dir).unwrap();
    let (r, _) = run_config(&data, &config, &opts, None).unwrap();
    assert_eq!(r.versions_restored, data.versions.len());
    assert!(r.delta_chunks.unwrap() > 0, "no deltas: {r:?}");
    assert!(r.total_factor > 1.5, "{r:?}");
}
