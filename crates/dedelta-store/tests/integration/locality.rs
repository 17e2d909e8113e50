//! The locality fingerprint index (issue 16 item 1): it deduplicates exactly as the exact
//! index does, with one on-disk lookup per container of old data rather than one per chunk;
//! its cache stays within its size; and it never deduplicates against a chunk the index no
//! longer holds (a prune's dead chunk left in a container it kept).

use crate::support::{
    backup_options, backup_with, config, forget_ids, init_repo, locked, me, noise, prune_with,
    read_files, restore_to, run_check, stored_bytes, time_of, versioned_text, write_files, Files,
};
use dedelta_store::commands::backup::{
    BackupResult, FingerprintIndexKind, FingerprintIndexOptions,
};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::IndexedRepository;
use std::path::Path;

fn locality(cache_containers: usize) -> FingerprintIndexOptions {
    FingerprintIndexOptions {
        kind: FingerprintIndexKind::Locality,
        cache_containers,
        ..FingerprintIndexOptions::default()
    }
}

fn exact() -> FingerprintIndexOptions {
    FingerprintIndexOptions::default()
}

/// Backs up `files` (written to `src`) as backup `n` with `lookup`.
fn backup(
    repo: &IndexedRepository,
    src: &Path,
    files: &Files,
    n: u64,
    lookup: FingerprintIndexOptions,
) -> BackupResult {
    write_tree(src, files);
    backup_written(repo, src, n, lookup)
}

/// Writes `files` to `src` with fixed times.
fn write_tree(src: &Path, files: &Files) {
    let _ = std::fs::remove_dir_all(src);
    write_files(src, files);
    let t = filetime::FileTime::from_unix_time(1_700_000_000, 0);
    for name in files.keys() {
        filetime::set_file_times(src.join(name), t, t).unwrap();
    }
    filetime::set_file_times(src, t, t).unwrap();
}

/// Backs up `src` as it is as backup `n` with `lookup`.
fn backup_written(
    repo: &IndexedRepository,
    src: &Path,
    n: u64,
    lookup: FingerprintIndexOptions,
) -> BackupResult {
    locked(repo, &me(), |lock| {
        let mut opts = backup_options(vec![src.to_path_buf()], time_of(n));
        opts.lookup = lookup;
        backup_with(repo, lock, opts)
    })
    .unwrap()
}

/// Version `v`: eight text files edited a little per version, and incompressible data
/// (several containers of it).
fn tree(v: u64) -> Files {
    let mut m = Files::new();
    for f in 0..8u64 {
        m.insert(format!("t{f}.txt"), versioned_text(f, 30_000, v));
    }
    m.insert("big.bin".into(), noise(600_000, 7));
    m
}

fn restores(repo: &IndexedRepository, res: &BackupResult, src: &Path, files: &Files) {
    let (_, snap) = repo.find_snapshot(&res.snapshot_id.to_hex()).unwrap();
    let out = src.with_file_name("out");
    let _ = std::fs::remove_dir_all(&out);
    restore_to(repo, &snap, &out).unwrap();
    let root = out.join(src.to_string_lossy().trim_start_matches('/'));
    assert!(read_files(&root) == *files, "restored files differ");
}

/// The same backups, with the exact and the locality index, store the same bytes: the same
/// data again stores nothing, and slightly changed data stores the same containers.
#[test]
fn locality_deduplicates_exactly_like_exact() {
    for delta in [DeltaConfig::recommended(), DeltaConfig::default()] {
        let dir = tempfile::tempdir().unwrap();
        let repos: Vec<(&str, FingerprintIndexOptions, IndexedRepository)> =
            [("exact", exact()), ("locality", locality(4))]
                .into_iter()
                .map(|(name, lookup)| {
                    let repo = init_repo(&dir.path().join(name), config(1, delta.clone()));
                    (name, lookup, repo)
                })
                .collect();
        // One source, written once per step and backed up into both: the same tree stream
        // (inodes and ctimes included).
        let src = dir.path().join("src");
        let mut stored = vec![Vec::new(); repos.len()];
        for (n, v) in [0u64, 0, 1, 1, 2].into_iter().enumerate() {
            let files = tree(v);
            write_tree(&src, &files);
            for ((name, lookup, repo), sizes) in repos.iter().zip(stored.iter_mut()) {
                let res = backup_written(repo, &src, n as u64, *lookup);
                sizes.push((res.summary.new_chunks, stored_bytes(repo)));
                if n == 1 || n == 3 {
                    // Only the tree stream is new (the files were written again).
                    assert!(
                        res.summary.bytes_new < 20_000,
                        "{name}: backup {n}: {} {:?}",
                        res.summary.bytes_new,
                        res.metrics.lookups
                    );
                }
                if *name == "locality" && n == 1 {
                    let l = &res.metrics.lookups;
                    assert_eq!(l.strategy, "locality");
                    // Old data: at most one on-disk lookup per container it was stored in
                    // (plus the filter's few false positives); the rest hit the cache.
                    assert!(
                        l.index_lookups <= l.prefetches + l.filter_false_positives,
                        "{l:?}"
                    );
                    assert!(l.cache_hits > 10 * l.index_lookups, "{l:?}");
                    assert!(l.cached_containers_max <= 4, "{l:?}");
                    assert!(l.filter_bytes > 0);
                }
                restores(repo, &res, &src, &files);
            }
        }
        assert_eq!(stored[0], stored[1], "exact vs locality, delta {delta:?}");
    }
}

