//! The restore caches (issue 16): every one restores bit-exact (delta chains, chunks repeated
//! inside a file, files larger than the assembly area, a cache of one container), the LRU
//! never holds more containers than its bound, and forward assembly reads each container
//! once per area, each container read one backend read. Reads are counted by a backend
//! wrapper that logs every data read (`get_range_into`; metadata sections are read with
//! `get_range`); the reads of the snapshot's tree stream, which no restore cache counts, are
//! taken out.

use crate::delta::run_backup;
use crate::intercept::{Hooks, Intercept};
use crate::support::{
    cache_root_for, config, every_restore_cache, files, init_repo, noise, restored_root, text,
    write_files, Files,
};
use dedelta_store::backend::{Backend, Result as BackendResult};
use dedelta_store::commands::{ls, restore};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::progress::NoProgress;
use dedelta_store::read::{walk_tree, PipelinedDecoder, PipelinedLocator, RestoreCacheChoice};
use dedelta_store::{IndexedRepository, Repository};
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Logs the container named by every data read, and passes every request on.
type Counting = Intercept<Arc<dyn Backend>, ReadLog>;

/// The containers [`Counting`] saw read, in order.
#[derive(Default)]
struct ReadLog(Mutex<Vec<String>>);

impl ReadLog {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

impl Hooks for ReadLog {
    fn container_data_read(
        &self,
        name: &str,
        _len: usize,
        read: &mut dyn FnMut() -> BackendResult<()>,
    ) -> BackendResult<()> {
        self.0.lock().unwrap().push(name.to_string());
        read()
    }
}

/// The data reads of restoring `snap`, without those of reading its tree (a walk of the tree
/// alone reads the same).
fn data_reads(
    repo: &IndexedRepository,
    counting: &Counting,
    snap: &dedelta_store::format::snapshot::Snapshot,
    mut reads: Vec<String>,
) -> Vec<String> {
    counting.take();
    walk_tree(repo, snap, |_, _| Ok(())).unwrap();
    for t in counting.take() {
        let at = reads
            .iter()
            .position(|r| *r == t)
            .expect("the tree is read too");
        reads.remove(at);
    }
    reads
}

/// Version `v` of the test tree: a 400 KB text edited a little more each version (deltas,
/// chained: each version's chunks are deltas of the last one's), a file of one noise block
/// repeated (chunks repeated inside a file), and a small file.
fn tree(v: u64) -> Files {
    let mut big = text(400_000, 7);
    for k in 0..v * 40 {
        let at = ((k * 7919 + v * 104_729) as usize * 31) % big.len();
        big[at] = b'#';
    }
    let block = noise(6_000, 9);
    let mut repeated = Vec::new();
    for _ in 0..8 {
        repeated.extend_from_slice(&block);
    }
    repeated.extend(text(3_000, 10 + v));
    files([
        ("big.txt", big),
        ("repeated.bin", repeated),
        ("small.txt", format!("version {v}\n").into_bytes()),
    ])
}

/// Four versions backed up; returns the repository reopened through a [`Counting`]
/// backend, the counter, and each version's tree.
fn four_versions(dir: &Path) -> (IndexedRepository, Arc<Counting>, Vec<Files>) {
    let path = dir.join("repo");
    let repo = init_repo(&path, config(1, DeltaConfig::recommended()));
    let src = dir.join("src");
    let mut trees = Vec::new();
    for v in 0..4 {
        let t = tree(v);
        write_files(&src, &t);
        run_backup(&repo, &src, v);
        trees.push(t);
    }
    let counting = Arc::new(Counting {
        inner: repo.backend().clone(),
        hooks: ReadLog::default(),
    });
    let counted = Repository::open_in_cache(counting.clone(), &cache_root_for(&path))
        .unwrap()
        .open_index()
        .unwrap();
    (counted, counting, trees)
}

#[test]
fn every_restore_cache_restores_bit_exact_within_its_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, counting, trees) = four_versions(tmp.path());
    let snaps = repo.snapshots().unwrap().snapshots;
    assert_eq!(snaps.len(), 4);
    let src = tmp.path().join("src");
    let mut caches = every_restore_cache();
    caches.push(RestoreCacheChoice::Lru { containers: 2 });
    caches.push(RestoreCacheChoice::Forward {
        area_bytes: 64 << 10,
    });
    for (k, cache) in caches.into_iter().enumerate() {
        for (i, (_, snap)) in snaps.iter().enumerate() {
            let target = tmp.path().join(format!("out-{k}-{i}"));
            let opts = restore::RestoreOptions {
                target: target.clone(),
                include: vec![],
                cache_bytes: 64 << 20,
                cache,
                ..Default::default()
            };
            counting.take();
            let st = restore::restore(&repo, snap, &opts, &NoProgress).unwrap();
            let reads = counting.take();
            let reads = data_reads(&repo, &counting, snap, reads);
            let what = format!("{cache:?}, version {i}: {:?}", st.restore_cache);
            assert!(st.errors.is_empty(), "{what}: {:?}", st.errors);
            let root = restored_root(&target, &src);
            for (name, data) in &trees[i] {
                assert!(
                    std::fs::read(root.join(name)).unwrap() == *data,
                    "{what}: {name}"
                );
            }
            let c = st.restore_cache;
            let distinct: HashSet<&String> = reads.iter().collect();
            assert!(c.containers_read >= distinct.len() as u64, "{what}");
            let want = st.bytes_written as f64 / 1e6 / c.containers_read as f64;
            assert!((st.speed_factor().unwrap() - want).abs() < 1e-12, "{what}");
            match cache {
                RestoreCacheChoice::Lru { containers } => {
                    assert_eq!(c.cache, "lru");
                    assert!(c.max_containers_held <= containers, "{what}");
                    // Regions are read one backend read each, on first use.
                    assert_eq!(reads.len() as u64, st.reads.regions_read, "{what}");
                    assert_eq!(c.regions_read, st.reads.regions_read, "{what}");
                }
                RestoreCacheChoice::Forward { area_bytes } => {
                    assert_eq!(c.cache, "forward");
                    // Each container read is one backend read (of the regions the area
                    // needs of it), and nothing else is read.
                    assert_eq!(reads.len() as u64, c.containers_read, "{what}");
                    if area_bytes >= 64 << 20 {
                        // One area holds the whole snapshot: each container is read once.
                        assert_eq!(c.areas, 1, "{what}");
                        assert_eq!(reads.len(), distinct.len(), "{what}: {reads:?}");
                    } else {
                        // 8 KiB and 64 KiB areas split big.txt (400 KB).
                        assert!(c.areas > 5, "{what}");
                    }
                }
            }
        }
    }
}

