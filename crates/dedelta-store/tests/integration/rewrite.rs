//! Capping (issue 16 item 2): a capped backup references at most T old containers per
//! segment, its rewritten copies are the ones the index names, and a prune then reclaims the
//! copies they replaced without losing anything a snapshot (or a delta) needs. The killed
//! capped backup is in `faults::capping_backup_crashed_at_every_write`.

use crate::support::{
    backup_options, backup_with, config, forget_ids, init_repo, locked, me, noise, prune_with,
    read_files, restore_to, restored_root, run_check, stored_bytes, time_of, write_files, Files,
};
use dedelta_core::ChunkId;
use dedelta_store::backend::FileKind;
use dedelta_store::commands::backup::rewrite::Capping;
use dedelta_store::commands::backup::{BackupOptions, BackupResult};
use dedelta_store::commands::restore::{restore, RestoreOptions};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::container::ContainerId;
use dedelta_store::format::snapshot::SnapshotId;
use dedelta_store::progress::NoProgress;
use dedelta_store::read::{walk_tree, ChunkLocator, RestoreCacheChoice};
use dedelta_store::IndexedRepository;
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::Path;

/// Segments of 64 KiB: about 32 chunks of the tests' config, over containers of 48 KiB.
const SEGMENT_BYTES: u64 = 64 * 1024;

/// Version `v` of two incompressible files: each version replaces a few 1 KiB spans with new
/// bytes, so that after a few versions a file's chunks lie in the containers of every
/// backup before (fragmentation).
pub(crate) fn version(v: u64) -> Files {
    let mut m = Files::new();
    for f in 0..2u64 {
        let mut d = noise(200_000, 10 + f);
        for w in 1..=v {
            for k in 0..6u64 {
                let at = ((w * 7 + k * 13 + f * 3) * 7_919 % 195) as usize * 1000;
                d[at..at + 1024].copy_from_slice(&noise(1024, 1000 * w + 10 * k + f));
            }
        }
        m.insert(format!("f{f}.bin"), d);
    }
    m
}

pub(crate) fn backup(
    repo: &IndexedRepository,
    src: &Path,
    v: u64,
    capping: Option<usize>,
) -> BackupResult {
    write_files(src, &version(v));
    let opts = BackupOptions {
        rewriting: capping.map(|level| {
            Box::new(Capping {
                segment_bytes: SEGMENT_BYTES,
                level,
            }) as _
        }),
        ..backup_options(vec![src.to_path_buf()], time_of(v))
    };
    locked(repo, &me(), |lock| backup_with(repo, lock, opts)).unwrap()
}

fn containers(repo: &IndexedRepository) -> HashSet<ContainerId> {
    repo.backend()
        .list(FileKind::Container)
        .unwrap()
        .into_iter()
        .map(|(name, _)| ContainerId::from_hex(&name).unwrap())
        .collect()
}

/// For each segment of `snap`'s file data (cut as the dedup stage cuts it: a segment ends
/// with the chunk that brings it to [`SEGMENT_BYTES`]), the containers of `old` that the index
/// names for its chunks.
fn old_containers_per_segment(
    repo: &IndexedRepository,
    snap: &SnapshotId,
    old: &HashSet<ContainerId>,
) -> Vec<HashSet<ContainerId>> {
    let (_, snap) = repo.find_snapshot(&snap.to_hex()).unwrap();
    let index = repo.index().reader().unwrap();
    let mut segments = vec![HashSet::new()];
    let mut len = 0u64;
    dedelta_store::read::walk_tree(repo, &snap, |_, chunks| {
        for c in chunks {
            let at = index.get(&c.id).unwrap().expect("indexed").container;
            if old.contains(&at) {
                segments.last_mut().unwrap().insert(at);
            }
            len += u64::from(c.len);
            if len >= SEGMENT_BYTES {
                segments.push(HashSet::new());
                len = 0;
            }
        }
        Ok(())
    })
    .unwrap();
    segments
}

