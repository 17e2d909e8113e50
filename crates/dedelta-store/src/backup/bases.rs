//! Runs on: the dedup thread.
//!
//! Delta bases: the bytes of the full chunk a delta is encoded against. They come from memory
//! (an LRU cache bounded in bytes, filled with this backup's new full chunks and the bases it
//! read), else from the local base cache of the last backups ([`crate::client::local_cache`]),
//! else they are read back (and verified) from the repository, which is the stage's main cost.
//!
//! One-level deltas (Shilane §2.1): a base is always a chunk stored in full. A candidate that
//! is itself stored as a delta is replaced by its own base, which is similar too. A candidate
//! whose data cannot be read (damage `check` has not recorded yet) is skipped, never used, and
//! reported when the backup ends.

use crate::client::local_cache::{self, LocalBaseCache};
use crate::error::{Error, Result};
use crate::read::ChunkReader;
use crate::repository::IndexedRepository;
use bytes::Bytes;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::path::PathBuf;

/// The share of the budget that new full chunks not used as a base yet may hold (see
/// [`BaseCache`]).
const FRESH_SHARE: usize = 8;

/// One LRU list bounded by bytes.
struct Lru {
    map: LruCache<ChunkId, Bytes>,
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

    fn put(&mut self, id: ChunkId, data: Bytes) {
        if self.budget == 0 {
            return;
        }
        self.bytes += data.len();
        if let Some(old) = self.map.put(id, data) {
            self.bytes -= old.len();
        }
        while self.bytes > self.budget {
            match self.map.pop_lru() {
                Some((_, old)) => self.bytes -= old.len(),
                None => break,
            }
        }
    }

    fn take(&mut self, id: &ChunkId) -> Option<Bytes> {
        let data = self.map.pop(id)?;
        self.bytes -= data.len();
        Some(data)
    }
}

/// An LRU cache of base chunks bounded by bytes, in two parts: bases that were used (read
/// back, or asked for again) get the whole budget; this backup's new full chunks, which on
/// new data are never used, get an eighth of it until one is asked for (then it moves to
/// the first part). So a backup of new data holds 32 MiB of them, not 256 (most of its peak
/// memory), while a chunk similar to a recent one still finds it in memory.
pub struct BaseCache {
    used: Lru,
    fresh: Lru,
}

impl BaseCache {
    /// A cache of at most `budget` bytes of used bases and `budget / 8` of new chunks.
    pub fn new(budget: usize) -> Self {
        BaseCache {
            used: Lru::new(budget),
            fresh: Lru::new(budget / FRESH_SHARE),
        }
    }

    /// A cached base (a new chunk asked for moves to the used bases).
    pub fn get(&mut self, id: &ChunkId) -> Option<Bytes> {
        if let Some(b) = self.used.map.get(id) {
            return Some(b.clone());
        }
        let b = self.fresh.take(id)?;
        self.used.put(*id, b.clone());
        Some(b)
    }

    /// Adds a base that was used, evicting the least recently used ones beyond the budget.
    pub fn put(&mut self, id: ChunkId, data: Bytes) {
        self.used.put(id, data);
    }

    /// Adds a new full chunk of this backup: a possible base for later chunks.
    pub fn put_fresh(&mut self, id: ChunkId, data: Bytes) {
        if !self.used.map.contains(&id) {
            self.fresh.put(id, data);
        }
    }

    /// The cached bases: the used ones, most recently used first, then the new chunks, most
    /// recent first.
    pub fn iter(&self) -> impl Iterator<Item = (&ChunkId, &Bytes)> {
        self.used.map.iter().chain(self.fresh.map.iter())
    }
}

/// Where bases came from, for the backup's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BaseCounts {
    /// Served from memory.
    pub memory: u64,
    /// Served from the local base cache file.
    pub local: u64,
    /// Read back from the repository (or not found).
    pub read_back: u64,
}

/// Fetches delta bases for one backup.
pub struct BaseFetcher<'a> {
    cache: BaseCache,
    reader: ChunkReader<'a>,
    /// The local base cache read at the start, and where the next one is written.
    local: Option<LocalBaseCache>,
    local_path: Option<PathBuf>,
    budget: usize,
    /// Where the bases came from.
    pub counts: BaseCounts,
    /// Candidates that could not be read.
    unreadable: Vec<String>,
}

impl<'a> BaseFetcher<'a> {
    /// A fetcher with `budget` bytes of bases in memory.
    pub fn new(repo: &'a IndexedRepository, budget: usize) -> Result<Self> {
        Ok(BaseFetcher {
            cache: BaseCache::new(budget),
            reader: ChunkReader::new(repo, 32 << 20)?,
            local: None,
            local_path: None,
            budget,
            counts: BaseCounts::default(),
            unreadable: Vec::new(),
        })
    }

    /// Reads bases from the local base cache in directory `path` and updates it at the end
    /// (see [`Self::save_local_cache`]); returns why an existing cache could not be used, if
    /// so. Does nothing when the base cache is disabled (size 0).
    pub fn use_local_cache(&mut self, path: PathBuf) -> Option<String> {
        if self.budget == 0 {
            return None;
        }
        let notice = match LocalBaseCache::open(&path) {
            Ok(cache) => {
                self.local = cache;
                None
            }
            Err(e) => Some(format!("{e}; it is rebuilt")),
        };
        self.local_path = Some(path);
        notice
    }

