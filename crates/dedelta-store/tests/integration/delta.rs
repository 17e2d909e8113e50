//! Delta compression end to end: every sketch x index x codec combination round-trips,
//! deltas cross containers, restore works with a cold cache, and a damaged base is traced to
//! every file that needs it; the local base cache changes speed, never what is stored.

use crate::support::{
    backup_options, backup_with, config, every_restore_cache, files, forget_ids, init_repo, locked,
    me, noise, prune_with, restore_to, restored_root, run_check, snapshot_ids, stored_bytes, text,
    time_of, write_files, Files,
};
use dedelta_core::chunker::ChunkerKind;
use dedelta_core::delta::DeltaKind;
use dedelta_core::sketch::{SketchKind, SketchParams};
use dedelta_core::ChunkId;
use dedelta_store::backend::FileKind;
use dedelta_store::commands::{backup, restore};
use dedelta_store::format::config::{DeltaConfig, SketchIndexKind};
use dedelta_store::format::container::{ContainerId, EntryKind};
use dedelta_store::format::snapshot::BackupSummary;
use dedelta_store::progress::NoProgress;
use dedelta_store::repository::read_container_meta;
use dedelta_store::IndexedRepository;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Version `v` of a file: the base text with a few scattered edits per version.
fn version(base: &[u8], v: u64) -> Vec<u8> {
    let mut out = base.to_vec();
    for k in 0..v * 12 {
        let pos = ((k * 7919 + v * 104_729) as usize * 31) % out.len();
        out[pos] = b'#';
    }
    // An insertion, so boundaries move too.
    let at = (v as usize * 40_000) % out.len();
    out.splice(at..at, format!("inserted in version {v}\n").bytes());
    out
}

/// Writes version `v` of the test tree to `root`; returns each file's name and content.
fn write_versions(root: &Path, v: u64) -> Files {
    let files = files([
        ("a.txt", version(&text(300_000, 1), v)),
        ("b.txt", version(&text(200_000, 2), v)),
    ]);
    write_files(root, &files);
    files
}

pub(crate) fn run_backup(repo: &IndexedRepository, src: &Path, n: u64) -> BackupSummary {
    run_backup_cached(repo, src, n, None).summary
}

fn run_backup_cached(
    repo: &IndexedRepository,
    src: &Path,
    n: u64,
    cache_dir: Option<&Path>,
) -> backup::BackupResult {
    locked(repo, &me(), |lock| {
        let mut opts = backup_options(vec![src.to_path_buf()], time_of(n));
        opts.cache_dir = cache_dir.map(Path::to_path_buf);
        backup_with(repo, lock, opts)
    })
    .unwrap()
}

/// Per version, each file's name and content.
type Contents = Vec<Files>;

/// The depth of chunk `id` down the delta links `base_of` (delta -> its base): 0 for a chunk
/// stored in full.
fn chain_depth(base_of: &HashMap<ChunkId, ChunkId>, mut id: ChunkId) -> u8 {
    let mut d = 0;
    while let Some(b) = base_of.get(&id) {
        d += 1;
        id = *b;
    }
    d
}

/// The chunks of every snapshot's tree stream.
fn tree_chunks(repo: &IndexedRepository) -> std::collections::HashSet<ChunkId> {
    repo.snapshots()
        .unwrap()
        .snapshots
        .iter()
        .flat_map(|(_, s)| s.tree.chunks.clone())
        .collect()
}

/// Backs up three versions; returns the repository and the source snapshots' contents.
fn three_versions(
    dir: &Path,
    delta: DeltaConfig,
) -> (IndexedRepository, Contents, Vec<BackupSummary>) {
    let repo = init_repo(&dir.join("repo"), config(2, delta));
    let src = dir.join("src");
    let mut contents = Vec::new();
    let mut sums = Vec::new();
    for v in 0..3 {
        contents.push(write_versions(&src, v));
        sums.push(run_backup(&repo, &src, v));
    }
    (repo, contents, sums)
}

fn restore_all(repo: &IndexedRepository, dir: &Path, contents: &[Files], cache_bytes: usize) {
    let snaps = repo.snapshots().unwrap().snapshots;
    assert_eq!(snaps.len(), contents.len());
    let src = dir.join("src");
    // Every restore cache restores bit-exact: the default LRU, an LRU of one container,
    // forward assembly with the default area and with areas smaller than most files.
    for (k, cache) in every_restore_cache().into_iter().enumerate() {
        for (i, (_, snap)) in snaps.iter().enumerate() {
            let target = dir.join(format!("out{i}-{cache_bytes}-{k}"));
            let opts = restore::RestoreOptions {
                target: target.clone(),
                include: vec![],
                cache_bytes,
                cache,
                ..Default::default()
            };
            let st = restore::restore(repo, snap, &opts, &NoProgress).unwrap();
            assert!(st.errors.is_empty(), "{cache:?}: {:?}", st.errors);
            let root = restored_root(&target, &src);
            for (name, data) in &contents[i] {
                assert!(
                    fs::read(root.join(name)).unwrap() == *data,
                    "{cache:?}: snapshot {i} file {name}"
                );
            }
        }
    }
}

fn combos() -> Vec<DeltaConfig> {
    let mut v = Vec::new();
    let sketches: [(Option<SketchKind>, usize); 5] = [
        (None, 4),
        (Some(SketchKind::NTransform), 4),
        (Some(SketchKind::NTransform), 2),
        (Some(SketchKind::Finesse), 4),
        (Some(SketchKind::Odess), 4),
    ];
    for (sketch, k) in sketches {
        for index in [SketchIndexKind::Full, SketchIndexKind::Stream] {
            for codec in DeltaKind::ALL {
                for dupadj in [false, true] {
                    if sketch.is_none() && index == SketchIndexKind::Stream {
                        continue; // the index is unused without sketches
                    }
                    v.push(DeltaConfig {
                        sketch,
                        sketch_params: SketchParams {
                            sf_count: 3,
                            features_per_sf: k,
                        },
                        codec,
                        sketch_index: index,
                        dupadj,
                        ..DeltaConfig::default()
                    });
                }
            }
        }
    }
    v
}

