//! LoopDelta (issue 17 items 1, 2 and 5): dense container lists per lineage, dense containers
//! loaded whole on the locality index's prefetch so that their chunks are the only bases (no
//! base read on its own), prune keeping the lists in step, and the presets round-tripping.

use crate::support::{
    backup_options, backup_with, edited_texts, forget_ids, locked, loopdelta_delta, me, prune_with,
    read_files, restore_to, restored_root, run_check, time_of, write_files, Files,
};
use dedelta_core::ChunkId;
use dedelta_store::backend::wrap::metered::{Direction, IoCounts, Purpose};
use dedelta_store::backend::FileKind;
use dedelta_store::commands::backup::dense;
use dedelta_store::commands::backup::rewrite::Capping;
use dedelta_store::commands::backup::{BackupOptions, BackupResult};
use dedelta_store::format::container::{ContainerId, EntryKind};
use dedelta_store::IndexedRepository;
use std::collections::HashSet;
use std::path::Path;

/// Version `v`: three texts with a few edits per version (most chunks duplicates, the
/// edited ones similar to the last version's).
fn tree(v: u64) -> Files {
    edited_texts(
        v,
        6,
        &[("a.txt", 200_000), ("b.txt", 150_000), ("c.txt", 120_000)],
    )
}

fn metered_repo(path: &Path) -> IndexedRepository {
    crate::support::metered_repo(path, loopdelta_delta())
}

/// Backs up `files` from `src` as backup `n` with `opts` changed by `f`.
fn backup(
    repo: &IndexedRepository,
    src: &Path,
    files: &Files,
    n: u64,
    f: impl FnOnce(&mut BackupOptions),
) -> BackupResult {
    write_files(src, files);
    let mut opts = backup_options(vec![src.to_path_buf()], time_of(n));
    f(&mut opts);
    locked(repo, &me(), |lock| backup_with(repo, lock, opts)).unwrap()
}

/// Every snapshot restores to what was backed up, and `check --read-data` passes.
fn assert_restores(repo: &IndexedRepository, dir: &Path, expected: &[(BackupResult, Files)]) {
    let listed = repo.snapshots().unwrap();
    for (i, (res, want)) in expected.iter().enumerate() {
        let (_, snap) = listed
            .snapshots
            .iter()
            .find(|(id, _)| *id == res.snapshot_id)
            .unwrap();
        let target = dir.join(format!("restore-{i}"));
        restore_to(repo, snap, &target).unwrap();
        let got = read_files(&restored_root(&target, Path::new(&snap.paths[0])));
        assert!(got == *want, "snapshot {i} restores bit-exact");
    }
    let report = run_check(repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// The second backup loads the first one's containers whole (they are on its dense list),
/// and its deltas' bases all come from them: no base is read on its own.
#[test]
fn dense_containers_are_prefetched_and_become_bases_without_base_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let first = backup(&repo, &src, &tree(0), 0, |_| {});
    let p0 = first.metrics.prefetch.expect("prefetching backup");
    assert_eq!((p0.dense_listed, p0.dense_loaded), (0, 0));
    assert_eq!(p0.dense_written, first.summary.containers_written);
    let before = repo.io_counts().unwrap();
    let second = backup(&repo, &src, &tree(1), 1, |_| {});
    let io = repo.io_counts().unwrap().since(&before);
    let p1 = second.metrics.prefetch.unwrap();
    assert_eq!(p1.dense_listed, first.summary.containers_written);
    assert!(p1.dense_loaded > 0 && p1.chunks_loaded > 0, "{p1:?}");
    assert!(second.summary.delta_chunks > 0, "{:?}", second.summary);
    assert_eq!(second.metrics.bases.prefetched, p1.bases_served);
    assert!(second.metrics.bases.prefetched >= second.summary.delta_chunks / 2);
    assert_eq!(second.metrics.bases.read_back, 0);
    // The I/O accounting: no base read, and each dense container in one prefetch request.
    assert_eq!(
        io.get(Purpose::BaseRead, Direction::Read).requests,
        0,
        "{io:?}"
    );
    let prefetch = io.get(Purpose::Prefetch, Direction::Read);
    assert!(prefetch.requests >= p1.dense_loaded, "{io:?}");
    assert!(
        prefetch.bytes >= p1.bytes_loaded / 4,
        "whole containers read: {io:?}"
    );
    // Without the list (a backup of another lineage) nothing is loaded whole, so no bases.
    let other = backup(&repo, &tmp.path().join("other"), &tree(1), 2, |_| {});
    let po = other.metrics.prefetch.unwrap();
    assert_eq!(
        (po.dense_listed, po.dense_loaded, po.bases_served),
        (0, 0, 0)
    );
    assert_restores(
        &repo,
        tmp.path(),
        &[(first, tree(0)), (second, tree(1)), (other, tree(1))],
    );
}

/// The parent's tree lies in a container of the last backup, which is dense: the next backup
/// reads that container whole once, takes the tree from it, and the locality index's later
/// prefetch of it costs no request. So the backup reads no container metadata and no chunk
/// data outside its prefetches (before: the tree container's metadata and its tree region,
/// three requests, then the whole container again), and its prefetches are one request per
/// container. A backup whose parent's tree is in no dense container reads it as before.
#[test]
fn parent_tree_comes_with_its_dense_container() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let first = backup(&repo, &src, &tree(0), 0, |_| {});
    let before = repo.io_counts().unwrap();
    let second = backup(&repo, &src, &tree(1), 1, |_| {});
    let io = repo.io_counts().unwrap().since(&before);
    let p1 = second.metrics.prefetch.unwrap();
    assert!(p1.parent_tree_cached, "{p1:?}");
    assert_no_reads_outside_prefetch(&io);
    // Every container of the first backup is dense here and read whole exactly once.
    let prefetch = io.get(Purpose::Prefetch, Direction::Read);
    assert_eq!(p1.dense_loaded, first.summary.containers_written, "{p1:?}");
    assert_eq!(prefetch.requests, p1.dense_loaded, "{io:?}");
    assert!(second.summary.delta_chunks > 0 && p1.bases_served > 0);
    // Another lineage (its parent, for hints, is the newest snapshot, whose containers are
    // on no list of its own): the tree's chunks are read alone from the repository.
    let before = repo.io_counts().unwrap();
    let other = backup(&repo, &tmp.path().join("other"), &tree(1), 2, |_| {});
    let io = repo.io_counts().unwrap().since(&before);
    assert!(other.metrics.prefetch.unwrap().tree_chunks_read_alone > 0);
    assert!(
        io.get(Purpose::ChunkData, Direction::Read).requests > 0,
        "{io:?}"
    );
    assert_restores(
        &repo,
        tmp.path(),
        &[(first, tree(0)), (second, tree(1)), (other, tree(1))],
    );
}

