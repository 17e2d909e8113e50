//! Tests of [`super`] (the fingerprint index strategies).

use super::*;
use crate::backend::local::LocalBackend;
use crate::backend::Backend;
use crate::backup::recent_containers::TRIES_PER_MISS;
use crate::client::index::{ChunkIndex, FingerprintFilter};
use crate::format::container::{ContainerMeta, EntryKind, EntryMeta};

fn container(seed: u8, ids: std::ops::Range<u64>) -> (ContainerId, ContainerMeta) {
    let entries = ids
        .map(|c| EntryMeta {
            id: ChunkId::of(&c.to_le_bytes()),
            kind: EntryKind::Full,
            region: 0,
            offset: 0,
            stored_len: 100,
            original_len: 100,
            super_features: vec![],
        })
        .collect();
    (
        ContainerId([seed; 32]),
        ContainerMeta {
            regions: vec![],
            entries,
        },
    )
}

/// The global filter's false positives are turned away by the runs' own filters before the
/// hints are tried: they spend no hint and read no bucket. (They spent two hints each, and
/// eight in a row stopped the hints for the rest of a backup: 301 of 449 on-disk lookups on
/// 30 Redis dumps with deduplication alone.)
#[test]
fn false_positives_of_the_filter_spend_no_hints() {
    let dir = tempfile::tempdir().unwrap();
    let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
    let (id, meta) = container(1, 0..5_000);
    index.insert_container(id, &meta).unwrap();
    let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new(dir.path().join("repo")));
    let hints: Vec<ContainerId> = (10..40).map(|s| ContainerId([s; 32])).collect();
    let locality = LocalityIndex::new(
        index.reader().unwrap(),
        Arc::new(DamageSet::default()),
        Arc::new(FingerprintFilter::all_set()),
        backend,
        8,
    )
    .with_hints(hints.clone());
    for c in 100_000..100_300u64 {
        assert_eq!(
            locality
                .container_of(&ChunkId::of(&c.to_le_bytes()))
                .unwrap(),
            None
        );
    }
    let l = locality.counters();
    assert_eq!(l.filter_negatives, 0);
    assert_eq!(l.filter_false_positives, 300, "{l:?}");
    // Only those the run's filter lets through too (about 1 %) read a bucket and try hints.
    assert!(l.disk_lookups <= 8, "{l:?}");
    assert!(l.hinted_prefetches <= 2 * l.disk_lookups, "{l:?}");
    // The hints have not stopped: a chunk the index holds is looked for in the next two
    // first (their containers are missing from the backend and fail to load), then the
    // index answers.
    let before = locality.counters();
    assert_eq!(
        locality.container_of(&meta.entries[7].id).unwrap(),
        Some(id)
    );
    let l = locality.counters();
    assert_eq!(
        l.hinted_prefetches - before.hinted_prefetches,
        TRIES_PER_MISS as u64
    );
    assert_eq!(l.disk_lookups, before.disk_lookups + 1, "{l:?}");
}

/// A container of `entries` (id and kind; the bytes do not matter here) stored in `backend`
/// and indexed in `index`.
fn stored(
    backend: &dyn Backend,
    index: &ChunkIndex,
    entries: &[(ChunkId, EntryKind)],
) -> ContainerId {
    use crate::format::container::{ContainerBuilder, RegionBuilder};
    let mut region = RegionBuilder::default();
    for (id, kind) in entries {
        region.push(*id, *kind, &id.0, 32, vec![]);
    }
    let mut b = ContainerBuilder::new();
    b.add_region(region.compress(dedelta_core::compress::Compression::None));
    let (cid, file, meta) = b.seal();
    backend
        .put(crate::backend::FileKind::Container, &cid.to_hex(), &file)
        .unwrap();
    index.insert_container(cid, &meta).unwrap();
    cid
}

