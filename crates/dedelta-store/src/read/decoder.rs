//! Rebuilding a located chunk: a delta is decoded against its base (bases rebuilt from deltas
//! are kept in an LRU cache), and every chunk is checked against its fingerprint.

use super::pipelined::decoder_caches;
use super::{LocatedChunk, ReadStats, BASE_CACHE_ENTRIES};
use crate::error::{Error, Result};
use dedelta_core::delta::{new_codec, DeltaCodec, DeltaKind};
use dedelta_core::{ChunkHasher, ChunkId};
use std::sync::Arc;

/// Rebuilds and verifies located chunks.
pub struct ChunkDecoder {
    bases: super::IdLru<Arc<Vec<u8>>>,
    codec: Box<dyn DeltaCodec>,
    stats: ReadStats,
    /// How chunk ids are computed (keyed in an encrypted repository).
    hasher: ChunkHasher,
    /// Whether [`Self::accept_chain`] uses a base stored in full where it lies rather than
    /// copying it into the cache (see [`super::full_bases_in_place`]).
    full_bases_in_place: bool,
}

impl ChunkDecoder {
    /// A decoder that keeps the default number of delta bases.
    pub(crate) fn new(hasher: ChunkHasher) -> Self {
        ChunkDecoder::with_bases(BASE_CACHE_ENTRIES, hasher)
    }

    /// A decoder that keeps up to `entries` delta bases.
    pub(crate) fn with_bases(entries: usize, hasher: ChunkHasher) -> Self {
        ChunkDecoder {
            hasher,
            bases: super::id_lru(entries),
            // Every codec writes the same instruction format, which any codec decodes.
            codec: new_codec(DeltaKind::Ddelta),
            stats: ReadStats::default(),
            full_bases_in_place: false,
        }
    }

    /// This decoder, using bases stored in full where they lie (`true`) or copying them into
    /// its cache (see [`super::full_bases_in_place`]).
    pub(crate) fn with_full_bases_in_place(mut self, in_place: bool) -> Self {
        self.full_bases_in_place = in_place;
        self
    }

    /// Whether bases stored in full are used where they lie, not cached.
    pub(crate) fn full_bases_in_place(&self) -> bool {
        self.full_bases_in_place
    }
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

    /// The cached bytes of base `id`, if held, without counting a hit or refreshing it.
    pub(crate) fn peek_base(&self, id: &ChunkId) -> Option<Arc<Vec<u8>>> {
        self.bases.peek(id).cloned()
    }

    /// Keeps the bytes of a chunk that deltas may name as their base.
    pub(crate) fn put_base(&mut self, id: ChunkId, bytes: Arc<Vec<u8>>) -> Arc<Vec<u8>> {
        self.stats.base_cache_misses += 1;
        self.bases.put(id, bytes.clone());
        bytes
    }

    /// Rebuilds the located delta bases of a chunk, `chain` nearest first (a delta chain,
    /// docs/format.md "Reading a chunk"): the farthest is stored in full, or is a delta whose
    /// own base this decoder holds. Each is checked for length, not against its fingerprint
    /// (the chunk rebuilt from them is; see [`Self::find_damaged_base`]); returns the nearest
    /// one's bytes. The links rebuilt from a delta are cached; a link stored in full is
    /// copied into the cache too, or, with [`Self::with_full_bases_in_place`], used where it
    /// lies in its region (copying it was 3 % of a restore's CPU), the locating half sending
    /// it again with each delta that needs it.
    pub(crate) fn accept_chain(&mut self, chain: &[LocatedChunk]) -> Result<BaseBytes> {
        let Some(farthest) = chain.last() else {
            return Err(Error::Index("an empty delta chain".into()));
        };
        let mut below = match farthest.delta_base {
            None => None,
            Some(b) => Some(BaseBytes::Rebuilt(self.cached_base(&b).ok_or_else(
                || farthest.corrupt(format!("its delta base {b} is not available")),
            )?)),
        };
        for link in chain.iter().rev() {
            let mut out = Vec::new();
            self.decode(link, below.as_ref().map(BaseBytes::bytes), &mut out, false)?;
            below = Some(match link.delta_base {
                Some(_) => BaseBytes::Rebuilt(self.put_base(link.id, Arc::new(out))),
                None if !decoder_caches(false, self.full_bases_in_place) => {
                    self.stats.bases_in_place += 1;
                    BaseBytes::Stored(link.clone())
                }
                None => {
                    BaseBytes::Rebuilt(self.put_base(link.id, Arc::new(link.stored().to_vec())))
                }
            });
        }
        below.ok_or_else(|| Error::Index("an empty delta chain".into()))
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
        let data: &[u8] = match c.delta_base {
            None => c.stored(),
            Some(_) => {
                out.clear();
                self.decode_delta_appending(c, base, out)?;
                out
            }
        };
        if data.len() != c.original_len || (verify && self.hasher.id(data) != c.id) {
            return Err(c.corrupt("content does not match its fingerprint".into()));
        }
        Ok(data)
    }

