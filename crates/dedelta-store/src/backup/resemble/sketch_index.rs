//! Sketch indexes: from a chunk's super-features to a candidate base chunk.
//!
//! One trait, [`SketchIndex`], with the strategies the papers compare:
//! - [`FullSketchIndex`]: every full chunk's super-features (LoopDelta's "Greedy" baseline),
//!   persisted in the client's chunk index (rebuilt from container metadata by `repair index`) plus an
//!   in-memory overlay for the chunks of the running backup.
//! - [`StreamSketchIndex`]: stream-informed delta (SIDC, Shilane et al. §2.1). Sketches live
//!   only in container metadata; when deduplication consults a container, its sketches are
//!   loaded with it, and only cached sketches are matched. LRU eviction by container; a
//!   super-feature stays while any cached container holds it; this backup's own new chunks
//!   are kept for as many containers' worth as the cache holds.
//!
//! Base choice is FirstFit (Finesse): super-features are tried in order and the first match
//! wins. Which chunk a super-feature names when several have it is the full index's
//! `delta.sketch_keep`: the oldest (Finesse's FirstFit, the default) or the newest (LoopDelta
//! §3.1.3, Greedy replaces the entry). The stream index keeps the first cached holder. LoopDelta's potential base chunk cache is
//! a third strategy, [`crate::backup::prefetch::PrefetchSketchIndex`], filled by the locality
//! fingerprint index's prefetches rather than by `consulted`.

use crate::backend::Backend;
use crate::client::index::IndexReader;
use crate::error::Result;
use crate::format::container::{ContainerId, ContainerMeta, EntryKind};
use crate::repository::read_container_meta_tail;
use dedelta_core::sketch::{FirstFitIndex, SketchKeep, SuperFeatures};
use dedelta_core::ChunkId;
use lru::LruCache;
use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::Arc;

/// Finds candidate bases by super-feature.
pub trait SketchIndex: Send {
    /// Up to `limit` distinct candidates in FirstFit order (see
    /// [`dedelta_core::sketch::first_fit::FirstFitIndex::matches_with_backing`]); the first is
    /// FirstFit's choice.
    fn lookup(&mut self, sfs: &SuperFeatures, limit: usize) -> Result<Vec<ChunkId>>;
    /// Records a full chunk stored by the running backup.
    fn insert(&mut self, id: ChunkId, sfs: &SuperFeatures);
    /// Deduplication found a duplicate stored in `container` (the stream-locality signal).
    fn consulted(&mut self, container: ContainerId) -> Result<()>;
    /// Strategy name.
    fn name(&self) -> &'static str;
}

/// Per-backup overlay: super-features of the full chunks this backup stored, asked before the
/// backing index at each super-feature position.
type Overlay = FirstFitIndex<ChunkId>;

/// New chunks per generation of [`FullSketchIndex`]'s overlay: about 32 MiB of 8 KiB chunks,
/// so that the overlay holds a few generations (a few MB) while the writer indexes batches of
/// 32 MiB behind the dedup thread.
const GENERATION_CHUNKS: usize = 4096;

/// One generation of the overlay: the super-features of consecutive new full chunks.
struct Generation {
    overlay: Overlay,
    /// The last chunk inserted: once the index holds it, it holds the whole generation.
    last: Option<ChunkId>,
    chunks: usize,
}

impl Generation {
    fn new(keep: SketchKeep) -> Self {
        Generation {
            overlay: Overlay::keeping(keep),
            last: None,
            chunks: 0,
        }
    }
}

