//! Runs on: restore's reader thread, beside the locator.
//!
//! The papers' restore cache, counted: the restore speed factor of DARE §4.5 and LoopDelta
//! §5.1 is the MB restored per container read through an LRU restore cache that holds whole
//! containers, as many as the user sets (LoopDelta: 512 containers of 4 MB; DARE: 256 and
//! 512 MB, 64 and 128 such containers). [`RestoreCacheModel`] is fed every data chunk a
//! restore needs, in restore order, and counts the containers such a cache reads: a chunk
//! whose container is not cached reads the container (one container read) and evicts the
//! least recently used one; a delta needs its base too, whose container is looked up the
//! same way (the papers' systems keep no other cache, so a base costs a container read unless
//! its container is cached). Beside them it counts the regions the cache would decompress
//! from the containers it holds (a region read on the first use of each region of a cached
//! container), and the stored bytes of the containers read.
//!
//! Counted, not held: restore's data go through [`super::ChunkLocator`]'s region cache,
//! bounded in bytes, and its decoder's cache of verified bases, and the counters of those
//! real reads stay in [`super::ReadStats`] (`regions_read`, `bytes_read`). A cache of
//! containers that held their data would change what restore reads, not what the papers'
//! metric counts; counting it beside the real reads keeps restore's memory bound in bytes
//! and measures the metric the same way for every configuration. The tree stream (the
//! papers' recipes, read apart from the containers) is not counted.

use super::{lru, META_CACHE_ENTRIES};
use crate::client::index::IndexReader;
use crate::error::Result;
use crate::format::container::{ContainerId, ContainerMeta, EntryKind};
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::collections::HashSet;
use std::sync::Arc;

/// The restore cache size of LoopDelta §5.1 ("a 512-container-sized (2GB) LRU cache"), the
/// default of `restore --cache-containers` and of the eval.
pub const PAPER_CACHE_CONTAINERS: usize = 512;

/// Deltas followed to their bases at most this deep (one level today; a bound so that a
/// damaged repository whose bases form a cycle cannot loop).
const MAX_BASE_DEPTH: usize = 16;

/// What the modelled restore cache read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RestoreCacheStats {
    /// Containers the cache holds at most.
    pub cache_containers: usize,
    /// Containers read: cache misses.
    pub containers_read: u64,
    /// Stored bytes of their regions (what reading the whole containers transfers, headers
    /// and metadata sections aside).
    pub container_bytes_read: u64,
    /// Regions decompressed from the cached containers (first use of each).
    pub regions_read: u64,
    /// Chunks looked up (data chunks and the bases of deltas).
    pub chunks: u64,
    /// Chunks the model could not place (not indexed, or their container unreadable): the
    /// restore reports those itself; they count no read here.
    pub unplaced: u64,
}

/// An LRU cache of whole containers, counted (see the module docs).
pub struct RestoreCacheModel<'a> {
    repo: &'a IndexedRepository,
    index: IndexReader,
    metas: LruCache<ContainerId, Arc<ContainerMeta>>,
    cache: ContainerLru,
    stats: RestoreCacheStats,
}

/// The cache itself: the containers it holds, least recently used first out, with the
/// regions decompressed from each.
struct ContainerLru(LruCache<ContainerId, HashSet<u32>>);

impl ContainerLru {
    fn new(containers: usize) -> Self {
        ContainerLru(lru(containers))
    }

    /// Uses `region` of `container`; returns whether the container had to be read, and
    /// whether the region had to be decompressed.
    fn touch(&mut self, container: ContainerId, region: u32) -> (bool, bool) {
        match self.0.get_mut(&container) {
            Some(regions) => (false, regions.insert(region)),
            None => {
                self.0.put(container, HashSet::from([region]));
                (true, true)
            }
        }
    }
}

