//! Restore reading a snapshot's own copies stored as deltas (issue 17: the cache-aware
//! filter's rewritten duplicates are deltas, and the speed factor rises only if older
//! snapshots read them): such a copy is read when its base is read from a copy stored in
//! full, never making a chain loop, and never failing a chunk that the index's copies
//! restore, through damage, `check`, the backup that heals it, and prune.

use crate::rewrite::{backup, check_clean, restore_reads, restores_exact, version};
use crate::support::{
    backup_options, backup_with, config, every_restore_cache, init_repo, locked, me, run_check,
    time_of, write_files,
};
use dedelta_core::ChunkId;
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::container::ContainerId;
use dedelta_store::format::snapshot::{Snapshot, SnapshotId};
use dedelta_store::read::{
    walk_tree, ChunkLocator, PipelinedDecoder, PipelinedLocator, RestoreCacheChoice,
};
use dedelta_store::IndexedRepository;
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// A plain backup of `src` as it is, at time `t`.
fn backup_files(repo: &IndexedRepository, src: &Path, t: u64) {
    let opts = backup_options(vec![src.to_path_buf()], time_of(t));
    locked(repo, &me(), |lock| backup_with(repo, lock, opts)).unwrap();
}

/// One-level deltas, versions 0..4 backed up plainly, then version 3 again capped at level 0
/// (every old duplicate stored again: the index names the new copies). Returns the repository,
/// its path, the source, and version 3's snapshot, whose own copies the tests read.
fn capped_after_four_versions(dir: &Path) -> (IndexedRepository, PathBuf, PathBuf, SnapshotId) {
    let delta = DeltaConfig {
        max_depth: 1,
        reanchor: None,
        ..DeltaConfig::recommended()
    };
    let repo_path = dir.join("repo");
    let repo = init_repo(&repo_path, config(1, delta));
    let src = dir.join("src");
    let mut old = None;
    for v in 0..4 {
        old = Some(backup(&repo, &src, v, None).snapshot_id);
    }
    backup(&repo, &src, 3, Some(0));
    (repo, repo_path, src, old.unwrap())
}

/// The chunks of `snap` read from their own delta copies whose index copies are stored in
/// full outside the snapshot's containers, with their bases.
fn own_deltas_indexed_in_full(
    repo: &IndexedRepository,
    snap: &Snapshot,
) -> Vec<(ChunkId, ChunkId)> {
    let own: HashSet<ContainerId> = snap.containers.iter().copied().collect();
    let mut locator = ChunkLocator::new(repo, 1 << 20)
        .unwrap()
        .reading_own_copies(&snap.containers);
    let mut pairs = Vec::new();
    walk_tree(repo, snap, |_, chunks| {
        for c in chunks {
            let own_copy = locator.locate(&c.id)?;
            let index_copy = locator.locate_index_copy(&c.id)?;
            if own.contains(&own_copy.container)
                && !own.contains(&index_copy.container)
                && index_copy.delta_base.is_none()
            {
                pairs.extend(own_copy.delta_base.map(|base| (c.id, base)));
            }
        }
        Ok(())
    })
    .unwrap();
    pairs
}

/// Flips a byte in the middle of the region holding `id`'s index copy.
fn damage_region_of(repo: &IndexedRepository, repo_path: &Path, id: &ChunkId) {
    let at = ChunkLocator::new(repo, 1 << 20)
        .unwrap()
        .locate_index_copy(id)
        .unwrap()
        .container;
    let meta = repo.read_container_meta(&at).unwrap();
    let entry = meta.entries.iter().find(|e| e.id == *id).unwrap();
    let region = meta.regions[entry.region as usize];
    let hex = at.to_hex();
    let file = repo_path.join("containers").join(&hex[..2]).join(&hex);
    let mut bytes = fs::read(&file).unwrap();
    bytes[region.offset as usize + region.stored_len as usize / 2] ^= 0xff;
    fs::write(&file, &bytes).unwrap();
}