/// The latest version's big file, dumped through every cache, is the file.
#[test]
fn dump_through_every_restore_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, counting, trees) = four_versions(tmp.path());
    let (id, snap) = repo.find_snapshot("latest").unwrap();
    let src = tmp.path().join("src");
    let path = src.join("big.txt");
    let path = path.to_str().unwrap().as_bytes();
    for cache in every_restore_cache() {
        let mut out = Vec::new();
        counting.take();
        let (n, c) = ls::dump_with(&repo, &id, &snap, path, cache, 1 << 20, &mut out).unwrap();
        assert!(out == trees[3]["big.txt"], "{cache:?}");
        assert_eq!(n, out.len() as u64);
        if let RestoreCacheChoice::Forward { .. } = cache {
            let reads = data_reads(&repo, &counting, &snap, counting.take());
            assert_eq!(reads.len() as u64, c.containers_read, "{cache:?}");
        }
    }
}

/// With one container, the LRU reads at least as often as with 512; forward assembly with
/// one area reads no container twice, so never more than an LRU large enough to hold them all.
#[test]
fn fewer_containers_read_with_more_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, _) = four_versions(tmp.path());
    let (_, snap) = repo.find_snapshot("latest").unwrap();
    let read = |cache: RestoreCacheChoice, name: &str| {
        let opts = restore::RestoreOptions {
            target: tmp.path().join(name),
            include: vec![],
            cache_bytes: 64 << 20,
            cache,
            ..Default::default()
        };
        let st = restore::restore(&repo, &snap, &opts, &NoProgress).unwrap();
        st.restore_cache.containers_read
    };
    let one = read(RestoreCacheChoice::Lru { containers: 1 }, "one");
    let all = read(RestoreCacheChoice::default(), "all");
    let fa = read(
        RestoreCacheChoice::Forward {
            area_bytes: 64 << 20,
        },
        "fa",
    );
    assert!(one > all, "{one} vs {all}");
    assert!(fa <= all, "{fa} vs {all}");
}