#[test]
fn every_sketch_index_codec_combination_round_trips() {
    for cfg in combos() {
        let tmp = tempfile::tempdir().unwrap();
        let label = format!(
            "{:?}/{:?}/{:?}/dupadj={}",
            cfg.sketch, cfg.sketch_index, cfg.codec, cfg.dupadj
        );
        let enabled = cfg.enabled();
        let (repo, contents, sums) = three_versions(tmp.path(), cfg);
        let deltas: u64 = sums.iter().map(|s| s.delta_chunks).sum();
        if enabled {
            assert!(deltas > 0, "{label}: no deltas");
        } else {
            assert_eq!(deltas, 0, "{label}");
        }
        restore_all(&repo, tmp.path(), &contents, 64 << 20);
        let report = run_check(&repo, true).unwrap();
        assert!(report.problems.is_empty(), "{label}: {:?}", report.problems);
    }
}

/// Best-of-N base choice (beyond the papers): with every index and sketch method it finds
/// deltas, restores exactly, and checks clean; its deltas are never larger in total than
/// FirstFit's on the same versions by more than a little (a smaller delta for one chunk can
/// change which chunks are stored full, and so the bases of later ones).
#[test]
fn best_of_n_candidates_round_trip() {
    for index in [SketchIndexKind::Full, SketchIndexKind::Stream] {
        let mut delta_bytes = Vec::new();
        for candidates in [1, 4] {
            let tmp = tempfile::tempdir().unwrap();
            let cfg = DeltaConfig {
                sketch_index: index,
                candidates,
                candidates_enough: None,
                ..DeltaConfig::recommended()
            };
            let (repo, contents, sums) = three_versions(tmp.path(), cfg);
            let deltas: u64 = sums.iter().map(|s| s.delta_chunks).sum();
            assert!(deltas > 0, "{index:?}/{candidates}: no deltas");
            delta_bytes.push(sums.iter().map(|s| s.bytes_after_delta).sum::<u64>());
            restore_all(&repo, tmp.path(), &contents, 64 << 20);
            let report = run_check(&repo, true).unwrap();
            assert!(report.problems.is_empty(), "{:?}", report.problems);
        }
        assert!(
            delta_bytes[1] as f64 <= delta_bytes[0] as f64 * 1.02,
            "{index:?}: {delta_bytes:?}"
        );
    }
}

/// `candidates_enough`: a further candidate is tried only for a chunk whose kept delta is
/// above the bound. At 100 % every kept delta is good enough, so four candidates store what
/// FirstFit stores, byte for byte; with no bound (best-of-N) the bases differ. In between,
/// what is stored restores exactly and checks clean.
#[test]
fn good_enough_deltas_stop_the_candidates() {
    // One source tree backed up into every repository, so that their trees (paths, mtimes)
    // are the same bytes too.
    let tmp = tempfile::tempdir().unwrap();
    let settings = [(1, None), (4, Some(1.0)), (4, None), (2, Some(0.1))];
    let repos: Vec<IndexedRepository> = settings
        .iter()
        .enumerate()
        .map(|(i, &(candidates, enough))| {
            let cfg = DeltaConfig {
                candidates,
                candidates_enough: enough,
                ..DeltaConfig::recommended()
            };
            init_repo(&tmp.path().join(format!("repo-{i}")), config(2, cfg))
        })
        .collect();
    let src = tmp.path().join("src");
    let mut contents = Vec::new();
    let mut stored: Vec<Vec<(u64, u64, u64, u64)>> = vec![Vec::new(); repos.len()];
    for v in 0..3 {
        contents.push(write_versions(&src, v));
        for (repo, sums) in repos.iter().zip(stored.iter_mut()) {
            let s = run_backup(repo, &src, v);
            sums.push((
                s.bytes_after_delta,
                s.delta_chunks,
                s.delta_bytes,
                s.sketch_deltas,
            ));
        }
    }
    for (i, repo) in repos.iter().enumerate() {
        restore_all(repo, tmp.path(), &contents, (64 << 20) + i);
        assert!(run_check(repo, true).unwrap().problems.is_empty());
    }
    assert_eq!(stored[1], stored[0], "100 %: FirstFit");
    assert_ne!(stored[2], stored[0], "best-of-N chose no other base");
}

#[test]
fn deltas_cross_containers_and_restore_with_cold_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, contents, sums) = three_versions(tmp.path(), DeltaConfig::recommended());
    assert!(sums[1].delta_chunks > 10, "{:?}", sums[1]);
    // Where every chunk lives.
    let mut home: HashMap<_, ContainerId> = HashMap::new();
    let mut deltas = Vec::new();
    for (name, _) in repo.backend().list(FileKind::Container).unwrap() {
        let cid = ContainerId::from_hex(&name).unwrap();
        for e in read_container_meta(repo.backend().as_ref(), &name)
            .unwrap()
            .entries
        {
            home.insert(e.id, cid);
            if let EntryKind::Delta { base, .. } = e.kind {
                deltas.push((e.id, base));
            }
        }
    }
    let crossing = deltas.iter().filter(|(d, b)| home[d] != home[b]).count();
    assert!(crossing > 0, "no delta with its base in another container");
    // Three versions, chains up to 4 deep: some base is a delta (version 2 on version 1),
    // and no chain is deeper than the versions.
    let base_of: HashMap<_, _> = deltas.iter().copied().collect();
    let max = deltas
        .iter()
        .map(|(d, _)| chain_depth(&base_of, *d))
        .max()
        .unwrap();
    assert!((2..=3).contains(&max), "{max}");
    // A tiny cache: every base is read back from its container (down its chain).
    restore_all(&repo, tmp.path(), &contents, 1);
    // And the stored size beats dedup-only.
    let tmp2 = tempfile::tempdir().unwrap();
    let (plain, _, _) = three_versions(tmp2.path(), DeltaConfig::default());
    assert!(
        stored_bytes(&repo) * 3 < stored_bytes(&plain) * 2,
        "delta {} vs plain {}",
        stored_bytes(&repo),
        stored_bytes(&plain)
    );
}

