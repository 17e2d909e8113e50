//! Tests of [`super`] (fingerprint_index.rs).

use super::*;
use crate::backend::local::LocalBackend;
use crate::client::index::ChunkIndex;
use crate::format::container::EntryMeta;

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