/// A restore finds most chunks beside the one it located before (a recipe runs on through its
/// container, and consecutive deltas' bases through theirs) without asking the index: counted,
/// each chunk and base located once either way, and the files restored bit-exact.
#[test]
fn a_sequential_recipe_restores_with_few_index_lookups() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, trees) = four_versions(tmp.path());
    let src = tmp.path().join("src");
    for (i, (_, snap)) in repo.snapshots().unwrap().snapshots.iter().enumerate() {
        let target = tmp.path().join(format!("out-{i}"));
        let opts = restore::RestoreOptions {
            target: target.clone(),
            include: vec![],
            cache_bytes: 64 << 20,
            ..Default::default()
        };
        let st = restore::restore(&repo, snap, &opts, &NoProgress).unwrap();
        assert!(st.errors.is_empty(), "{:?}", st.errors);
        let root = restored_root(&target, &src);
        for (name, data) in &trees[i] {
            assert!(std::fs::read(root.join(name)).unwrap() == *data, "{name}");
        }
        let r = st.reads;
        let chunks: usize = snap_chunks(&repo, snap);
        // Every chunk of the recipes is located (a base the decoder holds is not).
        assert!(
            r.index_lookups + r.index_lookups_spared >= chunks as u64,
            "version {i}: {r:?}, {chunks} chunks"
        );
        assert!(
            r.index_lookups * 3 < r.index_lookups_spared,
            "version {i}: {r:?}"
        );
    }
}

/// Chunk references in the recipes of `snap`'s files.
fn snap_chunks(
    repo: &IndexedRepository,
    snap: &dedelta_store::format::snapshot::Snapshot,
) -> usize {
    let mut n = 0;
    walk_tree(repo, snap, |_, c| {
        n += c.len();
        Ok(())
    })
    .unwrap();
    n
}

/// Regions are decompressed only as far as the chunks announced to the locator need (a dump
/// announces its file's recipe; issue 14): the first chunks of a file decompress the first
/// zstd block of their region, not all of it; a chunk past that point, never announced, has
/// its region decompressed again, whole; every chunk verifies, and a dump is bit-exact.
#[test]
fn announced_chunks_decompress_their_regions_only_as_far_as_needed() {
    let tmp = tempfile::tempdir().unwrap();
    // Regions of 256 KiB (two zstd blocks of 128 KiB), chunks of 32 KiB on average.
    let cfg = config(16, DeltaConfig::recommended());
    let region_size = cfg.region_size as u64;
    let repo = init_repo(&tmp.path().join("repo"), cfg);
    let src = tmp.path().join("src");
    let big = text(1_500_000, 3);
    write_files(&src, &files([("big.txt", big.clone())]));
    run_backup(&repo, &src, 0);
    let (id, snap) = repo.snapshots().unwrap().snapshots.pop().unwrap();
    let (mut recipe, mut path) = (Vec::new(), Vec::new());
    walk_tree(&repo, &snap, |node, chunks| {
        if node.path.ends_with(b"big.txt") {
            (recipe, path) = (chunks, node.path);
        }
        Ok(())
    })
    .unwrap();
    let starts: Vec<u64> = recipe
        .iter()
        .scan(0u64, |at, c| {
            let s = *at;
            *at += u64::from(c.len);
            Some(s)
        })
        .collect();
    let mut locator =
        PipelinedLocator::new(&repo, RestoreCacheChoice::default(), 64 << 20).unwrap();
    let mut decoder = PipelinedDecoder::new(repo.chunk_hasher(), &RestoreCacheChoice::default());
    let mut fetch = |locator: &mut PipelinedLocator<'_>, k: usize| {
        let f = locator.fetch(&recipe[k].id).unwrap();
        let at = starts[k] as usize;
        let data = decoder.decode(&f).unwrap();
        assert!(data == &big[at..at + data.len()], "chunk {k}");
    };
    locator.announce(recipe[..2].iter().map(|c| c.id));
    fetch(&mut locator, 0);
    fetch(&mut locator, 1);
    let s = locator.stats();
    assert_eq!((s.regions_read, s.regions_decoded_again), (1, 0), "{s:?}");
    assert!(
        s.bytes_decompressed <= region_size / 2,
        "one block of the region: {s:?}"
    );
    // A chunk of the same region past its first block, never announced.
    let late = (0..recipe.len())
        .rev()
        .find(|&k| starts[k] + u64::from(recipe[k].len) < region_size - 16_384)
        .unwrap();
    assert!(starts[late] + u64::from(recipe[late].len) > region_size / 2);
    fetch(&mut locator, late);
    let s = locator.stats();
    assert_eq!((s.regions_read, s.regions_decoded_again), (2, 1), "{s:?}");
    assert!(s.bytes_decompressed > region_size, "{s:?}");
    // A whole dump announces the whole recipe: bit-exact.
    let mut out = Vec::new();
    ls::dump(&repo, &id, &snap, &path, &mut out).unwrap();
    assert!(out == big);
}

