//! Odess (Zhang et al., "Odess: speeding up resemblance detection for redundancy elimination
//! by fast content-defined sampling", ICDE'21 / TPDS'21): content-defined sampling.
//!
//! # What is implemented
//!
//! A Gear rolling hash runs over the chunk, `h = (h << 1) + G[b]` (wrapping `u64`, `h = 0` at
//! the chunk start, `G` = [`ODESS_GEAR`]). A position is *sampled* when the top
//! [`SAMPLE_BITS`] = 7 bits of `h` are zero, about one position in 128 (the paper's sampling
//! ratio). Only sampled positions are transformed: with `x = (h >> 25) mod 2^32` (the 32 bits
//! below the seven zero ones), feature `i` (for `i < N = M * K`) is
//! `max (m_i * x + a_i) mod 2^32` over the sampled positions, the linear transforms of
//! Algorithm 1 applied to the sampling hash; SF `j` hashes features `j*K .. j*K + K` as in
//! N-transform ([`group_features`]). Per byte the work is one shift-and-add, one table load
//! and a test, against N-transform's Rabin step plus N multiply-add-max.
//!
//! Choices, each fixed forever (they decide every sketch):
//! - The sampling mask tests the *top* bits: bit `k` of a Gear hash depends on the last
//!   `k + 1` bytes only, so top bits make the sampling decision depend on a 64-byte window
//!   rather than on the last 7 bytes. For the same reason the transforms take bits 25..=56
//!   (covering the last 26 to 57 bytes), not the low 32 bits (the last 1 to 32 bytes).
//! - The transform constants are the low 32 bits of [`transform_constants`] from
//!   [`ODESS_TRANSFORM_SEED`] (multipliers odd, so each transform permutes the 32-bit values).
//! - The Gear table is splitmix64 from [`ODESS_GEAR_SEED`], not the chunker's table, so that
//!   sampling is independent of the [`GearChunker`](crate::chunker::gear::GearChunker)'s cut
//!   points (which would otherwise always be sampled positions).
//! - A chunk with no sampled position at all (short chunks, long runs) is sampled at every
//!   position instead: otherwise all such chunks would get the same, all-zero features and
//!   look similar to each other.
//!
//! # Speed
//!
//! The chunk is cut into [`LANES`] segments hashed by interleaved chains (see `sample`), one
//! rarely-taken branch per step of the four chains, and sampled hashes are transformed in
//! batches outside the hashing loop.
//!
//! The alternative rejected: transforming the Rabin fingerprints at sampled positions (a
//! Rabin step per byte costs about three Gear steps; the sampling hash doubles as the feature
//! hash).

use super::{group_features, transform_constants, SketchParams, Sketcher, SuperFeatures};
use super::{MAX_FEATURES, MAX_FEATURES_PER_SF, MAX_SF_COUNT};
use crate::chunker::gear::gear_table;

/// Number of top hash bits that must be zero for a position to be sampled (1 in 128).
pub const SAMPLE_BITS: u32 = 7;

/// Seed of Odess's Gear table: the ASCII bytes of `"odessgr\0"`.
pub const ODESS_GEAR_SEED: u64 = 0x6f64_6573_7367_7200;

/// Seed of the transform constants: the ASCII bytes of `"odesstf\0"`.
pub const ODESS_TRANSFORM_SEED: u64 = 0x6f64_6573_7374_6600;

/// Odess's Gear table, computed at compile time.
pub const ODESS_GEAR: &[u64; 256] = &gear_table(ODESS_GEAR_SEED);

/// The 32-bit transform multipliers (odd) and addends, computed at compile time.
const CONSTANTS: &([u32; MAX_FEATURES], [u32; MAX_FEATURES]) = &{
    let (m64, a64) = transform_constants(ODESS_TRANSFORM_SEED);
    let mut m = [1u32; MAX_FEATURES];
    let mut a = [0u32; MAX_FEATURES];
    let mut i = 0;
    while i < MAX_FEATURES {
        m[i] = m64[i] as u32;
        a[i] = a64[i] as u32;
        i += 1;
    }
    (m, a)
};

/// The bits of a sampled hash that the transforms read: `h >> TRANSFORM_SHIFT`, truncated to
/// 32 bits, is bits 25..=56, just below the [`SAMPLE_BITS`] that sampling forces to zero.
const TRANSFORM_SHIFT: u32 = 32 - SAMPLE_BITS;

/// Sampled hashes are buffered and transformed in batches of this many, which keeps the
/// per-byte loop free of the transform code.
const BATCH: usize = 64;