/// Version `v` of many small files, a few edited per version: a tree stream of several
/// chunks, each mostly its parent's, so the tree chunks of later versions are deltas.
fn many_files(v: u64) -> Files {
    (0..400u64)
        .map(|i| {
            let mut t = crate::support::text(2_500, i + 1);
            if i % 50 < v {
                t[100] = b'#';
            }
            (format!("file-{i:04}.txt"), t)
        })
        .collect()
}

/// [`backup`] of [`many_files`], every file with the same modification time (so that the
/// tree records of unedited files do not change).
fn backup_many_files(repo: &IndexedRepository, src: &Path, v: u64) -> BackupResult {
    backup_same_mtime(repo, src, &many_files(v), v)
}

/// Backs up `files` as backup `v`, every file with the same modification time.
fn backup_same_mtime(repo: &IndexedRepository, src: &Path, files: &Files, v: u64) -> BackupResult {
    write_files(src, files);
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    for name in files.keys() {
        let f = std::fs::File::options()
            .write(true)
            .open(src.join(name))
            .unwrap();
        f.set_modified(when).unwrap();
    }
    let opts = backup_options(vec![src.to_path_buf()], time_of(v));
    locked(repo, &me(), |lock| backup_with(repo, lock, opts)).unwrap()
}

/// A parent tree whose chunks are deltas (of the tree before it) is rebuilt from the dense
/// containers read whole: each delta comes with its container's read, its base is a full
/// chunk of a dense container, and the backup reads no container metadata and no chunk data
/// outside its prefetches. Before, such a tree was read through the read path (metadata,
/// regions and the bases' containers: a dozen requests a backup on 20 SQLAlchemy sdists).
#[test]
fn parent_tree_of_deltas_is_rebuilt_from_dense_containers() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let first = backup_many_files(&repo, &src, 0);
    let second = backup_many_files(&repo, &src, 1);
    // The second backup's tree holds deltas.
    let (_, snap) = repo.find_snapshot(&second.snapshot_id.to_string()).unwrap();
    let deltas = snap
        .tree
        .chunks
        .iter()
        .filter(|id| {
            let at = repo.index().get(id).unwrap().unwrap();
            let meta = repo.read_container_meta(&at.container).unwrap();
            meta.entries[at.entry as usize].kind != EntryKind::Full
        })
        .count();
    assert!(
        deltas > 0,
        "tree chunks stored as deltas: {:?}",
        second.summary
    );
    let before = repo.io_counts().unwrap();
    let third = backup_many_files(&repo, &src, 2);
    let io = repo.io_counts().unwrap().since(&before);
    let p = third.metrics.prefetch.unwrap();
    assert!(p.parent_tree_cached, "{p:?}");
    assert_no_reads_outside_prefetch(&io);
    assert_restores(
        &repo,
        tmp.path(),
        &[
            (first, many_files(0)),
            (second, many_files(1)),
            (third, many_files(2)),
        ],
    );
}

