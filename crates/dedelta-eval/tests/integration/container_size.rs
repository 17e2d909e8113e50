//! `--container-kib`: every repository of a run gets the container size given, so that a
//! series whose backups are small still writes several containers a backup.

use dedelta_eval::configs;
use dedelta_eval::dataset::Dataset;
use dedelta_eval::runner::{run_config, RunOptions};

/// Two versions of 3 MB of incompressible bytes each (half shared): with the default 4 MiB
/// containers each backup writes one container, with 512 KiB containers several, and the
/// repository's config records the size.
#[test]
fn container_size_is_applied_to_every_repository() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // xorshift64: incompressible.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut bytes: Vec<u8> = (0..3_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(data.join("v1"), &bytes).unwrap();
    for b in &mut bytes[1_500_000..] {
        *b = b.wrapping_add(1);
    }
    std::fs::write(data.join("v2"), &bytes).unwrap();
    let dataset = Dataset::resolve(data.to_str().unwrap(), d.path()).unwrap();
    let config = configs::parse("dedup").unwrap().remove(0);
    let run = |size: Option<usize>| {
        let opts = RunOptions {
            repos_dir: d.path().join(format!("repos-{size:?}")),
            scratch_dir: d.path().join("scratch"),
            threads: 2,
            restore_sample: None,
            host: "test".into(),
            time: "2026-11-25T00:00:00Z".into(),
            cache_containers: 4,
            assembly_bytes: None,
            speed_factor_versions: 2,
            lookup: Default::default(),
            io_models: Default::default(),
            container_size: size,
        };
        std::fs::create_dir_all(&opts.scratch_dir).unwrap();
        let (_, rows) = run_config(&dataset, &config, &opts, None).unwrap();
        let repo = dedelta_store::Repository::open_local(&opts.repos_dir.join("dedup")).unwrap();
        let written: Vec<u64> = rows.iter().map(|r| r.containers_written).collect();
        (repo.config().container_size, written)
    };
    let (default_size, default_written) = run(None);
    assert_eq!(
        default_size,
        dedelta_store::format::config::DEFAULT_CONTAINER_SIZE
    );
    assert_eq!(default_written, vec![1, 1]);
    let (small_size, small_written) = run(Some(512 << 10));
    assert_eq!(small_size, 512 << 10);
    assert!(
        small_written.iter().all(|&n| n >= 3),
        "several containers a backup: {small_written:?}"
    );
}