    /// Updates the local base cache to the bases and full chunks this backup holds in memory
    /// (most recently used first), topped up with the previous cache's other entries; returns
    /// why it could not be written, if so.
    pub fn save_local_cache(&mut self) -> Option<String> {
        let path = self.local_path.take()?;
        let fresh = self.cache.iter().map(|(id, b)| (*id, b.clone()));
        let budget = self.budget.min(local_cache::DEFAULT_BYTES);
        LocalBaseCache::save(&path, fresh, self.local.as_ref(), budget)
            .err()
            .map(|e| e.to_string())
    }

    /// Keeps a new full chunk of this backup as a possible base for later chunks.
    pub fn remember(&mut self, id: ChunkId, data: Bytes) {
        self.cache.put_fresh(id, data);
    }

    /// Why candidates were skipped, for the backup's notices.
    pub fn take_notices(&mut self) -> Vec<String> {
        let n = std::mem::take(&mut self.unreadable);
        match n.first() {
            None => Vec::new(),
            Some(first) => vec![format!(
                "{} candidate delta bases could not be read and were not used (first: {first}); \
                 run `dedelta check --read-data`",
                n.len()
            )],
        }
    }

    /// The base to try for candidate `id` (`id` itself, or its base if it is a delta) with
    /// its bytes. `None` if it is not indexed or cannot be read.
    pub fn fetch(&mut self, id: ChunkId) -> Result<Option<(ChunkId, Bytes)>> {
        if let Some(b) = self.cache.get(&id) {
            self.counts.memory += 1;
            return Ok(Some((id, b)));
        }
        let found = self.reader.base_of(&id);
        let mut base = self.skip_damaged(found)?;
        if base.is_none() {
            // Possibly written by this backup after the reader's view was taken.
            self.reader.refresh_index()?;
            let found = self.reader.base_of(&id);
            base = self.skip_damaged(found)?;
        }
        let Some(base) = base else {
            self.counts.read_back += 1;
            return Ok(None);
        };
        if base != id {
            if let Some(b) = self.cache.get(&base) {
                self.counts.memory += 1;
                return Ok(Some((base, b)));
            }
        }
        if let Some(bytes) = self.local_base(&base, base == id)? {
            self.counts.local += 1;
            self.cache.put(base, bytes.clone());
            return Ok(Some((base, bytes)));
        }
        self.counts.read_back += 1;
        let read = self.reader.read_base(&base);
        Ok(self.skip_damaged(read)?.map(|bytes| {
            let bytes = Bytes::from(bytes);
            self.cache.put(base, bytes.clone());
            (base, bytes)
        }))
    }

    /// `base`'s bytes from the local base cache, if it has them and the index holds
    /// `base` as a full chunk (`known_full` when that is already established): a cached
    /// chunk that the repository no longer holds in full must never become a delta's base.
    fn local_base(&mut self, base: &ChunkId, known_full: bool) -> Result<Option<Bytes>> {
        let Some(local) = self.local.as_mut() else {
            return Ok(None);
        };
        let Some(bytes) = local.get(base) else {
            return Ok(None);
        };
        let full = known_full || self.reader.base_of(base)? == Some(*base);
        Ok(full.then_some(bytes))
    }

    /// Turns damage met while reading a candidate into "no candidate": a damaged chunk must
    /// never become a base, and must not stop the backup either.
    fn skip_damaged<T>(&mut self, r: Result<Option<T>>) -> Result<Option<T>> {
        match r {
            Err(
                e @ (Error::CorruptChunk { .. }
                | Error::Corrupt { .. }
                | Error::ObjectMissing { .. }
                | Error::ContainerGone { .. }),
            ) => {
                self.unreadable.push(e.to_string());
                Ok(None)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(n: u8, len: usize) -> (ChunkId, Bytes) {
        (ChunkId::of(&[n]), Bytes::from(vec![n; len]))
    }

    /// New chunks get an eighth of the budget; one asked for moves to the used part and
    /// stays while later new chunks push the others out.
    #[test]
    fn new_chunks_get_a_share_until_used() {
        let mut c = BaseCache::new(800);
        let (a, da) = chunk(1, 60);
        c.put_fresh(a, da);
        assert!(c.get(&a).is_some());
        for n in 2..20 {
            let (id, d) = chunk(n, 60);
            c.put_fresh(id, d);
        }
        // 100 bytes of new chunks: only the last one is left.
        assert_eq!(c.fresh.map.len(), 1);
        assert!(c.get(&chunk(19, 60).0).is_some());
        assert!(c.get(&chunk(18, 60).0).is_none());
        assert!(c.get(&a).is_some(), "a used base stays");
        assert_eq!(c.iter().count(), 2);
        let (b, db) = chunk(30, 700);
        c.put(b, db);
        assert!(c.get(&b).is_some());
        assert!(c.used.bytes <= 800);
    }
}