/// Index of every full chunk's super-features: the persisted index, and in front of it the
/// super-features of this backup's new full chunks that the index may not hold yet.
///
/// The overlay is kept in generations of [`GENERATION_CHUNKS`] chunks and a generation is
/// dropped once the index holds its last chunk: the writer indexes containers in stream
/// order, so the index then holds the generation's every chunk and super-feature (or an
/// older chunk's, which FirstFit prefers anyway). So the overlay holds what the writer has
/// not indexed yet (tens of MB of data behind), not every new chunk of the backup: one
/// overlay for the whole backup took 19 MB of a backup of 500 MB of new data, growing with
/// the backup's size.
///
/// Which chunk a super-feature names when several have it is `keep`: with
/// [`SketchKeep::Oldest`] (FirstFit) the overlay's oldest generation is asked first, then the
/// index (which keeps the oldest); so a super-feature that both know resolves to this
/// backup's chunk, a memory hit (a chunk stored in full although the index's older chunk was
/// its candidate). With [`SketchKeep::Newest`] (LoopDelta §3.1.3) the newest generation is
/// asked first (each keeps its newest chunk), then the index (which then keeps the newest):
/// this backup's chunks are newer than any the index held before it.
pub struct FullSketchIndex {
    reader: IndexReader,
    /// Oldest first; the last one is being filled.
    generations: VecDeque<Generation>,
    keep: SketchKeep,
}

impl FullSketchIndex {
    /// An index over the persisted sketches visible to `reader`, keeping `keep`'s chunk per
    /// super-feature in its overlay (the persisted index follows
    /// [`crate::client::index::ChunkIndex::set_sketch_keep`], which backup sets alike).
    pub fn new(reader: IndexReader, keep: SketchKeep) -> Self {
        FullSketchIndex {
            reader,
            generations: VecDeque::from([Generation::new(keep)]),
            keep,
        }
    }

    /// Starts a new generation and drops the old ones the index now holds (refreshing the
    /// reader to the last commit first).
    fn rotate(&mut self) -> Result<()> {
        self.generations.push_back(Generation::new(self.keep));
        self.reader.refresh();
        while self.generations.len() > 1 {
            let indexed = match self.generations.front().and_then(|g| g.last) {
                Some(last) => self.reader.get(&last)?.is_some(),
                None => true,
            };
            if !indexed {
                break;
            }
            self.generations.pop_front();
        }
        Ok(())
    }

    /// Generations held (for tests).
    #[cfg(test)]
    fn generations(&self) -> usize {
        self.generations.len()
    }
}

