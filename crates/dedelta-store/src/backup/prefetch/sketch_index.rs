//! Runs on: the dedup thread.
//!
//! Resemblance detection for LoopDelta (§4.3): candidates only from the potential base chunk
//! cache ([`super::PrefetchedBases`]) and this backup's own new full chunks.

use super::PrefetchedBases;
use crate::backup::resemble::sketch_index::SketchIndex;
use crate::error::Result;
use crate::format::container::ContainerId;
use dedelta_core::sketch::{FirstFitIndex, SuperFeatures};
use dedelta_core::ChunkId;
use std::collections::VecDeque;
use std::sync::Arc;

/// Generations of this backup's new chunks the index keeps, per container of capacity.
const GENERATION_CHUNKS: usize = 512;

/// Resemblance detection over the potential base chunk cache and this backup's own new full
/// chunks (the latter for about as many containers' worth as the cache holds, as
/// [`crate::backup::resemble::sketch_index::StreamSketchIndex`] keeps them).
pub struct PrefetchSketchIndex {
    bases: Arc<PrefetchedBases>,
    /// This backup's new full chunks, oldest generation first; the last is being filled.
    overlay: VecDeque<(FirstFitIndex<ChunkId>, usize)>,
    capacity: usize,
}

impl PrefetchSketchIndex {
    /// An index over `bases` and up to `capacity` generations of new chunks.
    pub fn new(bases: Arc<PrefetchedBases>, capacity: usize) -> Self {
        PrefetchSketchIndex {
            bases,
            overlay: VecDeque::from([(FirstFitIndex::default(), 0)]),
            capacity: capacity.max(1),
        }
    }
}

impl SketchIndex for PrefetchSketchIndex {
    fn lookup(&mut self, sfs: &SuperFeatures, limit: usize) -> Result<Vec<ChunkId>> {
        // FirstFit as the stream index does it: at each super-feature position in order,
        // this backup's oldest new chunk with it, else the first cached holder.
        let mut out = Vec::new();
        for (position, sf) in sfs.0.iter().enumerate() {
            if out.len() >= limit {
                break;
            }
            let found = self
                .overlay
                .iter()
                .find_map(|g| g.0.get(position, *sf).copied())
                .or_else(|| self.bases.holder(position, *sf));
            if let Some(id) = found.filter(|id| !out.contains(id)) {
                out.push(id);
            }
        }
        Ok(out)
    }

    fn insert(&mut self, id: ChunkId, sfs: &SuperFeatures) {
        if self.overlay.back().is_none_or(|g| g.1 >= GENERATION_CHUNKS) {
            self.overlay.push_back((FirstFitIndex::default(), 0));
            while self.overlay.len() > self.capacity {
                self.overlay.pop_front();
            }
        }
        if let Some(g) = self.overlay.back_mut() {
            g.0.insert(id, sfs);
            g.1 += 1;
        }
    }

    fn consulted(&mut self, _container: ContainerId) -> Result<()> {
        // Containers come in through the fingerprint index's prefetches (DensePrefetcher).
        Ok(())
    }

    fn name(&self) -> &'static str {
        "prefetch"
    }
}