#[test]
fn damaged_base_is_traced_to_every_dependent_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, sums) = three_versions(tmp.path(), DeltaConfig::recommended());
    assert!(sums[1].delta_chunks > 0);
    // Damage every container written by the first backup (the bases).
    let first = repo.snapshots().unwrap().snapshots[0].1.clone();
    let mut bases = std::collections::HashSet::new();
    for (name, _) in repo.backend().list(FileKind::Container).unwrap() {
        for e in read_container_meta(repo.backend().as_ref(), &name)
            .unwrap()
            .entries
        {
            if let EntryKind::Delta { base, .. } = e.kind {
                bases.insert(base);
            }
        }
    }
    let repo_dir = tmp.path().join("repo");
    // A base of file data stored in full, in a region without tree chunks (with delta
    // chains a base may be a delta, or a tree chunk, whose damage hides the file names).
    let trees = tree_chunks(&repo);
    let mut damaged = 0;
    for (name, _) in repo.backend().list(FileKind::Container).unwrap() {
        let meta = read_container_meta(repo.backend().as_ref(), &name).unwrap();
        let tree_regions: std::collections::HashSet<u32> = meta
            .entries
            .iter()
            .filter(|e| trees.contains(&e.id))
            .map(|e| e.region)
            .collect();
        if let Some(e) = meta.entries.iter().find(|e| {
            bases.contains(&e.id) && e.kind == EntryKind::Full && !tree_regions.contains(&e.region)
        }) {
            let r = meta.regions[e.region as usize];
            let path = repo_dir.join("containers").join(&name[..2]).join(&name);
            let mut b = fs::read(&path).unwrap();
            b[r.offset as usize + r.stored_len as usize / 2] ^= 0x55;
            fs::write(&path, b).unwrap();
            damaged += 1;
            break;
        }
    }
    assert_eq!(damaged, 1);
    let report = run_check(&repo, true).unwrap();
    assert!(!report.problems.is_empty());
    // Every snapshot that has deltas on that base names the file.
    let files: std::collections::HashSet<(String, String)> = report
        .problems
        .iter()
        .filter_map(|p| Some((p.snapshot.clone()?, p.path.clone()?)))
        .collect();
    let snaps = repo.snapshots().unwrap().snapshots;
    let with_file = |i: usize| {
        files
            .iter()
            .filter(|(s, _)| *s == snaps[i].0.short())
            .count()
    };
    assert!(with_file(0) >= 1, "{:?}", report.problems);
    assert!(
        with_file(1) >= 1,
        "later snapshot's delta files not named: {:?}",
        report.problems
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.message.contains("delta base")),
        "{:?}",
        report.problems
    );
    // Restore refuses to write wrong bytes: the damaged files are listed, not written.
    let target = tmp.path().join("bad");
    let st = restore_to(&repo, &snaps[1].1, &target).unwrap();
    assert!(!st.errors.is_empty());
    for e in &st.errors {
        assert!(e.message.contains("corrupt chunk"), "{e:?}");
        assert!(
            !target.join(e.path_lossy().trim_start_matches('/')).exists(),
            "{e:?}"
        );
    }
    let _ = first;
}

/// A backup's duplicates that the local base cache holds (chunks of its snapshot, which
/// the next version's DupAdj takes as bases when they change) are noted, so that the cache's
/// save keeps them ahead of older entries; a backup without the cache notes none.
#[test]
fn a_backups_duplicates_held_by_the_local_base_cache_are_noted() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("r"), config(2, DeltaConfig::recommended()));
    let cache = tmp.path().join("cache");
    let src = tmp.path().join("src");
    write_versions(&src, 0);
    let first = run_backup_cached(&repo, &src, 0, Some(&cache));
    assert_eq!(first.metrics.bases.local_current, 0);
    write_versions(&src, 1);
    let second = run_backup_cached(&repo, &src, 1, Some(&cache));
    let s = &second.summary;
    assert!(s.chunks > s.new_chunks, "no duplicates: {s:?}");
    assert!(
        second.metrics.bases.local_current > 0,
        "{:?}",
        second.metrics.bases
    );
    write_versions(&src, 2);
    let uncached = run_backup_cached(&repo, &src, 2, None);
    assert_eq!(uncached.metrics.bases.local_current, 0);
}

/// The bases of a backup's duplicates that are deltas are kept in the local base cache
/// ahead of its other old entries too: a chunk at the depth bound that the next version
/// changes gets its own base as base, which is not a chunk of the snapshot (on a 30-version
/// Redis series such bases, fallen out of the cache, were most of the growing read-backs).
#[test]
fn the_bases_of_duplicate_deltas_are_noted_beside_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, chunk) = dupadj_only_fixed(tmp.path());
    let cache = tmp.path().join("cache");
    let src = tmp.path().join("src");
    // Each backup by a repository opened afresh, as each `backup` process opens it.
    drop(repo);
    // The first half changes, the second half stays (DupAdj pairs the changed chunks
    // through their unchanged neighbours).
    let n = 16;
    let mut data = text(2 * n * chunk, 3);
    let mut version = |v: u64, edit: &dyn Fn(&mut Vec<u8>)| {
        edit(&mut data);
        write_files(&src, &files([("f", data.clone())]));
        let repo = crate::support::open_repo(&tmp.path().join("repo"))
            .unwrap()
            .open_index()
            .unwrap();
        run_backup_cached(&repo, &src, v, Some(&cache))
    };
    version(0, &|_| {});
    // Each chunk of the first half becomes a delta of its old version.
    let second = version(1, &|d| {
        for i in 0..n {
            d[i * chunk + 100] = b'#';
        }
    });
    assert!(
        second.summary.delta_chunks >= n as u64 - 1,
        "{:?}",
        second.summary
    );
    // Only the first chunk changes again: the other deltas are duplicates now. With
    // one-level deltas (this configuration) no delta is kept as a base, so the cache holds
    // the n unchanged chunks and the bases of the n - 1 duplicate deltas (chunks of the
    // first version), all noted; the duplicates alone were n.
    let third = version(2, &|d| d[200] = b'%');
    let s = &third.summary;
    assert_eq!(s.chunks - s.new_chunks, 2 * n as u64 - 1, "{s:?}");
    let noted = third.metrics.bases.local_current;
    assert_eq!(noted, 2 * n as u64 - 1, "{s:?}");
}