/// Issue 17 (the cache-aware filter lowered the speed factor): an own copy stored as a delta
/// is read too when its base's copy is stored in full. Here the old snapshot's edited chunks
/// are one-level deltas; after a capped backup stored them again (the index names the new
/// copies), restoring the old snapshot reads every chunk, deltas included, from its own
/// containers, bit-exact.
#[test]
fn restore_reads_own_delta_copies_onto_full_bases() {
    let tmp = tempfile::tempdir().unwrap();
    let delta = DeltaConfig {
        max_depth: 1,
        reanchor: None,
        ..DeltaConfig::recommended()
    };
    let repo = init_repo(&tmp.path().join("repo"), config(1, delta));
    let src = tmp.path().join("src");
    let mut ids = Vec::new();
    for v in 0..4 {
        ids.push(backup(&repo, &src, v, None).snapshot_id);
    }
    let old = ids[3];
    let (_, old_snap) = repo.find_snapshot(&old.to_hex()).unwrap();
    let own: HashSet<ContainerId> = old_snap.containers.iter().copied().collect();
    // The old snapshot's chunks stored as deltas (its own copies).
    let mut deltas = HashSet::new();
    {
        let mut locator = ChunkLocator::new(&repo, 1 << 20).unwrap();
        walk_tree(&repo, &old_snap, |_, chunks| {
            for c in chunks {
                if locator.locate(&c.id)?.delta_base.is_some() {
                    deltas.insert(c.id);
                }
            }
            Ok(())
        })
        .unwrap();
    }
    assert!(!deltas.is_empty(), "version 3 has deltas");

    let capped = backup(&repo, &src, 3, Some(0));
    assert!(
        capped.metrics.rewritten.chunks > 0,
        "capping rewrote nothing"
    );
    let index = repo.index().reader().unwrap();
    let moved_deltas: Vec<ChunkId> = deltas
        .iter()
        .filter(|id| !own.contains(&index.get(id).unwrap().unwrap().container))
        .copied()
        .collect();
    assert!(
        !moved_deltas.is_empty(),
        "no delta of the old snapshot moved"
    );

    let mut locator = ChunkLocator::new(&repo, 1 << 20)
        .unwrap()
        .reading_own_copies(&old_snap.containers);
    for id in &moved_deltas {
        let c = locator.locate(id).unwrap();
        assert!(own.contains(&c.container), "own delta copy not read");
        assert!(c.delta_base.is_some());
    }
    restores_exact(&repo, tmp.path(), &src, &old, 3);
    let caches = [
        RestoreCacheChoice::Lru { containers: 2 },
        RestoreCacheChoice::Forward {
            area_bytes: 64 * 1024,
        },
    ];
    for cache in caches {
        let (_, read_from) = restore_reads(&repo, tmp.path(), &src, &old, 3, cache);
        assert!(read_from.is_subset(&own), "{cache:?}");
    }
    check_clean(&repo);
}

/// Found by the campaign after own delta copies became readable: a chunk whose own copy is a
/// delta on a base whose region is damaged, while the index's copy of the chunk does not need
/// that base, is read from the index's copy (restore failed on it before).
#[test]
fn an_own_delta_copy_on_a_damaged_base_falls_back_to_the_index_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, repo_path, _, old) = capped_after_four_versions(tmp.path());
    let (_, snap) = repo.find_snapshot(&old.to_hex()).unwrap();
    let (chunk, base) = *own_deltas_indexed_in_full(&repo, &snap)
        .first()
        .expect("an own delta copy whose index copy is full");
    // Damage the base's region (its only copy).
    damage_region_of(&repo, &repo_path, &base);

    let mut pipelined =
        PipelinedLocator::new(&repo, RestoreCacheChoice::Lru { containers: 4 }, 1 << 20)
            .unwrap()
            .reading_own_copies(&snap.containers);
    let fetched = pipelined.fetch(&chunk).unwrap();
    let mut decoder = PipelinedDecoder::new(
        repo.chunk_hasher(),
        &RestoreCacheChoice::Lru { containers: 4 },
    );
    let got = decoder.decode(&fetched).unwrap();
    assert_eq!(ChunkId::of(got), chunk);
}

