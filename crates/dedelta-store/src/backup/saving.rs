//! Runs on: the dedup thread (learning, between batches) and the encoding threads (asking,
//! during a batch).
//!
//! When the saving test may do without compressing the chunk. A delta is kept only when it
//! is at most `1 - min_saving` times the chunk compressed alone (zstd level 1, see
//! [`crate::format::config::DeltaConfig::min_saving`]). On an incremental backup of a Redis
//! dump, compressing the chunks for that test was 29 ms of CPU (in a backup bound by its CPU,
//! 0.3 s), and not one delta was turned away: the deltas were a quarter of their chunk
//! (median), and the chunks compressed 1.5x (at best 1.84x).
//!
//! So the stage learns, in stream order, the best ratio (bytes over compressed bytes) among
//! the chunks it compressed, and keeps a delta without compressing its chunk when the delta
//! would pass even for a chunk that compresses [`MARGIN`] times better than that. The old
//! rule stays: a delta 8x below its chunk's size is kept at once. Three things keep the
//! learnt ratio honest: it is used only after [`MIN_MEASURED`] chunks were compressed, a
//! sixteenth of the chunks (by fingerprint) is compressed whatever its delta, and a ratio
//! only ever grows. Measured with `dedelta eval` (which stores the same bytes run after run)
//! on the 20 SQLAlchemy sdists and the 10 Redis dumps, configurations `recommended`,
//! `greedy`, `dare` and `depth-1`: the same stored bytes as compressing every chunk. A chunk
//! more compressible than the margin allows may keep a delta that saves less than
//! `min_saving` (as one 8x more compressible could before); what is stored is exact either
//! way.
//!
//! Decisions do not depend on thread timing: a batch is judged by the ratio learnt from the
//! batches before it, which the dedup thread takes in stream order.

use dedelta_core::ChunkId;

/// How much better than the best ratio measured a chunk may compress before a delta taken
/// without compressing it could save less than asked.
const MARGIN: f64 = 1.5;
/// Chunks compressed before the learnt ratio is used.
const MIN_MEASURED: u64 = 256;

/// The best compression ratio among the chunks compressed so far (see the module
/// documentation).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Compressibility {
    best: f64,
    measured: u64,
}

impl Compressibility {
    /// Takes in a chunk of `raw` bytes that compressed to `cost`.
    pub fn learn(&mut self, raw: usize, cost: usize) {
        self.measured += 1;
        self.best = self.best.max(raw as f64 / cost.max(1) as f64);
    }

    /// Whether a delta of `delta` bytes may be taken as at most `keep` times chunk `id`
    /// (`raw` bytes) compressed alone without compressing it: by the 8x rule, or, unless the
    /// chunk is one of the sampled, by the learnt ratio with its margin.
    pub fn delta_surely_saves(&self, id: &ChunkId, delta: usize, raw: usize, keep: f64) -> bool {
        if delta * 8 <= raw {
            return true;
        }
        let sampled = id.as_bytes()[0] < 16;
        !sampled
            && self.measured >= MIN_MEASURED
            && delta as f64 * self.best * MARGIN <= keep * raw as f64
    }

    /// Chunks compressed so far.
    pub fn measured(&self) -> u64 {
        self.measured
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(first: u8) -> ChunkId {
        let mut b = [7u8; 32];
        b[0] = first;
        ChunkId(b)
    }

    /// Before enough chunks were compressed only the 8x rule holds; after, a delta within
    /// the margin over the best ratio is taken without compressing, one beyond it is not,
    /// and a sampled chunk is always compressed.
    #[test]
    fn the_learnt_ratio_decides_only_with_margin_and_after_enough_chunks() {
        let mut c = Compressibility::default();
        let (raw, keep) = (8000, 0.9);
        assert!(c.delta_surely_saves(&id(200), 1000, raw, keep), "8x rule");
        assert!(!c.delta_surely_saves(&id(200), 2000, raw, keep));
        for _ in 0..MIN_MEASURED {
            c.learn(raw, 5000);
        }
        // Best ratio 1.6: bound 8000 * 0.9 / (1.6 * 1.5) = 3000 bytes.
        assert!(c.delta_surely_saves(&id(200), 3000, raw, keep));
        assert!(!c.delta_surely_saves(&id(200), 3001, raw, keep));
        assert!(!c.delta_surely_saves(&id(3), 2000, raw, keep), "sampled");
        assert!(
            c.delta_surely_saves(&id(3), 1000, raw, keep),
            "8x rule, sampled"
        );
        // One chunk that compresses 4x moves the bound down to 1200 bytes.
        c.learn(raw, 2000);
        assert!(!c.delta_surely_saves(&id(200), 1201, raw, keep));
        assert!(c.delta_surely_saves(&id(200), 1200, raw, keep));
        assert_eq!(c.measured(), MIN_MEASURED + 1);
    }
}
