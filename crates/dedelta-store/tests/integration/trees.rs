//! Tree chunks as deltas: a version that changes references here and there stores its tree
//! as deltas against the parent's tree chunks, and every command (restore, ls, dump, check,
//! repair snapshots, stats) still reads it, also once the parent snapshot is forgotten and
//! pruned.

use crate::support::{
    backup_dir, config, forget_ids, init_repo, locked, me, noise, prune_with, read_files,
    restore_to, restored_root, run_check, text, update_files, Files,
};
use dedelta_core::ChunkId;
use dedelta_store::backend::FileKind;
use dedelta_store::commands::repair_snapshots::{self, RepairSnapshotsOptions};
use dedelta_store::commands::{ls, stats};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::container::EntryKind;
use dedelta_store::format::snapshot::{Snapshot, SnapshotId};
use dedelta_store::progress::NoProgress;
use dedelta_store::repository::read_container_meta;
use dedelta_store::IndexedRepository;
use std::collections::HashMap;
use std::path::Path;

/// Version `v` of the source: a large incompressible file (whose recipe is most of the tree)
/// with a few scattered bytes changed per version, so that about one reference in ten
/// changes, scattered; many small files; and from version 1 on, a new file named to come
/// first, so that everything after it in the tree moves.
pub(crate) fn version(v: u64) -> Files {
    let mut big = noise(1_500_000, 7);
    for k in 0..v * 40 {
        let at = ((k * 7919 + v * 104_729) * 37) as usize % big.len();
        big[at] ^= 0x5a;
    }
    let mut files = Files::new();
    files.insert("big.bin".into(), big);
    for i in 0..60 {
        files.insert(format!("s{i:03}.txt"), text(3000, 100 + i));
    }
    if v > 0 {
        files.insert("0-new.bin".into(), noise(60_000 * v as usize, 50 + v));
    }
    files
}

/// Backs up version `v` of `src` as backup number `v`; returns the snapshot.
pub(crate) fn backup_version(
    repo: &IndexedRepository,
    src: &Path,
    v: u64,
) -> (SnapshotId, Snapshot) {
    // Only the changed files are written: a rewritten file's record changes (inode, ctime,
    // mtime) even when its content does not.
    update_files(src, &version(v));
    let result = backup_dir(repo, src, v, &me()).unwrap();
    let snap = repo
        .snapshots()
        .unwrap()
        .snapshots
        .into_iter()
        .find(|(id, _)| *id == result.snapshot_id)
        .unwrap();
    (snap.0, snap.1)
}

/// How each stored chunk is stored, from container metadata.
fn entry_kinds(repo: &IndexedRepository) -> HashMap<ChunkId, EntryKind> {
    let mut kinds = HashMap::new();
    for (name, _) in repo.backend().list(FileKind::Container).unwrap() {
        for e in read_container_meta(repo.backend().as_ref(), &name)
            .unwrap()
            .entries
        {
            kinds.insert(e.id, e.kind);
        }
    }
    kinds
}

/// The stored bytes `stats` shares out to the chunks `ids` (a region's stored bytes by the
/// raw lengths of its entries).
fn shares_of(repo: &IndexedRepository, ids: &[ChunkId]) -> u64 {
    let mut total = 0;
    for (name, _) in repo.backend().list(FileKind::Container).unwrap() {
        let meta = read_container_meta(repo.backend().as_ref(), &name).unwrap();
        for e in meta.entries.iter().filter(|e| ids.contains(&e.id)) {
            let r = &meta.regions[e.region as usize];
            total += u64::from(r.stored_len) * u64::from(e.stored_len) / u64::from(r.raw_len);
        }
    }
    total
}

fn tree_bytes(repo: &IndexedRepository) -> u64 {
    stats::stats(repo).unwrap().breakdown.trees
}

/// Restores `snap` and compares it with `files`.
fn assert_restores(
    repo: &IndexedRepository,
    snap: &Snapshot,
    src: &Path,
    files: &Files,
    at: &Path,
) {
    let st = restore_to(repo, snap, at).unwrap();
    assert!(st.errors.is_empty(), "{:?}", st.errors);
    assert_eq!(&read_files(&restored_root(at, src)), files);
}