/// A parent tree chunk that no dense container holds (with Capping, a tree chunk
/// deduplicated against a container that is not dense) is read alone; the rest of the tree
/// still comes from the dense containers. Before, one such chunk made the backup read the
/// whole tree through the read path.
#[test]
fn parent_tree_chunk_outside_dense_containers_is_read_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let v0 = many_files(0);
    let mut v1 = v0.clone();
    v1.get_mut("file-0000.txt").unwrap()[100] = b'#';
    let first = backup_same_mtime(&repo, &src, &v0, 0);
    // Only the edited file is written again (a file written again would change its tree
    // record), with the same modification time.
    let edited = src.join("file-0000.txt");
    std::fs::write(&edited, &v1["file-0000.txt"]).unwrap();
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    let f = std::fs::File::options().write(true).open(&edited).unwrap();
    f.set_modified(when).unwrap();
    drop(f);
    let as_is = |v: u64| {
        let opts = backup_options(vec![src.to_path_buf()], time_of(v));
        locked(&repo, &me(), |lock| backup_with(&repo, lock, opts)).unwrap()
    };
    let second = as_is(1);
    let backend = repo.backend();
    let first_list = dense::load(backend.as_ref(), &first.snapshot_id)
        .unwrap()
        .unwrap();
    // The second tree's unchanged chunks are duplicates in the first backup's containers.
    let (_, snap) = repo.find_snapshot(&second.snapshot_id.to_string()).unwrap();
    let in_first = snap
        .tree
        .chunks
        .iter()
        .filter(|id| {
            let at = repo.index().get(id).unwrap().unwrap();
            first_list.containers.contains(&at.container)
        })
        .count();
    assert!(
        in_first > 0,
        "tree chunks deduplicated against the first backup"
    );
    // Those containers leave the second backup's dense list (as when their reuse ratio is
    // under the threshold).
    let mut list = dense::load(backend.as_ref(), &second.snapshot_id)
        .unwrap()
        .unwrap();
    list.containers
        .retain(|c| !first_list.containers.contains(c));
    dense::save(backend.as_ref(), &list).unwrap();
    let third = as_is(2);
    let p = third.metrics.prefetch.unwrap();
    assert!(p.parent_tree_cached, "{p:?}");
    // Those chunks, and any base of the second tree's deltas that lies there too.
    assert!(p.tree_chunks_read_alone >= in_first as u64, "{p:?}");
    assert_restores(
        &repo,
        tmp.path(),
        &[(first, v0), (second, v1.clone()), (third, v1)],
    );
}

/// The list is stored beside the snapshot and read by the next backup of the same host and
/// paths only.
#[test]
fn dense_list_is_read_back_by_the_same_lineage_only() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let first = backup(&repo, &a, &tree(0), 0, |_| {});
    let list = dense::load(repo.backend().as_ref(), &first.snapshot_id)
        .unwrap()
        .expect("a list beside the snapshot");
    assert_eq!(list.snapshot, first.snapshot_id);
    assert_eq!(
        list.containers.len() as u64,
        first.summary.containers_written
    );
    // Another path, then another host: neither reads a's list.
    let other_path = backup(&repo, &b, &tree(0), 1, |_| {});
    assert_eq!(other_path.metrics.prefetch.unwrap().dense_listed, 0);
    let other_host = backup(&repo, &a, &tree(1), 2, |o| o.host = "elsewhere".into());
    assert_eq!(other_host.metrics.prefetch.unwrap().dense_listed, 0);
    // The same lineage reads it, even after other lineages' backups.
    let again = backup(&repo, &a, &tree(1), 3, |_| {});
    assert_eq!(
        again.metrics.prefetch.unwrap().dense_listed,
        list.containers.len() as u64
    );
    // A damaged list only costs the next backup its bases.
    let name = again.snapshot_id.to_hex();
    let mut bytes = repo.backend().get(FileKind::Dense, &name).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    repo.backend().put(FileKind::Dense, &name, &bytes).unwrap();
    let after = backup(&repo, &a, &tree(2), 4, |_| {});
    assert_eq!(after.metrics.prefetch.unwrap().dense_listed, 0);
    assert!(
        after
            .notices
            .iter()
            .any(|n| n.contains("dense container list")),
        "{:?}",
        after.notices
    );
}