    /// Appends delta `c` rebuilt from `base` (its base's bytes, `None` if not available) to
    /// `out`, checked for length, not against its fingerprint; on an error `out` is left as
    /// it was.
    pub(crate) fn decode_delta_appending(
        &mut self,
        c: &LocatedChunk,
        base: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let base = match (c.delta_base, base) {
            (Some(_), Some(base)) => base,
            (Some(b), None) => {
                return Err(c.corrupt(format!("its delta base {b} is not available")))
            }
            (None, _) => return Err(c.corrupt("is not stored as a delta".into())),
        };
        let at = out.len();
        out.reserve(c.original_len);
        let decoded = self.codec.decode(base, c.stored(), out);
        if let Err(e) = decoded {
            out.truncate(at);
            return Err(c.corrupt(e.to_string()));
        }
        self.stats.deltas_decoded += 1;
        if out.len() - at != c.original_len {
            out.truncate(at);
            return Err(c.corrupt("content does not match its fingerprint".into()));
        }
        Ok(())
    }

    /// Which cached base, if any, does not match its fingerprint: called when a chunk rebuilt
    /// from bases that were not verified fails its own check, to name the damaged base rather
    /// than the chunk. `chain` is what the chunk was rebuilt from, nearest first; when it is
    /// empty, `base` (the chunk's base, from the cache) is checked. A damaged base rebuilt
    /// from a delta is dropped from the cache.
    pub(crate) fn find_damaged_base(
        &mut self,
        chain: &[LocatedChunk],
        base: &ChunkId,
    ) -> Option<Error> {
        let held = self.held_bases(chain, base);
        self.find_damaged_in(&held, chain)
    }

    /// The bases a chunk was rebuilt from as this decoder holds them now, farthest first:
    /// `chain` (nearest first; its links stored in full as they lie, the others as cached),
    /// or `base` when it is empty. Kept by a caller that checks the chunk later (a batch),
    /// when the cache may have let them go, for [`Self::find_damaged_in`].
    pub(crate) fn held_bases(
        &mut self,
        chain: &[LocatedChunk],
        base: &ChunkId,
    ) -> Vec<(ChunkId, BaseBytes)> {
        if chain.is_empty() {
            return self
                .bases
                .peek(base)
                .map(|b| (*base, BaseBytes::Rebuilt(b.clone())))
                .into_iter()
                .collect();
        }
        chain
            .iter()
            .rev()
            .filter_map(|l| {
                let bytes = match l.delta_base {
                    None if !decoder_caches(false, self.full_bases_in_place) => {
                        BaseBytes::Stored(l.clone())
                    }
                    _ => BaseBytes::Rebuilt(self.bases.peek(&l.id)?.clone()),
                };
                Some((l.id, bytes))
            })
            .collect()
    }

    /// Which of `held` (from [`Self::held_bases`], farthest first) does not match its
    /// fingerprint: the first that fails is the damaged one, named by its location in `chain`
    /// if it is there. A rebuilt one is dropped from the cache if the cache still holds
    /// those bytes.
    pub(crate) fn find_damaged_in(
        &mut self,
        held: &[(ChunkId, BaseBytes)],
        chain: &[LocatedChunk],
    ) -> Option<Error> {
        let (id, bytes) = held
            .iter()
            .find(|(id, b)| self.hasher.id(b.bytes()) != *id)?;
        if let BaseBytes::Rebuilt(bytes) = bytes {
            if self.bases.peek(id).is_some_and(|c| Arc::ptr_eq(c, bytes)) {
                self.bases.pop(id);
            }
        }
        let reason = "content does not match its fingerprint".to_string();
        Some(match chain.iter().find(|l| l.id == *id) {
            Some(l) => l.corrupt(reason),
            None => Error::CorruptChunk {
                container: "(cached)".into(),
                chunk: id.to_hex(),
                reason,
            },
        })
    }

    /// How this decoder computes chunk ids.
    pub(crate) fn hasher(&self) -> &ChunkHasher {
        &self.hasher
    }
}

/// The bytes of a delta base: rebuilt from its own delta (and kept in the decoder's cache),
/// or a chunk stored in full, used where it lies in its region.
#[derive(Clone, Debug)]
pub(crate) enum BaseBytes {
    /// Rebuilt from a delta: the cache's allocation.
    Rebuilt(Arc<Vec<u8>>),
    /// Stored in full: its slice of its region.
    Stored(LocatedChunk),
}

impl BaseBytes {
    /// The base's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            BaseBytes::Rebuilt(b) => b,
            BaseBytes::Stored(c) => c.stored(),
        }
    }
}

pub(crate) fn base_unreadable(c: &LocatedChunk, base: &ChunkId, e: &Error) -> Error {
    c.corrupt(format!("its delta base {base} is unreadable: {e}"))
}