pub(crate) fn restores_exact(
    repo: &IndexedRepository,
    dir: &Path,
    src: &Path,
    id: &SnapshotId,
    v: u64,
) {
    let (_, snap) = repo.find_snapshot(&id.to_hex()).unwrap();
    let target = dir.join("restore");
    let _ = fs::remove_dir_all(&target);
    restore_to(repo, &snap, &target).unwrap();
    assert!(
        read_files(&restored_root(&target, src)) == version(v),
        "version {v} differs"
    );
}

pub(crate) fn check_clean(repo: &IndexedRepository) {
    let report = run_check(repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// Backs up versions 0..6 plainly, then 6..9 capped at `level`: each capped backup references
/// at most `level` old containers per segment and rewrites some duplicates; everything
/// restores; `check --read-data` passes; a prune keeping only the last snapshot reclaims
/// space and leaves it restorable and checkable.
fn capping_holds(delta: DeltaConfig, level: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, delta));
    let src = tmp.path().join("src");
    let mut ids = BTreeMap::new();
    for v in 0..6 {
        ids.insert(v, backup(&repo, &src, v, None).snapshot_id);
    }
    // Without capping the last plain backup's segments reference more than `level` old
    // containers: what capping is for.
    let before_last = {
        let all = containers(&repo);
        let last = ids[&5];
        let (_, snap) = repo.find_snapshot(&last.to_hex()).unwrap();
        let mine: HashSet<ContainerId> = {
            let index = repo.index().reader().unwrap();
            let mut s = HashSet::new();
            dedelta_store::read::walk_tree(&repo, &snap, |_, chunks| {
                s.extend(
                    chunks
                        .iter()
                        .map(|c| index.get(&c.id).unwrap().unwrap().container),
                );
                Ok(())
            })
            .unwrap();
            s
        };
        assert!(mine.len() > level, "{} containers", mine.len());
        all
    };
    let mut rewritten = 0;
    for v in 6..9 {
        let old = containers(&repo);
        assert!(old.is_superset(&before_last));
        let res = backup(&repo, &src, v, Some(level));
        rewritten += res.metrics.rewritten.chunks;
        assert!(res.metrics.rewritten.chunks <= res.summary.new_chunks);
        for (i, seg) in old_containers_per_segment(&repo, &res.snapshot_id, &old)
            .iter()
            .enumerate()
        {
            assert!(
                seg.len() <= level,
                "version {v}, segment {i}: {} old containers",
                seg.len()
            );
        }
        ids.insert(v, res.snapshot_id);
    }
    assert!(rewritten > 0, "capping rewrote nothing");
    for (v, id) in &ids {
        restores_exact(&repo, tmp.path(), &src, id, *v);
    }
    check_clean(&repo);

    // Keep the last snapshot only: the copies the capped backups replaced are garbage.
    let forget: Vec<String> = ids
        .values()
        .take(ids.len() - 1)
        .map(|i| i.to_hex())
        .collect();
    let stored = stored_bytes(&repo);
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, &forget)?;
        prune_with(&repo, lock, 0.0, false)
    })
    .unwrap();
    assert!(stored_bytes(&repo) < stored);
    check_clean(&repo);
    restores_exact(&repo, tmp.path(), &src, &ids[&8], 8);
    // A prune with nothing to do finds the repository as it left it.
    let again = locked(&repo, &me(), |lock| prune_with(&repo, lock, 0.0, false)).unwrap();
    assert!(again.plan.delete.is_empty() && again.plan.rewrite.is_empty());
}

#[test]
fn capping_never_references_more_than_t_old_containers_per_segment_dedup_only() {
    let delta = DeltaConfig {
        sketch: None,
        dupadj: false,
        ..DeltaConfig::recommended()
    };
    capping_holds(delta, 1);
}

#[test]
fn capping_never_references_more_than_t_old_containers_per_segment_with_deltas() {
    capping_holds(DeltaConfig::recommended(), 2);
}