/// The local base cache flags the chunks stored in full (the chains' roots, and the only
/// chunks the sketch index names), which its later saves keep before other old entries; a
/// delta kept as a base is not flagged.
#[test]
fn the_local_base_cache_flags_the_chunks_stored_in_full() {
    use dedelta_store::client::local_cache::CacheIndex;
    let tmp = tempfile::tempdir().unwrap();
    let (repo, chunk, cache, index, src) = cached_dupadj(tmp.path(), 2);
    let n = 8;
    let mut data = text(2 * n * chunk, 5);
    let flags = |v: u64, data: &[u8]| {
        write_files(&src, &files([("f", data.to_vec())]));
        let summary = run_backup_cached(&repo, &src, v, Some(&cache)).summary;
        let entries = CacheIndex::decode(&fs::read(&index).unwrap())
            .unwrap()
            .entries;
        let full = entries.iter().filter(|(_, x)| x.full).count();
        (summary, full, entries.len() - full)
    };
    let (first, full, deltas) = flags(0, &data);
    assert_eq!((full, deltas), (2 * n, 0), "{first:?}");
    // The first half changes (DupAdj pairs it through the unchanged second half): deltas of
    // depth 1, the next version's bases, saved beside the first version's chunks.
    for i in 0..n {
        data[i * chunk + 100] = b'#';
    }
    let (second, full, deltas) = flags(1, &data);
    assert!(second.delta_chunks >= n as u64 - 1, "{second:?}");
    assert_eq!(deltas as u64, second.delta_chunks, "{second:?}");
    assert_eq!(full, 2 * n, "{second:?}");
}

/// The depth of the indexed copy of `id`, which must be readable.
fn indexed_depth(repo: &IndexedRepository, id: ChunkId) -> u8 {
    crate::support::indexed_depth(repo, id)
        .unwrap()
        .expect("readable chain")
}

/// The local base cache records each entry's delta depth, so that the next backup does not
/// walk its candidates down the index (issue 20), under the index layout of the backup that
/// wrote it. Every depth it records is the depth of the copy the index names, also after
/// another client stored chunks again in full (Capping, without this cache): the next
/// backup sees that the index no longer names the same copies and forgets the old depths.
#[test]
fn the_local_base_cache_records_true_depths_until_copies_change() {
    use dedelta_store::backup::rewrite::Capping;
    use dedelta_store::client::local_cache::CacheIndex;
    let tmp = tempfile::tempdir().unwrap();
    let (repo, chunk, cache, index, src) = cached_dupadj(tmp.path(), 4);
    let n = 8;
    let mut data = text(2 * n * chunk, 5);
    let recorded = || CacheIndex::decode(&fs::read(&index).unwrap()).unwrap();
    let all_true = |what: &str| {
        let entries = recorded().entries;
        let depths: Vec<u8> = entries.iter().filter_map(|(_, x)| x.depth).collect();
        for (id, x) in &entries {
            if let Some(d) = x.depth {
                assert_eq!(d, indexed_depth(&repo, *id), "{what}: {}", id.to_hex());
            }
        }
        depths
    };
    // A quarter of the chunks change in every version: the unchanged ones outnumber them.
    let mut edit = |v: u64| {
        for i in 0..n / 2 {
            data[i * chunk + 100 + v as usize] = b'#';
        }
        write_files(&src, &files([("f", data.clone())]));
    };
    for v in 0..3 {
        edit(v);
        run_backup_cached(&repo, &src, v, Some(&cache));
    }
    let depths = all_true("after three versions");
    assert!(depths.iter().any(|&d| d >= 2), "{depths:?}");
    // Another client backs the same version up again, Capping at one old container per
    // segment (the whole file): it keeps the first version's, holding the unchanged chunks,
    // and stores the changed ones, deltas two deep, again in full. The copies the index
    // names change, and with them the depths of the chains through them.
    let mark = recorded().mark;
    let capped = locked(&repo, &me(), |lock| {
        let mut opts = backup_options(vec![src.clone()], time_of(3));
        opts.sources.force = true;
        opts.rewriting = Some(Box::new(Capping {
            segment_bytes: (4 * n * chunk) as u64,
            level: 1,
        }));
        backup_with(&repo, lock, opts)
    })
    .unwrap();
    assert!(capped.metrics.rewritten.chunks > 0);
    assert!(!repo.index().layout_kept_since(&mark));
    for v in 4..6 {
        edit(v);
        run_backup_cached(&repo, &src, v, Some(&cache));
        all_true(&format!("version {v}"));
    }
}

