//! Tests of [`super`] (run.rs).

use super::*;
use dedelta_core::sketch::SketchKeep;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::AtomicU64;

fn id(n: u64) -> [u8; 32] {
    ChunkId::of(&n.to_le_bytes()).0
}

/// The model of a sequence of runs: newest chunk entry wins, oldest live key wins (the
/// newest with [`SketchKeep::Newest`]).
#[derive(Default)]
struct Model {
    chunks: HashMap<[u8; 32], u64>,
    sketches: BTreeMap<u64, [u8; 32]>,
    keep: SketchKeep,
}

fn check(model: &Model, runs: &[&Run], probes: &[u64]) {
    for (id, loc) in &model.chunks {
        let got = runs
            .iter()
            .rev()
            .find_map(|r| r.get(&ChunkId(*id)).unwrap());
        assert_eq!(got, Some(*loc));
    }
    for p in probes {
        let i = id(*p);
        let got = runs.iter().rev().find_map(|r| r.get(&ChunkId(i)).unwrap());
        assert_eq!(got, model.chunks.get(&i).copied());
    }
    for (key, chunk) in &model.sketches {
        let got = match model.keep {
            SketchKeep::Oldest => runs.iter().find_map(|r| r.sketch(*key).unwrap()),
            SketchKeep::Newest => runs.iter().rev().find_map(|r| r.sketch(*key).unwrap()),
        };
        assert_eq!(got, Some(ChunkId(*chunk)), "key {key}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Batches written as runs, then merged (with some chunks dead), answer as a map
    /// does.
    #[test]
    fn runs_and_merges_answer_as_a_map(
        batches in prop::collection::vec(
            prop::collection::vec((0u64..400, 0u64..1_000_000, prop::option::of(0u64..300)), 0..200),
            1..5),
        dead in prop::collection::hash_set(0u64..400, 0..40),
        newest: bool,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let keep = if newest { SketchKeep::Newest } else { SketchKeep::Oldest };
        let mut model = Model { keep, ..Model::default() };
        let mut runs = Vec::new();
        for (n, batch) in batches.iter().enumerate() {
            let chunks: Vec<_> = batch.iter().map(|(c, loc, _)| (id(*c), *loc)).collect();
            let sketches: Vec<_> = batch
                .iter()
                .filter_map(|(c, _, k)| k.map(|k| (k, id(*c))))
                .collect();
            for (c, loc) in &chunks {
                model.chunks.insert(*c, *loc);
            }
            for (k, c) in &sketches {
                match keep {
                    SketchKeep::Oldest => {
                        model.sketches.entry(*k).or_insert(*c);
                    }
                    SketchKeep::Newest => {
                        model.sketches.insert(*k, *c);
                    }
                }
            }
            let path = dir.path().join(format!("{n}.run"));
            if let Some(run) = write_batch(&path, n as u64, chunks, sketches, keep).unwrap() {
                runs.push(run);
            }
        }
        let probes: Vec<u64> = (0..400).collect();
        let refs: Vec<&Run> = runs.iter().collect();
        check(&model, &refs, &probes);
        // Runs whose super-feature filters their budget has no room for answer the same
        // (reading buckets), and hold no filter.
        let none = Arc::new(FilterBudget::new(0));
        let unheld: Vec<Run> = runs
            .iter()
            .map(|r| {
                let again = Run::open(r.path(), r.seq).unwrap();
                again.hold_sketch_filter_within(&none);
                again
            })
            .collect();
        check(&model, &unheld.iter().collect::<Vec<_>>(), &probes);
        prop_assert!(unheld.iter().all(|r| r.sketch_filter_bytes() == 0));
        prop_assert_eq!(none.held(), 0);
        // Merging changes no answer.
        let merged = merge(&refs, None, &dir.path().join("m.run"), 99, keep).unwrap();
        let merged: Vec<&Run> = merged.iter().collect();
        check(&model, &merged, &probes);
        // Dead chunks leave, with the keys naming them.
        let dead_ids: HashSet<ChunkId> = dead.iter().map(|d| ChunkId(id(*d))).collect();
        let pruned =
            merge(&refs, Some(&dead_ids), &dir.path().join("p.run"), 100, keep).unwrap();
        model.chunks.retain(|c, _| !dead_ids.contains(&ChunkId(*c)));
        // The oldest (newest) key whose chunk stays: recompute from the batches.
        model.sketches.clear();
        let ordered: Vec<&Vec<(u64, u64, Option<u64>)>> = match keep {
            SketchKeep::Oldest => batches.iter().collect(),
            SketchKeep::Newest => batches.iter().rev().collect(),
        };
        for batch in ordered {
            for (c, _, k) in batch {
                if let Some(k) = k {
                    if !dead.contains(c) && !model.sketches.contains_key(k) {
                        // The model keeps the first (last) recorded live chunk per key,
                        // but a run keeps only the first (last) of its own batch: a key
                        // whose kept chunk in a batch is dead loses that batch.
                        let mut with_key = batch.iter().filter(|(_, _, k2)| k2 == &Some(*k));
                        let kept_in_batch = match keep {
                            SketchKeep::Oldest => with_key.next(),
                            SketchKeep::Newest => with_key.next_back(),
                        }
                        .map(|(c2, _, _)| *c2);
                        if kept_in_batch == Some(*c) {
                            model.sketches.insert(*k, id(*c));
                        }
                    }
                }
            }
        }
        let pruned: Vec<&Run> = pruned.iter().collect();
        check(&model, &pruned, &probes);
    }
}

#[test]
fn every_torn_or_changed_byte_of_the_tail_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.run");
    let chunks: Vec<_> = (0..300).map(|n| (id(n), n)).collect();
    let sketches: Vec<_> = (0..100).map(|n| (n * 7, id(n))).collect();
    let run = write_batch(&path, 1, chunks, sketches, SketchKeep::Oldest)
        .unwrap()
        .unwrap();
    let good = std::fs::read(&path).unwrap();
    // 100 keys: no bucket bits, so keys take 5 bytes and references 3.
    let tail_start = HEADER.len() + 300 * CHUNK_ENTRY + 100 * 8;
    drop(run);
    for cut in [0, 10, good.len() / 2, good.len() - 1] {
        std::fs::write(&path, &good[..cut]).unwrap();
        assert!(matches!(Run::open(&path, 1), Err(Error::IndexDamaged(_))));
    }
    for at in (tail_start..good.len())
        .step_by(97)
        .chain([0, good.len() - 1])
    {
        let mut bad = good.clone();
        bad[at] ^= 0x20;
        std::fs::write(&path, &bad).unwrap();
        assert!(
            matches!(Run::open(&path, 1), Err(Error::IndexDamaged(_))),
            "byte {at}"
        );
    }
}

#[test]
fn a_changed_entry_is_refused_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.run");
    let chunks: Vec<_> = (0..300).map(|n| (id(n), n)).collect();
    let sketches: Vec<_> = (0..300).map(|n| (n, id(n))).collect();
    write_batch(&path, 1, chunks, sketches, SketchKeep::Oldest)
        .unwrap()
        .unwrap();
    let good = std::fs::read(&path).unwrap();
    for at in [
        HEADER.len() + 5,
        HEADER.len() + 200 * CHUNK_ENTRY + 33,
        HEADER.len() + 300 * CHUNK_ENTRY + 50,
    ] {
        let mut bad = good.clone();
        bad[at] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let run = Run::open(&path, 1).unwrap();
        let mut any_damage = false;
        for n in 0..300 {
            any_damage |= matches!(run.get(&ChunkId(id(n))), Err(Error::IndexDamaged(_)));
            any_damage |= matches!(run.sketch(n), Err(Error::IndexDamaged(_)));
            if let Ok(Some(loc)) = run.get(&ChunkId(id(n))) {
                assert_eq!(loc, n);
            }
        }
        assert!(any_damage, "byte {at}");
        let mut c = run.chunk_cursor();
        let mut s = run.sketch_cursor();
        let streamed = (|| -> Result<()> {
            while c.next()?.is_some() {}
            while s.next()?.is_some() {}
            Ok(())
        })();
        assert!(matches!(streamed, Err(Error::IndexDamaged(_))));
    }
}