/// The cache-aware filter's view of the fingerprint cache takes, when the stream reaches a
/// container, the metadata the pool read for it, even after the pool's cache (running ahead
/// of the stream) evicted it, or after the view itself evicted it and the stream meets it
/// again: the view reads no container again, and judges as before. With one-container
/// caches the view read every container here a second time (and the first one a third):
/// such re-reads made backup with the filter 1.52x deduplication's modelled disk time on the
/// SQLAlchemy tar series with 4-container caches (docs/eval/papers.md).
#[test]
fn the_filters_view_reads_no_container_the_pool_read() {
    let dir = tempfile::tempdir().unwrap();
    let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
    let backend: Arc<dyn Backend> = Arc::new(crate::backend::memory::MemoryBackend::default());
    let (base, old_delta, other) = (
        ChunkId::of(b"base"),
        ChunkId::of(b"delta"),
        ChunkId::of(b"other"),
    );
    let c1 = stored(backend.as_ref(), &index, &[(base, EntryKind::Full)]);
    let c2 = stored(
        backend.as_ref(),
        &index,
        &[(old_delta, EntryKind::delta(base))],
    );
    let c3 = stored(backend.as_ref(), &index, &[(other, EntryKind::Full)]);
    let locality = LocalityIndex::new(
        index.reader().unwrap(),
        Arc::new(DamageSet::default()),
        Arc::new(FingerprintFilter::all_set()),
        backend,
        1,
    )
    .judging_in_stream_order();
    // The pool looks up all three chunks before the stream reaches any: its cache of one
    // container evicts the first two.
    for (id, c) in [(base, c1), (old_delta, c2), (other, c3)] {
        assert_eq!(locality.container_of(&id).unwrap(), Some(c));
    }
    assert_eq!(locality.counters().prefetches, 3);
    locality.reached(&c1);
    assert_eq!(locality.cached_copy(&base), CachedCopy::Full);
    locality.reached(&c2);
    // The view holds one container too: the delta's base left it when the stream reached
    // the delta's container, so the duplicate is base-fragmented.
    assert_eq!(
        locality.cached_copy(&old_delta),
        CachedCopy::DeltaBaseMissing
    );
    locality.reached(&c3);
    assert_eq!(locality.cached_copy(&other), CachedCopy::Full);
    // The stream meets the first container again: the view evicted it, the pool's cache
    // let it go long before; its metadata was kept.
    locality.reached(&c1);
    assert_eq!(locality.cached_copy(&base), CachedCopy::Full);
    let l = locality.counters();
    assert_eq!((l.prefetches, l.view_rereads), (3, 0), "{l:?}");
}

/// A chunk stored twice (an old delta, then its rewrite by the cache-aware filter) is
/// answered with the copy the index names, in whichever order the pool's threads loaded the
/// two containers, and judged by that copy. Before, the cache mapped it to the container
/// loaded last: here the old delta's, loaded after the rewrite's, so the pool's answer and
/// the filter's judgement (and what the stream took in after them) depended on which lookup
/// ran first.
#[test]
fn a_chunk_stored_twice_is_answered_with_the_copy_the_index_names() {
    let dir = tempfile::tempdir().unwrap();
    let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
    let backend: Arc<dyn Backend> = Arc::new(crate::backend::memory::MemoryBackend::default());
    let (base, twice, beside_old, beside_new) = (
        ChunkId::of(b"base"),
        ChunkId::of(b"twice"),
        ChunkId::of(b"beside the old copy"),
        ChunkId::of(b"beside the new copy"),
    );
    stored(backend.as_ref(), &index, &[(base, EntryKind::Full)]);
    let c_old = stored(
        backend.as_ref(),
        &index,
        &[
            (beside_old, EntryKind::Full),
            (twice, EntryKind::delta(base)),
        ],
    );
    let c_new = stored(
        backend.as_ref(),
        &index,
        &[(twice, EntryKind::Full), (beside_new, EntryKind::Full)],
    );
    let reader = index.reader().unwrap();
    assert_eq!(reader.superseded(&c_old), &[1]);
    assert!(reader.superseded(&c_new).is_empty());
    let locality = LocalityIndex::new(
        reader,
        Arc::new(DamageSet::default()),
        Arc::new(FingerprintFilter::all_set()),
        backend,
        4,
    )
    .judging_in_stream_order();
    // The new copy's container is loaded first, the old one's last.
    assert_eq!(locality.container_of(&beside_new).unwrap(), Some(c_new));
    assert_eq!(locality.container_of(&beside_old).unwrap(), Some(c_old));
    assert_eq!(locality.container_of(&twice).unwrap(), Some(c_new));
    locality.reached(&c_new);
    locality.reached(&c_old);
    assert_eq!(locality.cached_copy(&twice), CachedCopy::Full);
    // The old copy, a delta whose base is not cached, would have been judged fragmented.
    let l = locality.counters();
    assert_eq!(
        (l.cache_hits, l.prefetches, l.index_lookups),
        (1, 2, 2),
        "{l:?}"
    );
}
