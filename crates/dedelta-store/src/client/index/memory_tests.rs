//! Tests of the index's memory outside the bounded caches (issue 16: at most 4 bytes per
//! stored chunk) and of the super-feature filters' budget.

use super::*;

/// `n` full entries with three distinct super-features each, chunk ids from `first`.
fn unique_container(seed: u64, first: u64, n: u64) -> (ContainerId, ContainerMeta) {
    let entries = (first..first + n)
        .map(|c| EntryMeta {
            id: ChunkId::of(&c.to_le_bytes()),
            kind: EntryKind::Full,
            region: 0,
            offset: 0,
            stored_len: 100,
            original_len: 100,
            super_features: vec![mix64(c), mix64(c ^ 1 << 60), mix64(c ^ 2 << 60)],
        })
        .collect();
    let id = ContainerId(ChunkId::of(&(seed | 1 << 63).to_le_bytes()).0);
    (
        id,
        ContainerMeta {
            regions: vec![],
            entries,
        },
    )
}

/// The lookups a locality backup with the full sketch index makes for 2,000 new chunks and
/// some old ones: the global filter, then the runs for what it lets through, and every key
/// of every chunk. Their answers.
fn ask(index: &ChunkIndex, n: u64) -> Vec<Option<u32>> {
    let (filter, _) = index.fingerprint_filter().unwrap();
    let r = index.reader().unwrap();
    let mut answers = Vec::new();
    for c in (n..n + 2_000).chain((0..n).step_by(97)) {
        let id = ChunkId::of(&c.to_le_bytes());
        if filter.contains(&id) {
            answers.push(r.get(&id).unwrap().map(|l| l.entry));
        }
        for (p, sf) in [mix64(c), mix64(c ^ 1 << 60), mix64(c ^ 2 << 60)]
            .into_iter()
            .enumerate()
        {
            answers.push(r.sketch(p, sf).unwrap().map(|id| u32::from(id.0[0])));
        }
    }
    answers
}

/// An index of 60,000 unique chunks with three keys each, after the lookups of new data a
/// locality backup with the full sketch index makes (the global filter, every run's
/// fingerprint filter and super-feature filter asked): under 4 bytes per chunk outside the
/// super-feature filters, which stay within their budget; with no budget the same lookups
/// give the same answers from the buckets.
#[test]
fn unique_data_stays_under_four_bytes_per_chunk_outside_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let n = 60_000u64;
    let per = 2_000u64;
    let index = ChunkIndex::open(&path).unwrap();
    for c in 0..n / per {
        let (id, meta) = unique_container(c, c * per, per);
        index.insert_container(id, &meta).unwrap();
    }
    index.compact_if_worthwhile().unwrap();
    let chunks: u64 = index.runs().iter().map(|r| r.1).sum();
    assert_eq!(chunks, n);
    let with_filters = ask(&index, n);
    let outside = index.memory_bytes() as f64 / n as f64;
    assert!(outside < 4.0, "{outside:.2} bytes per chunk");
    let held = index.sketch_lookups();
    assert!(held.filter_bytes > 3 * n, "{held:?}");
    assert!(held.filter_bytes <= held.filter_budget);
    assert_eq!(held.unfiltered, 0);
    drop(index);

    let index = ChunkIndex::open(&path).unwrap();
    index.set_sketch_filter_budget(0);
    assert_eq!(ask(&index, n), with_filters);
    let unheld = index.sketch_lookups();
    assert_eq!(unheld.filter_bytes, 0);
    assert_eq!(unheld.unfiltered, unheld.probes);
    assert!(unheld.bucket_reads > 2_000 * 3, "{unheld:?}");
}