#[test]
fn a_large_run_stays_under_64_bytes_per_chunk_with_three_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.run");
    let n = 100_000u64;
    let chunks: Vec<_> = (0..n).map(|c| (id(c), c)).collect();
    let sketches: Vec<_> = (0..3 * n).map(|s| (mix64(s) >> 24, id(s / 3))).collect();
    let run = write_batch(&path, 1, chunks, sketches.clone(), SketchKeep::Oldest)
        .unwrap()
        .unwrap();
    // The run as written is the run as read back.
    let reopened = Run::open(&path, 1).unwrap();
    assert_eq!(
        (run.chunks, run.sketches, run.file_len, run.tail_crc),
        (
            reopened.chunks,
            reopened.sketches,
            reopened.file_len,
            reopened.tail_crc
        )
    );
    // Only the bucket directories are held until a lookup asks a filter (issue 16: RAM
    // per chunk outside the bounded caches); then the filter it asked, about 10 bits per
    // chunk or 9 per key.
    let dirs = reopened.memory_bytes();
    assert_eq!(run.memory_bytes(), dirs);
    // 8 bytes per bucket of about 64 chunk entries or 256 keys.
    assert!(dirs < n as usize, "{dirs} bytes of directories");
    assert_eq!(reopened.get(&ChunkId(id(7))).unwrap(), Some(7));
    let chunk_filter = reopened.memory_bytes() - dirs;
    assert!((n * 10 / 8..n * 11 / 8).contains(&(chunk_filter as u64)));
    assert!(reopened.may_hold_sketch(sketches[0].0));
    // The super-feature filter is counted apart (a bounded cache, see `FilterBudget`).
    assert_eq!(reopened.memory_bytes(), dirs + chunk_filter);
    let sketch_filter = reopened.sketch_filter_bytes();
    assert!((3 * n * 9 / 8..3 * n * 10 / 8).contains(&(sketch_filter as u64)));
    // Issue 16: what stays in memory outside the bounded caches, with the locality index's
    // global filter (10 bits per fingerprint of 1.5 times the chunks), is under 4 bytes a
    // chunk even when every chunk has three keys: 1.25 for this filter, 1.875 for the
    // global one, the rest directories.
    let global = (n * 3 / 2 * super::super::filter::BITS_PER_KEY).div_ceil(512) * 64;
    let outside = (dirs + chunk_filter) as f64 + global as f64;
    assert!(
        outside / (n as f64) < 4.0,
        "{} bytes per chunk",
        outside / n as f64
    );
    // 8 bytes per bucket of 32-64 chunk entries and of 128-256 keys: at most 0.25 + 3 x
    // 0.0625 bytes per chunk with three keys (0.25 + 3 x 0.25 with 64 keys a bucket).
    assert!(
        (dirs as f64) / (n as f64) < 0.44,
        "{dirs} bytes of directories"
    );
    let per_chunk = run.file_len as f64 / n as f64;
    // 37 + 3 x 7 bytes of entries (a 40-bit key's top 8 bits are its bucket's), 4.6 of
    // filters, under 1 of bucket directories.
    assert!(per_chunk < 64.0, "{per_chunk} bytes per chunk");
    // Every key is found with its top bits restored from its bucket, and a key that
    // differs only in its top 8 bits is not.
    for (key, chunk) in sketches.iter().step_by(97) {
        assert_eq!(run.sketch(*key).unwrap(), Some(ChunkId(*chunk)));
        assert_eq!(run.sketch(*key ^ (0x5a << 32)).unwrap(), None);
    }
    let mut c = run.sketch_cursor();
    let mut keys = Vec::new();
    while let Some(Entry::Sketch(key, _)) = c.next().unwrap() {
        keys.push(key);
    }
    let mut want: Vec<u64> = sketches.iter().map(|s| s.0).collect();
    want.sort_unstable();
    want.dedup();
    assert_eq!(keys, want);
    let misses = (n..n + 100_000)
        .filter(|c| {
            let (h1, h2) = chunk_hashes(&id(*c));
            run.chunk_bloom.contains(&run.file, h1, h2)
        })
        .count();
    assert!(misses < 2_000, "{misses} false positives in 100000");
}

