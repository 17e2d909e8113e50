//! Reading chunks on two threads (restore, dump): one locates chunks and decompresses their
//! regions, the other decodes deltas, verifies and writes.

use super::decoder::base_unreadable;
use super::{lru, ChunkDecoder, ChunkLocator, LocatedChunk, ReadStats, BASE_CACHE_ENTRIES};
use crate::error::Result;
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;
use lru::LruCache;

/// What the locating thread hands over for one chunk: the chunk, and for a delta whose base
/// the decoding thread does not hold yet, the located base (or why it could not be found).
pub struct FetchedChunk {
    chunk: LocatedChunk,
    base: Option<Result<LocatedChunk>>,
}

impl FetchedChunk {
    /// The chunk's fingerprint.
    pub fn id(&self) -> &ChunkId {
        &self.chunk.id
    }

    /// The length of its original bytes.
    pub fn len(&self) -> usize {
        self.chunk.original_len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.chunk.original_len == 0
    }
}

/// The locating half of a two-thread read. It mirrors the decoding half's base cache (same
/// capacity, same sequence of uses, so the same LRU state) to send each base only when the
/// decoder does not hold it.
pub struct PipelinedLocator<'a> {
    locator: ChunkLocator<'a>,
    held: LruCache<ChunkId, ()>,
}

impl<'a> PipelinedLocator<'a> {
    /// A locator with `cache_bytes` of decompressed regions.
    pub fn new(repo: &'a IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(PipelinedLocator {
            locator: ChunkLocator::new(repo, cache_bytes)?,
            held: lru(BASE_CACHE_ENTRIES),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.locator.stats()
    }

    /// Locates chunk `id` (and its base, if the decoder will need it).
    pub fn fetch(&mut self, id: &ChunkId) -> Result<FetchedChunk> {
        let chunk = self.locator.locate(id)?;
        let base = match chunk.delta_base {
            Some(b) if self.held.get(&b).is_none() => {
                self.held.put(b, ());
                Some(self.locator.locate(&b))
            }
            _ => None,
        };
        Ok(FetchedChunk { chunk, base })
    }
}

/// The decoding half of a two-thread read: fed [`FetchedChunk`]s in the order the
/// [`PipelinedLocator`] made them.
#[derive(Default)]
pub struct PipelinedDecoder {
    decoder: ChunkDecoder,
    scratch: Vec<u8>,
}

impl PipelinedDecoder {
    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.decoder.stats()
    }

    /// The chunk's verified bytes.
    pub fn decode<'b>(&'b mut self, f: &'b FetchedChunk) -> Result<&'b [u8]> {
        let c = &f.chunk;
        let base = match (c.delta_base, &f.base) {
            (None, _) => None,
            (Some(b), Some(Ok(located))) => Some(
                self.decoder
                    .accept_base(located)
                    .map_err(|e| base_unreadable(c, &b, &e))?,
            ),
            (Some(b), Some(Err(e))) => return Err(base_unreadable(c, &b, e)),
            (Some(b), None) => self.decoder.cached_base(&b),
        };
        self.decoder.decode(
            c,
            base.as_deref().map(|b| b.as_slice()),
            &mut self.scratch,
            true,
        )
    }
}
