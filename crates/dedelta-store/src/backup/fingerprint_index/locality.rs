//! [`LocalityIndex`]: locality-preserved caching of whole containers' metadata, a global
//! Bloom filter, then the on-disk index (see [`super`] for how it compares with the exact
//! index, and for what a cache hit may count on).

use super::{Counts, FingerprintIndex, LookupCounters};
use crate::backend::Backend;
use crate::backup::caf::CachedCopy;
use crate::backup::recent_containers::{RecentContainers, TRIES_PER_MISS};
use crate::client::index::{FingerprintFilter, IndexReader, SketchLookups, Trust};
use crate::error::Result;
use crate::format::container::{ContainerId, ContainerMeta, EntryKind};
use crate::repository::damage::DamageSet;
use crate::repository::read_container_meta_tail;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// A cached container: its metadata and how far the index agrees with it.
struct Cached {
    meta: Arc<ContainerMeta>,
    trust: Trust,
}

/// The cache's state: the containers (LRU) and where each fingerprint is in them.
struct ContainerCache {
    containers: LruCache<ContainerId, Cached>,
    /// Fingerprint -> (container, entry number) of the copy the index names, among the
    /// cached containers' entries (entries a newer copy superseded are left out, see
    /// [`Self::load`]).
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
    /// `superseded` are its entries whose chunk the index names in a newer copy (in order):
    /// left out, so that a chunk stored twice (rewritten by Capping or the cache-aware
    /// filter) is answered with the copy the index names whichever containers are cached,
    /// and so whatever order the pool's threads loaded them in. Before, the container loaded
    /// last won, and what the stream then took in (the filter's view, the potential base
    /// chunk cache, the reuse-ratio monitor) depended on thread timing.
    fn load(
        &mut self,
        id: ContainerId,
        meta: Arc<ContainerMeta>,
        trust: Trust,
        superseded: &[u32],
    ) -> Option<(ContainerId, Arc<ContainerMeta>)> {
        if self.containers.contains(&id) {
            return None;
        }
        let mut superseded = superseded.iter().peekable();
        for (i, e) in meta.entries.iter().enumerate() {
            let i = i as u32;
            if superseded.next_if(|&&s| s <= i).is_some_and(|&s| s == i) {
                continue;
            }
            // An inversed delta does not replace the chunk's full copy in the index while
            // that is indexed (see `crate::backup::inverse`); the cache follows the index.
            if !e.kind.is_inversed() {
                self.map.insert(e.id, (id, i));
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
/// ([`crate::backup::prefetch::DensePrefetcher`]).
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

    /// Tries `hints` (the last backup's containers, see [`crate::backup::recent_containers`]) when
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
                let evicted = cache.load(id, Arc::new(meta), trust, self.reader.superseded(&id));
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
        // The copy the index names: the cache leaves out copies a newer one superseded.
        cache().judge(c, entry)
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
        let superseded = self.reader.superseded(container);
        let evicted = judged.lock().load(*container, meta, trust, superseded);
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