/// Odess super-features.
#[derive(Clone, Debug)]
pub struct OdessSketcher {
    params: SketchParams,
}

impl OdessSketcher {
    /// Builds the sketcher; `params` should be checked by [`super::new_sketcher`] (larger
    /// values are clamped to 8 SFs of 16 features).
    pub fn new(params: SketchParams) -> Self {
        OdessSketcher { params }
    }

    fn shape(&self) -> (usize, usize) {
        (
            self.params.sf_count.clamp(1, MAX_SF_COUNT),
            self.params.features_per_sf.clamp(1, MAX_FEATURES_PER_SF),
        )
    }

    /// The `N = M * K` features of `chunk`, in order.
    pub fn features(&self, chunk: &[u8]) -> Vec<u64> {
        let (m, k) = self.shape();
        let n = m * k;
        let mut feat = [0u32; MAX_FEATURES];
        let mask = !(u64::MAX >> SAMPLE_BITS);
        if sample(chunk, mask, &mut feat[..n]) == 0 {
            sample(chunk, 0, &mut feat[..n]);
        }
        feat[..n].iter().map(|&f| u64::from(f)).collect()
    }
}

/// Hashes computed by one interleaved loop: the chunk is cut into this many segments, each
/// hashed by its own Gear chain after a 63-byte warm-up (same hashes as one chain over the
/// whole chunk).
pub const LANES: usize = 4;

/// A Gear hash depends only on the last 64 bytes (older contributions are shifted out).
const GEAR_WINDOW: usize = 64;

/// Runs the Gear hash over `chunk`, transforms the hashes `h` with `h & mask == 0` into the
/// running maxima `feat`, and returns how many positions were sampled.
///
/// The hash at position `p` is `sum_{k < 64} G[b_{p-k}] << k`, so it can be computed by a
/// chain started (at 0) 63 bytes before `p` as well as by one started at the chunk start. The
/// chunk is therefore cut into [`LANES`] segments, each hashed by its own chain after a 63-byte
/// warm-up, the chains interleaved in one loop: the processor overlaps them instead of waiting
/// on one shift-and-add per byte. The set of sampled hashes, hence the features, is exactly
/// that of a single pass.
fn sample(chunk: &[u8], mask: u64, feat: &mut [u32]) -> usize {
    let gear = ODESS_GEAR;
    let len = chunk.len();
    if len < LANES * GEAR_WINDOW {
        return sample_serial(chunk, 0, mask, feat);
    }
    let bound = |l: usize| l * len / LANES;
    // Segment l covers bound(l)..bound(l + 1); its hashes before bound(l) are warm-up.
    let mut h = [0u64; LANES];
    for (l, h) in h.iter_mut().enumerate() {
        let start = bound(l);
        for &b in &chunk[start.saturating_sub(GEAR_WINDOW - 1)..start] {
            *h = (*h << 1).wrapping_add(gear[b as usize]);
        }
    }
    let n = (0..LANES)
        .map(|l| bound(l + 1) - bound(l))
        .min()
        .unwrap_or(0);
    let seg = |l: usize| &chunk[bound(l)..bound(l) + n];
    let mut buf = [0u64; BATCH];
    let mut pending = 0;
    let mut total = 0;
    let [mut h0, mut h1, mut h2, mut h3] = h;
    // Zipped iterators: one loop, four chains, no bounds checks. The mask is a run of top
    // bits, so `h & mask == 0` means `h < 2^(64 - bits)`, and the four chains' minimum tells
    // whether any of this step's positions is sampled: one rarely-taken branch per four bytes
    // instead of four.
    for (((&b0, &b1), &b2), &b3) in seg(0).iter().zip(seg(1)).zip(seg(2)).zip(seg(3)) {
        h0 = (h0 << 1).wrapping_add(gear[b0 as usize]);
        h1 = (h1 << 1).wrapping_add(gear[b1 as usize]);
        h2 = (h2 << 1).wrapping_add(gear[b2 as usize]);
        h3 = (h3 << 1).wrapping_add(gear[b3 as usize]);
        if h0.min(h1).min(h2.min(h3)) & mask == 0 {
            for hl in [h0, h1, h2, h3] {
                if hl & mask == 0 {
                    // `pending < BATCH` holds here (flushed below when within LANES of
                    // full); the modulo only spares the bounds check.
                    buf[pending % BATCH] = hl;
                    pending += 1;
                }
            }
            if pending > BATCH - LANES {
                transform(&buf[..pending], feat);
                total += pending;
                pending = 0;
            }
        }
    }
    let h = [h0, h1, h2, h3];
    transform(&buf[..pending], feat);
    total += pending;
    // The segments' last bytes beyond the common length (at most one each).
    for (l, &hl) in h.iter().enumerate() {
        let end = bound(l + 1);
        let mut hl = hl;
        for &b in &chunk[bound(l) + n..end] {
            hl = (hl << 1).wrapping_add(gear[b as usize]);
            if hl & mask == 0 {
                transform(&[hl], feat);
                total += 1;
            }
        }
    }
    total
}

