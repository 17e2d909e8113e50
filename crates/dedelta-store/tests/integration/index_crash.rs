//! The client index after a crash that lost what it does not fsync (its manifest, replaced by
//! temporary file and rename only: docs/format.md, "Crashes and the index"): whether the
//! manifest comes back as it was before the last commit, torn or empty, the next backup and
//! every restore give the right bytes, and `check --read-data` finds nothing.

use crate::support::{
    backup_files, cache_root_for, config, forget_ids, init_repo, me, open_repo, prune_with,
    read_files, restore_to, restored_root, run_check, text, versioned_text, Files,
};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::IndexedRepository;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// What the crash left of the manifest.
#[derive(Clone, Copy, Debug)]
enum Crash {
    /// The last backup's commit never reached the disk: the manifest before it (an index
    /// behind the repository, beside a run file no manifest names).
    LostBackupCommit,
    /// A prune's commits never reached the disk: the manifest before them names containers
    /// the prune deleted and chunks it removed.
    LostPruneCommits,
    /// The rename reached the disk, half of the new file's bytes did not.
    Torn,
    /// The rename reached the disk, none of the new file's bytes did.
    Emptied,
}

/// The manifest of the one index under the test cache root of the repository at `repo`.
fn manifest_of(repo: &Path) -> PathBuf {
    fs::read_dir(cache_root_for(repo))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("chunks.idx"))
        .find(|p| p.exists())
        .expect("the client index")
}

/// Version `v` of a small tree that dedups and deltas against the versions before it.
fn tree(v: u64) -> Files {
    let mut m = Files::new();
    for f in 0..3u64 {
        m.insert(format!("f{f}.txt"), versioned_text(f, 120_000, v));
    }
    m.insert(format!("new{v}.txt"), text(30_000, 100 + v));
    m
}

fn backup(repo: &IndexedRepository, src: &Path, model: &mut BTreeMap<String, Files>, v: u64) {
    let files = tree(v);
    let id = backup_files(repo, src, &files, v, &me())
        .unwrap()
        .snapshot_id
        .to_hex();
    model.insert(id, files);
}

#[test]
fn a_manifest_lost_torn_or_emptied_by_a_crash_never_gives_a_wrong_answer() {
    for crash in [
        Crash::LostBackupCommit,
        Crash::LostPruneCommits,
        Crash::Torn,
        Crash::Emptied,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("repo");
        let src = tmp.path().join("src");
        let mut model = BTreeMap::new();
        let repo = init_repo(&path, config(1, DeltaConfig::recommended()));
        backup(&repo, &src, &mut model, 1);
        let manifest = manifest_of(&path);
        let mut before = fs::read(&manifest).unwrap();
        backup(&repo, &src, &mut model, 2);
        if let Crash::LostPruneCommits = crash {
            before = fs::read(&manifest).unwrap();
            let first = model.keys().next().unwrap().clone();
            let lock = repo.lock(&me()).unwrap();
            forget_ids(&repo, &lock, std::slice::from_ref(&first)).unwrap();
            let pruned = prune_with(&repo, &lock, 0.0, false).unwrap();
            drop(lock);
            assert!(
                pruned.bytes_freed > 0,
                "{crash:?}: the prune deleted nothing"
            );
            model.remove(&first);
        }
        let now = fs::read(&manifest).unwrap();
        drop(repo);
        let left = match crash {
            Crash::LostBackupCommit | Crash::LostPruneCommits => before,
            Crash::Torn => now[..now.len() / 2].to_vec(),
            Crash::Emptied => Vec::new(),
        };
        fs::write(&manifest, left).unwrap();

        let repo = open_repo(&path).unwrap().open_index().unwrap();
        backup(&repo, &src, &mut model, 3);
        let snaps = repo.snapshots().unwrap().snapshots;
        assert_eq!(snaps.len(), model.len(), "{crash:?}");
        for (id, snap) in snaps {
            let target = tmp.path().join("restored");
            let _ = fs::remove_dir_all(&target);
            restore_to(&repo, &snap, &target).unwrap();
            let got = read_files(&restored_root(&target, &src));
            assert!(
                got == model[&id.to_hex()],
                "{crash:?}: {} differs",
                id.short()
            );
        }
        let report = run_check(&repo, true).unwrap();
        assert!(
            report.problems.is_empty(),
            "{crash:?}: {:?}",
            report.problems
        );
    }
}

/// A backup writes its snapshot beside the client index's last batch, not after it: a crash
/// in between leaves durable containers the index has not taken in. The next open catches
/// up with them, and a batch indexed late lands as well.
#[test]
fn containers_finished_unindexed_are_taken_in_by_the_next_open() {
    use dedelta_core::ChunkId;
    use dedelta_store::format::container::{EntryKind, RegionBuilder};
    use dedelta_store::repository::ContainerWriter;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let repo = init_repo(&path, config(1, DeltaConfig::default()));
    let write = |repo: &IndexedRepository, text: &[u8]| {
        let id = ChunkId::of(text);
        let mut region = RegionBuilder::default();
        region.push(id, EntryKind::Full, text, text.len(), Vec::new());
        let mut writer = ContainerWriter::new(repo).indexing_in_batches();
        writer
            .add_region(region.compress(repo.config().compression))
            .unwrap();
        (id, writer.finish_unindexed().unwrap())
    };
    // Indexed late, as a backup does beside its snapshot.
    let (late, unindexed) = write(&repo, b"indexed beside the snapshot");
    assert!(repo.index().get(&late).unwrap().is_none());
    unindexed.index(&repo).unwrap();
    assert!(repo.index().get(&late).unwrap().is_some());
    // Never indexed: the process died after the snapshot.
    let (lost, unindexed) = write(&repo, b"the process died before indexing it");
    drop(unindexed);
    assert!(repo.index().get(&lost).unwrap().is_none());
    drop(repo);
    let repo = open_repo(&path).unwrap().open_index().unwrap();
    assert!(
        repo.index().get(&lost).unwrap().is_some(),
        "taken in at the open"
    );
    assert!(repo.index().get(&late).unwrap().is_some());
    let mut locator = dedelta_store::read::ChunkLocator::new(&repo, 1 << 20).unwrap();
    let chunk = locator.locate(&lost).unwrap();
    assert_eq!(chunk.stored(), b"the process died before indexing it");
}