/// A backup crashed at any of its writes leaves the local base cache recording only true
/// depths of chunks the index names: the save records depths only once the snapshot is
/// committed. Before, the last containers of a crashed backup may never have been stored, and
/// another copy of their chunks indexed later would have other depths.
#[test]
fn a_crashed_backup_records_no_depth_the_index_does_not_back() {
    use dedelta_store::backend::memory::MemoryBackend;
    use dedelta_store::backend::wrap::fault::{CrashEffect, FaultBackend, FaultPlan};
    use dedelta_store::backend::Backend;
    use dedelta_store::client::local_cache::CacheIndex;
    use std::sync::Arc;
    let (cfg, chunk) = dupadj_only_fixed_config(4);
    let n = 8;
    let mut crash_points = 0;
    for effect in [CrashEffect::Lost, CrashEffect::Durable] {
        for at in 0.. {
            let tmp = tempfile::tempdir().unwrap();
            let inner = Arc::new(MemoryBackend::default());
            inner
                .put(FileKind::Config, "config", &cfg.to_bytes())
                .unwrap();
            let fault = Arc::new(FaultBackend::new(inner));
            let index = tmp.path().join("index").join("chunks.idx");
            let open = || {
                dedelta_store::Repository::open(fault.clone(), index.clone())
                    .unwrap()
                    .open_index()
                    .unwrap()
            };
            let (cache, src) = (tmp.path().join("cache"), tmp.path().join("src"));
            let mut data = text(2 * n * chunk, 5);
            let mut edit = |v: u64| {
                for i in 0..n {
                    data[i * chunk + 100 + v as usize] = b'#';
                }
                write_files(&src, &files([("f", data.clone())]));
            };
            let repo = open();
            for v in 0..2 {
                edit(v);
                run_backup_cached(&repo, &src, v, Some(&cache));
            }
            edit(2);
            fault.arm(FaultPlan::crash(at, effect));
            let crashed = locked(&repo, &me(), |lock| {
                let mut opts = backup_options(vec![src.clone()], time_of(2));
                opts.cache_dir = Some(cache.clone());
                backup_with(&repo, lock, opts)
            });
            fault.disarm();
            drop(repo);
            if crashed.is_ok() {
                break;
            }
            crash_points += 1;
            let repo = open();
            let bases = cache.join(&repo.config().id).join("bases.idx");
            let recorded = CacheIndex::decode(&fs::read(bases).unwrap()).unwrap();
            for (id, x) in recorded.entries {
                if let Some(d) = x.depth {
                    let when = format!("crash at write {at} {effect:?}: {}", id.to_hex());
                    assert!(repo.index().get(&id).unwrap().is_some(), "{when}");
                    assert_eq!(d, indexed_depth(&repo, id), "{when}");
                }
            }
        }
    }
    assert!(crash_points >= 4, "{crash_points}");
}

/// Backs up versions 0..5 of the test tree twice, with and without a local base cache; the
/// cache must serve bases and leave every stored byte as it was. A garbage cache file is a
/// notice and is rebuilt; after everything is forgotten and pruned, cached bases that the
/// repository no longer holds are never used.
#[test]
fn local_base_cache_serves_bases_and_changes_nothing_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let init = |name: &str| {
        init_repo(
            &tmp.path().join(name),
            config(2, DeltaConfig::recommended()),
        )
    };
    let (cached, plain) = (init("cached"), init("plain"));
    let cache = tmp.path().join("cache");
    let src = tmp.path().join("src");
    let file = cache.join(&cached.config().id).join("bases.idx");
    let mut contents: Contents = Vec::new();
    for v in 0..5 {
        contents.push(write_versions(&src, v));
        if v == 3 {
            fs::write(&file, b"not a cache file").unwrap();
        }
        let with = run_backup_cached(&cached, &src, v, Some(&cache));
        let without_res = run_backup_cached(&plain, &src, v, None);
        let without = without_res.summary;
        assert!(file.exists(), "version {v}: no cache file written");
        assert_eq!(with.notices.is_empty(), v != 3, "{:?}", with.notices);
        let s = &with.summary;
        let local_hits = with.metrics.bases.local;
        if v == 0 || v == 3 {
            assert_eq!(local_hits, 0, "version {v}");
        } else {
            assert!(local_hits > 0, "version {v}: {:?}", with.metrics);
        }
        assert_eq!(without_res.metrics.bases.local, 0);
        for (a, b) in [
            (s.delta_chunks, without.delta_chunks),
            (s.bytes_after_delta, without.bytes_after_delta),
            (s.bytes_added, without.bytes_added),
        ] {
            assert_eq!(a, b, "version {v}: cached {s:?} vs plain {without:?}");
        }
    }
    restore_all(&cached, tmp.path(), &contents, 64 << 20);
    assert!(run_check(&cached, true).unwrap().problems.is_empty());

    // Forget and prune everything: the cache file still holds the old bases, none of which
    // may become a base again.
    let ids: Vec<_> = snapshot_ids(&cached).unwrap().into_iter().collect();
    locked(&cached, &me(), |lock| {
        forget_ids(&cached, lock, &ids)?;
        prune_with(&cached, lock, 0.0, false)
    })
    .unwrap();
    let cached = crate::support::open_repo(&tmp.path().join("cached"))
        .unwrap()
        .open_index()
        .unwrap();
    write_versions(&src, 5);
    let after = run_backup_cached(&cached, &src, 5, Some(&cache));
    assert_eq!(after.metrics.bases.local, 0);
    assert!(run_check(&cached, true).unwrap().problems.is_empty());
    let snaps = cached.snapshots().unwrap().snapshots;
    assert_eq!(snaps.len(), 1);
    let target = tmp.path().join("after");
    restore_to(&cached, &snaps[0].1, &target).unwrap();
    let root = restored_root(&target, &src);
    for n in ["a.txt", "b.txt"] {
        assert!(fs::read(root.join(n)).unwrap() == fs::read(src.join(n)).unwrap());
    }
}

/// A repository in `dir` that finds bases by DupAdj alone, with fixed-size chunks (so that
/// byte edits move no boundary and a walk pairs each changed chunk with its old version);
/// returns it and the chunk size.
pub(crate) fn dupadj_only_fixed(dir: &Path) -> (IndexedRepository, usize) {
    dupadj_only_fixed_at_depth(dir, DeltaConfig::default().max_depth)
}

/// [`dupadj_only_fixed`] with delta chains up to `max_depth` deep.
fn dupadj_only_fixed_at_depth(dir: &Path, max_depth: u8) -> (IndexedRepository, usize) {
    let (cfg, chunk) = dupadj_only_fixed_config(max_depth);
    (init_repo(&dir.join("repo"), cfg), chunk)
}

/// [`dupadj_only_fixed_at_depth`] in `dir` with a local base cache: the repository, its chunk
/// size, the cache directory, the cache's index file and the source directory.
fn cached_dupadj(
    dir: &Path,
    max_depth: u8,
) -> (IndexedRepository, usize, PathBuf, PathBuf, PathBuf) {
    let (repo, chunk) = dupadj_only_fixed_at_depth(dir, max_depth);
    let cache = dir.join("cache");
    let index = cache.join(&repo.config().id).join("bases.idx");
    (repo, chunk, cache, index, dir.join("src"))
}

