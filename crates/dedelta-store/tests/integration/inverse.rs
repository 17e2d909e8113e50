//! LoopDelta's cache-aware filter (§4.4) and inversed delta compression (§4.5), issue 17
//! items 3 and 4: a base-fragmented duplicate is stored again; an inversed pair restores
//! bit-exact and a prune then reclaims the old full copy; `check --read-data` passes after
//! each. The killed backup with inversed deltas is in
//! `faults::inversed_backup_crashed_at_every_write`.

use crate::support::{
    backup_options, backup_with, config, init_repo, locked, me, noise, prune_with, read_files,
    restore_to, restored_root, run_check, time_of, write_files, Files,
};
use dedelta_core::ChunkId;
use dedelta_store::backend::FileKind;
use dedelta_store::commands::backup::caf::LoopDeltaOptions;
use dedelta_store::commands::backup::rewrite::Capping;
use dedelta_store::commands::backup::{
    BackupOptions, BackupResult, FingerprintIndexKind, FingerprintIndexOptions,
};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::container::{ContainerId, ContainerMeta, EntryKind};
use dedelta_store::format::snapshot::SnapshotId;
use dedelta_store::repository::read_container_meta;
use dedelta_store::IndexedRepository;
use std::collections::HashSet;
use std::fs;
use std::path::Path;

/// `data` with 16 bytes changed every `every` bytes (from `seed`): every chunk of it is new,
/// and similar to its chunk in `data`.
fn edited(data: &[u8], every: usize, seed: u64) -> Vec<u8> {
    let mut d = data.to_vec();
    let mut at = every / 2;
    let mut k = 0;
    while at + 16 <= d.len() {
        d[at..at + 16].copy_from_slice(&noise(16, seed * 1000 + k));
        at += every;
        k += 1;
    }
    d
}

fn one_file(data: Vec<u8>) -> Files {
    let mut m = Files::new();
    m.insert("f.bin".into(), data);
    m
}

fn backup(
    repo: &IndexedRepository,
    src: &Path,
    files: &Files,
    n: u64,
    opts: impl FnOnce(BackupOptions) -> BackupOptions,
) -> BackupResult {
    let _ = fs::remove_dir_all(src);
    write_files(src, files);
    let o = opts(backup_options(vec![src.to_path_buf()], time_of(n)));
    locked(repo, &me(), |lock| backup_with(repo, lock, o)).unwrap()
}

fn restores_exact(repo: &IndexedRepository, dir: &Path, src: &Path, id: &SnapshotId, want: &Files) {
    let (_, snap) = repo.find_snapshot(&id.to_hex()).unwrap();
    let target = dir.join("restore");
    let _ = fs::remove_dir_all(&target);
    restore_to(repo, &snap, &target).unwrap();
    assert!(
        read_files(&restored_root(&target, src)) == *want,
        "snapshot {} differs",
        id.short()
    );
}

