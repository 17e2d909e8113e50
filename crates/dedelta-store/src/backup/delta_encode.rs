//! Runs on: the dedup thread (with the pool's free threads, or the stage's own pool).
//!
//! Encoding a batch's chunks against their next bases and judging each delta: the
//! re-anchoring and tree bounds, the saving test ([`super::saving`]), best-of-N.

use super::{DeltaStage, NewChunk, Rejected, Stored, TREE_MAX_DELTA};
use dedelta_core::compress::Compression;

impl DeltaStage<'_> {
    /// Encodes every chunk that has a next base against it, in parallel when the stage has a
    /// pool, and keeps the delta if it saves enough.
    pub(super) fn encode_candidates(&self, batch: &mut [NewChunk]) {
        let codec = self.codec.as_ref();
        let keep = 1.0 - self.cfg.min_saving;
        // Re-anchored bases reach the next versions through DupAdj's positional hint; the
        // sketch index keeps the oldest chunk per super-feature (FirstFit), so without DupAdj
        // a drifted chunk would be stored in full in every version (10 Redis dumps, DupAdj
        // off: 104.41 MB with the bound at 30 %, 102.86 without).
        let reanchor = self.cfg.reanchor.filter(|_| self.cfg.dupadj);
        // With delta chains the delta is compared compressed too, as it will be stored: its
        // literals are the new text, which compresses like the chunk does (20 SQLAlchemy
        // sdists, depth 4: 17.16 -> 16.78 MB; the raw delta against the compressed chunk
        // turned away deltas of a fifth of their chunk's size). With one-level deltas the raw
        // delta is compared, as before: there a delta kept against the first full copy keeps
        // the next versions on that drifting copy too (`dare`, one level without
        // re-anchoring: 17.61 MB raw, 19.81 compressed).
        let compare_compressed = self.cfg.max_depth > 1;
        // As learnt from the batches before this one: the same whatever the threads do.
        let learnt = self.compressibility;
        let encode = |c: &mut NewChunk| {
            let Some((base, source)) = c.next_base.take() else {
                return;
            };
            let mut delta = Vec::new();
            codec.encode(&base.bytes, &c.data, &mut delta);
            // What the chunk would cost stored in full: zstd level 1 of the chunk alone,
            // computed only when the delta is not obviously smaller (8x below raw size,
            // which a single chunk rarely compresses to, or below what the chunks so far
            // compressed to, with a margin: see `saving`). See `compare_compressed` for what
            // the delta is compared as.
            // Re-anchoring: a delta above the bound is not kept, so the chunk is stored in full
            // (unless a later candidate gives a smaller delta) and becomes the next versions'
            // base.
            let max_delta = if c.tree {
                Some(TREE_MAX_DELTA)
            } else {
                reanchor
            };
            let in_bound = max_delta.is_none_or(|m| delta.len() as f64 <= c.data.len() as f64 * m);
            let keep_it = in_bound
                && (learnt.delta_surely_saves(&c.id, delta.len(), c.data.len(), keep) || {
                    let cost = *c
                        .full_cost
                        .get_or_insert_with(|| Compression::zstd(1).compress(&c.data).1.len());
                    let bound = cost as f64 * keep;
                    // `compress` never returns more than its input, so a raw delta within the
                    // bound is within it compressed too: compressed only when that decides.
                    delta.len() as f64 <= bound
                        || (compare_compressed
                            && Compression::zstd(1).compress(&delta).1.len() as f64 <= bound)
                });
            if c.smallest.is_none_or(|(len, _)| delta.len() < len) {
                let why = match (keep_it, in_bound, c.tree) {
                    (true, _, _) => None,
                    (false, false, true) => Some(Rejected::TreeBound),
                    (false, false, false) => Some(Rejected::Reanchor),
                    (false, true, _) => Some(Rejected::MinSaving),
                };
                c.smallest = Some((delta.len(), why));
            }
            // A later candidate (best-of-N) replaces a kept delta only when smaller.
            let better = match &c.stored {
                Stored::Delta { delta: kept, .. } => delta.len() < kept.len(),
                Stored::Full => true,
            };
            if keep_it && better {
                c.stored = Stored::Delta {
                    base: base.id,
                    delta,
                    depth: base.depth + 1,
                };
                c.source = Some(source);
            }
        };
        self.for_each(batch, encode);
    }
}