/// The cache never holds more containers than asked, whatever the data.
#[test]
fn the_cache_holds_at_most_its_containers() {
    let dir = tempfile::tempdir().unwrap();
    let repo = init_repo(&dir.path().join("repo"), config(1, DeltaConfig::default()));
    let src = dir.path().join("src");
    let mut files = Files::new();
    for f in 0..6u64 {
        files.insert(format!("n{f}.bin"), noise(200_000, f));
    }
    let first = backup(&repo, &src, &files, 0, exact());
    assert!(first.summary.containers_written >= 10);
    for n in [1, 2, 3] {
        let res = backup(&repo, &src, &files, 1, locality(n));
        let l = &res.metrics.lookups;
        assert!(
            res.summary.bytes_new < 20_000,
            "{} new: {:?}",
            res.summary.bytes_new,
            res.metrics.lookups
        );
        assert!(l.cached_containers_max <= n as u64, "cache of {n}: {l:?}");
        assert!(l.prefetches >= first.summary.containers_written, "{l:?}");
    }
}

/// The last locality backup's containers are hints for the next: a backup of the same data
/// finds its old containers through them, without asking the on-disk index, and stores what
/// the exact index would.
#[test]
fn the_last_backups_containers_spare_index_lookups() {
    let dir = tempfile::tempdir().unwrap();
    let repo = init_repo(&dir.path().join("repo"), config(1, DeltaConfig::default()));
    let src = dir.path().join("src");
    let mut files = Files::new();
    for f in 0..6u64 {
        files.insert(format!("n{f}.bin"), noise(200_000, f));
    }
    let first = backup(&repo, &src, &files, 0, locality(64));
    assert!(first.summary.containers_written >= 10);
    for n in [1, 2] {
        let res = backup(&repo, &src, &files, n, locality(64));
        let l = &res.metrics.lookups;
        assert!(res.summary.bytes_new < 20_000, "{l:?}");
        // The old containers come from the hints: few are looked up on disk (without hints,
        // one lookup each). Not none: the pool's threads look chunks up out of stream order,
        // so a miss may need a container more than two hints ahead.
        let written = first.summary.containers_written;
        // (A quarter at least: on a loaded machine, as in CI, the pool runs further ahead
        // and more of the old containers are found by lookups; 14 of 36 once.)
        assert!(l.hint_hits * 4 >= written, "{l:?}");
        assert!(l.disk_lookups * 4 <= written, "{written} written: {l:?}");
        assert!(l.hinted_prefetches <= l.prefetches, "{l:?}");
        restores(&repo, &res, &src, &files);
    }
    // Unrelated data: hints that never hold a chunk stop, and the index answers.
    let mut other = Files::new();
    other.insert("o.bin".into(), noise(600_000, 99));
    backup(&repo, &src, &other, 3, locality(64));
    let res = backup(&repo, &src, &files, 4, locality(64));
    assert!(res.summary.bytes_new < 20_000, "{:?}", res.metrics.lookups);
    restores(&repo, &res, &src, &files);
}

/// A prune that keeps a container with dead entries keeps them in the index, as an index
/// rebuilt from the containers names them (another client's, see
/// `clients::an_index_takes_in_dead_chunks_another_client_made_live_again`): a locality
/// backup that prefetches that container, also when it comes as a hint from the last locality
/// backup, deduplicates against them, and its snapshot restores, before and after the next
/// prune (which finds them referenced). Until 2026-11-29 prune took them out of its index,
/// and the backup stored them again.
#[test]
fn dead_entries_of_a_kept_container_stay_indexed_and_are_deduplicated() {
    for first_kind in [exact(), locality(8)] {
        dead_entries_stay_indexed(first_kind);
    }
}

