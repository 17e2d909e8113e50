//! Runs on: the worker pool (and the dedup thread for tree chunks), shared by both.
//!
//! How backup finds the duplicates of chunks stored before it: a [`FingerprintIndex`]
//! strategy, chosen per backup ([`FingerprintIndexKind`]).
//!
//! - [`ExactIndex`]: every chunk is looked up in the client's on-disk index (each run's
//!   Bloom filter first, then one bucket read per run it lets through). One random read per
//!   duplicate chunk: about 120 per MiB of duplicate data at 8 KiB chunks.
//! - [`LocalityIndex`]: locality-preserved caching (Zhu et al., FAST'08 §4.2, LoopDelta §4.3).
//!   An LRU cache of whole containers' metadata (fingerprint -> entry, and the full entries'
//!   super-features), `cache_containers` containers at most; then one global Bloom filter
//!   over every fingerprint (the index's [`FingerprintFilter`], about 1.25-1.9 bytes a
//!   chunk); only when the cache misses and the filter says "maybe" the on-disk index. A hit
//!   there loads (prefetches) the metadata of the container it names, so the duplicates that
//!   follow it in the stream, which were stored beside it, are found in memory. A backup of
//!   data seen before costs one index lookup and one metadata read per container of it,
//!   rather than one lookup per chunk; new data costs a filter test per chunk and the
//!   filter's false positives (about 0.4-1 %), which the runs' own filters then turn away
//!   in memory (counted in `index_lookups`, not in `disk_lookups`). Before the on-disk index
//!   reads a bucket, a miss that the runs' filters let through too tries the last backup's
//!   containers in the order it used them ([`super::recent_containers`]): the cache starts
//!   empty in every process, and without these hints each old container a backup references
//!   cost an on-disk lookup again.
//!
//! A cache hit must not deduplicate against a chunk the index would not name: a prune
//! removes dead chunks from the index but keeps containers that are mostly live, dead
//! entries and all, and a rebuild leaves out delta copies whose base has no copy. So a
//! cached entry counts only if the index's record of its container says so
//! ([`IndexReader::trust`]: no entry removed since it was taken in; for a delta entry, none
//! left out either), its copy is not recorded as damaged, and the filter (which holds
//! exactly the index's fingerprints, and a few false ones) lets it through; any other cached
//! entry is looked up on disk. Prune marks trimmed both the containers of the copies it
//! removes and the kept containers holding other copies of those chunks. Not covered: when
//! `check` or `repair packs` removes a damaged copy, another container's good copy of the
//! same chunk is not marked, so a cache hit on it (only through a filter false positive,
//! since the filter is rebuilt after every removal) would name a chunk that is stored but
//! not indexed: `repair index` takes it back in, and prune refuses to run until then, so no
//! data is lost.
//!
//! A chunk stored twice (a rewrite by Capping or the cache-aware filter beside the old copy)
//! is answered with the copy the index names: the index records the entries a newer copy
//! superseded ([`IndexReader::superseded`]) and the cache leaves them out, so the answer does
//! not depend on which of the two containers the pool's threads happened to load last, and
//! neither does what the stream takes in after it (the filter's view, LoopDelta's base
//! cache, the reuse-ratio monitor, the snapshot's containers). Where two cached copies are
//! both unrecorded (an index of manifest version 3, until it is rebuilt) the container
//! loaded last wins; evicting it forgets the fingerprint even if the other holds it too (a
//! miss more, never a wrong answer).
//!
//! Alternative rejected: an in-memory map of every fingerprint (DDFS before the summary
//! vector; 40+ bytes a chunk, 40 GB for a billion chunks). Sparse indexing (Lillibridge et
//! al.) samples hooks per segment instead of a filter per chunk; its miss rate depends on
//! the sampling and it needs a segment layer this format does not have.

use super::caf::CachedCopy;
use crate::client::index::{IndexReader, SketchLookups};
use crate::error::Result;
use crate::format::container::ContainerId;
use crate::repository::damage::DamageSet;
use dedelta_core::ChunkId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod locality;
pub use locality::{LocalityIndex, MetaLoader};

/// Which strategy finds the duplicates of chunks stored before the backup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FingerprintIndexKind {
    /// Every chunk looked up in the on-disk index.
    #[default]
    Exact,
    /// A cache of whole containers' metadata, a global Bloom filter, then the on-disk index.
    Locality,
}

impl FingerprintIndexKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FingerprintIndexKind::Exact => "exact",
            FingerprintIndexKind::Locality => "locality",
        }
    }

    /// Parses [`Self::name`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "exact" => Some(FingerprintIndexKind::Exact),
            "locality" => Some(FingerprintIndexKind::Locality),
            _ => None,
        }
    }
}