/// The config of [`dupadj_only_fixed_at_depth`] and its chunk size.
fn dupadj_only_fixed_config(max_depth: u8) -> (dedelta_store::format::config::RepoConfig, usize) {
    let delta = DeltaConfig {
        sketch: None,
        dupadj: true,
        max_depth,
        ..DeltaConfig::default()
    };
    let mut cfg = config(1, delta);
    cfg.chunker.kind = ChunkerKind::Fixed;
    let chunk = cfg.chunker.params.avg_size;
    (cfg, chunk)
}

/// DupAdj's backward walk crosses a block boundary (issue 15): every chunk of the first MiB
/// (one block) changes and none is a duplicate, so no forward walk pairs them; the duplicate
/// that follows comes in the next block. The unpaired chunks at the end of the first block
/// are held until it is seen, and pair backwards with the parent's chunks at their places.
#[test]
fn dupadj_backward_walk_crosses_a_block_boundary() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, chunk) = dupadj_only_fixed(tmp.path());
    let changed = text(1 << 20, 7);
    let tail = text(200_000, 8);
    let mut edited = changed.clone();
    for pos in (100..edited.len()).step_by(chunk) {
        edited[pos] = b'#';
    }
    let src = tmp.path().join("src");
    let mut contents = Vec::new();
    let mut sums = Vec::new();
    for (n, head) in [&changed, &edited].into_iter().enumerate() {
        let files = files([("f", [head.as_slice(), &tail].concat())]);
        write_files(&src, &files);
        sums.push(run_backup(&repo, &src, n as u64));
        contents.push(files);
    }
    // Without the hold, only the changed chunks cut in the second block had a pair (3); with
    // it, also the last MAX_HELD (64) of the first block.
    let s = &sums[1];
    assert!((64..64 + 8).contains(&s.dupadj_deltas), "{s:?}");
    restore_all(&repo, tmp.path(), &contents, 1 << 20);
}

/// DupAdj walks the backup's own stored stream (DARE's list over the whole stored stream),
/// not only the parent's: in a first backup, without any parent, a second copy of a file with
/// edits pairs its changed chunks with the first copy's, around the chunks they share.
#[test]
fn dupadj_walks_the_own_stream_without_a_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, chunk) = dupadj_only_fixed(tmp.path());
    // Two megabytes, so that the copy's chunks come in later blocks than the original's.
    let original = text(2 << 20, 11);
    let mut copy = original.clone();
    // Every other chunk edited: the ones between stay duplicates.
    for pos in (100..copy.len()).step_by(2 * chunk) {
        copy[pos] = b'#';
    }
    let src = tmp.path().join("src");
    let files = files([("a", original), ("b", copy)]);
    write_files(&src, &files);
    let s = run_backup(&repo, &src, 0);
    let edited = (2 << 20) / (2 * chunk) as u64;
    assert!(s.dupadj_deltas * 10 >= edited * 9, "{s:?}");
    restore_all(&repo, tmp.path(), &[files], 1 << 20);
}

/// Version `v` of a drifting file: version `v - 1` with 1 % of its bytes rewritten in 16-byte
/// runs at random places, so that each version is further from the first (as a database file
/// under scattered updates) while its length, and most chunk boundaries, stay.
fn drifting(v: u64) -> Vec<u8> {
    let mut out = text(300_000, 9);
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..v {
        for _ in 0..out.len() / 100 / 16 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pos = (x >> 8) as usize % (out.len() - 16);
            for (k, b) in out[pos..pos + 16].iter_mut().enumerate() {
                *b = b'a' + ((x >> (k * 3)) % 26) as u8;
            }
        }
    }
    out
}

/// What the data deltas of a repository look like: the largest delta as a fraction of its
/// chunk, how many deltas name a base that a later backup than the first stored, and the
/// longest delta chain.
struct DeltaShape {
    max_fraction: f64,
    deltas: usize,
    on_later_bases: usize,
    max_depth: u8,
    chained: usize,
    stored: u64,
}

