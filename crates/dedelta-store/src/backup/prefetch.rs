//! Runs on: the worker pool (loading containers, through the locality fingerprint index) and
//! the dedup thread (candidates and bases).
//!
//! Locality-aware base prefetching (LoopDelta §4.3). At the start of a backup the dense
//! container list of the lineage's last backup ([`super::dense`]) becomes a lookup table.
//! When the locality fingerprint index prefetches a container's metadata for deduplication
//! and the container is on the list, the whole container comes in the same request
//! ([`DensePrefetcher`], metered as a prefetch): its metadata feeds deduplication as before,
//! and its full chunks, with their super-features from the metadata, enter the potential
//! base chunk cache ([`PrefetchedBases`]), an LRU bounded in containers whose chunks are
//! evicted a container at a time. Deltas are not loaded: only chunks stored in full are bases
//! (one-level, as LoopDelta follows Shilane et al.).
//!
//! The first dense container a backup reads is usually the one holding its parent's tree
//! (the last container the last backup wrote): the backup reads that tree before
//! deduplication starts, for the tree stream's delta bases, and instead of reading the
//! container's metadata and the tree's region, then the whole container again when the
//! locality index prefetches it, it reads the container whole once, takes the tree from the
//! cache and keeps the metadata for that prefetch ([`DensePrefetcher::preload`]). LoopDelta
//! prefetches a dense container when deduplication first accesses it; here the parent's tree
//! is that first access (docs/eval/papers.md). A tree chunk stored as a delta is rebuilt
//! there too, from its delta (kept from the same read) and its base when a dense container
//! holds the base (read whole then, as deduplication would): the tree of a version whose
//! tree chunks are deltas of an older tree cost the read path a dozen requests a backup
//! (metadata, regions, the bases' containers; the backups of 20 SQLAlchemy sdists: 237 of
//! their 657 reads and writes), which dedup, reading no parent tree, does not pay.
//!
//! A container enters the cache when the dedup thread's stream reaches its first duplicate,
//! which runs a fixed number of bytes ahead of resemblance detection
//! ([`super::lookahead`]): so it offers bases to new chunks before that duplicate too, and
//! what the cache holds at each chunk does not depend on thread timing.
//!
//! Resemblance detection then looks only there and at this backup's own new full chunks
//! ([`PrefetchSketchIndex`]), and the delta stage takes bases only from there and from
//! memory ([`super::bases::BaseFetcher::only_cached`]): no base is read on its own, so the
//! backup's base reads (the I/O accounting's `base reads`) stay 0.
//!
//! The cache also remembers which chunks every container loaded through it (whole or
//! metadata only) stores in full, by an 8-byte prefix of their fingerprints: the data chunks
//! whose share a backup references is the container's reuse ratio
//! ([`super::dense::ReuseMonitor`]; 8 bytes a chunk of each container a backup touches).

mod loader;
mod sketch_index;
pub use loader::DensePrefetcher;
pub use sketch_index::PrefetchSketchIndex;

use super::dense::LocalDenseContainers;
use crate::backend::Backend;
use crate::format::config::{
    DeltaConfig, SketchIndexKind, PREFETCH_CACHE_CONTAINERS, PREFETCH_CACHE_CONTAINERS_CAPPING,
};
use crate::format::container::{ContainerId, ContainerMeta, EntryKind};
use crate::repository::snapshots::SnapshotList;
use bytes::Bytes;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard};

/// A super-feature at its position.
type Key = (u8, u64);

/// The first 8 bytes of a fingerprint: enough to tell a container's entries apart.
fn prefix(id: &ChunkId) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&id.0[..8]);
    u64::from_le_bytes(b)
}

/// What the potential base chunk cache did in one backup (reported, never stored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PrefetchCounts {
    /// Containers on the dense list the backup started with.
    pub dense_listed: u64,
    /// Dense containers loaded whole (one request each, with their metadata).
    pub dense_loaded: u64,
    /// Of those, the ones read whole when the stream reached them because the pool had not
    /// (or its read had been dropped from the landed ones: [`DensePrefetcher::reached`]).
    pub loaded_at_stream: u64,
    /// Full chunks those brought into the cache.
    pub chunks_loaded: u64,
    /// Their raw bytes.
    pub bytes_loaded: u64,
    /// Bases the cache served.
    pub bases_served: u64,
    /// Containers on the dense list this backup wrote.
    pub dense_written: u64,
    /// Whether the parent's tree came through [`DensePrefetcher::tree_chunks`] (from dense
    /// containers read whole, and chunks read alone) rather than read the usual way.
    pub parent_tree_cached: bool,
    /// Of the parent tree's chunks and their delta bases, those no dense container held,
    /// read alone ([`DensePrefetcher::tree_chunks`]).
    pub tree_chunks_read_alone: u64,
    /// Of the dense containers loaded, those read from the client's disk instead of the
    /// repository (`--keep-dense-local`, [`super::dense::LocalDenseContainers`]).
    pub local_loaded: u64,
    /// Their stored bytes.
    pub local_bytes: u64,
}

