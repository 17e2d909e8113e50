//! Rebuilding a located chunk: a delta is decoded against its base (bases are verified once
//! and kept in an LRU cache), and every chunk is checked against its fingerprint.

use super::{lru, LocatedChunk, ReadStats, BASE_CACHE_ENTRIES};
use crate::error::{Error, Result};
use dedelta_core::delta::{new_codec, DeltaCodec, DeltaKind};
use dedelta_core::ChunkId;
use lru::LruCache;
use std::sync::Arc;

/// Rebuilds and verifies located chunks.
pub struct ChunkDecoder {
    bases: LruCache<ChunkId, Arc<Vec<u8>>>,
    codec: Box<dyn DeltaCodec>,
    stats: ReadStats,
}

impl Default for ChunkDecoder {
    fn default() -> Self {
        ChunkDecoder {
            bases: lru(BASE_CACHE_ENTRIES),
            // Every codec writes the same instruction format, which any codec decodes.
            codec: new_codec(DeltaKind::Ddelta),
            stats: ReadStats::default(),
        }
    }
}

impl ChunkDecoder {
    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    pub(crate) fn cached_base(&mut self, id: &ChunkId) -> Option<Arc<Vec<u8>>> {
        let b = self.bases.get(id).cloned();
        if b.is_some() {
            self.stats.base_cache_hits += 1;
        }
        b
    }

    /// Checks a located chunk as a delta base (stored in full, bytes matching its
    /// fingerprint) and caches its bytes.
    pub(crate) fn accept_base(&mut self, base: &LocatedChunk) -> Result<Arc<Vec<u8>>> {
        self.stats.base_cache_misses += 1;
        if base.delta_base.is_some() {
            return Err(base.corrupt("a delta is used as a delta base".into()));
        }
        let bytes = base.stored();
        if bytes.len() != base.original_len || ChunkId::of(bytes) != base.id {
            return Err(base.corrupt("content does not match its fingerprint".into()));
        }
        let bytes = Arc::new(bytes.to_vec());
        self.bases.put(base.id, bytes.clone());
        Ok(bytes)
    }

    /// The chunk's bytes: a slice of its region for a full chunk, rebuilt into `out` from
    /// `base` for a delta; checked against the fingerprint when `verify`.
    pub(crate) fn decode<'b>(
        &mut self,
        c: &'b LocatedChunk,
        base: Option<&[u8]>,
        out: &'b mut Vec<u8>,
        verify: bool,
    ) -> Result<&'b [u8]> {
        let data: &[u8] = match (c.delta_base, base) {
            (None, _) => c.stored(),
            (Some(_), Some(base)) => {
                out.clear();
                out.reserve(c.original_len);
                self.codec
                    .decode(base, c.stored(), out)
                    .map_err(|e| c.corrupt(e.to_string()))?;
                self.stats.deltas_decoded += 1;
                out
            }
            (Some(b), None) => {
                return Err(c.corrupt(format!("its delta base {b} is not available")))
            }
        };
        if data.len() != c.original_len || (verify && ChunkId::of(data) != c.id) {
            return Err(c.corrupt("content does not match its fingerprint".into()));
        }
        Ok(data)
    }
}

pub(crate) fn base_unreadable(c: &LocatedChunk, base: &ChunkId, e: &Error) -> Error {
    c.corrupt(format!("its delta base {base} is unreadable: {e}"))
}
