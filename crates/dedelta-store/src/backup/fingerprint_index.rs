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
//!   containers in the order it used them ([`super::recent_containers`]): the cache starts empty in every process, and without
//!   these hints each old container a backup references cost an on-disk lookup again.
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
//! data is lost. The cache maps a fingerprint to the container loaded last
//! that holds it; evicting that container forgets the fingerprint even if an older cached
//! container holds it too (a miss more, never a wrong answer).
//!
//! Alternative rejected: an in-memory map of every fingerprint (DDFS before the summary
//! vector; 40+ bytes a chunk, 40 GB for a billion chunks). Sparse indexing (Lillibridge et
//! al.) samples hooks per segment instead of a filter per chunk; its miss rate depends on
//! the sampling and it needs a segment layer this format does not have.

use super::caf::CachedCopy;
use super::recent_containers::{RecentContainers, TRIES_PER_MISS};
use crate::backend::Backend;
use crate::client::index::{FingerprintFilter, IndexReader, SketchLookups, Trust};
use crate::error::Result;
use crate::format::container::{ContainerId, ContainerMeta, EntryKind};
use crate::repository::damage::DamageSet;
use crate::repository::read_container_meta_tail;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// A cached container: its metadata and how far the index agrees with it.
struct Cached {
    meta: Arc<ContainerMeta>,
    trust: Trust,
}

/// The cache's state: the containers (LRU) and where each fingerprint is in them.
struct ContainerCache {
    containers: LruCache<ContainerId, Cached>,
    /// Fingerprint -> (container, entry number) in the container loaded last holding it.
    map: HashMap<ChunkId, (ContainerId, u32)>,
}

impl ContainerCache {
    /// The cached entry of `id`: its container, whether it is a full entry, and the
    /// container's trust; refreshes the container.
    fn find(&mut self, id: &ChunkId) -> Option<(ContainerId, bool, Trust)> {
        let &(c, entry) = self.map.get(id)?;
        let cached = self.containers.get(&c)?;
        let full = cached
            .meta
            .entries
            .get(entry as usize)
            .is_some_and(|e| e.kind == EntryKind::Full);
        Some((c, full, cached.trust))
    }

    /// What the cache says of entry `entry` of container `c` (see [`CachedCopy`]); looking up
    /// a delta's base counts as a use of the base's container, as restore's read would.
    fn judge(&mut self, c: ContainerId, entry: u32) -> CachedCopy {
        let kind = self
            .containers
            .peek(&c)
            .and_then(|m| m.meta.entries.get(entry as usize).map(|e| e.kind));
        match kind {
            None => CachedCopy::Unknown,
            Some(EntryKind::Full) => CachedCopy::Full,
            Some(EntryKind::Delta { base, .. }) => match self.map.get(&base) {
                Some(&(bc, _)) => {
                    self.containers.get(&bc);
                    CachedCopy::DeltaBaseCached(bc)
                }
                None => CachedCopy::DeltaBaseMissing,
            },
        }
    }

    /// Takes in container `id`'s metadata as the most recently used, evicting the least
    /// recently used container if full; the evicted container and its metadata.
    fn load(
        &mut self,
        id: ContainerId,
        meta: Arc<ContainerMeta>,
        trust: Trust,
    ) -> Option<(ContainerId, Arc<ContainerMeta>)> {
        if self.containers.contains(&id) {
            return None;
        }
        for (i, e) in meta.entries.iter().enumerate() {
            // An inversed delta does not replace the chunk's full copy in the index while
            // that is indexed (see `crate::backup::inverse`); the cache follows the index.
            if !e.kind.is_inversed() {
                self.map.insert(e.id, (id, i as u32));
            }
        }
        let (old, gone) = self.containers.push(id, Cached { meta, trust })?;
        if old == id {
            return None;
        }
        for e in &gone.meta.entries {
            if self.map.get(&e.id).is_some_and(|m| m.0 == old) {
                self.map.remove(&e.id);
            }
        }
        Some((old, gone.meta))
    }
}

