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
//! Resemblance detection then looks only there and at this backup's own new full chunks
//! ([`PrefetchSketchIndex`]), and the delta stage takes bases only from there and from
//! memory ([`super::bases::BaseFetcher::only_cached`]): no base is read on its own, so the
//! backup's base reads (the I/O accounting's `base reads`) stay 0.
//!
//! The cache also remembers which chunks every container loaded through it (whole or
//! metadata only) stores in full, by an 8-byte prefix of their fingerprints: the data chunks
//! whose share a backup references is the container's reuse ratio
//! ([`super::dense::ReuseMonitor`]; 8 bytes a chunk of each container a backup touches).

mod sketch_index;
pub use sketch_index::PrefetchSketchIndex;

use super::dense::LocalDenseContainers;
use super::fingerprint_index::MetaLoader;
use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use crate::format::config::{
    DeltaConfig, SketchIndexKind, PREFETCH_CACHE_CONTAINERS, PREFETCH_CACHE_CONTAINERS_CAPPING,
};
use crate::format::container::{self, ContainerId, ContainerMeta, EntryKind};
use crate::repository::read_container_meta_tail;
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

/// One cached container: its full chunks and the keys it holds.
struct CachedContainer {
    chunks: Vec<ChunkId>,
    keys: Vec<Key>,
}