/// Super-feature lookups past the budget read buckets, and are counted as such; within it
/// the filter turns most absent keys away and its false positives are counted.
#[test]
fn sketch_lookups_count_what_they_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.run");
    let n = 20_000u64;
    let chunks: Vec<_> = (0..n).map(|c| (id(c), c)).collect();
    let sketches: Vec<_> = (0..3 * n).map(|s| (mix64(s) >> 24, id(s / 3))).collect();
    write_batch(&path, 1, chunks, sketches.clone(), SketchKeep::Oldest)
        .unwrap()
        .unwrap();
    let absent: Vec<u64> = (3 * n..3 * n + 10_000).map(|s| mix64(s) >> 24).collect();
    let ask = |run: &Run, counts: &SketchCounts| {
        for (key, chunk) in sketches.iter().step_by(31) {
            assert_eq!(
                run.sketch_counting(*key, counts).unwrap(),
                Some(ChunkId(*chunk))
            );
        }
        for key in &absent {
            assert_eq!(run.sketch_counting(*key, counts).unwrap(), None);
        }
    };
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let present = sketches.iter().step_by(31).count() as u64;
    let budget = Arc::new(FilterBudget::new(0));
    let unheld = Run::open(&path, 1).unwrap();
    unheld.hold_sketch_filter_within(&budget);
    let counts = SketchCounts::default();
    ask(&unheld, &counts);
    assert_eq!(g(&counts.probes), present + 10_000);
    assert_eq!(g(&counts.unfiltered), present + 10_000);
    assert_eq!(g(&counts.passed), 0);
    assert!(g(&counts.bucket_reads) > present + 9_000);
    assert_eq!(unheld.sketch_filter_bytes(), 0);
    // With room: the filter is held and its false positives are about 1.8 %.
    budget.set_limit(u64::MAX);
    let counts = SketchCounts::default();
    ask(&unheld, &counts);
    assert_eq!(g(&counts.unfiltered), 0);
    assert_eq!(g(&counts.passed_found), present);
    let false_positives = g(&counts.passed) - present;
    assert!(false_positives < 400, "{false_positives} of 10000");
    assert_eq!(g(&counts.bucket_reads), g(&counts.passed));
    assert!(unheld.sketch_filter_bytes() > 0);
    assert_eq!(budget.held() as usize, unheld.sketch_filter_bytes() + 9);
    drop(unheld);
    assert_eq!(budget.held(), 0);
}