/// A container's full chunks with their super-features, as read.
type Loaded = Vec<(ChunkId, Bytes, Vec<u64>)>;

/// One cached container: its full chunks and the keys it holds.
struct CachedContainer {
    chunks: Vec<ChunkId>,
    keys: Vec<Key>,
}

struct Inner {
    containers: LruCache<ContainerId, CachedContainer>,
    /// Dense containers the pool read whole ahead of the dedup thread, waiting until the
    /// stream reaches them ([`PrefetchedBases::reached`]); as many as the cache holds, least
    /// recently landed dropped first (read again if the stream then reaches them).
    landed: LruCache<ContainerId, Loaded>,
    /// Bytes of each cached full chunk, and the container loaded last that holds it.
    chunks: HashMap<ChunkId, (Bytes, ContainerId)>,
    /// For each key, its cached holders, oldest load first (one per container).
    keys: HashMap<Key, Vec<(ChunkId, ContainerId)>>,
    /// The full entries (fingerprint prefixes) of every container whose metadata came
    /// through the cache.
    full: HashMap<ContainerId, HashSet<u64>>,
    /// The metadata of dense containers read whole before the locality index asked for them
    /// ([`DensePrefetcher::preload`]), until it does.
    preloaded: HashMap<ContainerId, ContainerMeta>,
    /// The parent tree's chunks stored as deltas, from the containers read whole for it
    /// ([`DensePrefetcher::tree_chunks`]): base and delta, until the tree is rebuilt.
    tree_deltas: HashMap<ChunkId, (ChunkId, Bytes)>,
    counts: PrefetchCounts,
}

/// LoopDelta's potential base chunk cache (see the module doc), shared by the pool's
/// threads and the dedup thread.
pub struct PrefetchedBases {
    /// The last backup's dense container list.
    dense: HashSet<ContainerId>,
    /// Copies of dense containers on the client's disk (`--keep-dense-local`), if kept.
    local: Option<LocalDenseContainers>,
    /// The repository's client cache directory, where the dense list is kept too.
    client_dir: Option<std::path::PathBuf>,
    inner: Mutex<Inner>,
}

