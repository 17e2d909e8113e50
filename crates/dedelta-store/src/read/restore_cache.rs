//! Runs on: restore's (and dump's) reader thread, inside its [`super::ChunkLocator`].
//!
//! Restore caches: where a restore keeps the decompressed regions it read, and what it counts
//! as a container read. Two strategies behind one trait, [`RestoreCache`]:
//!
//! - [`ContainerLru`] (the default): the papers' restore cache (DARE §4.5, LoopDelta §5.1:
//!   "a 512-container-sized (2GB) LRU cache"), an LRU of containers. A chunk whose container
//!   is not held reads it (one container read) and evicts the least recently used container
//!   once more than N are held. Of a held container, restore keeps the regions it needed:
//!   each is read and decompressed on its first use (a range read of one region, counted in
//!   `regions_read`, not as another container read). The regions held are also bounded in bytes: past it the least recently used
//!   region goes, and a container whose last region goes is no longer held. Restore's and
//!   dump's bound in bytes starts small and grows as regions let go of are read again
//!   ([`ContainerLru::growing`]). With N large,
//!   that is the region cache bounded in bytes that check and backup use; with the byte bound
//!   large, the papers' cache.
//! - [`ForwardAssembly`] (Lillibridge et al., FAST'13, §3.2): restore looks ahead over the
//!   next M bytes of the snapshot's recipe (an assembly area, which may span files and split
//!   a large one), finds every region those chunks and the delta bases they need lie in, and
//!   reads each container once for the area: one backend read spanning the regions it needs
//!   of it, after which the area's chunks are all served from memory. The area's regions are
//!   dropped when the next area starts. Unlike the paper, which copies each chunk into an
//!   M-byte buffer and drops the container, the area keeps the regions its chunks lie in
//!   (chunks are slices of them, so nothing is copied): memory is the area's regions, at
//!   most one per chunk of the area and per delta base it needs.
//!
//! Delta bases go through the same cache: restore's decoder keeps the bases it rebuilt from
//! deltas ([`super::RESTORE_BASE_CACHE_ENTRIES`]), and a base it lacks (always one stored in
//! full, which it uses where it lies) is located like any chunk, so a base in a container the
//! cache does not hold costs a container read. (The papers'
//! systems have no cache of bases; this one spares some reads they would count.)
//!
//! The restore speed factor ([`speed_factor`]) is MB restored per container read counted
//! here. The tree stream (the papers' recipes, read apart from the containers) is not
//! counted.

use crate::format::container::ContainerId;
use lru::LruCache;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The restore cache size of LoopDelta §5.1 ("a 512-container-sized (2GB) LRU cache"), the
/// default of `restore --cache-containers` and of the eval.
pub const PAPER_CACHE_CONTAINERS: usize = 512;

/// The default assembly area of [`ForwardAssembly`]: 64 MiB of restored bytes.
pub const DEFAULT_ASSEMBLY_BYTES: u64 = 64 << 20;

/// Which restore cache to use, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "cache", rename_all = "snake_case")]
pub enum RestoreCacheChoice {
    /// [`ContainerLru`] of this many containers (at least 1).
    Lru {
        /// Containers held at most.
        containers: usize,
    },
    /// [`ForwardAssembly`] over areas of this many restored bytes (at least 1).
    Forward {
        /// The assembly area, in bytes of restored data.
        area_bytes: u64,
    },
}

impl Default for RestoreCacheChoice {
    fn default() -> Self {
        RestoreCacheChoice::Lru {
            containers: PAPER_CACHE_CONTAINERS,
        }
    }
}

impl RestoreCacheChoice {
    /// The cache, its regions bounded by `cache_bytes` too (the LRU only; an assembly area
    /// holds what its chunks need). An LRU bounded in bytes grows to that bound as it needs
    /// ([`ContainerLru::growing`]); `usize::MAX` (no bound in bytes: the papers' cache of
    /// containers, as eval runs it) holds every region until its container goes.
    pub fn build(self, cache_bytes: usize) -> Box<dyn RestoreCache> {
        match self {
            RestoreCacheChoice::Lru { containers } if cache_bytes == usize::MAX => {
                Box::new(ContainerLru::new(containers, cache_bytes))
            }
            RestoreCacheChoice::Lru { containers } => {
                Box::new(ContainerLru::growing(containers, cache_bytes))
            }
            RestoreCacheChoice::Forward { area_bytes } => {
                Box::new(ForwardAssembly::new(area_bytes))
            }
        }
    }
}

