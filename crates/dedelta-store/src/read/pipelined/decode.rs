//! The decoding half of a two-thread read ([`PipelinedDecoder`]): rebuilds the chunks the
//! locating half hands over, a batch at a time, and checks their fingerprints.

use super::super::decoder::{base_unreadable, BaseBytes};
use super::super::helper::Helper;
use super::super::verified::Verified;
use super::super::{ChunkDecoder, ReadStats, RESTORE_BASE_CACHE_ENTRIES};
use super::{full_bases_in_place, FetchedChunk};
use crate::error::Result;
use crate::read::RestoreCacheChoice;
use dedelta_core::ChunkId;
use std::ops::Range;

/// Bytes of a batch's chunks ([`PipelinedDecoder::decode_batch`]) from which the decoding
/// thread shares their hashing with its helper thread: below it, waking the helper costs more
/// than it takes over.
const SHARED_VERIFY_BYTES: usize = 128 << 10;

/// The decoding half of a two-thread read: fed [`FetchedChunk`]s in the order the
/// [`PipelinedLocator`] made them.
pub struct PipelinedDecoder {
    decoder: ChunkDecoder,
    /// The rebuilt deltas of the batch being decoded by [`Self::decode_batch`], one after
    /// the other (reused batch after batch).
    scratch: Vec<u8>,
    /// What is known to be verified where it lies, not hashed again ([`Verified`]).
    verified: Verified,
    /// Chunks not hashed again for it.
    verified_before: u64,
}

/// A chunk of a batch, decoded, before its fingerprint is checked.
enum Decoded {
    /// Stored in full: its bytes are its slice of the region, copied to `copied` of the
    /// batch's buffer if the caller asked for every chunk there.
    Full { copied: Option<Range<usize>> },
    /// A delta rebuilt into `range` of the batch's buffer, from the bases `held` (farthest
    /// first; checked only if the chunk fails); `trusted` when its base was (see
    /// [`Verified`]).
    Delta {
        range: Range<usize>,
        held: Vec<(ChunkId, BaseBytes)>,
        trusted: bool,
    },
}

/// Where a verified chunk of a batch lies.
enum Place {
    /// Its slice of its region (stored in full).
    Region,
    /// These bytes of the batch's buffer.
    Buffer(Range<usize>),
}

impl Decoded {
    fn place(&self) -> Place {
        match self {
            Decoded::Full { copied: None } => Place::Region,
            Decoded::Full { copied: Some(r) } | Decoded::Delta { range: r, .. } => {
                Place::Buffer(r.clone())
            }
        }
    }

    /// Whether its bytes would be those that matched before where it lies (see
    /// [`Verified`]): a chunk stored in full, or a delta from a trusted base.
    fn may_be_known(&self) -> bool {
        matches!(
            self,
            Decoded::Full { .. } | Decoded::Delta { trusted: true, .. }
        )
    }
}

/// The bytes of `f` at `place`, `buf` being the batch's buffer.
fn bytes_at<'b>(f: &'b FetchedChunk, place: &Place, buf: &'b [u8]) -> &'b [u8] {
    match place {
        Place::Region => f.chunk.stored(),
        Place::Buffer(r) => &buf[r.clone()],
    }
}

