//! What restore's and dump's decoding half ([`super::PipelinedDecoder`]) knows to be
//! verified without hashing it again.
//!
//! A tree of versions restores most chunks many times over (the 20 SQLAlchemy versions:
//! 1.2 GB written from 62 MB of chunks). Hashing each copy of a chunk stored in full took 0.2
//! of the restore's 1.9 CPU-seconds; the deltas met again, rebuilt from the same bytes, were
//! 62 % of what was still hashed (58,640 deltas decoded for 13,257 stored).
//!
//! - **Where bytes matched.** A chunk whose fingerprint matched is remembered with where its
//!   stored bytes lie ([`LocatedChunk::stored_at`]: a `Weak` of the region's allocation and
//!   an offset). Met again at that place in a region still alive, they are the same bytes (a
//!   region is never written once made, and the `Weak` keeps its allocation from being reused
//!   while the record lasts). For a delta the record means: these bytes, decoded against the
//!   base's *true content*, give the chunk. So a delta is remembered only when it was
//!   rebuilt from a trusted base, and taken as verified only when rebuilt from one again: a
//!   delta verified against an unchecked copy of its base proves it for that copy's bytes
//!   only.
//! - **Trusted bases.** A base holds its true content, known without hashing it, when it
//!   was rebuilt from a chain whose every link matched where it lies now, starting from a
//!   chunk stored in full or a trusted base: by induction, each link decoded from its
//!   remembered bytes against its base's true content gives its own content. A base rebuilt
//!   from a delta is recorded by the cache's allocation (a `Weak`, so a pointer equal to the
//!   cache's is those bytes); a base the cache rebuilt from other bytes is not trusted. A base
//!   stored in full is not cached but used where it lies in its region, sent again with each
//!   delta that needs it: it is trusted exactly when those bytes matched before where they
//!   lie ([`Verified::matched`] of the link), the first case above with nothing to record.

use super::pipelined::decoder_caches;
use super::{id_lru, ChunkDecoder, IdLru, LocatedChunk, RESTORE_BASE_CACHE_ENTRIES};
use dedelta_core::ChunkId;
use std::sync::{Arc, Weak};

/// Chunks remembered as verified where they lie (some 100 bytes each).
const VERIFIED_ENTRIES: usize = 1 << 16;

/// See the module doc.
pub(super) struct Verified {
    /// Chunks whose bytes matched, and where those bytes lie.
    at: IdLru<(Weak<Vec<u8>>, usize)>,
    /// Bases of the decoder's cache known to hold their true content, by allocation.
    bases: IdLru<Weak<Vec<u8>>>,
}

impl Verified {
    pub(super) fn new() -> Self {
        Verified {
            at: id_lru(VERIFIED_ENTRIES),
            bases: id_lru(RESTORE_BASE_CACHE_ENTRIES),
        }
    }

    /// Whether `c`'s stored bytes, where they lie now, matched its fingerprint before.
    pub(super) fn matched(&mut self, c: &LocatedChunk) -> bool {
        self.at.get(&c.id).is_some_and(|at| c.is_stored_at(at))
    }

    /// Records that `c`'s stored bytes matched its fingerprint (a delta: rebuilt from a
    /// trusted base).
    pub(super) fn record(&mut self, c: &LocatedChunk) {
        self.at.put(c.id, c.stored_at());
    }

    /// Whether `bytes`, the decoder's cached base `id`, are trusted.
    pub(super) fn trusts(&mut self, id: &ChunkId, bytes: &Arc<Vec<u8>>) -> bool {
        self.bases
            .get(id)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(bytes)))
    }

    /// After `decoder` rebuilt `chain` (nearest first, [`ChunkDecoder::accept_chain`]):
    /// records which of its links the cache now holds trusted, and whether the nearest, the
    /// delta's base, is. A link stored in full is not cached (used where it lies), so nothing
    /// is recorded for it: it is trusted when it matched where it lies.
    pub(super) fn note_chain(&mut self, decoder: &ChunkDecoder, chain: &[LocatedChunk]) -> bool {
        let mut trusted = match chain.last().and_then(|l| l.delta_base) {
            None => true,
            Some(below) => decoder
                .peek_base(&below)
                .is_some_and(|bytes| self.trusts(&below, &bytes)),
        };
        for link in chain.iter().rev() {
            trusted = trusted && self.matched(link);
            if !decoder_caches(link.delta_base.is_some(), decoder.full_bases_in_place()) {
                continue;
            }
            match decoder.peek_base(&link.id) {
                Some(bytes) if trusted => self.bases.put(link.id, Arc::downgrade(&bytes)),
                _ => self.bases.pop(&link.id),
            };
        }
        trusted
    }
}