/// What a restore cache read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RestoreCacheStats {
    /// `"lru"` or `"forward"`.
    pub cache: &'static str,
    /// The LRU's bound in containers (0 for forward assembly).
    pub cache_containers: usize,
    /// Forward assembly's area in bytes (0 for the LRU).
    pub assembly_bytes: u64,
    /// Containers read: the LRU's misses, or each container once per assembly area that
    /// needs it.
    pub containers_read: u64,
    /// Stored bytes of the regions of the containers read (what reading the whole
    /// containers transfers, headers and metadata sections aside).
    pub container_bytes_read: u64,
    /// Regions read and decompressed into the cache.
    pub regions_read: u64,
    /// Regions served from the cache.
    pub region_hits: u64,
    /// The most containers held at once.
    pub max_containers_held: usize,
    /// Assembly areas restored (forward assembly).
    pub areas: u64,
}

impl RestoreCacheStats {
    /// A container read: a miss of the cache, of `container_bytes` stored bytes.
    fn container_read(&mut self, container_bytes: u64) {
        self.containers_read += 1;
        self.container_bytes_read += container_bytes;
    }
}

/// Where restore keeps decompressed regions, and what counts as a container read.
///
/// The locator asks [`RestoreCache::get`] first; on a miss it reads the region and hands it
/// to [`RestoreCache::put`]. A cache with an assembly area ([`RestoreCache::area_bytes`]) is
/// filled ahead: restore starts each area with [`RestoreCache::start_area`] and reads the
/// regions the area needs, container by container, before fetching its chunks.
pub trait RestoreCache: Send {
    /// Region `region` of `container`, if held.
    fn get(&mut self, container: &ContainerId, region: u32) -> Option<Arc<Vec<u8>>>;
    /// Whether `container` is held: reading another of its regions is no container read.
    fn holds(&self, container: &ContainerId) -> bool;
    /// Whether region `region` of `container` is held, without counting as a use (restore
    /// reads ahead only what the cache lacks).
    fn has(&self, container: &ContainerId, region: u32) -> bool;
    /// Keeps region `region` of `container`, just read; `container_bytes` is the stored size
    /// of the container's regions. Regions let go of are pushed onto `evicted` (their buffers
    /// are reused).
    fn put(
        &mut self,
        container: ContainerId,
        region: u32,
        bytes: Arc<Vec<u8>>,
        container_bytes: u64,
        evicted: &mut Vec<Arc<Vec<u8>>>,
    );
    /// The assembly area, in restored bytes, over which restore looks ahead; `None` reads
    /// chunk by chunk.
    fn area_bytes(&self) -> Option<u64>;
    /// The next assembly area starts: the last one's regions go onto `evicted`.
    fn start_area(&mut self, evicted: &mut Vec<Arc<Vec<u8>>>);
    /// Counters so far.
    fn stats(&self) -> RestoreCacheStats;
}

/// The byte bound a growing [`ContainerLru`] starts at.
pub const GROWING_START_BYTES: usize = 32 << 20;
/// A growing [`ContainerLru`] doubles its byte bound once, of the regions read since it last
/// grew, at least one in this many were regions it had let go of...
const GROW_REREAD_SHARE: u64 = 8;
/// ...and at least this many.
const GROW_MIN_REREADS: u64 = 8;
/// Regions read over which a growing [`ContainerLru`] counts those read again (halved past
/// it).
const GROWTH_WINDOW: u64 = 4096;
/// Regions let go of that a growing [`ContainerLru`] remembers, to notice reading them again.
const GHOSTS: usize = 4096;

/// An LRU of containers, bounded in containers and in bytes of the regions held (see the
/// module docs).
pub struct ContainerLru {
    /// Regions held, least recently used first out under the byte bound.
    regions: LruCache<(ContainerId, u32), Arc<Vec<u8>>>,
    /// Containers held (those with a region held), least recently used first out under the
    /// bound in containers, with the regions held of each.
    containers: LruCache<ContainerId, Vec<u32>>,
    max_containers: usize,
    /// The byte bound now: `max_bytes`, or less while a growing cache has not needed it.
    bound: usize,
    max_bytes: usize,
    bytes: usize,
    /// Growing: regions let go of under the byte bound, and counts since the bound last grew.
    growth: Option<Growth>,
    stats: RestoreCacheStats,
}