/// A dump's output goes out in buffers of 1 MiB from a thread of its own, and a restore's
/// files are written on its target thread (issue 20): a file of several buffers arrives
/// whole and in order either way, and an output that fails partway ends the dump with the
/// output's error, without hanging.
#[test]
fn a_dump_of_several_output_buffers_arrives_in_order_and_reports_a_failing_output() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &tmp.path().join("repo"),
        config(16, DeltaConfig::recommended()),
    );
    let src = tmp.path().join("src");
    let big = text(9_000_000, 7);
    write_files(&src, &files([("big.txt", big.clone())]));
    run_backup(&repo, &src, 0);
    let (id, snap) = repo.snapshots().unwrap().snapshots.pop().unwrap();
    let mut path = Vec::new();
    walk_tree(&repo, &snap, |node, _| {
        if node.path.ends_with(b"big.txt") {
            path = node.path;
        }
        Ok(())
    })
    .unwrap();
    let mut out = Vec::new();
    assert_eq!(
        ls::dump(&repo, &id, &snap, &path, &mut out).unwrap(),
        big.len() as u64
    );
    assert!(out == big);
    let target = tmp.path().join("restored");
    let opts = restore::RestoreOptions {
        target: target.clone(),
        ..Default::default()
    };
    let st = restore::restore(&repo, &snap, &opts, &NoProgress).unwrap();
    assert!(st.errors.is_empty(), "{:?}", st.errors);
    let restored = std::fs::read(target.join(String::from_utf8(path.clone()).unwrap())).unwrap();
    assert!(restored == big, "restored bit-exact");

    /// Takes that many more bytes, then fails.
    struct FailsAfter(usize);
    impl std::io::Write for FailsAfter {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if b.len() > self.0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "the reader went away",
                ));
            }
            self.0 -= b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let err = ls::dump(&repo, &id, &snap, &path, &mut FailsAfter(1_500_000)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("writing to standard output") && msg.contains("went away"),
        "{msg}"
    );
}

/// A delta whose base is stored in full is rebuilt each time it is fetched: the decoding half
/// uses that base where it lies and does not cache it, and the locating half, mirroring the
/// decoder's cache, sends it again (taken as held, the delta would fail as "not available").
/// Every chunk of every version fetched twice in a row decodes, and its fingerprint matches.
#[test]
fn a_delta_on_a_base_stored_in_full_is_sent_again_each_time() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, _) = four_versions(tmp.path());
    let mut ids = Vec::new();
    for (_, snap) in repo.snapshots().unwrap().snapshots {
        walk_tree(&repo, &snap, |_, chunks| {
            ids.extend(chunks.iter().map(|c| c.id));
            Ok(())
        })
        .unwrap();
    }
    let mut locator =
        PipelinedLocator::new(&repo, RestoreCacheChoice::default(), 64 << 20).unwrap();
    let mut decoder = PipelinedDecoder::new(repo.chunk_hasher(), &RestoreCacheChoice::default());
    for id in &ids {
        for _ in 0..2 {
            let f = locator.fetch(id).unwrap();
            if let Err(e) = decoder.decode(&f) {
                panic!("chunk {id}: {e}");
            }
        }
    }
    let s = decoder.stats();
    assert!(s.deltas_decoded > 0 && s.bases_in_place > 0, "{s:?}");
}