impl PipelinedDecoder {
    /// A decoder checking chunks with `hasher` (the repository's), fed by a
    /// [`PipelinedLocator`](super::PipelinedLocator) reading through restore cache `cache`:
    /// the same choice as the locator's, so that both keep the bases stored in full, or
    /// neither ([`full_bases_in_place`]).
    pub fn new(hasher: dedelta_core::ChunkHasher, cache: &RestoreCacheChoice) -> Self {
        PipelinedDecoder {
            decoder: ChunkDecoder::with_bases(RESTORE_BASE_CACHE_ENTRIES, hasher)
                .with_full_bases_in_place(full_bases_in_place(cache)),
            scratch: Vec::new(),
            verified: Verified::new(),
            verified_before: 0,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        ReadStats {
            chunks_verified_before: self.verified_before,
            ..self.decoder.stats()
        }
    }

    /// The chunk's verified bytes: [`Self::decode_batch`] of one chunk.
    pub fn decode<'b>(&'b mut self, f: &'b FetchedChunk) -> Result<&'b [u8]> {
        self.decode_batch(&[f]).pop().expect("one result per chunk")
    }

    /// The verified bytes of each chunk of `batch`, in order, or why they cannot be had: a
    /// chunk stored in full as its slice of its region, a delta rebuilt into a buffer this
    /// decoder keeps. See [`Self::decode_batch_into`].
    pub fn decode_batch<'b>(&'b mut self, batch: &[&'b FetchedChunk]) -> Vec<Result<&'b [u8]>> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let places = self.decode_places(batch, &mut scratch, false);
        self.scratch = scratch;
        let scratch: &'b [u8] = &self.scratch;
        batch
            .iter()
            .zip(places)
            .map(|(f, p)| p.map(|p| bytes_at(f, &p, scratch)))
            .collect()
    }

    /// Appends the verified bytes of each chunk of `batch`, in order, to `out`, and gives
    /// where each lies in it, or why it cannot be had (what a failed chunk appended is not
    /// named). Deltas are rebuilt straight into `out`: restore copied each into it from a
    /// buffer of its own, some 600 MB of the 1.2 GB tree of 20 SQLAlchemy versions.
    ///
    /// Chunks are rebuilt one after the other on this thread (a delta needs the bases the
    /// chunks before it left in the cache), then their fingerprints are checked, on this
    /// thread and a helper thread when the batch is large enough: BLAKE3 was
    /// most of the decoding thread's time, which was two thirds of a dump's CPU. No chunk's
    /// bytes are named before its fingerprint matched. Every chunk is rebuilt, also those
    /// after one that fails (a caller skips them): the decoder's base cache then follows the
    /// locating half's mirror of it.
    ///
    /// Bases are not verified on their own here (restore and dump): the chunk rebuilt from
    /// them is, which a damaged base fails (a delta decoded against other bytes does not
    /// give the chunk's fingerprint). Only then are the bases it used checked, to name the
    /// damaged one. With delta chains this halves the hashing of a restore (20 SQLAlchemy
    /// versions at depth 4: 7,525 bases verified for 62 MB restored). A chunk that matched
    /// before in the same bytes in memory (a delta: on a trusted base) is not hashed again
    /// (see [`Verified`]).
    pub fn decode_batch_into(
        &mut self,
        batch: &[&FetchedChunk],
        out: &mut Vec<u8>,
    ) -> Vec<Result<Range<usize>>> {
        self.decode_places(batch, out, true)
            .into_iter()
            .map(|p| {
                p.map(|p| match p {
                    Place::Buffer(r) => r,
                    Place::Region => unreachable!("every chunk is copied"),
                })
            })
            .collect()
    }

    /// [`Self::decode_batch_into`], deltas rebuilt into `buf` and, with `copy_full`, chunks
    /// stored in full copied there too.
    fn decode_places(
        &mut self,
        batch: &[&FetchedChunk],
        buf: &mut Vec<u8>,
        copy_full: bool,
    ) -> Vec<Result<Place>> {
        let PipelinedDecoder {
            decoder,
            verified,
            verified_before,
            ..
        } = self;
        buf.reserve(
            batch
                .iter()
                .filter(|f| copy_full || f.chunk.delta_base.is_some())
                .map(|f| f.len())
                .sum(),
        );
        let decoded: Vec<Result<Decoded>> = batch
            .iter()
            .map(|f| rebuild(decoder, f, buf, copy_full, verified))
            .collect();
        let buf: &[u8] = buf;
        // Chunks checked before in the same bytes, deltas from a trusted base.
        let known: Vec<bool> = batch
            .iter()
            .zip(&decoded)
            .map(|(f, d)| d.as_ref().is_ok_and(Decoded::may_be_known) && verified.matched(&f.chunk))
            .collect();
        // The other fingerprints, shared with a free thread: (bytes, the id they hash to).
        let checks: Vec<(&[u8], std::sync::OnceLock<ChunkId>)> = batch
            .iter()
            .zip(&decoded)
            .zip(&known)
            .filter(|(_, &known)| !known)
            .filter_map(|((f, d), _)| {
                let d = d.as_ref().ok()?;
                Some((bytes_at(f, &d.place(), buf), Default::default()))
            })
            .collect();
        let hasher = *decoder.hasher();
        let check = |i: usize| {
            let (data, id) = &checks[i];
            let _ = id.set(hasher.id(data));
        };
        let bytes: usize = checks.iter().map(|(b, _)| b.len()).sum();
        match Helper::get().filter(|_| bytes >= SHARED_VERIFY_BYTES) {
            Some(helper) => helper.for_each(checks.len(), &check),
            None => (0..checks.len()).for_each(check),
        }
        let mut ids = checks.iter().map(|(_, id)| id.get().copied());
        let mut out = Vec::with_capacity(batch.len());
        for ((f, d), known) in batch.iter().zip(decoded).zip(known) {
            let c = &f.chunk;
            let d = match d {
                Ok(d) => d,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            if known {
                *verified_before += 1;
                out.push(Ok(d.place()));
                continue;
            }
            if ids.next().flatten() == Some(c.id) {
                if d.may_be_known() {
                    verified.record(c);
                }
                out.push(Ok(d.place()));
                continue;
            }
            let failed = c.corrupt("content does not match its fingerprint".into());
            let e = match (&d, c.delta_base, &f.bases) {
                (Decoded::Delta { held, .. }, Some(b), Ok(chain)) => decoder
                    .find_damaged_in(held, chain)
                    .map(|d| base_unreadable(c, &b, &d))
                    .unwrap_or(failed),
                _ => failed,
            };
            out.push(Err(e));
        }
        out
    }
}

/// Rebuilds chunk `f` without checking its fingerprint (only its length): a delta appended to
/// `buf`, a chunk stored in full too with `copy_full`. A chunk that fails here (its base
/// unreadable or damaged, its delta malformed) appends nothing and is reported as
/// [`PipelinedDecoder::decode_batch_into`] says.
fn rebuild(
    decoder: &mut ChunkDecoder,
    f: &FetchedChunk,
    buf: &mut Vec<u8>,
    copy_full: bool,
    verified: &mut Verified,
) -> Result<Decoded> {
    let c = &f.chunk;
    let Some(b) = c.delta_base else {
        decoder.decode(c, None, &mut Vec::new(), false)?;
        let copied = copy_full.then(|| {
            let at = buf.len();
            buf.extend_from_slice(c.stored());
            at..buf.len()
        });
        return Ok(Decoded::Full { copied });
    };
    let (base, base_trusted) = match &f.bases {
        Err(e) => return Err(base_unreadable(c, &b, e)),
        Ok(chain) if chain.is_empty() => {
            let base = decoder.cached_base(&b);
            let t = base
                .as_ref()
                .is_some_and(|bytes| verified.trusts(&b, bytes));
            (base.map(BaseBytes::Rebuilt), t)
        }
        Ok(chain) => {
            let base = decoder
                .accept_chain(chain)
                .map_err(|e| base_unreadable(c, &b, &e))?;
            (Some(base), verified.note_chain(decoder, chain))
        }
    };
    let at = buf.len();
    let failed = decoder
        .decode_delta_appending(c, base.as_ref().map(BaseBytes::bytes), buf)
        .err();
    let chain = f.bases.as_deref().unwrap_or_default();
    if let Some(e) = failed {
        buf.truncate(at);
        let damaged = match base {
            Some(_) => decoder
                .find_damaged_base(chain, &b)
                .map(|d| base_unreadable(c, &b, &d)),
            None => None,
        };
        return Err(damaged.unwrap_or(e));
    }
    Ok(Decoded::Delta {
        range: at..buf.len(),
        held: decoder.held_bases(chain, &b),
        trusted: base_trusted,
    })
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