/// What a growing [`ContainerLru`] watches.
struct Growth {
    /// Regions let go of under the byte bound (a ghost list).
    ghosts: LruCache<(ContainerId, u32), ()>,
    /// Regions read since the bound last grew.
    read: u64,
    /// Of those, regions that were ghosts.
    reread: u64,
}

impl ContainerLru {
    /// At most `containers` containers (at least 1) and `max_bytes` of regions (the region
    /// just read is kept whatever its size).
    pub fn new(containers: usize, max_bytes: usize) -> Self {
        let containers = containers.max(1);
        ContainerLru {
            regions: LruCache::unbounded(),
            containers: LruCache::unbounded(),
            max_containers: containers,
            bound: max_bytes,
            max_bytes,
            bytes: 0,
            growth: None,
            stats: RestoreCacheStats {
                cache: "lru",
                cache_containers: containers,
                ..RestoreCacheStats::default()
            },
        }
    }

    /// As [`Self::new`], but the byte bound starts at [`GROWING_START_BYTES`] (or `max_bytes`
    /// if smaller) and doubles, up to `max_bytes`, whenever regions it let go of are read
    /// again often (one in [`GROW_REREAD_SHARE`] of the regions read since it last grew).
    ///
    /// Why: every region is decompressed into a buffer, and a buffer is only reused once the
    /// cache lets a region go, so a cache that never fills maps fresh pages for every region,
    /// which the kernel must fault in and zero. The 20 per-version dumps of the SQLAlchemy
    /// sdists took 1.85-1.94 s with a fixed 256 MiB against 1.74-1.76 s with 32 MiB, for a
    /// few regions read again; a 1.24 GB file needs the large cache (half the CPU of 32 MiB,
    /// which read its 20 MB repository's regions 13 times over), and grows to it.
    pub fn growing(containers: usize, max_bytes: usize) -> Self {
        ContainerLru::growing_from(containers, max_bytes, GROWING_START_BYTES)
    }

    /// [`Self::growing`] from a byte bound of `start`.
    fn growing_from(containers: usize, max_bytes: usize, start: usize) -> Self {
        let mut lru = ContainerLru::new(containers, max_bytes);
        if max_bytes > start {
            lru.bound = start;
            lru.growth = Some(Growth {
                ghosts: super::lru(GHOSTS),
                read: 0,
                reread: 0,
            });
        }
        lru
    }

    /// The byte bound now (see [`Self::growing`]).
    pub fn bound_bytes(&self) -> usize {
        self.bound
    }

    /// Counts a region read; grows the bound if regions let go of are read again often.
    fn note_read(&mut self, key: (ContainerId, u32)) {
        let Some(g) = self.growth.as_mut() else {
            return;
        };
        g.read += 1;
        if g.ghosts.pop(&key).is_some() {
            g.reread += 1;
        }
        // A window, so that a long stretch read once does not hide what comes after it.
        if g.read > GROWTH_WINDOW {
            (g.read, g.reread) = (g.read / 2, g.reread / 2);
        }
        if g.reread >= GROW_MIN_REREADS && g.reread * GROW_REREAD_SHARE >= g.read {
            self.bound = self.bound.saturating_mul(2).min(self.max_bytes);
            (g.read, g.reread) = (0, 0);
            if self.bound == self.max_bytes {
                self.growth = None;
            }
        }
    }

    /// Containers held now.
    pub fn len(&self) -> usize {
        self.containers.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty()
    }
}

impl RestoreCache for ContainerLru {
    fn get(&mut self, container: &ContainerId, region: u32) -> Option<Arc<Vec<u8>>> {
        let r = self.regions.get(&(*container, region))?.clone();
        self.containers.promote(container);
        self.stats.region_hits += 1;
        Some(r)
    }

    fn holds(&self, container: &ContainerId) -> bool {
        self.containers.contains(container)
    }

    fn has(&self, container: &ContainerId, region: u32) -> bool {
        self.regions.contains(&(*container, region))
    }