impl PrefetchedBases {
    /// A cache of up to `capacity` containers' full chunks, loading those of `dense`.
    pub fn new(dense: HashSet<ContainerId>, capacity: usize) -> Self {
        let counts = PrefetchCounts {
            dense_listed: dense.len() as u64,
            ..PrefetchCounts::default()
        };
        PrefetchedBases {
            dense,
            local: None,
            client_dir: None,
            inner: Mutex::new(Inner {
                containers: LruCache::new(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)),
                landed: LruCache::new(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)),
                chunks: HashMap::new(),
                keys: HashMap::new(),
                full: HashMap::new(),
                preloaded: HashMap::new(),
                tree_deltas: HashMap::new(),
                counts,
            }),
        }
    }

    /// The repository's client cache directory, if the backup has one.
    pub fn client_dir(&self) -> Option<&std::path::Path> {
        self.client_dir.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `id` is on the dense list.
    pub fn is_dense(&self, id: &ContainerId) -> bool {
        self.dense.contains(id)
    }

    /// Whether container `id`'s chunks are cached (refreshing it if so).
    fn touch(&self, id: &ContainerId) -> bool {
        self.lock().containers.get(id).is_some()
    }

    /// Whether container `id`'s chunks are cached or have landed (changing nothing): the
    /// pool's test before reading a dense container whole.
    fn holds_or_landed(&self, id: &ContainerId) -> bool {
        let g = self.lock();
        g.containers.contains(id) || g.landed.contains(id)
    }

    /// Keeps container `id`'s chunks, read whole on the pool ahead of the dedup thread,
    /// until the stream reaches the container: the cache's contents and its evictions
    /// follow the stream's order, not the pool's timing.
    fn land(&self, id: ContainerId, chunks: Loaded) {
        let mut g = self.lock();
        if !g.containers.contains(&id) {
            g.landed.push(id, chunks);
        }
    }

    /// The dedup thread met, in stream order (as the duplicate entered its look-ahead window,
    /// [`crate::backup::lookahead`]), a duplicate stored in container `id`: a dense
    /// container's chunks enter the cache now (as the most recently used, evicting the least
    /// recently used container if full) if they landed, and a cached one is refreshed.
    /// Returns whether its chunks are cached now; `false` for a dense container that has not
    /// landed, which the caller reads ([`DensePrefetcher::reached`]).
    pub fn reached(&self, id: &ContainerId) -> bool {
        if !self.is_dense(id) {
            return false;
        }
        let landed = {
            let mut g = self.lock();
            if g.containers.get(id).is_some() {
                return true;
            }
            g.landed.pop(id)
        };
        match landed {
            Some(chunks) => {
                self.insert(*id, chunks);
                true
            }
            None => false,
        }
    }

    /// Records which chunks container `id` stores in full.
    fn record_full(&self, id: ContainerId, meta: &ContainerMeta) {
        let full = meta
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::Full)
            .map(|e| prefix(&e.id))
            .collect();
        self.lock().full.insert(id, full);
    }

    /// Takes in container `id`'s full chunks (with their super-features) as the most recently
    /// used, evicting the least recently used container if full.
    fn insert(&self, id: ContainerId, chunks: Loaded) {
        let mut g = self.lock();
        let inner = &mut *g;
        if inner.containers.contains(&id) {
            return;
        }
        inner.counts.dense_loaded += 1;
        let mut cached = CachedContainer {
            chunks: Vec::with_capacity(chunks.len()),
            keys: Vec::new(),
        };
        for (chunk, bytes, sfs) in chunks {
            inner.counts.chunks_loaded += 1;
            inner.counts.bytes_loaded += bytes.len() as u64;
            for (i, sf) in sfs.iter().enumerate() {
                let k = (i as u8, *sf);
                let holders = inner.keys.entry(k).or_default();
                if holders.last().map(|h| h.1) != Some(id) {
                    holders.push((chunk, id));
                    cached.keys.push(k);
                }
            }
            inner.chunks.insert(chunk, (bytes, id));
            cached.chunks.push(chunk);
        }
        if let Some((old, gone)) = inner.containers.push(id, cached) {
            if old != id {
                for c in &gone.chunks {
                    if inner.chunks.get(c).is_some_and(|(_, at)| *at == old) {
                        inner.chunks.remove(c);
                    }
                }
                for k in &gone.keys {
                    if let Some(holders) = inner.keys.get_mut(k) {
                        holders.retain(|h| h.1 != old);
                        if holders.is_empty() {
                            inner.keys.remove(k);
                        }
                    }
                }
            }
        }
    }

    /// A cached chunk's bytes (refreshing its container), counted as a base served.
    pub fn get(&self, id: &ChunkId) -> Option<Bytes> {
        let mut g = self.lock();
        let (bytes, c) = g.chunks.get(id).cloned()?;
        g.containers.get(&c);
        g.counts.bases_served += 1;
        Some(bytes)
    }

    /// A cached chunk's bytes, not counted as a base served (the parent's tree chunks).
    pub fn peek(&self, id: &ChunkId) -> Option<Bytes> {
        self.lock().chunks.get(id).map(|(b, _)| b.clone())
    }

    /// The container a cached chunk was loaded from.
    pub fn container_of(&self, id: &ChunkId) -> Option<ContainerId> {
        self.lock().chunks.get(id).map(|(_, c)| *c)
    }

    /// [`Self::record_full`], for tests elsewhere in the crate.
    #[cfg(test)]
    pub(crate) fn record_full_for_test(&self, id: ContainerId, meta: &ContainerMeta) {
        self.record_full(id, meta);
    }

    /// How many chunks a container whose metadata came through the cache stores in full.
    pub fn full_count(&self, id: &ContainerId) -> Option<usize> {
        self.lock().full.get(id).map(HashSet::len)
    }

    /// Whether container `id` (whose metadata came through the cache) stores `chunk` in
    /// full; `false` if unknown.
    pub fn stores_full(&self, id: &ContainerId, chunk: &ChunkId) -> bool {
        self.lock()
            .full
            .get(id)
            .is_some_and(|f| f.contains(&prefix(chunk)))
    }

    /// The first cached holder of super-feature `sf` at `position`.
    fn holder(&self, position: usize, sf: u64) -> Option<ChunkId> {
        let g = self.lock();
        g.keys
            .get(&(position as u8, sf))
            .and_then(|h| h.first())
            .map(|h| h.0)
    }

    /// Containers whose chunks are cached now.
    pub fn cached_containers(&self) -> usize {
        self.lock().containers.len()
    }

    /// What the cache did so far.
    pub fn counts(&self) -> PrefetchCounts {
        self.lock().counts
    }
}