/// A filter read after the run was opened that no longer matches what the open verified
/// (the file changed under it) is not used: every key is a "maybe", and the bucket reads
/// give the right answers.
#[test]
fn a_filter_damaged_after_open_costs_reads_not_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("r.run");
    let chunks: Vec<_> = (0..5_000u64).map(|c| (id(c), c)).collect();
    write_batch(&path, 1, chunks, Vec::new(), SketchKeep::Oldest)
        .unwrap()
        .unwrap();
    let run = Run::open(&path, 1).unwrap();
    // Zero the chunk filter's words on disk (they follow the probes byte and the count).
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let filter = &run.chunk_bloom;
    let (at, len) = filter.span();
    f.write_all_at(&vec![0u8; len - 9], at + 9).unwrap();
    assert_eq!(run.get(&ChunkId(id(4_321))).unwrap(), Some(4_321));
    assert_eq!(run.get(&ChunkId(id(9_999))).unwrap(), None);
    assert!(
        run.may_hold(&ChunkId(id(9_999))),
        "a damaged filter answers maybe"
    );
    assert_eq!(filter.memory_bytes(), 0, "nothing held for it");
    assert!(
        Run::open(&path, 1).is_err(),
        "the tail no longer matches its checksum"
    );
}

/// A small run reads its first lookups' buckets alone (a command that looks up a few chunks
/// does not read the whole run: issue 14), then is read whole and answers from memory from
/// then on: a lookup costs no read (issue 20: 8,943 `pread`s per incremental backup), with
/// the same answers.
#[test]
fn a_small_run_answers_from_memory_after_its_first_lookups() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("r.run");
    let chunks: Vec<_> = (0..3_000u64).map(|c| (id(c), c)).collect();
    let sketches: Vec<_> = (0..3_000u64).map(|n| (n * 7_919, id(n))).collect();
    write_batch(&path, 1, chunks, sketches, SketchKeep::Oldest)
        .unwrap()
        .unwrap();
    let run = Run::open(&path, 1).unwrap();
    assert_eq!(run.resident_bytes(), 0);
    for c in 0..u64::from(RESIDENT_AFTER_READS) {
        assert_eq!(run.get(&ChunkId(id(c))).unwrap(), Some(c));
        assert_eq!(run.resident_bytes(), 0, "lookup {c} read its bucket alone");
    }
    assert_eq!(run.get(&ChunkId(id(17))).unwrap(), Some(17));
    let areas = (run.tail_offset - HEADER.len() as u64) as usize;
    assert_eq!(run.resident_bytes(), areas);
    // The entries on disk are gone: the answers come from memory, all of them.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&vec![0u8; areas], HEADER.len() as u64)
        .unwrap();
    for c in 0..3_000u64 {
        assert_eq!(run.get(&ChunkId(id(c))).unwrap(), Some(c));
        assert_eq!(run.sketch(c * 7_919).unwrap(), Some(ChunkId(id(c))));
    }
    assert_eq!(run.get(&ChunkId(id(3_000))).unwrap(), None);
    // A run opened now cannot be read whole (every bucket fails its CRC): it reads bucket by
    // bucket and reports the damage a lookup meets.
    let run = Run::open(&path, 1).unwrap();
    assert!(matches!(
        run.get(&ChunkId(id(17))),
        Err(Error::IndexDamaged(_))
    ));
    assert!(run.resident().is_none());
}