/// The reuse ratio decides: a threshold of 1 lists nothing (no ratio is above it), 0 lists
/// every container the backup wrote or referenced.
#[test]
fn dense_threshold_selects_containers_by_reuse_ratio() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    backup(&repo, &src, &tree(0), 0, |_| {});
    let with = |t: f64| {
        let mut d = loopdelta_delta();
        d.dense_threshold = t;
        Some(d)
    };
    let none = backup(&repo, &src, &tree(1), 1, |o| o.delta = with(1.0));
    assert_eq!(none.metrics.prefetch.unwrap().dense_written, 0);
    let all = backup(&repo, &src, &tree(2), 2, |o| o.delta = with(0.0));
    let p = all.metrics.prefetch.unwrap();
    // Nothing was listed for it (the last list is empty), yet it references the first
    // backup's containers as duplicates: at threshold 0 they are listed with its own.
    assert_eq!(p.dense_listed, 0);
    assert!(p.dense_written > all.summary.containers_written, "{p:?}");
}

/// Prune (LoopDelta §4.6): the containers it deletes or rewrites leave every list, and the
/// lists of forgotten snapshots go.
#[test]
fn prune_removes_its_containers_from_the_dense_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let results: Vec<BackupResult> = (0..3)
        .map(|v| backup(&repo, &src, &tree(v), v, |_| {}))
        .collect();
    let backend = repo.backend().clone();
    let forgotten: Vec<String> = results[..2]
        .iter()
        .map(|r| r.snapshot_id.to_hex())
        .collect();
    locked(&repo, &me(), |lock| forget_ids(&repo, lock, &forgotten)).unwrap();
    let plan = locked(&repo, &me(), |lock| prune_with(&repo, lock, 0.0, true))
        .unwrap()
        .plan;
    let removed: HashSet<ContainerId> = plan
        .delete
        .iter()
        .chain(plan.rewrite.iter())
        .copied()
        .collect();
    let kept = &results[2];
    let before = dense::load(backend.as_ref(), &kept.snapshot_id)
        .unwrap()
        .unwrap();
    assert!(
        before.containers.iter().any(|c| removed.contains(c)),
        "the kept snapshot's list names a container prune removes"
    );
    let stats = locked(&repo, &me(), |lock| prune_with(&repo, lock, 0.0, false)).unwrap();
    assert_eq!(
        (stats.dense_lists_updated, stats.dense_lists_deleted),
        (1, 2)
    );
    let after = dense::load(backend.as_ref(), &kept.snapshot_id)
        .unwrap()
        .unwrap();
    assert!(!after.containers.is_empty());
    for c in &after.containers {
        assert!(!removed.contains(c));
        assert!(backend.exists(FileKind::Container, &c.to_hex()).unwrap());
    }
    assert_eq!(backend.list(FileKind::Dense).unwrap().len(), 1);
    // The next backup of the lineage reads the pruned list and still restores.
    let next = backup(&repo, &src, &tree(3), 3, |_| {});
    assert_eq!(
        next.metrics.prefetch.unwrap().dense_listed,
        after.containers.len() as u64
    );
    assert_restores(&repo, tmp.path(), &[(next, tree(3))]);
}

/// `loopdelta` and `loopdelta-cap` (Capping at 15 per segment; small segments here so that
/// it rewrites) round-trip: every version restores bit-exact and `check --read-data` passes.
#[test]
fn loopdelta_presets_round_trip() {
    for capped in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let repo = metered_repo(&tmp.path().join("repo"));
        let src = tmp.path().join("src");
        let mut done = Vec::new();
        let mut rewritten = 0;
        for v in 0..4 {
            let res = backup(&repo, &src, &tree(v), v, |o| {
                if capped {
                    o.rewriting = Some(Box::new(Capping {
                        segment_bytes: 64 * 1024,
                        level: 1,
                    }));
                }
            });
            rewritten += res.metrics.rewritten.chunks;
            assert_eq!(res.metrics.bases.read_back, 0);
            done.push((res, tree(v)));
        }
        assert_eq!(rewritten > 0, capped);
        assert_restores(&repo, tmp.path(), &done);
    }
}