fn check_clean(repo: &IndexedRepository) {
    let report = run_check(repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

fn metas(repo: &IndexedRepository) -> Vec<(ContainerId, ContainerMeta)> {
    repo.backend()
        .list(FileKind::Container)
        .unwrap()
        .into_iter()
        .map(|(name, _)| {
            let meta = read_container_meta(repo.backend().as_ref(), &name).unwrap();
            (ContainerId::from_hex(&name).unwrap(), meta)
        })
        .collect()
}

/// The chunks stored as deltas in `repo`'s containers.
fn delta_ids(repo: &IndexedRepository) -> HashSet<ChunkId> {
    metas(repo)
        .iter()
        .flat_map(|(_, m)| m.entries.iter())
        .filter(|e| matches!(e.kind, EntryKind::Delta { .. }))
        .map(|e| e.id)
        .collect()
}

/// How the copy the index names of `id` is stored.
fn indexed_kind(repo: &IndexedRepository, id: &ChunkId) -> EntryKind {
    let loc = repo.index().get(id).unwrap().expect("indexed");
    let meta = read_container_meta(repo.backend().as_ref(), &loc.container.to_hex()).unwrap();
    meta.entries[loc.entry as usize].kind
}

fn capped(opts: BackupOptions, inversed: bool) -> BackupOptions {
    BackupOptions {
        rewriting: Some(Box::new(Capping {
            segment_bytes: 1 << 20,
            level: 1,
        })),
        loopdelta: LoopDeltaOptions {
            inversed_delta: inversed,
            ..Default::default()
        },
        ..opts
    }
}

/// Version 1 stores a file; version 2 edits it every 4 KiB, capped at one old container per
/// segment: its new chunks' similar chunks lie mostly in containers the segment gave up, so
/// they are inverted. Both versions restore bit-exact before and after a prune that keeps both
/// snapshots; the index names the full copies until the prune, the inversed deltas after it,
/// and the prune reclaims the old full copies; `check --read-data` passes throughout.
#[test]
fn an_inversed_pair_restores_and_prune_reclaims_the_old_full_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &tmp.path().join("repo"),
        config(1, DeltaConfig::recommended()),
    );
    let src = tmp.path().join("src");
    let v1 = one_file(noise(400_000, 7));
    let v2 = one_file(edited(&v1["f.bin"], 4096, 2));
    let s1 = backup(&repo, &src, &v1, 1, |o| o).snapshot_id;
    let res = backup(&repo, &src, &v2, 2, |o| capped(o, true));
    let s2 = res.snapshot_id;
    assert!(
        res.metrics.rewritten.inversed_chunks > 0,
        "{:?}",
        res.metrics.rewritten
    );
    let inversed: HashSet<ChunkId> = metas(&repo)
        .iter()
        .flat_map(|(_, m)| m.entries.iter())
        .filter(|e| e.kind.is_inversed())
        .map(|e| e.id)
        .collect();
    assert_eq!(inversed.len() as u64, res.metrics.rewritten.inversed_chunks);
    for id in &inversed {
        assert_eq!(indexed_kind(&repo, id), EntryKind::Full, "full copy first");
    }
    restores_exact(&repo, tmp.path(), &src, &s1, &v1);
    restores_exact(&repo, tmp.path(), &src, &s2, &v2);
    check_clean(&repo);

    locked(&repo, &me(), |lock| prune_with(&repo, lock, 0.0, false)).unwrap();
    for id in &inversed {
        assert!(
            matches!(indexed_kind(&repo, id), EntryKind::Delta { .. }),
            "the inversed delta is the copy after prune"
        );
    }
    let full_left = metas(&repo)
        .iter()
        .flat_map(|(_, m)| m.entries.iter())
        .filter(|e| inversed.contains(&e.id) && e.kind == EntryKind::Full)
        .count();
    assert_eq!(full_left, 0, "prune reclaims the old full copies");
    restores_exact(&repo, tmp.path(), &src, &s1, &v1);
    restores_exact(&repo, tmp.path(), &src, &s2, &v2);
    check_clean(&repo);
    // The next backup of version 2 is all duplicates, and reads right.
    let s3 = backup(&repo, &src, &v2, 3, |o| capped(o, true)).snapshot_id;
    restores_exact(&repo, tmp.path(), &src, &s3, &v2);
    check_clean(&repo);
}

/// Without the option, the same backups invert nothing.
#[test]
fn capping_alone_inverts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &tmp.path().join("repo"),
        config(1, DeltaConfig::recommended()),
    );
    let src = tmp.path().join("src");
    let v1 = one_file(noise(400_000, 7));
    let v2 = one_file(edited(&v1["f.bin"], 4096, 2));
    backup(&repo, &src, &v1, 1, |o| o);
    let res = backup(&repo, &src, &v2, 2, |o| capped(o, false));
    assert_eq!(res.metrics.rewritten.inversed_chunks, 0);
    assert!(!metas(&repo)
        .iter()
        .any(|(_, m)| m.entries.iter().any(|e| e.kind.is_inversed())));
}

fn locality(opts: BackupOptions, caf: bool) -> BackupOptions {
    locality_caching(opts, caf, 2)
}

/// [`locality`] with a fingerprint cache of `containers`.
fn locality_caching(opts: BackupOptions, caf: bool, containers: usize) -> BackupOptions {
    BackupOptions {
        lookup: FingerprintIndexOptions {
            kind: FingerprintIndexKind::Locality,
            cache_containers: containers,
            ..FingerprintIndexOptions::default()
        },
        loopdelta: LoopDeltaOptions {
            cache_aware_filter: caf,
            ..Default::default()
        },
        ..opts
    }
}