/// Backs up 10 drifting versions with `reanchor` and deltas at most `max_depth` deep; checks
/// every version restores bit-exact, `check --read-data` is clean, and no delta chain is
/// deeper than `max_depth`.
fn drifting_series(
    dir: &Path,
    reanchor: Option<f64>,
    dupadj: bool,
    max_depth: u8,
) -> (IndexedRepository, Contents, DeltaShape) {
    let delta = DeltaConfig {
        reanchor,
        dupadj,
        max_depth,
        ..DeltaConfig::recommended()
    };
    let repo = init_repo(&dir.join("repo"), config(1, delta));
    let src = dir.join("src");
    let list = |repo: &IndexedRepository| -> std::collections::HashSet<String> {
        let names = repo.backend().list(FileKind::Container).unwrap();
        names.into_iter().map(|(n, _)| n).collect()
    };
    let mut contents = Vec::new();
    let mut first_backup = Default::default();
    for v in 0..10 {
        contents.push(files([("db", drifting(v))]));
        write_files(&src, &contents[v as usize]);
        run_backup(&repo, &src, v);
        if v == 0 {
            first_backup = list(&repo);
        }
    }
    restore_all(&repo, dir, &contents, 64 << 20);
    let report = run_check(&repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let trees = tree_chunks(&repo);
    let (mut full_in, mut deltas, mut base_of) = (HashMap::new(), Vec::new(), HashMap::new());
    for name in list(&repo) {
        for e in read_container_meta(repo.backend().as_ref(), &name)
            .unwrap()
            .entries
        {
            match e.kind {
                EntryKind::Full => {
                    full_in.insert(e.id, first_backup.contains(&name));
                }
                EntryKind::Delta { base, .. } => {
                    base_of.insert(e.id, base);
                    if !trees.contains(&e.id) {
                        deltas.push((base, e));
                    }
                }
            }
        }
    }
    let depths: Vec<u8> = deltas
        .iter()
        .map(|(_, e)| chain_depth(&base_of, e.id))
        .collect();
    let max = depths.iter().copied().max().unwrap_or(0);
    assert!(
        max <= max_depth,
        "a chain of {max} with a bound of {max_depth}"
    );
    let shape = DeltaShape {
        max_fraction: deltas
            .iter()
            .map(|(_, e)| e.stored_len as f64 / e.original_len as f64)
            .fold(0.0, f64::max),
        deltas: deltas.len(),
        on_later_bases: deltas
            .iter()
            .filter(|(b, _)| !full_in.get(b).copied().unwrap_or(true))
            .count(),
        max_depth: max,
        chained: depths.iter().filter(|&&d| d > 1).count(),
        stored: stored_bytes(&repo),
    };
    (repo, contents, shape)
}

/// Base re-anchoring (issue 14): on a drifting file, the papers' rule keeps deltas against
/// the first version's chunks as they grow; with a bound (and DupAdj), no data delta passes
/// it, the chunks whose delta would have are stored in full by a later backup and the next
/// versions' deltas name them, and every version still restores bit-exact.
#[test]
fn drifting_versions_reanchor_their_bases() {
    let bound = 0.06;
    let tmp = tempfile::tempdir().unwrap();
    let (_, _, papers) = drifting_series(&tmp.path().join("papers"), None, true, 1);
    // The drift is enough to matter: without the bound, deltas grew past it.
    assert!(papers.max_fraction > bound, "{}", papers.max_fraction);
    let (_, _, reanchored) = drifting_series(&tmp.path().join("reanchor"), Some(bound), true, 1);
    assert!(reanchored.deltas > 0);
    assert!(
        reanchored.max_fraction <= bound,
        "{}",
        reanchored.max_fraction
    );
    // Later versions' chunks became bases, and more deltas rest on them than without.
    assert!(reanchored.on_later_bases > 0);
    assert!(
        reanchored.on_later_bases > papers.on_later_bases,
        "{} vs {}",
        reanchored.on_later_bases,
        papers.on_later_bases
    );
    // Without DupAdj the bound is not applied: nothing would find the newer copies.
    let (_, _, sketch_only) =
        drifting_series(&tmp.path().join("sketch-only"), Some(bound), false, 1);
    assert!(
        sketch_only.max_fraction > bound,
        "{}",
        sketch_only.max_fraction
    );
}

/// Bounded delta chains (issue 14): on a drifting file, a version's chunks delta against the
/// previous version's (themselves deltas) instead of the last full copy, never deeper than
/// the bound; the repository is smaller than with one-level deltas; and the chains survive
/// what moves or drops chunks: a prune after forgetting every version but the last (the
/// chain's bases are kept down to the full chunk, then copied forward), and an index rebuilt
/// from the containers alone.
#[test]
fn delta_chains_stay_bounded_and_survive_prune_and_rebuild() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, _, one) = drifting_series(&tmp.path().join("one"), None, true, 1);
    assert_eq!((one.max_depth, one.chained), (1, 0));
    let (repo, contents, chained) = drifting_series(&tmp.path().join("chain"), None, true, 3);
    assert_eq!(chained.max_depth, 3);
    assert!(chained.chained > 0);
    assert!(
        chained.stored < one.stored,
        "chains {} vs one level {}",
        chained.stored,
        one.stored
    );
    // Forget every version but the last, prune everything that is not needed.
    let ids: Vec<String> = snapshot_ids(&repo).unwrap().into_iter().collect();
    let time = |id: &String| repo.find_snapshot(id).unwrap().1.time;
    let latest = ids.iter().map(time).max().unwrap();
    let older: Vec<String> = ids
        .iter()
        .filter(|id| time(id) != latest)
        .cloned()
        .collect();
    assert_eq!(older.len(), 9);
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, &older)?;
        prune_with(&repo, lock, 0.0, false)
    })
    .unwrap();
    // (restore_all names its targets by cache size: one size per round.)
    let check_last = |cache_bytes: usize| {
        let report = run_check(&repo, true).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        restore_all(
            &repo,
            &tmp.path().join("chain"),
            &contents[9..],
            cache_bytes,
        );
    };
    check_last(1 << 20);
    dedelta_store::commands::repair::rebuild_index(&repo, &mut |_| {}).unwrap();
    check_last(1 << 21);
}

/// Issue 15, DARE §3.1: with `sketch_dupadj_misses` only the new chunks DupAdj did not
/// resolve are sketched (every new chunk is otherwise), and with FirstFit what is stored is
/// the same: the sketch index's candidates follow DupAdj's as they did.
#[test]
fn dare_sketches_only_dupadj_misses() {
    sketching_misses_stores_what_sketching_all_does(1, None);
}

/// With best-of-N (the defaults: a second candidate for a chunk whose first delta is poor)
/// sketching DupAdj's misses stores what sketching every chunk does: a chunk whose DupAdj
/// delta was kept but is not good enough is sketched too, and tries its sketch candidate.
/// Before 2026-11-30 only the chunks left in full were sketched, and such chunks kept their
/// poor delta (the 10 Redis dumps stored 0.8 % more).
#[test]
fn dare_sketches_the_chunks_best_of_n_goes_on_with() {
    sketching_misses_stores_what_sketching_all_does(
        dedelta_store::format::config::DEFAULT_CANDIDATES,
        Some(dedelta_store::format::config::DEFAULT_CANDIDATES_ENOUGH),
    );
}