/// Containers the locality cache holds by default: the metadata of 64 containers of 4 MiB
/// (256 MiB of stored data; about 2,000 entries each on SQLAlchemy, some 150 bytes an entry
/// decoded and 80 in the fingerprint map: about 30 MB). Estimated, not measured.
pub const DEFAULT_CACHE_CONTAINERS: usize = 64;

/// How a backup finds duplicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FingerprintIndexOptions {
    /// The strategy.
    pub kind: FingerprintIndexKind,
    /// Containers of metadata the locality cache holds (at least 1).
    pub cache_containers: usize,
    /// Bytes the index's super-feature filters may hold (the full sketch index's bounded
    /// cache, see [`crate::client::index::DEFAULT_SKETCH_FILTER_BYTES`]).
    pub sketch_filter_bytes: u64,
}

impl Default for FingerprintIndexOptions {
    fn default() -> Self {
        FingerprintIndexOptions {
            kind: FingerprintIndexKind::Exact,
            cache_containers: DEFAULT_CACHE_CONTAINERS,
            sketch_filter_bytes: crate::client::index::DEFAULT_SKETCH_FILTER_BYTES,
        }
    }
}

/// What a strategy counted (a backup reports them; never stored).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LookupCounters {
    /// The strategy's name.
    pub strategy: String,
    /// Chunks looked up.
    pub lookups: u64,
    /// Found in the locality cache.
    pub cache_hits: u64,
    /// Turned away by the global filter: known new without touching the disk.
    pub filter_negatives: u64,
    /// Let through by the global filter but not in the index.
    pub filter_false_positives: u64,
    /// Lookups that went to the on-disk index.
    pub index_lookups: u64,
    /// Of those, the ones that read the disk: a run's filter let them through to a bucket
    /// read (the others, the global filter's false positives mostly, were turned away in
    /// memory by every run's own filter).
    pub disk_lookups: u64,
    /// Run buckets those lookups read (one random read each; the runs' own filters spare
    /// the others).
    pub bucket_reads: u64,
    /// Container metadata sections loaded into the cache.
    pub prefetches: u64,
    /// Of those, the last backup's containers loaded as hints ([`super::recent_containers`])
    /// when the cache missed a chunk the filter let through.
    pub hinted_prefetches: u64,
    /// Lookups a hinted container answered (each spared an on-disk lookup).
    pub hint_hits: u64,
    /// Of the prefetches, the cache-aware filter's view of the cache reading again the
    /// metadata of a container the pool had read, when the stream reached it
    /// ([`FingerprintIndex::reached`]) and neither the pool's cache nor the metadata kept for
    /// the view held it any more (see `StreamView`).
    pub view_rereads: u64,
    /// Prefetches that failed (the lookup's answer stands; the container is not cached).
    pub prefetch_errors: u64,
    /// The most containers the cache held at once.
    pub cached_containers_max: u64,
    /// Bytes of the global filter in memory (0 for the exact index).
    pub filter_bytes: u64,
    /// Fingerprints the global filter was sized for.
    pub filter_capacity: u64,
    /// Bytes the on-disk index holds in memory besides the global filter (its runs' own
    /// filters, of fingerprints and of super-feature keys, and bucket directories), after
    /// the backup.
    pub index_memory_bytes: u64,
    /// Chunk entries of the index's runs after the backup (a chunk in two runs counts
    /// twice until they merge).
    pub index_chunks: u64,
    /// What the full sketch index's lookups in the runs cost during the backup, and the
    /// super-feature filters held (a bounded cache, not in `index_memory_bytes`).
    pub sketch: SketchLookups,
}

impl LookupCounters {
    /// Random reads a disk would have made: bucket reads and metadata prefetches.
    pub fn random_reads(&self) -> u64 {
        self.bucket_reads + self.prefetches
    }

    /// The filter's false-positive rate among the lookups it answered for chunks the index
    /// does not hold (`None` before any).
    pub fn filter_fp_rate(&self) -> Option<f64> {
        let absent = self.filter_negatives + self.filter_false_positives;
        (absent > 0).then(|| self.filter_false_positives as f64 / absent as f64)
    }
}

/// A way to find which container holds the stored copy of a chunk.
pub trait FingerprintIndex: Send + Sync {
    /// The container of the usable indexed copy of `id` (copies recorded as damaged count as
    /// absent), if any, as the index stood when the backup started.
    ///
    /// # Errors
    /// Reading the index or (locality) a container's metadata fails so that no answer can be
    /// given; a failed prefetch alone is counted, not an error.
    fn container_of(&self, id: &ChunkId) -> Result<Option<ContainerId>>;