/// The fingerprint cache as the dedup thread's stream fills it, for the cache-aware filter
/// ([`LocalityIndex::judging_in_stream_order`]), and the metadata both caches let go lately.
///
/// Why the parked metadata. The view is a second fingerprint cache, of the pool's capacity,
/// filled in stream order so that the filter's judgements do not depend on thread timing;
/// its contents are the paper's cache's, but its reads must not be extra reads: the paper
/// has one cache and the filter only looks in it ("with the assistance of the recently
/// prefetched metadata", LoopDelta §4.4). Before, the view took a container's metadata from
/// the pool's cache when the stream reached it, and read it again when the pool's cache no
/// longer held it. With caches of a few containers that was most of the time: the pool runs
/// some 10 MiB of file data ahead of the stream (the blocks in flight and the look-ahead
/// window), and a container the stream meets again after the view evicted it was usually
/// gone from the pool's cache too (the pool had found its chunks while the view still held
/// it). On the SQLAlchemy tar series at 1 MiB containers, caches of 4 containers, these
/// re-reads were 3,091 of the 8,883 prefetch requests of 20 backups with the filter, against
/// 5,836 without it, and made backup 1.52x deduplication's modelled disk time (8
/// containers: 1.14x); the filter's rewrites (670 chunks, 7 MB) changed the layout little
/// (docs/eval/papers.md). Now a container either cache evicts while the other does not hold
/// it is parked here, and the view takes it from the pool's cache or from here before
/// reading it: it re-read none on that series. What the view holds at each stream position,
/// and so what the filter judges, is unchanged; only where its metadata comes from is.
struct StreamView {
    cache: Mutex<ContainerCache>,
    /// Metadata evicted by the pool's cache or the view while the other did not hold it,
    /// least recently parked dropped first (read again if the stream then reaches it).
    parked: Mutex<LruCache<ContainerId, Arc<ContainerMeta>>>,
}

/// Containers of metadata parked for the stream view ([`StreamView`]): with it the view
/// re-read no container on the SQLAlchemy tar series with caches of 4 containers (1 MiB),
/// where the pool's cache and the view each held 4. Decoded metadata only, shared with the
/// caches while they hold it (some 100-500 KB a container), and only with the filter.
const PARKED_CONTAINERS: usize = 64;

impl StreamView {
    fn lock(&self) -> std::sync::MutexGuard<'_, ContainerCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, LruCache<ContainerId, Arc<ContainerMeta>>> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How the locality index reads a container's metadata when it prefetches it: by default its
/// footer and metadata section; LoopDelta's dense containers whole, with their data
/// ([`super::prefetch::DensePrefetcher`]).
pub trait MetaLoader: Send + Sync {
    /// Container `id`'s metadata, read through `backend`.
    ///
    /// # Errors
    /// The metadata cannot be read.
    fn load(&self, backend: &dyn Backend, id: &ContainerId) -> Result<ContainerMeta>;

    /// The stream reached container `id` ([`FingerprintIndex::reached`]); reads through
    /// `backend` what the loader needs and did not read ahead.
    fn reached(&self, _backend: &dyn Backend, _id: &ContainerId) {}
}

/// Locality-preserved caching (see the module doc).
pub struct LocalityIndex {
    reader: IndexReader,
    damage: Arc<DamageSet>,
    filter: Arc<FingerprintFilter>,
    backend: Arc<dyn Backend>,
    cache: Mutex<ContainerCache>,
    /// The fingerprint cache as the dedup thread's stream order fills it (same capacity,
    /// containers taken in when the stream reaches them, [`FingerprintIndex::reached`]),
    /// which the cache-aware filter judges by ([`Self::judging_in_stream_order`]); `None`
    /// without the filter.
    judged: Option<StreamView>,
    /// Held across an on-disk lookup and the prefetch it leads to: the pool's threads work
    /// on neighbouring blocks, which are usually in the same container, and without it each
    /// looked the container up and loaded it (12 loads of 8 containers in a 30 MB backup).
    disk: Mutex<()>,
    counts: Counts,
    /// How prefetches read a container (`None`: its metadata only).
    loader: Option<Arc<dyn MetaLoader>>,
    /// The last backup's containers, tried before the on-disk index.
    recent: RecentContainers,
    /// The index's super-feature lookups counted before this backup.
    sketch_before: SketchLookups,
}

impl LocalityIndex {
    /// A locality index over `reader` with `filter` (holding every fingerprint of it),
    /// caching up to `cache_containers` containers' metadata read from `backend`.
    pub fn new(
        reader: IndexReader,
        damage: Arc<DamageSet>,
        filter: Arc<FingerprintFilter>,
        backend: Arc<dyn Backend>,
        cache_containers: usize,
    ) -> Self {
        LocalityIndex {
            sketch_before: reader.sketch_lookups(),
            reader,
            damage,
            filter,
            backend,
            cache: Mutex::new(ContainerCache {
                containers: LruCache::new(
                    NonZeroUsize::new(cache_containers).unwrap_or(NonZeroUsize::MIN),
                ),
                map: HashMap::new(),
            }),
            judged: None,
            disk: Mutex::new(()),
            counts: Counts::default(),
            loader: None,
            recent: RecentContainers::default(),
        }
    }

