//! Runs on: the dedup thread.
//!
//! The delta bases a backup holds in memory: an LRU bounded in bytes, in two parts (bases
//! used, and this backup's new chunks until one is used), each entry with its delta depth.

use bytes::Bytes;
use dedelta_core::ChunkId;
use lru::LruCache;

/// The share of the budget that new chunks not used as a base yet may hold (see
/// [`BaseCache`]): a quarter, 64 MiB by default. They are the next version's bases (with
/// delta chains, the default, the chunks the local base cache saves first); with an eighth,
/// a 56 MB Redis dump kept only its last 32 MiB, and the next backup read 40 % of its bases
/// back from the repository, decompressing their regions.
const FRESH_SHARE: usize = 4;

/// One LRU list bounded by bytes: each chunk's bytes and delta depth.
struct Lru {
    map: LruCache<ChunkId, (Bytes, u8)>,
    bytes: usize,
    budget: usize,
}

impl Lru {
    fn new(budget: usize) -> Self {
        Lru {
            map: LruCache::unbounded(),
            bytes: 0,
            budget,
        }
    }

    fn put(&mut self, id: ChunkId, data: Bytes, depth: u8) {
        if self.budget == 0 {
            return;
        }
        self.bytes += data.len();
        if let Some((old, _)) = self.map.put(id, (data, depth)) {
            self.bytes -= old.len();
        }
        while self.bytes > self.budget {
            match self.map.pop_lru() {
                Some((_, (old, _))) => self.bytes -= old.len(),
                None => break,
            }
        }
    }

    fn take(&mut self, id: &ChunkId) -> Option<(Bytes, u8)> {
        let (data, depth) = self.map.pop(id)?;
        self.bytes -= data.len();
        Some((data, depth))
    }
}

/// An LRU cache of base chunks bounded by bytes, in two parts: bases that were used (read
/// back, or asked for again) get the whole budget; this backup's new chunks, which on new
/// data are never used, get a quarter of it ([`FRESH_SHARE`]) until one is asked for (then
/// it moves to the first part). So a backup of new data holds 64 MiB of them, not 256 (most
/// of its peak memory), while a chunk similar to a recent one still finds it in memory, and
/// the local base cache gets a version's worth of them for the next backup.
pub struct BaseCache {
    used: Lru,
    fresh: Lru,
}

impl BaseCache {
    /// A cache of at most `budget` bytes of used bases and `budget / FRESH_SHARE` of new
    /// chunks.
    pub fn new(budget: usize) -> Self {
        BaseCache {
            used: Lru::new(budget),
            fresh: Lru::new(budget / FRESH_SHARE),
        }
    }

    /// A cached base (a new chunk asked for moves to the used bases).
    pub fn get(&mut self, id: &ChunkId) -> Option<Bytes> {
        if let Some((b, _)) = self.used.map.get(id) {
            return Some(b.clone());
        }
        let (b, depth) = self.fresh.take(id)?;
        self.used.put(*id, b.clone(), depth);
        Some(b)
    }

    /// A cached chunk's bytes and delta depth, without counting as a use.
    pub(super) fn peek(&self, id: &ChunkId) -> Option<&(Bytes, u8)> {
        self.used.map.peek(id).or_else(|| self.fresh.map.peek(id))
    }

    /// The delta depth of a cached chunk, without counting as a use.
    pub fn depth_of(&self, id: &ChunkId) -> Option<u8> {
        self.peek(id).map(|(_, d)| *d)
    }

    /// Adds a base that was used, evicting the least recently used ones beyond the budget.
    pub fn put(&mut self, id: ChunkId, data: Bytes, depth: u8) {
        self.used.put(id, data, depth);
    }

    /// Adds a new chunk of this backup (stored in full, or a delta of `depth`): a possible
    /// base for later chunks.
    pub fn put_fresh(&mut self, id: ChunkId, data: Bytes, depth: u8) {
        if !self.used.map.contains(&id) {
            self.fresh.put(id, data, depth);
        }
    }

    /// The cached bases with their delta depths: the used ones, most recently used first,
    /// then the new chunks, most recent first; with `fresh_first`, the new chunks first.
    pub fn iter(&self, fresh_first: bool) -> impl Iterator<Item = (&ChunkId, &Bytes, u8)> {
        let (first, second) = if fresh_first {
            (&self.fresh, &self.used)
        } else {
            (&self.used, &self.fresh)
        };
        first
            .map
            .iter()
            .chain(second.map.iter())
            .map(|(id, (b, depth))| (id, b, *depth))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(n: u8, len: usize) -> (ChunkId, Bytes) {
        (ChunkId::of(&[n]), Bytes::from(vec![n; len]))
    }

    /// New chunks get a quarter of the budget; one asked for moves to the used part and
    /// stays while later new chunks push the others out.
    #[test]
    fn new_chunks_get_a_share_until_used() {
        let mut c = BaseCache::new(400);
        let (a, da) = chunk(1, 60);
        c.put_fresh(a, da, 0);
        assert!(c.get(&a).is_some());
        for n in 2..20 {
            let (id, d) = chunk(n, 60);
            c.put_fresh(id, d, 1);
        }
        // 100 bytes of new chunks (400 / FRESH_SHARE): only the last one is left.
        assert_eq!(c.fresh.map.len(), 1);
        assert!(c.get(&chunk(19, 60).0).is_some());
        assert!(c.get(&chunk(18, 60).0).is_none());
        assert!(c.get(&a).is_some(), "a used base stays");
        assert_eq!(c.iter(false).count(), 2);
        // The new chunks first, when asked (what a backup with delta chains saves).
        let (n, dn) = chunk(40, 60);
        c.put_fresh(n, dn, 1);
        assert_eq!(
            c.iter(false).next().map(|(id, _, d)| (*id, d)),
            Some((a, 0))
        );
        assert_eq!(c.iter(true).next().map(|(id, _, d)| (*id, d)), Some((n, 1)));
        assert_eq!(
            (c.depth_of(&a), c.depth_of(&chunk(19, 60).0)),
            (Some(0), Some(1))
        );
        let (b, db) = chunk(30, 350);
        c.put(b, db, 2);
        assert!(c.get(&b).is_some());
        assert!(c.used.bytes <= 400);
    }
}