/// LoopDelta's potential base chunk cache for a backup whose sketch index is `prefetch`
/// (`delta`), and its capacity in containers (the config's, else 150, or 20 for a backup with
/// `rewriting`: LoopDelta §5.3), filled from the dense container list of the last backup of
/// `lineage` (host and paths) in `listed`; `None` for any other sketch index.
/// `client_cache`: the client cache directory and the repository id, where the list comes
/// from when this client's last backup of the lineage kept it there
/// ([`super::dense::load_for_lineage`]), and where dense containers are kept with
/// `keep_dense_local` (`--keep-dense-local`, [`LocalDenseContainers`]).
pub fn for_backup(
    backend: &dyn Backend,
    delta: &DeltaConfig,
    rewriting: bool,
    lineage: (&str, &[String]),
    listed: Option<&SnapshotList>,
    (client_cache, keep_dense_local): (Option<(&std::path::Path, &str)>, bool),
    notices: &mut Vec<String>,
) -> Option<(Arc<PrefetchedBases>, usize)> {
    if delta.sketch_index != SketchIndexKind::Prefetch || delta.sketch.is_none() {
        return None;
    }
    let capacity = delta.prefetch_cache_containers.unwrap_or(if rewriting {
        PREFETCH_CACHE_CONTAINERS_CAPPING
    } else {
        PREFETCH_CACHE_CONTAINERS
    });
    let client_dir = client_cache.and_then(|(root, repo_id)| {
        crate::client::cache::repo_dir(root, repo_id)
            .map_err(|e| notices.push(format!("{e}; no local copy of the dense list")))
            .ok()
    });
    // Without a listing (it failed, with a notice) nothing is prefetched.
    let (dense, notice) = match listed {
        Some(l) => super::dense::load_for_lineage(
            backend,
            l,
            (lineage.0, lineage.1),
            client_dir.as_deref(),
        ),
        None => Default::default(),
    };
    notices.extend(notice);
    let local = client_dir
        .as_deref()
        .filter(|_| keep_dense_local)
        .and_then(|d| {
            LocalDenseContainers::open(d, &dense)
                .map_err(|e| notices.push(format!("{e}; dense containers are not kept locally")))
                .ok()
        });
    let mut bases = PrefetchedBases::new(dense, capacity);
    bases.client_dir = client_dir;
    bases.local = local;
    Some((Arc::new(bases), capacity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(n: u64) -> (ChunkId, Bytes, Vec<u64>) {
        let id = ChunkId::of(&n.to_le_bytes());
        (
            id,
            Bytes::from(vec![n as u8; 10]),
            vec![n * 3 + 1, n * 5 + 2],
        )
    }

    fn container(n: u8) -> ContainerId {
        ContainerId([n; 32])
    }

    /// The cache holds at most its capacity in containers and evicts a container's chunks
    /// and super-features together, least recently used first (a base served refreshes its
    /// container).
    #[test]
    fn evicts_whole_containers_least_recently_used_first() {
        let dense: HashSet<ContainerId> = (1..=3).map(container).collect();
        let cache = PrefetchedBases::new(dense, 2);
        cache.insert(container(1), (0..4).map(chunk).collect());
        cache.insert(container(2), (10..14).map(chunk).collect());
        // A base of container 1 served: container 2 is now the least recently used.
        assert!(cache.get(&chunk(0).0).is_some());
        cache.insert(container(3), (20..24).map(chunk).collect());
        assert_eq!(cache.cached_containers(), 2);
        assert!(cache.get(&chunk(11).0).is_none(), "container 2 left whole");
        assert!(
            cache.holder(0, 11 * 3 + 1).is_none(),
            "with its super-features"
        );
        assert_eq!(cache.holder(0, 3 * 3 + 1), Some(chunk(3).0));
        assert_eq!(cache.container_of(&chunk(21).0), Some(container(3)));
        let c = cache.counts();
        assert_eq!(
            (c.dense_listed, c.dense_loaded, c.chunks_loaded),
            (3, 3, 12)
        );
        assert_eq!(c.bases_served, 1);
    }

    /// The first holder of a super-feature is the chunk of the container loaded first, and it
    /// moves to the next holder when that container leaves.
    #[test]
    fn first_fit_takes_the_first_loaded_holder() {
        let cache = PrefetchedBases::new(HashSet::new(), 2);
        let (a, b) = (chunk(1), chunk(2));
        let shared = vec![7, 8];
        cache.insert(container(1), vec![(a.0, a.1.clone(), shared.clone())]);
        cache.insert(container(2), vec![(b.0, b.1.clone(), shared.clone())]);
        assert_eq!(cache.holder(1, 8), Some(a.0));
        cache.insert(container(3), vec![chunk(3)]);
        assert_eq!(cache.holder(1, 8), Some(b.0));
    }
}