struct Inner {
    containers: LruCache<ContainerId, CachedContainer>,
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
    fn insert(&self, id: ContainerId, chunks: Vec<(ChunkId, Bytes, Vec<u64>)>) {
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

/// Region cache of the reader of the parent tree's chunks and bases that no dense container
/// holds ([`DensePrefetcher::tree_chunks`]): a region or two.
const TREE_BASE_READ_BYTES: usize = 4 << 20;

/// The locality index's loader for LoopDelta: a dense container not cached yet is read
/// whole, in one request, and its full chunks enter the cache; any other container's
/// metadata is read as usual (one request). A dense container the backup read whole before
/// ([`Self::preload`]: the one holding the parent's tree) costs no request.
pub struct DensePrefetcher {
    /// The cache it fills.
    pub bases: Arc<PrefetchedBases>,
}

impl DensePrefetcher {
    /// Reads container `id` whole: its metadata, and its full chunks into the cache; the
    /// deltas of the chunks in `tree` (the parent's tree, being read) are kept aside.
    fn load_whole(
        &self,
        backend: &dyn Backend,
        id: &ContainerId,
        tree: &HashSet<ChunkId>,
    ) -> Result<ContainerMeta> {
        let name = id.to_hex();
        let what = format!("container {name}");
        let kept = self.bases.local.as_ref().and_then(|l| l.get(id));
        let file = match kept {
            Some(file) => {
                let mut g = self.bases.lock();
                g.counts.local_loaded += 1;
                g.counts.local_bytes += file.len() as u64;
                file
            }
            None => {
                let file = backend.get(FileKind::Container, &name)?;
                if let Some(l) = &self.bases.local {
                    l.put(id, &file);
                }
                file
            }
        };
        // The name is the hash of the bytes: a whole read is verified entirely (the bases
        // decoded below are then exactly what a restore decodes).
        if ChunkId::of(&file).0 != id.0 {
            return Err(Error::corrupt(&what, "content does not match its name"));
        }
        let meta = container::decode_container_meta(&file, &what)?;
        let mut raw: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut chunks = Vec::new();
        let mut deltas = Vec::new();
        let wanted = |e: &&container::EntryMeta| match e.kind {
            EntryKind::Full => true,
            EntryKind::Delta { .. } => tree.contains(&e.id),
        };
        for e in meta.entries.iter().filter(wanted) {
            if let std::collections::hash_map::Entry::Vacant(v) = raw.entry(e.region) {
                let r = meta
                    .regions
                    .get(e.region as usize)
                    .ok_or_else(|| Error::corrupt(&what, "entry names no region"))?;
                let stored = file
                    .get(r.offset as usize..(r.offset as usize + r.stored_len as usize))
                    .ok_or_else(|| Error::corrupt(&what, "region outside the file"))?;
                v.insert(container::open_region(stored, r, &what)?);
            }
            let bytes = raw[&e.region]
                .get(e.offset as usize..e.offset as usize + e.stored_len as usize)
                .ok_or_else(|| Error::corrupt(&what, "entry outside its region"))?;
            let bytes = Bytes::copy_from_slice(bytes);
            match e.kind {
                EntryKind::Full => chunks.push((e.id, bytes, e.super_features.clone())),
                EntryKind::Delta { base, .. } => deltas.push((e.id, (base, bytes))),
            }
        }
        self.bases.insert(*id, chunks);
        self.bases.lock().tree_deltas.extend(deltas);
        Ok(meta)
    }

    /// Reads dense container `id` whole now, if it is dense and not cached, keeping its
    /// metadata for when the locality index asks for it: the backup reads its parent's tree
    /// before deduplication starts, and the tree lies in a container of the last backup,
    /// which is dense (one request then instead of the metadata, the tree's region, and the
    /// whole container again later). Returns whether the container's chunks are cached.
    /// `tree`: the chunks of the parent's tree, whose deltas are kept aside.
    pub fn preload(
        &self,
        backend: &dyn Backend,
        id: &ContainerId,
        tree: &HashSet<ChunkId>,
    ) -> bool {
        if !self.bases.is_dense(id) {
            return false;
        }
        if self.bases.touch(id) {
            return true;
        }
        match self.load_whole(backend, id, tree) {
            Ok(meta) => {
                self.bases.record_full(*id, &meta);
                self.bases.lock().preloaded.insert(*id, meta);
                true
            }
            Err(_) => false,
        }
    }

    /// The chunks of the tree `chunks` (in order), from dense containers as far as they hold
    /// them, read whole now if needed through `backend` ([`Self::preload`]): a chunk stored
    /// in full from the cache, a delta rebuilt from its delta (kept aside when its container
    /// was read) and its base, and checked against its fingerprint. A chunk or base no dense
    /// container holds is read alone from `repo` (its container's metadata and region, as
    /// reading the tree the usual way reads every chunk; counted in
    /// [`PrefetchCounts::tree_chunks_read_alone`]): with Capping, a tree chunk deduplicated
    /// against a container that is not dense made the backup read the whole tree the usual
    /// way. `None` if a chunk cannot be read or rebuilt, for the caller to read the tree as
    /// usual.
    pub fn tree_chunks(
        &self,
        repo: &crate::repository::IndexedRepository,
        backend: &dyn Backend,
        chunks: &[ChunkId],
    ) -> Option<Vec<Bytes>> {
        let index = repo.index().reader().ok()?;
        let hasher = repo.chunk_hasher();
        let mut reader = None;
        let mut read_alone = 0u64;
        let tree: HashSet<ChunkId> = chunks.iter().copied().collect();
        // A chunk's bytes, its container read whole if need be (`None`: not dense).
        let cached = |id: &ChunkId| -> Option<Bytes> {
            if let Some(b) = self.bases.peek(id) {
                return Some(b);
            }
            let at = index.get(id).ok()??;
            if !self.preload(backend, &at.container, &tree) {
                return None;
            }
            self.bases.peek(id)
        };
        // A chunk no dense container holds, read alone and checked.
        let mut alone = |id: &ChunkId| -> Option<Bytes> {
            if reader.is_none() {
                reader = crate::read::ChunkReader::new(repo, TREE_BASE_READ_BYTES).ok();
            }
            let raw = reader.as_mut()?.read_chunk(id).ok()?;
            read_alone += 1;
            (hasher.id(&raw) == *id).then(|| Bytes::from(raw))
        };
        let rebuilt = chunks
            .iter()
            .map(|id| {
                if let Some(b) = cached(id) {
                    return Some(b);
                }
                let kept = self.bases.lock().tree_deltas.get(id).cloned();
                let Some((base, delta)) = kept else {
                    return alone(id);
                };
                let base = match cached(&base) {
                    Some(b) => b,
                    None => alone(&base)?,
                };
                let mut raw = Vec::new();
                dedelta_core::delta::format::decode(&base, &delta, &mut raw).ok()?;
                (hasher.id(&raw) == *id).then(|| Bytes::from(raw))
            })
            .collect::<Option<Vec<Bytes>>>();
        let mut g = self.bases.lock();
        g.tree_deltas = HashMap::new();
        g.counts.parent_tree_cached = rebuilt.is_some();
        g.counts.tree_chunks_read_alone = read_alone;
        rebuilt
    }
}

impl MetaLoader for DensePrefetcher {
    fn load(&self, backend: &dyn Backend, id: &ContainerId) -> Result<ContainerMeta> {
        if let Some(meta) = self.bases.lock().preloaded.remove(id) {
            return Ok(meta);
        }
        let meta = if self.bases.is_dense(id) && !self.bases.touch(id) {
            // A container that cannot be read whole is no base; its metadata may still be
            // readable (the lookup's answer stands either way).
            match self.load_whole(backend, id, &HashSet::new()) {
                Ok(meta) => meta,
                Err(_) => read_container_meta_tail(backend, &id.to_hex())?,
            }
        } else {
            read_container_meta_tail(backend, &id.to_hex())?
        };
        self.bases.record_full(*id, &meta);
        Ok(meta)
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