    /// What it counted so far.
    fn counters(&self) -> LookupCounters;

    /// What the fingerprint cache says of `id`'s stored copy, without touching the disk, for
    /// the cache-aware filter ([`super::caf`]); [`CachedCopy::Unknown`] without a cache.
    fn cached_copy(&self, _id: &ChunkId) -> CachedCopy {
        CachedCopy::Unknown
    }

    /// Whether the strategy has a fingerprint cache ([`Self::cached_copy`] can answer).
    fn has_cache(&self) -> bool {
        false
    }

    /// The containers that answered lookups, in first-use order (the next backup's hints);
    /// none for a strategy that takes no hints.
    fn used_containers(&self) -> Vec<ContainerId> {
        Vec::new()
    }

    /// The dedup thread met, in stream order, a duplicate stored in `container`. The caches
    /// whose contents feed its decisions (the cache-aware filter's view of the fingerprint
    /// cache, LoopDelta's base cache) take containers in here, in the stream's order, rather
    /// than when the pool's lookups, which run ahead on several threads, loaded them: the
    /// same backup then stores the same bytes whatever the threads' timing.
    fn reached(&self, _container: &ContainerId) {}
}

/// Counters shared by the pool's threads.
#[derive(Debug, Default)]
struct Counts {
    lookups: AtomicU64,
    cache_hits: AtomicU64,
    filter_negatives: AtomicU64,
    filter_false_positives: AtomicU64,
    index_lookups: AtomicU64,
    disk_lookups: AtomicU64,
    bucket_reads: AtomicU64,
    prefetches: AtomicU64,
    hinted_prefetches: AtomicU64,
    hint_hits: AtomicU64,
    view_rereads: AtomicU64,
    prefetch_errors: AtomicU64,
    cached_containers_max: AtomicU64,
}

impl Counts {
    fn bump(a: &AtomicU64) {
        a.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self, strategy: &str) -> LookupCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LookupCounters {
            strategy: strategy.to_string(),
            lookups: g(&self.lookups),
            cache_hits: g(&self.cache_hits),
            filter_negatives: g(&self.filter_negatives),
            filter_false_positives: g(&self.filter_false_positives),
            index_lookups: g(&self.index_lookups),
            disk_lookups: g(&self.disk_lookups),
            bucket_reads: g(&self.bucket_reads),
            prefetches: g(&self.prefetches),
            hinted_prefetches: g(&self.hinted_prefetches),
            hint_hits: g(&self.hint_hits),
            view_rereads: g(&self.view_rereads),
            prefetch_errors: g(&self.prefetch_errors),
            cached_containers_max: g(&self.cached_containers_max),
            ..LookupCounters::default()
        }
    }

    /// One on-disk lookup, counted.
    fn disk_get(
        &self,
        reader: &IndexReader,
        id: &ChunkId,
    ) -> Result<Option<crate::client::index::ChunkLocation>> {
        Counts::bump(&self.index_lookups);
        let mut reads = 0;
        let r = reader.get_counting(id, &mut reads);
        self.bucket_reads.fetch_add(reads, Ordering::Relaxed);
        if reads > 0 {
            Counts::bump(&self.disk_lookups);
        }
        r
    }
}

/// Today's lookup: the on-disk index for every chunk.
pub struct ExactIndex {
    reader: IndexReader,
    damage: Arc<DamageSet>,
    counts: Counts,
    /// The index's super-feature lookups counted before this backup.
    sketch_before: SketchLookups,
}

impl ExactIndex {
    /// Looks up in `reader`, counting copies `damage` records as absent.
    pub fn new(reader: IndexReader, damage: Arc<DamageSet>) -> Self {
        ExactIndex {
            sketch_before: reader.sketch_lookups(),
            reader,
            damage,
            counts: Counts::default(),
        }
    }
}

impl FingerprintIndex for ExactIndex {
    fn container_of(&self, id: &ChunkId) -> Result<Option<ContainerId>> {
        Counts::bump(&self.counts.lookups);
        Ok(self
            .counts
            .disk_get(&self.reader, id)?
            .map(|loc| loc.container)
            .filter(|c| self.damage.reason(c, id).is_none()))
    }

    fn counters(&self) -> LookupCounters {
        LookupCounters {
            sketch: self.reader.sketch_lookups().since(&self.sketch_before),
            ..self.counts.snapshot("exact")
        }
    }
}

#[cfg(test)]
mod tests;
