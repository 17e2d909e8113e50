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
use dedelta_core::sketch::{FirstFitIndex, SuperFeatures};
use dedelta_core::ChunkId;
use lru::LruCache;
use std::collections::HashMap;
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

/// Index of every full chunk's super-features.
pub struct FullSketchIndex {
    reader: IndexReader,
    overlay: Overlay,
}

impl FullSketchIndex {
    /// An index over the persisted sketches visible to `reader`.
    pub fn new(reader: IndexReader) -> Self {
        FullSketchIndex {
            reader,
            overlay: Overlay::default(),
        }
    }
}

impl SketchIndex for FullSketchIndex {
    fn lookup(&mut self, sfs: &SuperFeatures, limit: usize) -> Result<Vec<ChunkId>> {
        let reader = &self.reader;
        self.overlay
            .matches_with_backing(sfs, limit, |i, sf| reader.sketch(i, sf))
    }

    fn insert(&mut self, id: ChunkId, sfs: &SuperFeatures) {
        self.overlay.insert(id, sfs);
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