/// The filter's view of the fingerprint cache reads no container the backup's lookups read
/// (LoopDelta §4.4: the filter looks only at the metadata deduplication prefetched). A
/// version backed up again, with a fingerprint cache of one container: the pool looks up a
/// whole block (1 MiB, some 30 containers here) before the stream reaches its first chunk,
/// so its cache has evicted the block's containers but the last by then. The view read each
/// of those again (the SQLAlchemy tar series with 4-container caches: 3,091 re-reads in 20
/// backups, backup 1.52x deduplication's modelled disk time); now it takes the metadata the
/// pool read. Every prefetch request is one the lookups counted.
#[test]
fn the_filter_reads_no_container_again() {
    use dedelta_store::backend::wrap::metered::{Direction, Purpose};
    let tmp = tempfile::tempdir().unwrap();
    let repo = crate::support::metered_repo(&tmp.path().join("repo"), DeltaConfig::recommended());
    let src = tmp.path().join("src");
    let v1 = one_file(noise(1_500_000, 11));
    backup(&repo, &src, &v1, 1, |o| locality_caching(o, true, 1));
    // Fewer than the view keeps (64), more than a block's worth.
    let containers = metas(&repo).len();
    assert!((25..=60).contains(&containers), "{containers} containers");
    let before = repo.io_counts().unwrap();
    let r2 = backup(&repo, &src, &v1, 2, |o| locality_caching(o, true, 1));
    let io = repo.io_counts().unwrap().since(&before);
    let l = &r2.metrics.lookups;
    assert!(l.prefetches >= 25, "{l:?}");
    assert_eq!(l.view_rereads, 0, "{l:?}");
    assert_eq!(
        io.get(Purpose::Prefetch, Direction::Read).requests,
        l.prefetches,
        "{io:?}"
    );
    assert!(r2.summary.new_chunks <= 1, "{:?}", r2.summary);
    restores_exact(&repo, tmp.path(), &src, &r2.snapshot_id, &v1);
}

/// Version 2 is stored as deltas against version 1; version 3 is version 2 again, after
/// other data: its chunks are duplicates of old deltas whose bases (version 1's chunks) are
/// not in the fingerprint cache, so the filter stores them again (as full chunks: no base is
/// in memory). Every version restores, `check --read-data` passes, and a prune reclaims the
/// old delta copies the rewritten ones replace.
#[test]
fn a_base_fragmented_duplicate_is_rewritten_and_prune_reclaims_the_old_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &tmp.path().join("repo"),
        config(1, DeltaConfig::recommended()),
    );
    let src = tmp.path().join("src");
    let v1 = one_file(noise(200_000, 9));
    let v2 = one_file(edited(&v1["f.bin"], 4096, 3));
    let s1 = backup(&repo, &src, &v1, 1, |o| locality(o, true)).snapshot_id;
    let r2 = backup(&repo, &src, &v2, 2, |o| locality(o, true));
    assert!(r2.summary.delta_chunks > 0, "version 2 is stored as deltas");
    let old_deltas = delta_ids(&repo);
    // Without the filter, version 2 again is all duplicates (but its new tree chunk).
    let plain = backup(&repo, &src, &v2, 3, |o| locality(o, false));
    assert!(plain.summary.new_chunks <= 1);
    let r3 = backup(&repo, &src, &v2, 4, |o| locality(o, true));
    let caf = r3.metrics.rewritten.caf;
    assert!(caf.base_not_cached > 0, "{caf:?}");
    assert!(r3.summary.new_chunks >= caf.base_not_cached);
    let rewritten: Vec<&ChunkId> = old_deltas
        .iter()
        .filter(|id| indexed_kind(&repo, id) == EntryKind::Full)
        .collect();
    assert_eq!(
        rewritten.len() as u64,
        caf.base_not_cached + caf.base_given_up
    );
    for (id, s) in [(s1, &v1), (r2.snapshot_id, &v2), (r3.snapshot_id, &v2)] {
        restores_exact(&repo, tmp.path(), &src, &id, s);
    }
    check_clean(&repo);
    // The next backup finds them stored in full: nothing more is fragmented.
    let r5 = backup(&repo, &src, &v2, 5, |o| locality(o, true));
    let again = r5.metrics.rewritten.caf;
    assert_eq!(again.base_not_cached + again.base_given_up, 0, "{again:?}");
    assert!(r5.summary.new_chunks <= 1);

    locked(&repo, &me(), |lock| prune_with(&repo, lock, 0.0, false)).unwrap();
    let copies = metas(&repo)
        .iter()
        .flat_map(|(_, m)| m.entries.iter())
        .filter(|e| rewritten.contains(&&e.id))
        .count();
    assert_eq!(
        copies,
        rewritten.len(),
        "prune reclaims the old delta copies"
    );
    for (id, s) in [(s1, &v1), (r2.snapshot_id, &v2), (r3.snapshot_id, &v2)] {
        restores_exact(&repo, tmp.path(), &src, &id, s);
    }
    check_clean(&repo);
}