/// The campaign's scenario (seeds 1000 and 7002 failed it, see
/// `campaign::own_delta_copies_through_heals`), by hand: chunks read from their own delta
/// copies whose bases' only copies are damaged; `check --read-data` takes the bases out of
/// the index and a backup of every version stores them again (here in full; in the
/// campaign, one was stored as a delta on the chunk whose own copy needed it, and resolving
/// that base as a chunk asked for went back to the own copy: a loop). The old snapshot then
/// restores bit-exact with every restore cache, each such chunk through its own copy.
#[test]
fn own_delta_copies_restore_after_their_damaged_bases_are_healed() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, repo_path, src, old) = capped_after_four_versions(tmp.path());
    let (_, snap) = repo.find_snapshot(&old.to_hex()).unwrap();
    let own: HashSet<ContainerId> = snap.containers.iter().copied().collect();
    // Pairs (A, B): A read from its own delta copy on B, A's index copy full elsewhere.
    let pairs = own_deltas_indexed_in_full(&repo, &snap);
    assert!(
        !pairs.is_empty(),
        "no own delta copy whose index copy is full"
    );
    // Damage the region of every such base (their only copies), but those whose region the
    // snapshot's tree needs (the healing backup's tree differs: it would not heal).
    let mut locator = ChunkLocator::new(&repo, 1 << 20).unwrap();
    let mut tree: HashSet<ChunkId> = HashSet::new();
    for id in &snap.tree.chunks {
        tree.insert(*id);
        tree.extend(locator.locate(id).unwrap().delta_base);
    }
    let mut damaged = HashSet::new();
    for (_, base) in &pairs {
        let at = locator.locate(base).unwrap().container;
        let meta = repo.read_container_meta(&at).unwrap();
        let entry = meta.entries.iter().find(|e| e.id == *base).unwrap();
        let needed_by_tree = meta
            .entries
            .iter()
            .any(|e| e.region == entry.region && tree.contains(&e.id));
        if !needed_by_tree && damaged.insert((at, entry.region)) {
            damage_region_of(&repo, &repo_path, base);
        }
    }
    assert!(!damaged.is_empty(), "no base to damage");
    let report = run_check(&repo, true).unwrap();
    assert!(!report.problems.is_empty(), "check missed the damage");
    // The healing backup: every version's files, so the damaged bases are stored again.
    let mut all = crate::support::Files::new();
    for v in 0..4 {
        for (name, data) in version(v) {
            all.insert(format!("v{v}-{name}"), data);
        }
    }
    all.extend(version(3));
    write_files(&src, &all);
    backup_files(&repo, &src, 4);
    // The old snapshot restores bit-exact, with every restore cache, and so does everything.
    write_files(&src, &version(3));
    for cache in every_restore_cache() {
        restore_reads(&repo, tmp.path(), &src, &old, 3, cache);
    }
    let mut pipelined =
        PipelinedLocator::new(&repo, RestoreCacheChoice::Lru { containers: 4 }, 1 << 20)
            .unwrap()
            .reading_own_copies(&snap.containers);
    let mut decoder = PipelinedDecoder::new(
        repo.chunk_hasher(),
        &RestoreCacheChoice::Lru { containers: 4 },
    );
    for (a, _) in &pairs {
        let fetched = pipelined.fetch(a).unwrap();
        assert_eq!(ChunkId::of(decoder.decode(&fetched).unwrap()), *a);
    }
    // Still through their own delta copies (but those in a damaged region), the healed bases
    // read from their new copies.
    let mut locator = ChunkLocator::new(&repo, 1 << 20)
        .unwrap()
        .reading_own_copies(&snap.containers);
    let through_own = pairs
        .iter()
        .filter(|(a, _)| {
            let c = locator.locate(a).unwrap();
            own.contains(&c.container) && c.delta_base.is_some()
        })
        .count();
    assert!(
        through_own * 2 > pairs.len(),
        "{through_own} of {}",
        pairs.len()
    );
}