/// `keep_dense_local` (`backup --keep-dense-local`, a deviation from LoopDelta §4.3): the
/// dense containers a backup reads whole are kept on the client's disk, and the next backup
/// reads those still dense from there instead of the repository. It stores exactly what the
/// paper's prefetch stores (the same bases come from the same containers); only the
/// repository's prefetch bytes fall. The two runs' data chunks are compared exactly: every
/// one stored the same way (full, or a delta of the same base). Their trees differ (files
/// written again have other change times), and so, now and then, does a tree chunk: where the
/// tree's content-defined cuts fall decides whether the parent tree chunk at its place is a
/// full chunk (a cached base) or a delta (none). Comparing whole backups' delta counts made
/// this test fail in about half the runs; that was the trees, not thread timing.
#[test]
fn dense_containers_kept_locally_are_read_from_the_client() {
    let tmp = tempfile::tempdir().unwrap();
    // The same source path for both (the paths are in the trees).
    let src = tmp.path().join("src");
    let run = |name: &str, keep: bool| {
        let repo = metered_repo(&tmp.path().join(name));
        let cache = tmp.path().join(format!("{name}-cache"));
        let mut done = Vec::new();
        let mut prefetched = Vec::new();
        for v in 0..4 {
            let before = repo.io_counts().unwrap();
            let res = backup(&repo, &src, &tree(v), v, |o| {
                o.cache_dir = Some(cache.clone());
                o.loopdelta.keep_dense_local = keep;
            });
            let io = repo.io_counts().unwrap().since(&before);
            prefetched.push(io.get(Purpose::Prefetch, Direction::Read));
            done.push((res, tree(v)));
        }
        assert_restores(&repo, tmp.path(), &done);
        let kinds = stored_kinds(&repo);
        (done, prefetched, kinds)
    };
    let (paper, paper_io, paper_kinds) = run("paper", false);
    let (local, local_io, local_kinds) = run("local", true);
    // Data chunks have the same ids in both; tree chunks (other change times) do not.
    let mut common = 0;
    let mut deltas = 0;
    for (id, kind) in &paper_kinds {
        if let Some(other) = local_kinds.get(id) {
            assert_eq!(kind, other, "chunk {id:?} is stored the same way");
            common += 1;
            deltas += usize::from(matches!(kind, EntryKind::Delta { .. }));
        }
    }
    assert!(
        common > 100 && deltas > 50,
        "{common} chunks, {deltas} deltas"
    );
    for (v, ((p, _), (l, _))) in paper.iter().zip(&local).enumerate() {
        let (pp, lp) = (p.metrics.prefetch.unwrap(), l.metrics.prefetch.unwrap());
        // The same dense containers loaded (the bases served may differ by the tree's).
        assert_eq!(
            pp.dense_loaded, lp.dense_loaded,
            "backup {v}: {pp:?} {lp:?}"
        );
        assert_eq!((pp.local_loaded, pp.local_bytes), (0, 0));
        if v >= 2 {
            // The first backup's containers are still dense, and were kept by the second.
            assert!(lp.local_loaded > 0, "backup {v}: {lp:?}");
            // Each kept container is a prefetch request fewer.
            assert_eq!(
                local_io[v].requests + lp.local_loaded,
                paper_io[v].requests,
                "backup {v}"
            );
            assert!(local_io[v].bytes < paper_io[v].bytes, "backup {v}");
        } else {
            assert_eq!(lp.local_loaded, 0, "backup {v}: nothing kept yet");
        }
    }
}

/// A backup with a client cache directory keeps a copy of the dense list it wrote there, and
/// the next backup of the lineage on that client reads the copy: no snapshot or list file is
/// read from the repository. Another client (another cache directory) reads the
/// repository's list, the same containers.
#[test]
fn dense_list_is_read_from_the_client_that_wrote_it() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let with_cache = |dir: &str| {
        let cache = tmp.path().join(dir);
        move |o: &mut BackupOptions| o.cache_dir = Some(cache)
    };
    let first = backup(&repo, &src, &tree(0), 0, with_cache("client-a"));
    let mut listed = Vec::new();
    let mut list_reads = Vec::new();
    for (n, client) in [(1, "client-a"), (2, "client-b")] {
        let before = repo.io_counts().unwrap();
        let res = backup(&repo, &src, &tree(n), n, with_cache(client));
        let io = repo.io_counts().unwrap().since(&before);
        listed.push(res.metrics.prefetch.unwrap().dense_listed);
        list_reads.push(io.get(Purpose::Snapshot, Direction::Read).requests);
    }
    assert_eq!(listed[0], first.metrics.prefetch.unwrap().dense_written);
    assert!(listed[1] > 0);
    // Client a reads its own copy; client b reads the repository's list (the snapshot files
    // come from the repository handle's snapshot cache in both).
    assert_eq!(list_reads, vec![0, 1]);
}