/// With LoopDelta's prefetching, a base-fragmented duplicate is stored again as a delta
/// against a chunk of the potential base chunk cache (LoopDelta §4.5's workflow: "for each
/// unique, fragmented, and base-fragmented chunk, LoopDelta detects its base chunk from the
/// potential base chunk cache"). Version 2's chunks are deltas of version 1's; version 2
/// again, with a fingerprint cache of one container, meets each old delta right after a
/// duplicate of version 1's container (so the delta's base is not in the fingerprint cache:
/// base-fragmented), while version 1's containers are dense and read whole (so the base is
/// in the potential base chunk cache). Before, the rewritten chunks came unsketched from the
/// pool and looked only in this backup's own chunks: all were stored in full.
#[test]
fn a_base_fragmented_duplicate_becomes_a_delta_of_a_prefetched_base() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &tmp.path().join("repo"),
        config(1, crate::support::loopdelta_delta()),
    );
    let src = tmp.path().join("src");
    let v1 = one_file(noise(200_000, 9));
    let v2 = one_file(edited(&v1["f.bin"], 4096, 3));
    let small_cache = |caf: bool| move |o: BackupOptions| locality_caching(o, caf, 1);
    let s1 = backup(&repo, &src, &v1, 1, small_cache(true)).snapshot_id;
    let r2 = backup(&repo, &src, &v2, 2, small_cache(true));
    assert!(r2.summary.delta_chunks > 0, "version 2 is stored as deltas");
    let before: HashSet<ContainerId> = metas(&repo).into_iter().map(|(c, _)| c).collect();
    let old_deltas = delta_ids(&repo);
    let r3 = backup(&repo, &src, &v2, 3, small_cache(true));
    let caf = r3.metrics.rewritten.caf;
    assert!(caf.base_not_cached > 0, "{caf:?}");
    assert_eq!(r3.metrics.bases.read_back, 0);
    // The rewritten copies (the ones the index names now, in this backup's containers).
    let (mut rewritten, mut as_deltas) = (0, 0);
    for id in &old_deltas {
        let loc = repo.index().get(id).unwrap().expect("indexed");
        if before.contains(&loc.container) {
            continue;
        }
        rewritten += 1;
        if matches!(indexed_kind(&repo, id), EntryKind::Delta { .. }) {
            as_deltas += 1;
        }
    }
    assert_eq!(rewritten, caf.base_not_cached + caf.base_given_up);
    assert!(
        as_deltas * 2 > rewritten,
        "{as_deltas} of {rewritten} rewritten chunks are deltas"
    );
    for (id, s) in [(s1, &v1), (r2.snapshot_id, &v2), (r3.snapshot_id, &v2)] {
        restores_exact(&repo, tmp.path(), &src, &id, s);
    }
    check_clean(&repo);
}