/// Level 0 is allowed in the library (every old duplicate rewritten): nothing old is
/// referenced at all.
#[test]
fn capping_at_level_zero_references_no_old_container() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &tmp.path().join("repo"),
        config(1, DeltaConfig::recommended()),
    );
    let src = tmp.path().join("src");
    backup(&repo, &src, 0, None);
    let old = containers(&repo);
    let res = backup(&repo, &src, 1, Some(0));
    assert!(res.metrics.rewritten.chunks > 0);
    for seg in old_containers_per_segment(&repo, &res.snapshot_id, &old) {
        assert!(seg.is_empty());
    }
    restores_exact(&repo, tmp.path(), &src, &res.snapshot_id, 1);
    check_clean(&repo);
}

/// Containers read restoring `id` with `cache` (bit-exact checked), and the containers the
/// locator reads each of its file chunks from.
pub(crate) fn restore_reads(
    repo: &IndexedRepository,
    dir: &Path,
    src: &Path,
    id: &SnapshotId,
    v: u64,
    cache: RestoreCacheChoice,
) -> (u64, HashSet<ContainerId>) {
    let (_, snap) = repo.find_snapshot(&id.to_hex()).unwrap();
    let target = dir.join("restore");
    let _ = fs::remove_dir_all(&target);
    let opts = RestoreOptions {
        target: target.clone(),
        include: vec![],
        cache_bytes: 1 << 20,
        cache,
        ..Default::default()
    };
    let stats = restore(repo, &snap, &opts, &NoProgress).unwrap();
    assert!(stats.errors.is_empty(), "{:?}", stats.errors);
    assert!(
        read_files(&restored_root(&target, src)) == version(v),
        "version {v} differs"
    );
    let mut locator = ChunkLocator::new(repo, 1 << 20)
        .unwrap()
        .reading_own_copies(&snap.containers);
    // A chunk that cannot be located (here: absent) does not stop the next ones from being
    // read from the snapshot's own copies.
    assert!(locator.locate(&ChunkId::of(b"absent")).is_err());
    let mut read_from = HashSet::new();
    walk_tree(repo, &snap, |_, chunks| {
        for c in chunks {
            read_from.insert(locator.locate(&c.id)?.container);
        }
        Ok(())
    })
    .unwrap();
    (stats.restore_cache.containers_read, read_from)
}

/// Issue 16: after a capped backup stored some of an older snapshot's chunks again (the index
/// now names the new copies), restoring the older snapshot still reads only its own
/// containers, as many as before the capped backup, with either restore cache, bit-exact; a
/// prune keeps those copies while the older snapshot remains, and reclaims them once it is
/// forgotten.
#[test]
fn restore_after_capping_reads_the_snapshots_own_copies() {
    let tmp = tempfile::tempdir().unwrap();
    let delta = DeltaConfig {
        sketch: None,
        dupadj: false,
        ..DeltaConfig::recommended()
    };
    let repo = init_repo(&tmp.path().join("repo"), config(1, delta));
    let src = tmp.path().join("src");
    let mut ids = Vec::new();
    for v in 0..6 {
        ids.push(backup(&repo, &src, v, None).snapshot_id);
    }
    let old = ids[5];
    let (_, old_snap) = repo.find_snapshot(&old.to_hex()).unwrap();
    let own: HashSet<ContainerId> = old_snap.containers.iter().copied().collect();
    assert!(!own.is_empty(), "the snapshot names its containers");
    let caches = [
        RestoreCacheChoice::Lru { containers: 2 },
        RestoreCacheChoice::Forward {
            area_bytes: 64 * 1024,
        },
    ];
    let before: Vec<(u64, HashSet<ContainerId>)> = caches
        .iter()
        .map(|c| restore_reads(&repo, tmp.path(), &src, &old, 5, *c))
        .collect();
    assert!(before[0].1.is_subset(&own));

    let capped = backup(&repo, &src, 6, Some(1));
    assert!(
        capped.metrics.rewritten.chunks > 0,
        "capping rewrote nothing"
    );
    // The index now names new copies of some of the old snapshot's chunks.
    let index = repo.index().reader().unwrap();
    let mut moved = 0;
    walk_tree(&repo, &old_snap, |_, chunks| {
        moved += chunks
            .iter()
            .filter(|c| !own.contains(&index.get(&c.id).unwrap().unwrap().container))
            .count();
        Ok(())
    })
    .unwrap();
    assert!(moved > 0, "no chunk of the old snapshot was rewritten");

    for (cache, was) in caches.iter().zip(&before) {
        let now = restore_reads(&repo, tmp.path(), &src, &old, 5, *cache);
        assert_eq!(now, *was, "{cache:?}");
    }
    restores_exact(&repo, tmp.path(), &src, &capped.snapshot_id, 6);

    // A prune keeps the old snapshot's copies while it remains.
    locked(&repo, &me(), |lock| prune_with(&repo, lock, 0.0, false)).unwrap();
    check_clean(&repo);
    for (cache, was) in caches.iter().zip(&before) {
        assert_eq!(
            restore_reads(&repo, tmp.path(), &src, &old, 5, *cache),
            *was
        );
    }
    // Forgetting every snapshot but the capped one lets prune reclaim them.
    let stored = stored_bytes(&repo);
    let forget: Vec<String> = ids.iter().map(|i| i.to_hex()).collect();
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, &forget)?;
        prune_with(&repo, lock, 0.0, false)
    })
    .unwrap();
    assert!(stored_bytes(&repo) < stored);
    check_clean(&repo);
    restores_exact(&repo, tmp.path(), &src, &capped.snapshot_id, 6);
}