fn dead_entries_stay_indexed(first_kind: FingerprintIndexOptions) {
    let dir = tempfile::tempdir().unwrap();
    let repo = init_repo(&dir.path().join("repo"), config(4, DeltaConfig::default()));
    let src = dir.path().join("src");
    let kept = noise(60_000, 1);
    let dead = noise(20_000, 2);
    let both: Files = [
        ("a.bin".to_string(), kept.clone()),
        ("b.bin".to_string(), dead.clone()),
    ]
    .into();
    let only_kept: Files = [("a.bin".to_string(), kept.clone())].into();
    let first = backup(&repo, &src, &both, 0, first_kind);
    backup(&repo, &src, &only_kept, 1, first_kind);
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, &[first.snapshot_id.to_hex()])?;
        // Keep every partly dead container: b.bin's chunks stay in it, and in the index.
        prune_with(&repo, lock, 1.0, false)
    })
    .unwrap();
    let again = backup(&repo, &src, &both, 2, locality(8));
    assert!(
        again.summary.bytes_new < dead.len() as u64 / 2,
        "b.bin's chunks are deduplicated against their kept copies: {} new bytes, {:?}",
        again.summary.bytes_new,
        again.metrics.lookups
    );
    let report = run_check(&repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    restores(&repo, &again, &src, &both);
    // And after a prune, the snapshot still restores.
    locked(&repo, &me(), |lock| prune_with(&repo, lock, 0.0, false)).unwrap();
    restores(&repo, &again, &src, &both);
}

/// The filter file is kept beside the index: a second locality backup reads it instead of
/// rebuilding it; a damaged one is rebuilt, with a notice, and the backup is unchanged.
#[test]
fn a_damaged_filter_file_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("repo");
    let repo = init_repo(&path, config(1, DeltaConfig::default()));
    let src = dir.path().join("src");
    let files = tree(0);
    let rebuilt = |r: &BackupResult| {
        r.notices
            .iter()
            .any(|n| n.starts_with("fingerprint filter rebuilt"))
    };
    assert!(rebuilt(&backup(&repo, &src, &files, 0, locality(4))));
    assert!(!rebuilt(&backup(&repo, &src, &files, 1, locality(4))));
    drop(repo);
    let cache = crate::support::cache_root_for(&path);
    let filter = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("chunks.idx.filter"))
        .find(|p| p.exists())
        .expect("a filter file beside the index");
    let mut bytes = std::fs::read(&filter).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&filter, bytes).unwrap();
    let repo = crate::support::open_repo(&path)
        .unwrap()
        .open_index()
        .unwrap();
    let res = backup(&repo, &src, &files, 2, locality(4));
    assert!(rebuilt(&res), "{:?}", res.notices);
    assert!(res.notices.iter().any(|n| n.contains("checksum")));
    assert!(
        res.summary.bytes_new < 20_000,
        "{} new: {:?}",
        res.summary.bytes_new,
        res.metrics.lookups
    );
    assert!(!rebuilt(&backup(&repo, &src, &files, 3, locality(4))));
}

/// A metered repository files the locality index's metadata loads as prefetches (issue 16
/// item 4's purpose): a size query and two ranged reads of one container per prefetch, and
/// an exact backup makes none.
#[test]
fn prefetches_are_metered_as_prefetch() {
    use dedelta_store::backend::wrap::metered::{Direction, Purpose};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("repo");
    let repo = dedelta_store::Repository::init_local_with_cache(
        &path,
        config(1, DeltaConfig::default()),
        &crate::support::cache_root_for(&path),
    )
    .unwrap()
    .metered()
    .open_index()
    .unwrap();
    let src = dir.path().join("src");
    let files = tree(0);
    let before = repo.io_counts().unwrap();
    backup(&repo, &src, &files, 0, exact());
    let mid = repo.io_counts().unwrap();
    assert_eq!(mid.since(&before).purpose(Purpose::Prefetch).requests, 0);
    let res = backup(&repo, &src, &files, 1, locality(4));
    let c = repo.io_counts().unwrap().since(&mid);
    let prefetches = res.metrics.lookups.prefetches;
    assert!(prefetches > 0);
    let reads = c.get(Purpose::Prefetch, Direction::Read);
    // One suffix read per prefetch (the footer and the metadata section together).
    assert_eq!(reads.requests, prefetches, "{c:?}");
    assert!(reads.bytes > 0);
}