    fn put(
        &mut self,
        container: ContainerId,
        region: u32,
        bytes: Arc<Vec<u8>>,
        container_bytes: u64,
        evicted: &mut Vec<Arc<Vec<u8>>>,
    ) {
        self.stats.regions_read += 1;
        self.note_read((container, region));
        match self.containers.get_mut(&container) {
            Some(held) => held.push(region),
            None => {
                self.stats.container_read(container_bytes);
                self.containers.put(container, vec![region]);
            }
        }
        self.bytes += bytes.len();
        if let Some(old) = self.regions.put((container, region), bytes) {
            // Not held (get missed), so never here; kept consistent all the same.
            self.bytes -= old.len();
            evicted.push(old);
        }
        // The bound in containers: the least recently used one goes, all its regions.
        while self.containers.len() > self.max_containers {
            let Some((cid, held)) = self.containers.pop_lru() else {
                break;
            };
            for i in held {
                if let Some(r) = self.regions.pop(&(cid, i)) {
                    self.bytes -= r.len();
                    evicted.push(r);
                }
            }
        }
        // The byte bound: the least recently used region goes; a container whose last
        // region goes is no longer held (using it again is a container read).
        while self.bytes > self.bound && self.regions.len() > 1 {
            let Some(((cid, i), r)) = self.regions.pop_lru() else {
                break;
            };
            self.bytes -= r.len();
            evicted.push(r);
            if let Some(g) = self.growth.as_mut() {
                g.ghosts.put((cid, i), ());
            }
            if let Some(held) = self.containers.peek_mut(&cid) {
                held.retain(|&x| x != i);
                if held.is_empty() {
                    self.containers.pop(&cid);
                }
            }
        }
        self.stats.max_containers_held = self.stats.max_containers_held.max(self.containers.len());
    }

    fn area_bytes(&self) -> Option<u64> {
        None
    }

    fn start_area(&mut self, _evicted: &mut Vec<Arc<Vec<u8>>>) {}

    fn stats(&self) -> RestoreCacheStats {
        self.stats
    }
}

/// Forward assembly: the regions of one assembly area (see the module docs).
pub struct ForwardAssembly {
    area_bytes: u64,
    regions: HashMap<(ContainerId, u32), Arc<Vec<u8>>>,
    /// Containers read for this area.
    read: HashSet<ContainerId>,
    stats: RestoreCacheStats,
}

impl ForwardAssembly {
    /// Areas of `area_bytes` restored bytes (at least 1; an area holds at least one chunk).
    pub fn new(area_bytes: u64) -> Self {
        let area_bytes = area_bytes.max(1);
        ForwardAssembly {
            area_bytes,
            regions: HashMap::new(),
            read: HashSet::new(),
            stats: RestoreCacheStats {
                cache: "forward",
                assembly_bytes: area_bytes,
                ..RestoreCacheStats::default()
            },
        }
    }
}

impl RestoreCache for ForwardAssembly {
    fn get(&mut self, container: &ContainerId, region: u32) -> Option<Arc<Vec<u8>>> {
        let r = self.regions.get(&(*container, region))?.clone();
        self.stats.region_hits += 1;
        Some(r)
    }

    fn holds(&self, container: &ContainerId) -> bool {
        self.read.contains(container)
    }

    fn has(&self, container: &ContainerId, region: u32) -> bool {
        self.regions.contains_key(&(*container, region))
    }

    fn put(
        &mut self,
        container: ContainerId,
        region: u32,
        bytes: Arc<Vec<u8>>,
        container_bytes: u64,
        _evicted: &mut Vec<Arc<Vec<u8>>>,
    ) {
        self.stats.regions_read += 1;
        if self.read.insert(container) {
            self.stats.container_read(container_bytes);
            self.stats.max_containers_held = self.stats.max_containers_held.max(self.read.len());
        }
        self.regions.insert((container, region), bytes);
    }

    fn area_bytes(&self) -> Option<u64> {
        Some(self.area_bytes)
    }

    fn start_area(&mut self, evicted: &mut Vec<Arc<Vec<u8>>>) {
        evicted.extend(self.regions.drain().map(|(_, r)| r));
        self.read.clear();
        self.stats.areas += 1;
    }