/// The options are refused where they cannot work, before anything is written.
#[test]
fn the_options_are_refused_without_what_they_need() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &tmp.path().join("repo"),
        config(1, DeltaConfig::recommended()),
    );
    let src = tmp.path().join("src");
    write_files(&src, &one_file(noise(10_000, 1)));
    let run = |o: BackupOptions| locked(&repo, &me(), |lock| backup_with(&repo, lock, o));
    let caf_exact = BackupOptions {
        loopdelta: LoopDeltaOptions {
            cache_aware_filter: true,
            ..Default::default()
        },
        ..backup_options(vec![src.clone()], time_of(1))
    };
    let e = run(caf_exact).unwrap_err().to_string();
    assert!(e.contains("--fingerprint-index locality"), "{e}");
    let inv_uncapped = BackupOptions {
        loopdelta: LoopDeltaOptions {
            inversed_delta: true,
            ..Default::default()
        },
        ..backup_options(vec![src.clone()], time_of(1))
    };
    let e = run(inv_uncapped).unwrap_err().to_string();
    assert!(e.contains("--capping-level"), "{e}");
    // A version-3 repository has no inversed deltas.
    let mut cfg = config(1, DeltaConfig::recommended());
    cfg.version = 3;
    let old = init_repo(&tmp.path().join("old"), cfg);
    let o = capped(backup_options(vec![src.clone()], time_of(1)), true);
    let e = locked(&old, &me(), |lock| backup_with(&old, lock, o))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("format version 4") && e.contains("version 3"),
        "{e}"
    );
}

/// The deepest delta chain among the copies the index names.
fn deepest_chain(repo: &IndexedRepository) -> usize {
    let kinds: std::collections::HashMap<ChunkId, EntryKind> = {
        let mut locs = Vec::new();
        repo.index()
            .for_each(|id, loc| locs.push((id, loc)))
            .unwrap();
        let metas: std::collections::HashMap<ContainerId, ContainerMeta> =
            metas(repo).into_iter().collect();
        locs.into_iter()
            .map(|(id, loc)| (id, metas[&loc.container].entries[loc.entry as usize].kind))
            .collect()
    };
    kinds
        .keys()
        .map(|id| {
            let (mut at, mut depth) = (*id, 0);
            while let Some(EntryKind::Delta { base, .. }) = kinds.get(&at) {
                at = *base;
                depth += 1;
            }
            depth
        })
        .max()
        .unwrap_or(0)
}

/// Chunks inverted while deltas of another snapshot name them as their base: with one-level
/// deltas the prune keeps their full copies (a delta on them stays one level), with chains it
/// makes the inversed deltas their copies (those deltas get one link deeper, within the
/// bound). Either way every snapshot restores and `check --read-data` passes. Returns the
/// inversed deltas promoted and the deepest chain after the prune.
fn inverting_a_base(max_depth: u8) -> (u64, usize) {
    let tmp = tempfile::tempdir().unwrap();
    let delta = DeltaConfig {
        max_depth,
        ..DeltaConfig::recommended()
    };
    let repo = init_repo(&tmp.path().join("repo"), config(1, delta));
    let (src1, src2) = (tmp.path().join("one"), tmp.path().join("two"));
    let v1 = one_file(noise(400_000, 7));
    let v2 = one_file(edited(&v1["f.bin"], 4096, 2));
    let v3 = one_file(edited(&v1["f.bin"], 4096, 3));
    let s1 = backup(&repo, &src1, &v1, 1, |o| o).snapshot_id;
    // Another path: deltas against version 1's chunks, and not the next backup's parent.
    let r2 = backup(&repo, &src2, &v2, 2, |o| o);
    assert!(r2.summary.delta_chunks > 0);
    let r3 = backup(&repo, &src1, &v3, 3, |o| capped(o, true));
    assert!(
        r3.metrics.rewritten.inversed_chunks > 0,
        "{:?}",
        r3.metrics.rewritten
    );
    let stats = locked(&repo, &me(), |lock| prune_with(&repo, lock, 0.0, false)).unwrap();
    for (id, src, files) in [
        (s1, &src1, &v1),
        (r2.snapshot_id, &src2, &v2),
        (r3.snapshot_id, &src1, &v3),
    ] {
        restores_exact(&repo, tmp.path(), src, &id, files);
    }
    check_clean(&repo);
    (stats.plan.inversed_promoted, deepest_chain(&repo))
}

#[test]
fn a_base_keeps_its_full_copy_with_one_level_deltas() {
    let (_, deepest) = inverting_a_base(1);
    assert_eq!(deepest, 1, "deltas stay one level deep");
}

#[test]
fn a_base_is_inverted_within_the_depth_bound() {
    let (promoted, deepest) = inverting_a_base(8);
    assert!(promoted > 0);
    assert_eq!(
        deepest, 2,
        "a delta on an inverted chunk is one link deeper"
    );
}