impl<'a> RestoreCacheModel<'a> {
    /// A cache of at most `containers` containers (at least 1).
    ///
    /// # Errors
    /// The index cannot be read.
    pub fn new(repo: &'a IndexedRepository, containers: usize) -> Result<Self> {
        let containers = containers.max(1);
        Ok(RestoreCacheModel {
            repo,
            index: repo.index().reader()?,
            metas: lru(META_CACHE_ENTRIES),
            cache: ContainerLru::new(containers),
            stats: RestoreCacheStats {
                cache_containers: containers,
                ..RestoreCacheStats::default()
            },
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> RestoreCacheStats {
        self.stats
    }

    /// Chunk `id` is restored next: its container (and for a delta, its base's) is used.
    pub fn access(&mut self, id: &ChunkId) {
        let mut next = Some(*id);
        for _ in 0..MAX_BASE_DEPTH {
            let Some(id) = next.take() else {
                return;
            };
            self.stats.chunks += 1;
            match self.place(&id) {
                Some((container, region, kind)) => {
                    self.touch(container, region);
                    if let EntryKind::Delta { base } = kind {
                        next = Some(base);
                    }
                }
                None => self.stats.unplaced += 1,
            }
        }
    }

    /// The container, region and kind of chunk `id`, if the index and metadata say.
    fn place(&mut self, id: &ChunkId) -> Option<(ContainerId, u32, EntryKind)> {
        let loc = self.index.get(id).ok()??;
        let meta = match self.metas.get(&loc.container) {
            Some(m) => m.clone(),
            None => {
                // Unmetered: the model's reads are not the restore's.
                let backend = self.repo.unmetered_backend();
                let m = crate::repository::read_container_meta(
                    backend.as_ref(),
                    &loc.container.to_hex(),
                );
                let m = Arc::new(m.ok()?);
                self.metas.put(loc.container, m.clone());
                m
            }
        };
        let e = meta.entries.get(loc.entry as usize)?;
        (e.id == *id).then_some((loc.container, e.region, e.kind))
    }

    fn touch(&mut self, container: ContainerId, region: u32) {
        let (container_read, region_read) = self.cache.touch(container, region);
        self.stats.regions_read += u64::from(region_read);
        if container_read {
            self.stats.containers_read += 1;
            self.stats.container_bytes_read += self.metas.peek(&container).map_or(0, |m| {
                m.regions.iter().map(|r| u64::from(r.stored_len)).sum()
            });
        }
    }
}

/// MB (10^6 bytes) restored per container read: the papers' restore speed factor; `None`
/// when no container was read.
pub fn speed_factor(restored_bytes: u64, containers_read: u64) -> Option<f64> {
    (containers_read > 0).then(|| restored_bytes as f64 / 1e6 / containers_read as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The LRU by hand, with a cache of 2 containers: chunks in containers A A B C A B, then
    /// a delta in C whose base is in A.
    /// - A: miss (1 read), A: hit, B: miss (2), C: miss (3, evicts A), A: miss (4, evicts
    ///   B), B: miss (5, evicts C);
    /// - the delta: C miss (6, evicts A), its base in A: miss (7, evicts B).
    ///
    /// With 3 containers: A, B, C are read once each and the rest hit: 3 reads.
    #[test]
    fn lru_of_containers_by_hand() {
        let ids: Vec<ContainerId> = (1..=3u8).map(|b| ContainerId([b; 32])).collect();
        let (a, b, c) = (ids[0], ids[1], ids[2]);
        let count = |n: usize| {
            let mut cache = ContainerLru::new(n);
            let (mut containers, mut regions) = (0, 0);
            for (cid, region) in [
                (a, 0),
                (a, 1),
                (b, 0),
                (c, 0),
                (a, 0),
                (b, 0),
                (c, 1),
                (a, 0),
            ] {
                let (cr, rr) = cache.touch(cid, region);
                containers += u64::from(cr);
                regions += u64::from(rr);
            }
            (containers, regions)
        };
        // Every miss reads one region; the hit on A reads its region 1.
        assert_eq!(count(2), (7, 8));
        // A0 A1 B0 C0, then C1: three containers, five distinct regions.
        assert_eq!(count(3), (3, 5));
        // 10 MB restored over 4 container reads.
        assert_eq!(speed_factor(10_000_000, 4), Some(2.5));
        assert_eq!(speed_factor(10_000_000, 0), None);
    }
}