    fn stats(&self) -> RestoreCacheStats {
        self.stats
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

    fn region() -> Arc<Vec<u8>> {
        Arc::new(vec![0; 10])
    }

    /// Uses `(container, region)` in order through `cache`, reading on a miss; returns the
    /// containers and regions read.
    fn run(cache: &mut dyn RestoreCache, uses: &[(ContainerId, u32)]) -> (u64, u64) {
        let mut evicted = Vec::new();
        for &(cid, r) in uses {
            if cache.get(&cid, r).is_none() {
                cache.put(cid, r, region(), 100, &mut evicted);
            }
        }
        let s = cache.stats();
        (s.containers_read, s.regions_read)
    }

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
        let uses = [
            (a, 0),
            (a, 1),
            (b, 0),
            (c, 0),
            (a, 0),
            (b, 0),
            (c, 1),
            (a, 0),
        ];
        // Every miss reads one region; the hit on A reads its region 1.
        assert_eq!(run(&mut ContainerLru::new(2, usize::MAX), &uses), (7, 8));
        // A0 A1 B0 C0, then C1: three containers, five distinct regions.
        let mut three = ContainerLru::new(3, usize::MAX);
        assert_eq!(run(&mut three, &uses), (3, 5));
        assert_eq!(three.stats().max_containers_held, 3);
        // A byte bound of two regions (10 bytes each) holds fewer containers than 3.
        let mut small = ContainerLru::new(3, 20);
        run(&mut small, &uses);
        assert!(small.stats().containers_read > 3 && small.len() <= 2);
        // 10 MB restored over 4 container reads.
        assert_eq!(speed_factor(10_000_000, 4), Some(2.5));
        assert_eq!(speed_factor(10_000_000, 0), None);
    }

    /// The LRU never holds more containers than its bound, whatever the sequence.
    #[test]
    fn lru_holds_at_most_its_bound() {
        for n in 1..5 {
            let mut cache = ContainerLru::new(n, usize::MAX);
            let mut evicted = Vec::new();
            for i in 0..200u32 {
                let cid = ContainerId([(i * 7 % 11) as u8; 32]);
                if cache.get(&cid, i % 3).is_none() {
                    cache.put(cid, i % 3, region(), 100, &mut evicted);
                }
                assert!(cache.len() <= n);
            }
            assert_eq!(cache.stats().max_containers_held, n);
        }
    }

    /// A growing LRU keeps its small bound while regions it let go of are not read again, and
    /// doubles it, up to its maximum, once they are: then a working set larger than the
    /// start is held, and read once.
    #[test]
    fn growing_lru_grows_only_when_it_reads_regions_again() {
        let a = ContainerId([1; 32]);
        // Regions of 10 bytes: a bound of 100 holds 10 of them.
        let mut cache = ContainerLru::growing_from(512, 1000, 100);
        let once: Vec<(ContainerId, u32)> = (0..200).map(|i| (a, i)).collect();
        assert_eq!(run(&mut cache, &once), (1, 200));
        assert_eq!(cache.bound_bytes(), 100, "nothing read again: no growth");
        // 25 regions (250 bytes) in turn: read again and again until the bound holds them.
        let cycle: Vec<(ContainerId, u32)> =
            (0..20).flat_map(|_| (1000..1025).map(|i| (a, i))).collect();
        run(&mut cache, &cycle);
        assert!(cache.bound_bytes() >= 250 && cache.bound_bytes() <= 1000);
        let before = cache.stats().regions_read;
        run(&mut cache, &cycle);
        assert_eq!(
            cache.stats().regions_read,
            before,
            "the working set is held"
        );
        // Never past its maximum, however much is read again.
        let wide: Vec<(ContainerId, u32)> =
            (0..20).flat_map(|_| (0..300).map(|i| (a, i))).collect();
        run(&mut cache, &wide);
        assert_eq!(cache.bound_bytes(), 1000);
        // A maximum at or below the start is a fixed bound, as `new`'s.
        assert_eq!(ContainerLru::growing_from(512, 50, 100).bound_bytes(), 50);
        assert_eq!(ContainerLru::new(512, 1000).bound_bytes(), 1000);
    }

    /// Forward assembly counts a container once per area, whatever its regions.
    #[test]
    fn forward_assembly_counts_a_container_once_per_area() {
        let (a, b) = (ContainerId([1; 32]), ContainerId([2; 32]));
        let mut fa = ForwardAssembly::new(1 << 20);
        let mut evicted = Vec::new();
        fa.start_area(&mut evicted);
        assert_eq!(run(&mut fa, &[(a, 0), (a, 1), (b, 0), (a, 0)]), (2, 3));
        fa.start_area(&mut evicted);
        assert_eq!(evicted.len(), 3);
        assert!(fa.get(&a, 0).is_none() && !fa.holds(&a));
        assert_eq!(run(&mut fa, &[(a, 0)]), (3, 4));
        assert_eq!(fa.stats().areas, 2);
    }
}