/// Backs the same versions up with and without `sketch_dupadj_misses` (`candidates`
/// candidates, best-of-N stopping at `enough`) and compares what each sketched and stored.
fn sketching_misses_stores_what_sketching_all_does(candidates: usize, enough: Option<f64>) {
    // One source tree backed up into both repositories, so that their trees (paths, mtimes)
    // are the same bytes too.
    let tmp = tempfile::tempdir().unwrap();
    let repos: Vec<IndexedRepository> = [false, true]
        .into_iter()
        .map(|misses_only| {
            let delta = DeltaConfig {
                sketch: Some(SketchKind::NTransform),
                sketch_params: SketchParams {
                    sf_count: 3,
                    features_per_sf: 2,
                },
                reanchor: None,
                candidates,
                candidates_enough: enough,
                sketch_dupadj_misses: misses_only,
                ..DeltaConfig::recommended()
            };
            init_repo(
                &tmp.path().join(format!("repo-{misses_only}")),
                config(2, delta),
            )
        })
        .collect();
    let src = tmp.path().join("src");
    let mut contents = Vec::new();
    let mut runs: Vec<Vec<backup::BackupResult>> = vec![Vec::new(), Vec::new()];
    for v in 0..3 {
        contents.push(write_versions(&src, v));
        for (repo, results) in repos.iter().zip(runs.iter_mut()) {
            results.push(run_backup_cached(repo, &src, v, None));
        }
    }
    for (i, repo) in repos.iter().enumerate() {
        // Distinct cache sizes keep the two restores' target folders apart.
        restore_all(repo, tmp.path(), &contents, (64 << 20) + i);
        assert!(run_check(repo, true).unwrap().problems.is_empty());
    }
    let (all, misses) = (&runs[0], &runs[1]);
    for (v, (a, m)) in all.iter().zip(misses).enumerate() {
        let (sa, sm) = (&a.summary, &m.summary);
        assert_eq!(
            a.metrics.sketched_chunks, sa.new_chunks,
            "v{v}: every new chunk"
        );
        // DupAdj's deltas (of file data; a tree chunk's parent-tree deltas count there too,
        // and tree chunks are always sketched) are the chunks left unsketched.
        assert!(
            m.metrics.sketched_chunks + sm.dupadj_deltas >= sm.new_chunks,
            "v{v}: a DupAdj miss went unsketched: {} + {} < {}",
            m.metrics.sketched_chunks,
            sm.dupadj_deltas,
            sm.new_chunks
        );
        assert_eq!(
            (sa.bytes_after_delta, sa.delta_chunks, sa.sketch_deltas),
            (sm.bytes_after_delta, sm.delta_chunks, sm.sketch_deltas),
            "v{v}: the same chunks stored the same way"
        );
    }
    // Later versions: DupAdj resolves most new chunks, which are then never sketched.
    for v in 1..3 {
        assert!(misses[v].summary.dupadj_deltas > 0);
        assert!(
            misses[v].metrics.sketched_chunks < all[v].metrics.sketched_chunks,
            "v{v}: {} sketched, as many as without DARE's rule",
            misses[v].metrics.sketched_chunks
        );
    }
}

/// With no bases kept in memory, every candidate base is read back from the repository, and
/// the backup reads the regions ahead and opens them on the worker pool beside the dedup
/// thread: what is stored must be exactly what a backup with every base in memory stores,
/// and both must restore.
#[test]
fn bases_read_back_ahead_change_nothing_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let cold_cfg = DeltaConfig {
        base_cache_bytes: 0,
        ..DeltaConfig::recommended()
    };
    let cold = init_repo(&tmp.path().join("cold"), config(2, cold_cfg));
    let warm = init_repo(
        &tmp.path().join("warm"),
        config(2, DeltaConfig::recommended()),
    );
    let src = tmp.path().join("src");
    let mut contents: Contents = Vec::new();
    for v in 0..4 {
        contents.push(write_versions(&src, v));
        let c = run_backup_cached(&cold, &src, v, None);
        // Every base read back verifies (a region read ahead under the wrong key would not).
        assert!(c.notices.is_empty(), "version {v}: {:?}", c.notices);
        let w = run_backup_cached(&warm, &src, v, None);
        if v > 0 {
            assert!(
                c.metrics.bases.read_back > 0,
                "version {v}: {:?}",
                c.metrics
            );
            assert_eq!(c.metrics.bases.memory, 0, "version {v}");
            assert!(c.summary.delta_chunks > 0, "version {v}");
        }
        let (s, t) = (&c.summary, &w.summary);
        for (a, b) in [
            (s.delta_chunks, t.delta_chunks),
            (s.bytes_after_delta, t.bytes_after_delta),
            (s.bytes_added, t.bytes_added),
        ] {
            assert_eq!(a, b, "version {v}: cold {s:?} vs warm {t:?}");
        }
    }
    restore_all(&cold, tmp.path(), &contents, 64 << 20);
    assert!(run_check(&cold, true).unwrap().problems.is_empty());
}

/// On data that compresses poorly, the saving test compresses a chunk alone to weigh its
/// delta only until it has learnt how well the chunks compress (`backup::saving`): most of
/// the deltas are kept without compressing their chunk, and everything restores bit-exact.
#[test]
fn the_saving_test_stops_compressing_chunks_that_compress_poorly() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("r"), config(1, DeltaConfig::recommended()));
    let src = tmp.path().join("src");
    // Several batches: the stage learns from one batch for the next.
    let v0 = noise(6 << 20, 1);
    // A run of 300 new bytes every 2 KiB: deltas about a sixth of their chunk, above the
    // 8x rule, far below what a chunk of noise compresses to.
    let mut v1 = v0.clone();
    for (k, at) in (0..v1.len()).step_by(2048).enumerate() {
        let end = (at + 300).min(v1.len());
        v1[at..end].copy_from_slice(&noise(end - at, 100 + k as u64));
    }
    let mut contents: Contents = Vec::new();
    for (n, data) in [v0, v1].into_iter().enumerate() {
        let f = files([("data.bin", data)]);
        write_files(&src, &f);
        contents.push(f);
        let res = run_backup_cached(&repo, &src, n as u64, None);
        if n == 1 {
            let s = &res.summary;
            let compressed = res.metrics.saving_test_compressions;
            assert!(s.delta_chunks > 1500, "{s:?}");
            assert!(
                compressed >= 256 && compressed * 2 < s.delta_chunks,
                "{compressed} chunks compressed for {} deltas",
                s.delta_chunks
            );
        }
    }
    restore_all(&repo, tmp.path(), &contents, 64 << 20);
    assert!(run_check(&repo, true).unwrap().problems.is_empty());
}