impl SketchIndex for FullSketchIndex {
    fn lookup(&mut self, sfs: &SuperFeatures, limit: usize) -> Result<Vec<ChunkId>> {
        // FirstFit: at each position in order, the oldest (newest) overlay generation that
        // has the super-feature, else the persisted index.
        let mut out: Vec<ChunkId> = Vec::new();
        for (position, sf) in sfs.0.iter().enumerate() {
            if out.len() >= limit {
                break;
            }
            let in_overlay = |g: &Generation| g.overlay.get(position, *sf).copied();
            let overlay_hit = match self.keep {
                SketchKeep::Oldest => self.generations.iter().find_map(in_overlay),
                SketchKeep::Newest => self.generations.iter().rev().find_map(in_overlay),
            };
            let found = match overlay_hit {
                Some(id) => Some(id),
                None => self.reader.sketch(position, *sf)?,
            };
            if let Some(id) = found {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }

    fn insert(&mut self, id: ChunkId, sfs: &SuperFeatures) {
        let Some(g) = self.generations.back_mut() else {
            return;
        };
        g.overlay.insert(id, sfs);
        g.last = Some(id);
        g.chunks += 1;
        if g.chunks >= GENERATION_CHUNKS {
            // A failed lookup here only keeps generations longer: the next rotation retries.
            let _ = self.rotate();
        }
    }

    fn consulted(&mut self, _container: ContainerId) -> Result<()> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "full"
    }
}

/// New chunks per generation of [`StreamSketchIndex`]'s overlay: one container's worth (a
/// 4 MiB container of 8 KiB chunks), the unit the cache counts in. Containers are filled by
/// stored (compressed) bytes, so a real one holds more (about 2,000 SQLAlchemy chunks): the
/// overlay holds at most, usually fewer, chunks than the cached containers.
pub const STREAM_GENERATION_CHUNKS: usize = 512;

/// A key of the stream index: (super-feature position, value).
type Key = (u8, u64);

/// Stream-informed sketch cache (SIDC, Shilane et al. §2.1).
///
/// Holds the sketches of the `capacity` containers deduplication consulted most recently
/// (LRU), and of this backup's own new full chunks (the overlay). A super-feature is
/// findable while any cached container holds it: every cached holder is kept per key, in the
/// order the containers were loaded, and FirstFit takes the first; evicting a container
/// removes its holders only, so a key shared with a newer cached container stays and names
/// that container's chunk (it was removed with the first holder, issue 15).
///
/// The overlay is bounded the same way: at most `capacity` generations of
/// [`STREAM_GENERATION_CHUNKS`] new chunks, the oldest generation dropped first. SIDC's cache
/// is a budget of containers, and this backup's new chunks are containers being written at
/// the head of the stream; stream locality means the ones `capacity` containers behind are
/// as unlikely to be matched as an evicted container. So the index holds the sketches of at
/// most 2 x `capacity` containers, whatever the backup's size (an unbounded overlay grew
/// with every new chunk: about 60 bytes a key, 3 keys a chunk, 7 MB per 300 MB of new data).
pub struct StreamSketchIndex {
    backend: Arc<dyn Backend>,
    /// Cached containers and every key each one holds.
    containers: LruCache<ContainerId, Vec<Key>>,
    /// For each key, its cached holders (a chunk and its container), oldest load first; one
    /// per container (its first chunk with the key).
    map: HashMap<Key, Vec<(ChunkId, ContainerId)>>,
    /// This backup's new full chunks, oldest generation first; the last is being filled.
    overlay: VecDeque<(Overlay, usize)>,
    /// Generations the overlay keeps (the cache's capacity).
    capacity: usize,
    /// Container metadata sections loaded.
    pub loads: u64,
}

impl StreamSketchIndex {
    /// A cache of the sketches of up to `capacity` containers (and as many containers' worth
    /// of this backup's new chunks).
    pub fn new(backend: Arc<dyn Backend>, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        StreamSketchIndex {
            backend,
            containers: LruCache::new(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)),
            map: HashMap::new(),
            overlay: VecDeque::from([(Overlay::default(), 0)]),
            capacity,
            loads: 0,
        }
    }

    /// Takes in the full entries' super-features of `container`'s metadata as the newest
    /// cached container, evicting the least recently used one if the cache is full.
    fn load(&mut self, container: ContainerId, meta: &ContainerMeta) {
        let mut keys = Vec::new();
        for e in &meta.entries {
            if e.kind != EntryKind::Full {
                continue;
            }
            for (i, sf) in e.super_features.iter().enumerate() {
                let k = (i as u8, *sf);
                let holders = self.map.entry(k).or_default();
                // Holders are pushed in load order: this container's, if any, is the last.
                if holders.last().map(|h| h.1) != Some(container) {
                    holders.push((e.id, container));
                    keys.push(k);
                }
            }
        }
        if let Some((old, old_keys)) = self.containers.push(container, keys) {
            if old != container {
                self.evict(old, &old_keys);
            }
        }
    }

    /// Removes container `old`'s holders of `keys`, and each key it was the last holder of.
    fn evict(&mut self, old: ContainerId, keys: &[Key]) {
        for k in keys {
            if let Some(holders) = self.map.get_mut(k) {
                holders.retain(|h| h.1 != old);
                if holders.is_empty() {
                    self.map.remove(k);
                }
            }
        }
    }

    /// New chunks the overlay holds (for tests).
    #[cfg(test)]
    fn overlay_chunks(&self) -> usize {
        self.overlay.iter().map(|g| g.1).sum()
    }
}