    /// Tries `hints` (the last backup's containers, see [`super::recent_containers`]) when
    /// the cache misses a chunk the filter lets through, before the on-disk index.
    pub fn with_hints(mut self, hints: Vec<ContainerId>) -> Self {
        self.recent = RecentContainers::new(hints);
        self
    }

    /// Prefetches the next hinted containers (at most [`TRIES_PER_MISS`]) until one holds
    /// `id`; the container, as a cache hit would give it.
    fn found_in_hints(&self, id: &ChunkId) -> Option<ContainerId> {
        for _ in 0..TRIES_PER_MISS {
            let c = self.recent.next(|c| self.cache().containers.contains(c))?;
            Counts::bump(&self.counts.hinted_prefetches);
            self.prefetch(c);
            let found = self.cached(id);
            self.recent.tried(found.is_some());
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Keeps the fingerprint cache a second time as the stream fills it, for the cache-aware
    /// filter ([`FingerprintIndex::cached_copy`]): the pool's cache holds what its lookups,
    /// ahead of the stream and in any order, loaded and evicted. The second cache takes its
    /// metadata from the pool's reads, not from reads of its own (see `StreamView`).
    pub fn judging_in_stream_order(mut self) -> Self {
        let capacity = self.cache().containers.cap();
        let parked = NonZeroUsize::new(PARKED_CONTAINERS).unwrap_or(NonZeroUsize::MIN);
        self.judged = Some(StreamView {
            cache: Mutex::new(ContainerCache {
                containers: LruCache::new(capacity),
                map: HashMap::new(),
            }),
            parked: Mutex::new(LruCache::new(parked)),
        });
        self
    }

    /// Prefetches read containers through `loader`.
    pub fn with_loader(mut self, loader: Arc<dyn MetaLoader>) -> Self {
        self.loader = Some(loader);
        self
    }

    /// The cached entry of `id` if the index agrees with it (see the module doc).
    fn cached(&self, id: &ChunkId) -> Option<ContainerId> {
        let (c, full, trust) = self.cache().find(id)?;
        let trusted = match trust {
            Trust::Whole => true,
            Trust::FullEntries => full,
            Trust::Nothing => false,
        };
        (trusted && self.damage.reason(&c, id).is_none() && self.filter.contains(id)).then_some(c)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, ContainerCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The metadata of a cached container (fingerprints and super-features), without
    /// refreshing it: for later stages that look for bases among recently used containers.
    pub fn cached_meta(&self, id: &ContainerId) -> Option<Arc<ContainerMeta>> {
        self.cache().containers.peek(id).map(|c| c.meta.clone())
    }

    /// Containers cached now.
    pub fn cached_containers(&self) -> usize {
        self.cache().containers.len()
    }

    /// Loads container `id`'s metadata into the cache unless it is there.
    fn prefetch(&self, id: ContainerId) {
        if self.cache().containers.contains(&id) {
            return;
        }
        Counts::bump(&self.counts.prefetches);
        let read = match &self.loader {
            Some(l) => l.load(self.backend.as_ref(), &id),
            None => read_container_meta_tail(self.backend.as_ref(), &id.to_hex()),
        };
        match read {
            Ok(meta) => {
                let trust = self.reader.trust(&id);
                let mut cache = self.cache();
                let evicted = cache.load(id, Arc::new(meta), trust);
                self.counts
                    .cached_containers_max
                    .fetch_max(cache.containers.len() as u64, Ordering::Relaxed);
                // Parked under the cache's lock: the stream view looks in the cache, then
                // among the parked, under the same lock (see `reached`).
                if let (Some((gone, meta)), Some(view)) = (evicted, &self.judged) {
                    if !view.lock().containers.contains(&gone) {
                        view.parked().push(gone, meta);
                    }
                }
            }
            Err(_) => Counts::bump(&self.counts.prefetch_errors),
        }
    }
}

impl LocalityIndex {
    /// [`FingerprintIndex::container_of`] without recording the answer as used.
    fn locate(&self, id: &ChunkId) -> Result<Option<ContainerId>> {
        Counts::bump(&self.counts.lookups);
        if let Some(c) = self.cached(id) {
            Counts::bump(&self.counts.cache_hits);
            return Ok(Some(c));
        }
        if !self.filter.contains(id) {
            Counts::bump(&self.counts.filter_negatives);
            return Ok(None);
        }
        // Another thread may be loading the container that holds it: wait, and look again.
        let _disk = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = self.cached(id) {
            Counts::bump(&self.counts.cache_hits);
            return Ok(Some(c));
        }
        // The global filter's false positives (0.4-0.9 % of new chunks) are turned away by
        // the runs' own filters in memory: asked first, so that they do not spend hints
        // (each spent two, and eight in a row stopped the hints for the rest of the backup:
        // 301 of 449 on-disk lookups on 30 Redis dumps with deduplication alone).
        if !self.reader.may_hold(id) {
            Counts::bump(&self.counts.index_lookups);
            Counts::bump(&self.counts.filter_false_positives);
            return Ok(None);
        }
        if let Some(c) = self.found_in_hints(id) {
            Counts::bump(&self.counts.hint_hits);
            return Ok(Some(c));
        }
        let Some(loc) = self.counts.disk_get(&self.reader, id)? else {
            Counts::bump(&self.counts.filter_false_positives);
            return Ok(None);
        };
        self.prefetch(loc.container);
        self.recent.found_by_index(loc.container);
        Ok(Some(loc.container).filter(|c| self.damage.reason(c, id).is_none()))
    }
}

impl FingerprintIndex for LocalityIndex {
    fn container_of(&self, id: &ChunkId) -> Result<Option<ContainerId>> {
        let found = self.locate(id)?;
        if let Some(c) = found {
            self.recent.used(c);
        }
        Ok(found)
    }

    fn cached_copy(&self, id: &ChunkId) -> CachedCopy {
        let cache = || match &self.judged {
            Some(j) => j.lock(),
            None => self.cache(),
        };
        let Some(&(c, entry)) = cache().map.get(id) else {
            return CachedCopy::Unknown;
        };
        let judged = cache().judge(c, entry);
        if judged != CachedCopy::DeltaBaseMissing {
            return judged;
        }
        // A chunk stored more than once (rewritten, by Capping or by this filter) is mapped
        // to the cached container loaded last that holds it, which may not be the copy the
        // index names (the newest) and restore reads: before judging it fragmented, the
        // index is asked (one on-disk lookup, for such chunks only).
        match self.counts.disk_get(&self.reader, id) {
            Ok(Some(loc)) if (loc.container, loc.entry) != (c, entry) => {
                cache().judge(loc.container, loc.entry)
            }
            Ok(Some(_)) => judged,
            _ => CachedCopy::Unknown,
        }
    }

    fn has_cache(&self) -> bool {
        true
    }

    fn used_containers(&self) -> Vec<ContainerId> {
        self.recent.used_order()
    }

    fn reached(&self, container: &ContainerId) {
        if let Some(l) = &self.loader {
            l.reached(self.backend.as_ref(), container);
        }
        let Some(judged) = &self.judged else {
            return;
        };
        if judged.lock().containers.get(container).is_some() {
            return;
        }
        // The pool loaded it for the lookup that named it; read again only if neither the
        // pool's cache (running ahead, it may have evicted it since) nor the parked hold it.
        let kept = {
            let cache = self.cache();
            match cache.containers.peek(container) {
                Some(c) => Some(c.meta.clone()),
                None => judged.parked().pop(container),
            }
        };
        let meta = match kept {
            Some(meta) => meta,
            None => {
                Counts::bump(&self.counts.prefetches);
                Counts::bump(&self.counts.view_rereads);
                match read_container_meta_tail(self.backend.as_ref(), &container.to_hex()) {
                    Ok(meta) => Arc::new(meta),
                    Err(_) => {
                        Counts::bump(&self.counts.prefetch_errors);
                        return;
                    }
                }
            }
        };
        let trust = self.reader.trust(container);
        let evicted = judged.lock().load(*container, meta, trust);
        // Parked under the pool cache's lock, as the pool parks its evictions (see
        // `prefetch`): the stream meets a container again after the view evicted it, and
        // the pool, which found its chunks while the view still held it, has let it go too.
        if let Some((gone, meta)) = evicted {
            let cache = self.cache();
            if !cache.containers.contains(&gone) {
                judged.parked().push(gone, meta);
            }
        }
    }

    fn counters(&self) -> LookupCounters {
        LookupCounters {
            filter_bytes: self.filter.memory_bytes() as u64,
            filter_capacity: self.filter.capacity(),
            sketch: self.reader.sketch_lookups().since(&self.sketch_before),
            ..self.counts.snapshot("locality")
        }
    }
}

#[cfg(test)]
mod tests;