/// An own copy that fails to read (its region damaged) is replaced by the index's copy for
/// that chunk alone: the snapshot's other chunks are still read from its own containers.
#[test]
fn a_damaged_own_copy_falls_back_to_the_index_for_that_chunk_only() {
    let tmp = tempfile::tempdir().unwrap();
    let delta = DeltaConfig {
        sketch: None,
        dupadj: false,
        ..DeltaConfig::recommended()
    };
    let repo_path = tmp.path().join("repo");
    let repo = init_repo(&repo_path, config(1, delta));
    let src = tmp.path().join("src");
    let mut old = None;
    for v in 0..6 {
        old = Some(backup(&repo, &src, v, None).snapshot_id);
    }
    backup(&repo, &src, 6, Some(1));
    let (_, snap) = repo.find_snapshot(&old.unwrap().to_hex()).unwrap();
    let own: HashSet<ContainerId> = snap.containers.iter().copied().collect();
    // The old snapshot's chunks whose index copy a capped rewrite moved, with their own copy.
    let index = repo.index().reader().unwrap();
    let mut locator = ChunkLocator::new(&repo, 1 << 20)
        .unwrap()
        .reading_own_copies(&snap.containers);
    let mut moved = Vec::new();
    walk_tree(&repo, &snap, |_, chunks| {
        for c in chunks {
            if !own.contains(&index.get(&c.id)?.unwrap().container) {
                moved.push((c.id, locator.locate(&c.id)?.container));
            }
        }
        Ok(())
    })
    .unwrap();
    let (first, at) = moved[0];
    assert!(own.contains(&at));
    let others: Vec<ChunkId> = moved
        .iter()
        .filter(|(_, c)| *c != at)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        !others.is_empty(),
        "every moved chunk's own copy in one container"
    );
    // Damage the region of `first`'s own copy, not the container's metadata.
    let meta = repo.read_container_meta(&at).unwrap();
    let entry = meta.entries.iter().find(|e| e.id == first).unwrap();
    let region = meta.regions[entry.region as usize];
    let hex = at.to_hex();
    let file = repo_path.join("containers").join(&hex[..2]).join(&hex);
    let mut bytes = fs::read(&file).unwrap();
    let mid = region.offset as usize + region.stored_len as usize / 2;
    bytes[mid] ^= 0xff;
    fs::write(&file, &bytes).unwrap();

    let mut locator = ChunkLocator::new(&repo, 1 << 20)
        .unwrap()
        .reading_own_copies(&snap.containers);
    let fell_back = locator.locate(&first).unwrap();
    assert!(!own.contains(&fell_back.container), "the index's copy");
    for id in &others {
        assert!(own.contains(&locator.locate(id).unwrap().container));
    }
}
