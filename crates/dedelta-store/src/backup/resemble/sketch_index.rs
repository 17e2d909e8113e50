//! Sketch indexes: from a chunk's super-features to a candidate base chunk.
//!
//! One trait, [`SketchIndex`], with the strategies the papers compare:
//! - [`FullSketchIndex`]: every full chunk's super-features (LoopDelta's "Greedy" baseline),
//!   persisted in the client's chunk index (rebuilt from container metadata by `repair index`) plus an
//!   in-memory overlay for the chunks of the running backup.
//! - [`StreamSketchIndex`]: stream-informed delta (SIDC, Shilane et al. §2.1). Sketches live
//!   only in container metadata; when deduplication consults a container, its sketches are
//!   loaded with it, and only cached sketches are matched. LRU eviction by container.
//!
//! Base choice is FirstFit (Finesse): super-features are tried in order and the first match
//! wins. The `consulted` hook is where LoopDelta's dual-locality tracking and locality-aware
//! prefetching will plug in: they observe the same stream of container consultations.

use crate::backend::Backend;
use crate::client::index::IndexReader;
use crate::error::Result;
use crate::format::container::{ContainerId, EntryKind};
use crate::repository::read_container_meta;
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

/// Stream-informed sketch cache (SIDC).
pub struct StreamSketchIndex {
    backend: Arc<dyn Backend>,
    containers: LruCache<ContainerId, Vec<(u8, u64)>>,
    map: HashMap<(u8, u64), (ChunkId, ContainerId)>,
    overlay: Overlay,
    /// Container metadata sections loaded.
    pub loads: u64,
}

impl StreamSketchIndex {
    /// A cache of the sketches of up to `capacity` containers.
    pub fn new(backend: Arc<dyn Backend>, capacity: usize) -> Self {
        StreamSketchIndex {
            backend,
            containers: LruCache::new(
                NonZeroUsize::new(capacity.max(1)).unwrap_or(NonZeroUsize::MIN),
            ),
            map: HashMap::new(),
            overlay: Overlay::default(),
            loads: 0,
        }
    }
}

impl SketchIndex for StreamSketchIndex {
    fn lookup(&mut self, sfs: &SuperFeatures, limit: usize) -> Result<Vec<ChunkId>> {
        let (map, containers) = (&self.map, &mut self.containers);
        self.overlay.matches_with_backing(sfs, limit, |i, sf| {
            Ok(map.get(&(i as u8, sf)).map(|(id, c)| {
                containers.get(c); // a hit refreshes its container
                *id
            }))
        })
    }

    fn insert(&mut self, id: ChunkId, sfs: &SuperFeatures) {
        self.overlay.insert(id, sfs);
    }

    fn consulted(&mut self, container: ContainerId) -> Result<()> {
        if self.containers.get(&container).is_some() {
            return Ok(());
        }
        let meta = read_container_meta(self.backend.as_ref(), &container.to_hex())?;
        self.loads += 1;
        let mut keys = Vec::new();
        for e in &meta.entries {
            if e.kind != EntryKind::Full {
                continue;
            }
            for (i, sf) in e.super_features.iter().enumerate() {
                let k = (i as u8, *sf);
                self.map.entry(k).or_insert_with(|| {
                    keys.push(k);
                    (e.id, container)
                });
            }
        }
        if let Some((old, old_keys)) = self.containers.push(container, keys) {
            if old != container {
                for k in old_keys {
                    if self.map.get(&k).is_some_and(|(_, c)| *c == old) {
                        self.map.remove(&k);
                    }
                }
            }
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "stream"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::index::ChunkIndex;
    use crate::format::container::{ContainerMeta, EntryMeta};

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