/// [`sample`] with one chain, for short chunks: hashes `chunk` from `h`.
fn sample_serial(chunk: &[u8], mut h: u64, mask: u64, feat: &mut [u32]) -> usize {
    let mut total = 0;
    for &b in chunk {
        h = (h << 1).wrapping_add(ODESS_GEAR[b as usize]);
        if h & mask == 0 {
            transform(&[h], feat);
            total += 1;
        }
    }
    total
}

/// `feat[i] = max(feat[i], m_i * h + a_i)` for every sampled `h`. Never inlined: kept out of
/// the hashing loop, whose four chains then stay in registers.
#[inline(never)]
fn transform(sampled: &[u64], feat: &mut [u32]) {
    let (m, a) = CONSTANTS;
    for &h in sampled {
        let x = (h >> TRANSFORM_SHIFT) as u32;
        for ((f, &m), &a) in feat.iter_mut().zip(m).zip(a) {
            *f = (*f).max(m.wrapping_mul(x).wrapping_add(a));
        }
    }
}

impl Sketcher for OdessSketcher {
    fn sketch(&self, chunk: &[u8]) -> SuperFeatures {
        let (m, k) = self.shape();
        group_features(&self.features(chunk), m, k)
    }

    fn params(&self) -> SketchParams {
        self.params
    }

    fn name(&self) -> &'static str {
        "odess"
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{random_chunk, similarity_rates, Rng};
    use super::*;

    /// The definition written plainly.
    fn reference(chunk: &[u8], n: usize) -> Vec<u64> {
        let (m, a) = CONSTANTS;
        let mut hashes = Vec::new();
        let mut h = 0u64;
        for &b in chunk {
            h = (h << 1).wrapping_add(ODESS_GEAR[b as usize]);
            hashes.push(h);
        }
        let mut sampled: Vec<u64> = hashes.iter().copied().filter(|h| h >> 57 == 0).collect();
        if sampled.is_empty() {
            sampled = hashes;
        }
        (0..n)
            .map(|i| {
                sampled
                    .iter()
                    .map(|&h| m[i].wrapping_mul((h >> 25) as u32).wrapping_add(a[i]))
                    .max()
                    .map_or(0, u64::from)
            })
            .collect()
    }

    #[test]
    fn matches_definition() {
        let mut rng = Rng(9);
        for (len, m, k) in [
            (0, 3, 4),
            (50, 3, 4),
            (8192, 3, 4),
            (65536, 3, 2),
            (3000, 8, 16),
        ] {
            let chunk = random_chunk(&mut rng, len);
            let s = OdessSketcher::new(SketchParams {
                sf_count: m,
                features_per_sf: k,
            });
            assert_eq!(
                s.features(&chunk),
                reference(&chunk, m * k),
                "{len} {m}x{k}"
            );
        }
    }

    #[test]
    fn samples_about_one_in_128() {
        let mut rng = Rng(10);
        let chunk = random_chunk(&mut rng, 1 << 20);
        let mut feat = [0u32; 12];
        let n = sample(&chunk, !(u64::MAX >> SAMPLE_BITS), &mut feat);
        let expected = (1 << 20) / 128;
        assert!((expected * 9 / 10..expected * 11 / 10).contains(&n), "{n}");
    }

    #[test]
    fn small_distinct_chunks_differ() {
        let s = OdessSketcher::new(SketchParams::default());
        assert_ne!(s.sketch(b"hello"), s.sketch(b"world"));
    }

    #[test]
    fn detects_edited_chunks() {
        for k in [4, 2] {
            let s = OdessSketcher::new(SketchParams {
                sf_count: 3,
                features_per_sf: k,
            });
            let (hit, false_pos) = similarity_rates(&s, 200, 42);
            eprintln!("odess 3x{k}: detected {hit:.3}, false positives {false_pos:.5}");
            // Measured (seed 42): see `measure_detection` in sketch/mod.rs for the sweep.
            assert!(hit >= 0.93, "3x{k}: {hit}");
            assert!(false_pos < 0.001, "3x{k}: {false_pos}");
        }
    }
}