impl SketchIndex for StreamSketchIndex {
    fn lookup(&mut self, sfs: &SuperFeatures, limit: usize) -> Result<Vec<ChunkId>> {
        // FirstFit: at each position in order, the oldest overlay generation that has the
        // super-feature, else the first cached holder.
        let mut out: Vec<ChunkId> = Vec::new();
        for (position, sf) in sfs.0.iter().enumerate() {
            if out.len() >= limit {
                break;
            }
            let found = match self
                .overlay
                .iter()
                .find_map(|g| g.0.get(position, *sf).copied())
            {
                Some(id) => Some(id),
                None => match self.map.get(&(position as u8, *sf)).and_then(|h| h.first()) {
                    Some(&(id, c)) => {
                        self.containers.get(&c); // a hit refreshes its container
                        Some(id)
                    }
                    None => None,
                },
            };
            if let Some(id) = found {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }

    fn insert(&mut self, id: ChunkId, sfs: &SuperFeatures) {
        if self
            .overlay
            .back()
            .is_none_or(|g| g.1 >= STREAM_GENERATION_CHUNKS)
        {
            self.overlay.push_back((Overlay::default(), 0));
            while self.overlay.len() > self.capacity {
                self.overlay.pop_front();
            }
        }
        if let Some(g) = self.overlay.back_mut() {
            g.0.insert(id, sfs);
            g.1 += 1;
        }
    }

    fn consulted(&mut self, container: ContainerId) -> Result<()> {
        if self.containers.get(&container).is_some() {
            return Ok(());
        }
        let meta = read_container_meta_tail(self.backend.as_ref(), &container.to_hex())?;
        self.loads += 1;
        self.load(container, &meta);
        Ok(())
    }

    fn name(&self) -> &'static str {
        "stream"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::client::index::ChunkIndex;
    use crate::format::container::EntryMeta;

    fn chunk(n: usize) -> (ChunkId, SuperFeatures) {
        let id = ChunkId::of(&(n as u64).to_le_bytes());
        (id, SuperFeatures(vec![n as u64 * 3 + 1, n as u64 * 5 + 2]))
    }

    fn container(seed: u8, chunks: std::ops::Range<usize>) -> (ContainerId, ContainerMeta) {
        let entries = chunks
            .map(|n| {
                let (id, sfs) = chunk(n);
                EntryMeta {
                    id,
                    kind: EntryKind::Full,
                    region: 0,
                    offset: 0,
                    stored_len: 1,
                    original_len: 1,
                    super_features: sfs.0,
                }
            })
            .collect();
        let meta = ContainerMeta {
            regions: vec![],
            entries,
        };
        (ContainerId(ChunkId::of(&[seed]).0), meta)
    }

    /// A container of full chunks with the given ids and super-features.
    fn container_with(
        seed: u8,
        chunks: &[(ChunkId, SuperFeatures)],
    ) -> (ContainerId, ContainerMeta) {
        let entries = chunks
            .iter()
            .map(|(id, sfs)| EntryMeta {
                id: *id,
                kind: EntryKind::Full,
                region: 0,
                offset: 0,
                stored_len: 1,
                original_len: 1,
                super_features: sfs.0.clone(),
            })
            .collect();
        let meta = ContainerMeta {
            regions: vec![],
            entries,
        };
        (ContainerId(ChunkId::of(&[seed, 0xfe]).0), meta)
    }

    fn stream(capacity: usize) -> StreamSketchIndex {
        StreamSketchIndex::new(Arc::new(MemoryBackend::default()), capacity)
    }

    /// Issue 15: evicting the older of two cached containers that share a super-feature
    /// removed the key while the newer one was still cached. A key stays while any cached
    /// container holds it, names a chunk of a cached container, and goes with the last one.
    #[test]
    fn stream_keeps_a_super_feature_while_any_cached_container_holds_it() {
        let id = |n: u8| ChunkId::of(&[n]);
        let sf = |a: u64, b: u64| SuperFeatures(vec![a, b]);
        let mut s = stream(2);
        let (a, meta_a) = container_with(1, &[(id(1), sf(7, 1)), (id(2), sf(7, 2))]);
        let (b, meta_b) = container_with(2, &[(id(3), sf(7, 3))]);
        let (c, meta_c) = container_with(3, &[(id(4), sf(8, 4))]);
        let (d, meta_d) = container_with(4, &[(id(5), sf(9, 5))]);
        let (e, meta_e) = container_with(5, &[(id(6), sf(9, 6))]);
        s.load(a, &meta_a);
        s.load(b, &meta_b);
        // The first loaded holder, and in it the first chunk with the key (FirstFit).
        assert_eq!(s.lookup(&sf(7, 0), 1).unwrap(), vec![id(1)]);
        s.load(c, &meta_c); // evicts b: a was refreshed by the hit
        assert_eq!(s.lookup(&sf(7, 0), 1).unwrap(), vec![id(1)]);
        s.load(d, &meta_d); // evicts c
        s.load(e, &meta_e); // evicts a; b was evicted before
        assert!(s.lookup(&sf(7, 0), 1).unwrap().is_empty());
        // Again, evicting the first holder while the second is cached.
        let mut s = stream(2);
        s.load(a, &meta_a);
        s.load(b, &meta_b);
        s.load(c, &meta_c); // evicts a (no hit refreshed it)
        assert_eq!(s.lookup(&sf(7, 0), 1).unwrap(), vec![id(3)]);
        assert!(s.containers.contains(&b));
        s.load(d, &meta_d); // evicts c: the hit on b refreshed it
        s.load(e, &meta_e); // evicts b, the last holder
        assert!(s.lookup(&sf(7, 0), 1).unwrap().is_empty());
        assert_eq!(s.lookup(&sf(9, 0), 1).unwrap(), vec![id(5)]);
        // Nothing is left of evicted containers.
        let holders: usize = s.map.values().map(Vec::len).sum();
        assert_eq!(holders, 4, "{:?}", s.map); // d and e: two keys each
        assert!(s
            .map
            .values()
            .flatten()
            .all(|(_, c)| s.containers.contains(c)));
    }

    /// The stream index's overlay of this backup's new chunks holds at most as many
    /// generations as the cache holds containers; the oldest go first.
    #[test]
    fn stream_overlay_is_bounded_by_the_container_budget() {
        let capacity = 3;
        let mut s = stream(capacity);
        let total = 5 * STREAM_GENERATION_CHUNKS + 7;
        for n in 0..total {
            let (id, sfs) = chunk(n);
            s.insert(id, &sfs);
            assert!(s.overlay_chunks() <= capacity * STREAM_GENERATION_CHUNKS);
            assert!(s.overlay.len() <= capacity);
        }
        let found = |s: &mut StreamSketchIndex, n: usize| {
            let (id, sfs) = chunk(n);
            s.lookup(&sfs, 1).unwrap() == vec![id]
        };
        assert!(found(&mut s, total - 1));
        assert!(found(&mut s, total - 2 * STREAM_GENERATION_CHUNKS));
        assert!(!found(&mut s, 0));
        assert!(!found(
            &mut s,
            total - capacity * STREAM_GENERATION_CHUNKS - 8
        ));
    }

    /// Issue 15: the full index keeps the oldest chunk per super-feature (FirstFit) or the
    /// newest (LoopDelta §3.1.3), in the persisted index (across runs, and after they are
    /// merged) and in the overlay.
    #[test]
    fn full_index_keeps_the_oldest_or_the_newest_chunk() {
        for keep in [SketchKeep::Oldest, SketchKeep::Newest] {
            let dir = tempfile::tempdir().unwrap();
            let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
            index.set_sketch_keep(keep);
            let id = |n: u8| ChunkId::of(&[n]);
            let sf = |a: u64, b: u64| SuperFeatures(vec![a, b]);
            // Three backups' containers, each with a chunk of super-feature 10 at position 0
            // (and fillers, 9, 3 and 0 of them, so that the index keeps three runs).
            for (n, fillers) in [(1u8, 9u8), (2, 3), (3, 0)] {
                let mut chunks = vec![(id(n), sf(10, 100 + u64::from(n)))];
                chunks.extend((0..fillers).map(|f| (id(100 + 10 * n + f), sf(0, 0))));
                let (c, meta) = container_with(n, &chunks);
                index.insert_container(c, &meta).unwrap();
            }
            assert_eq!(index.runs().len(), 3);
            let (oldest, newest) = (id(1), id(3));
            let want = |k: SketchKeep| {
                if k == SketchKeep::Oldest {
                    oldest
                } else {
                    newest
                }
            };
            let mut s = FullSketchIndex::new(index.reader().unwrap(), keep);
            assert_eq!(
                s.lookup(&sf(10, 0), 1).unwrap(),
                vec![want(keep)],
                "{keep:?}"
            );
            // Merged into one run, the index answers the same.
            assert!(index.compact_if_worthwhile().unwrap().is_some());
            assert_eq!(index.runs().len(), 1);
            let mut s = FullSketchIndex::new(index.reader().unwrap(), keep);
            assert_eq!(
                s.lookup(&sf(10, 0), 1).unwrap(),
                vec![want(keep)],
                "{keep:?}"
            );
            // The running backup's chunks: two more with the same super-feature.
            s.insert(id(4), &sf(10, 0));
            s.insert(id(5), &sf(10, 1));
            let found = s.lookup(&sf(10, 0), 1).unwrap();
            match keep {
                // A memory hit before the index: the backup's first chunk with it.
                SketchKeep::Oldest => assert_eq!(found, vec![id(4)]),
                SketchKeep::Newest => assert_eq!(found, vec![id(5)]),
            }
            // Positions still come first: super-feature 0's match wins over a newer one at 1.
            let found = s.lookup(&sf(10, 101), 2).unwrap();
            assert_eq!(found.len(), 2);
            assert_eq!(found[1], id(1));
        }
    }

    /// The overlay drops a generation once the index holds its last chunk, not before, and
    /// every chunk stays a candidate throughout (from the overlay or from the index).
    #[test]
    fn overlay_generations_leave_once_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
        let mut s = FullSketchIndex::new(index.reader().unwrap(), SketchKeep::Oldest);
        let g = GENERATION_CHUNKS;
        let found = |s: &mut FullSketchIndex, n: usize| {
            let (id, sfs) = chunk(n);
            s.lookup(&sfs, 1).unwrap() == vec![id]
        };
        for n in 0..2 * g {
            let (id, sfs) = chunk(n);
            s.insert(id, &sfs);
        }
        // Nothing indexed yet: both generations stay (and a third was started).
        assert_eq!(s.generations(), 3);
        assert!(found(&mut s, 0) && found(&mut s, 2 * g - 1));
        // The writer indexes the first generation but its last chunk: it stays.
        let (id, meta) = container(1, 0..g - 1);
        index.insert_container(id, &meta).unwrap();
        for n in 2 * g..3 * g {
            let (id, sfs) = chunk(n);
            s.insert(id, &sfs);
        }
        assert_eq!(s.generations(), 4);
        // Its last chunk indexed: the first generation leaves at the next rotation.
        let (id, meta) = container(2, g - 1..g + 5);
        index.insert_container(id, &meta).unwrap();
        for n in 3 * g..4 * g {
            let (id, sfs) = chunk(n);
            s.insert(id, &sfs);
        }
        assert_eq!(s.generations(), 4);
        for n in [0, g - 1, g, 2 * g, 4 * g - 1] {
            assert!(found(&mut s, n), "chunk {n}");
        }
    }
}