/// How each chunk stored in `repo` is stored (each entry's kind, with its base for a delta).
fn stored_kinds(repo: &IndexedRepository) -> std::collections::HashMap<ChunkId, EntryKind> {
    repo.backend()
        .list(FileKind::Container)
        .unwrap()
        .into_iter()
        .flat_map(|(name, _)| {
            dedelta_store::repository::read_container_meta(repo.backend().as_ref(), &name)
                .unwrap()
                .entries
        })
        .map(|e| (e.id, e.kind))
        .collect()
}

/// No container metadata, chunk data or base read outside the prefetches.
fn assert_no_reads_outside_prefetch(io: &IoCounts) {
    for purpose in [
        Purpose::ContainerMeta,
        Purpose::ChunkData,
        Purpose::BaseRead,
    ] {
        assert_eq!(
            io.get(purpose, Direction::Read).requests,
            0,
            "{purpose:?}: {io:?}"
        );
    }
}

/// Issue 17, the look-ahead (`delta.prefetch_lookahead_bytes`): a dense container whose first
/// duplicate in the stream comes a block after new chunks similar to its chunks offers them
/// their bases. Version 1 is version 0's text edited every 1000 bytes (all its chunks new and
/// similar to the dense container's), then 1.2 MB of new noise, then version 0's text again
/// (the container's first duplicates, in the stream's second 1 MiB block). With decisions in
/// stream order and no window (a dense container entered the cache at its first duplicate's
/// block) the edited chunks found no base; deduplication running 2 MiB ahead (the default)
/// finds them.
#[test]
fn dense_container_reached_after_similar_chunks_offers_them_bases() {
    let text = crate::support::text(24_000, 3);
    // Noise behind the text, so that the tree (read before the stream, with its dense
    // container) lies in a later container than the text's.
    let mut old = text.clone();
    old.extend(crate::support::noise(200_000, 9));
    let v0 = Files::from([("a".to_string(), old)]);
    let mut edited = text.clone();
    for pos in (500..edited.len()).step_by(1000) {
        edited[pos] = b'#';
    }
    let mut data = edited;
    data.extend(crate::support::noise(1_200_000, 5));
    data.extend(&text);
    let v1 = Files::from([("a".to_string(), data)]);
    let run = |lookahead: Option<u64>| {
        let tmp = tempfile::tempdir().unwrap();
        let repo = metered_repo(&tmp.path().join("repo"));
        let src = tmp.path().join("src");
        let first = backup(&repo, &src, &v0, 0, |_| {});
        assert!(first.summary.containers_written >= 1);
        let second = backup(&repo, &src, &v1, 1, |o| {
            if let Some(b) = lookahead {
                o.delta = Some(dedelta_store::format::config::DeltaConfig {
                    prefetch_lookahead_bytes: b,
                    ..loopdelta_delta()
                });
            }
        });
        let p = second.metrics.prefetch.unwrap();
        assert_eq!(second.metrics.bases.read_back, 0);
        let got = (second.summary.delta_chunks, p.bases_served, p.dense_loaded);
        assert_restores(
            &repo,
            tmp.path(),
            &[(first, v0.clone()), (second, v1.clone())],
        );
        got
    };
    let (deltas, served, loaded) = run(None);
    assert!(loaded >= 1, "the dense container is loaded");
    assert!(
        deltas >= 6 && served >= 6,
        "{deltas} deltas, {served} bases served"
    );
    // A block at a time: the edited chunks were delta-checked before the container came in
    // (only the chunk where the noise meets the text again, in the duplicates' block, finds
    // its base).
    let (deltas0, served0, _) = run(Some(0));
    assert!(
        deltas0 + 5 <= deltas && served0 + 5 <= served,
        "window 0: {deltas0} deltas, {served0} bases served; 2 MiB: {deltas}, {served}"
    );
    // The same bytes stored in every run.
    assert_eq!(run(None).0, deltas);
}