/// The second version's tree costs a fraction of the first's: its chunks are deltas against
/// the first tree's chunks (on main, nearly every tree chunk changed and was stored whole).
#[test]
fn a_changed_version_stores_its_tree_as_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &dir.path().join("repo"),
        config(1, DeltaConfig::recommended()),
    );
    let src = dir.path().join("src");
    let (_, first) = backup_version(&repo, &src, 0);
    let first_tree = tree_bytes(&repo);
    let (_, second) = backup_version(&repo, &src, 1);
    let second_tree = tree_bytes(&repo) - first_tree;
    assert!(first.tree.chunks.len() >= 8, "{}", first.tree.chunks.len());
    assert!(
        second_tree * 3 < first_tree,
        "first tree {first_tree} bytes, second {second_tree}"
    );
    // Bases are tree chunks of the parent, found at their place despite the inserted file.
    let kinds = entry_kinds(&repo);
    let parent_bases = second
        .tree
        .chunks
        .iter()
        .filter(|id| match kinds.get(id) {
            Some(EntryKind::Delta { base, .. }) => first.tree.chunks.contains(base),
            _ => false,
        })
        .count();
    assert!(
        parent_bases * 2 > second.tree.chunks.len(),
        "{parent_bases} of {} tree chunks are deltas against the parent's tree",
        second.tree.chunks.len()
    );
}

/// Restore, ls, check and a later backup read trees stored as deltas, also after the parent
/// snapshot is forgotten and pruned (the bases of its tree must stay).
#[test]
fn delta_trees_survive_forget_and_prune_of_their_parent() {
    let dir = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &dir.path().join("repo"),
        config(1, DeltaConfig::recommended()),
    );
    let src = dir.path().join("src");
    let (first_id, first) = backup_version(&repo, &src, 0);
    let (second_id, second) = backup_version(&repo, &src, 1);
    let kinds = entry_kinds(&repo);
    let bases: Vec<ChunkId> = second
        .tree
        .chunks
        .iter()
        .filter_map(|id| match kinds.get(id) {
            Some(EntryKind::Delta { base, .. }) if first.tree.chunks.contains(base) => Some(*base),
            _ => None,
        })
        .collect();
    assert!(
        !bases.is_empty(),
        "no tree chunk is a delta of the parent's"
    );

    let report = run_check(&repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_restores(&repo, &second, &src, &version(1), &dir.path().join("r1"));
    let stored = |name: &str| src.join(name).to_string_lossy().into_owned();
    let (node, _) =
        ls::find_node(&repo, &second_id, &second, stored("s059.txt").as_bytes()).unwrap();
    assert_eq!(node.size, 3000);

    // Forget the parent and prune every partly dead container.
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, &[first_id.to_hex()])?;
        prune_with(&repo, lock, 0.0, false)
    })
    .unwrap();
    let kinds = entry_kinds(&repo);
    for b in &bases {
        assert_eq!(kinds.get(b), Some(&EntryKind::Full), "base {b} was pruned");
    }
    // `stats` counts the kept bases, which no snapshot's tree names any more, as trees.
    let mut tree_ids = second.tree.chunks.clone();
    tree_ids.extend(
        second
            .tree
            .chunks
            .iter()
            .filter_map(|id| match kinds.get(id) {
                Some(EntryKind::Delta { base, .. }) => Some(*base),
                _ => None,
            }),
    );
    tree_ids.sort();
    tree_ids.dedup();
    assert_eq!(tree_bytes(&repo), shares_of(&repo, &tree_ids));
    let report = run_check(&repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_restores(&repo, &second, &src, &version(1), &dir.path().join("r2"));
    let mut out = Vec::new();
    ls::dump(
        &repo,
        &second_id,
        &second,
        stored("big.bin").as_bytes(),
        &mut out,
    )
    .unwrap();
    assert_eq!(out, version(1)["big.bin"]);

    // The next backup takes the pruned repository's trees as its bases.
    let (_, third) = backup_version(&repo, &src, 2);
    assert_restores(&repo, &third, &src, &version(2), &dir.path().join("r3"));
    let report = run_check(&repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // `repair snapshots` reads both trees whole: nothing to repair.
    let repaired = locked(&repo, &me(), |lock| {
        let opts = RepairSnapshotsOptions {
            forget: false,
            dry_run: false,
        };
        repair_snapshots::repair_snapshots(&repo, lock, &opts, &NoProgress)
    })
    .unwrap();
    assert_eq!(repaired.intact, 2);
    assert!(repaired.repaired.is_empty());
}
