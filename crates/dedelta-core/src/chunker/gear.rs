//! Gear CDC as in Ddelta §3.2 (Table 2, Algorithm 2): `fp = (fp << 1) + GEAR[b]` per byte,
//! a cut after byte `i` when the `log2(avg)` most significant bits of `fp` are all zero, with
//! the minimum and maximum chunk sizes enforced.
//!
//! # Why the most significant bits
//!
//! Each shift pushes older bytes' contributions one bit up, so bit `k` of `fp` depends on the
//! last `k + 1` bytes only: the low bits see a tiny window and the top bits see the last 64
//! bytes. Ddelta (and FastCDC) therefore test the top bits; testing the low bits, as Rabin
//! CDC does, would cut on the content of a 13-byte window.
//!
//! # Skipping the minimum
//!
//! A byte's contribution leaves the 64-bit hash after 64 shifts, so the hash at byte
//! `min_size - 1` is the same whether hashing starts at the chunk start or 64 bytes before
//! `min_size`. Hashing starts there: the cut points are exactly those of Algorithm 2 with a
//! minimum enforced, and the first `min_size - 64` bytes of each chunk are never read. (The
//! alternative rejected is FastCDC's "start hashing at `min_size` with `fp = 0`", which reads
//! even less but changes the hash of the first 64 positions after the minimum.)
//!
//! # The table
//!
//! [`GEAR`] holds 256 fixed 64-bit values: the first 256 outputs of splitmix64 seeded with
//! [`GEAR_SEED`], computed by a `const fn` at compile time (see [`gear_table`]). Ddelta uses
//! 32-bit random integers; 64-bit entries are needed here because the cut tests the top bits
//! of a 64-bit hash. The table decides every cut point, so it must never change: a unit test
//! pins a few entries.

use super::{Chunker, ChunkerParams};

/// Seed of the splitmix64 sequence that fills [`GEAR`]: the ASCII bytes of `"dedelta\0"`.
pub const GEAR_SEED: u64 = 0x6465_6465_6c74_6100;

/// The Gear table of the chunker: `gear_table(GEAR_SEED)`, fixed forever.
pub const GEAR: &[u64; 256] = &gear_table(GEAR_SEED);

/// One step of splitmix64 (Steele, Lea and Flood, 2014): advances `state` by the golden-ratio
/// increment and returns the mixed output.
pub const fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A Gear table: the first 256 outputs of splitmix64 from `seed`. Deterministic; evaluated at
/// compile time for [`GEAR`].
pub const fn gear_table(seed: u64) -> [u64; 256] {
    let mut state = seed;
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = splitmix64(&mut state);
        i += 1;
    }
    t
}

/// Gear CDC (Ddelta Algorithm 2) with minimum and maximum chunk sizes.
#[derive(Clone, Debug)]
pub struct GearChunker {
    params: ChunkerParams,
    /// The top `log2(avg_size)` bits.
    mask: u64,
}

impl GearChunker {
    /// Builds the chunker; `params` must satisfy [`ChunkerParams::validate`] (a power-of-two
    /// average, so that `log2(avg)` bits give an expected `avg` bytes between cut candidates).
    pub fn new(params: ChunkerParams) -> Self {
        let bits = params.avg_size.max(1).trailing_zeros().min(63);
        GearChunker {
            params,
            mask: !(u64::MAX >> bits),
        }
    }
}

impl Chunker for GearChunker {
    fn next_chunk_len(&self, data: &[u8]) -> usize {
        let p = self.params;
        let len = data.len().min(p.max_size);
        if len <= p.min_size {
            // The short end of the stream (or a chunk that cannot be cut before min).
            return len;
        }
        let gear = GEAR;
        let mask = self.mask;
        // Byte `min_size - 1` is the first that may end a chunk; its hash depends on the 64
        // bytes ending there.
        let first = p.min_size.max(1) - 1;
        let mut fp = 0u64;
        for &b in &data[first.saturating_sub(63)..first] {
            fp = (fp << 1).wrapping_add(gear[b as usize]);
        }
        // Two bytes per step: `fp2 = (fp << 2) + (2 * g1 + g2)` keeps one shift and one add per
        // two bytes on the loop-carried chain; `fp1`, the hash after the first byte, is
        // computed off the chain. Same hashes, same cuts, about 1.5x the speed.
        let tail = &data[first..len];
        let mut pairs = tail.chunks_exact(2);
        let mut pos = first;
        for pair in &mut pairs {
            let g1 = gear[pair[0] as usize];
            let g2 = gear[pair[1] as usize];
            let fp1 = (fp << 1).wrapping_add(g1);
            let fp2 = (fp << 2).wrapping_add((g1 << 1).wrapping_add(g2));
            if fp1 & mask == 0 {
                return pos + 1;
            }
            if fp2 & mask == 0 {
                return pos + 2;
            }
            fp = fp2;
            pos += 2;
        }
        if let [b] = pairs.remainder() {
            fp = (fp << 1).wrapping_add(gear[*b as usize]);
            if fp & mask == 0 {
                return pos + 1;
            }
        }
        len
    }

    fn params(&self) -> ChunkerParams {
        self.params
    }

    fn name(&self) -> &'static str {
        "gear"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunker::chunk_all;

    /// The table must never change: it decides every cut point.
    #[test]
    fn table_is_pinned() {
        // splitmix64's published first output for seed 0.
        let mut s = 0;
        assert_eq!(splitmix64(&mut s), 0xe220_a839_7b1d_cdaf);
        let t = gear_table(GEAR_SEED);
        assert_eq!(&t, GEAR);
        let distinct: std::collections::HashSet<u64> = t.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
        let mut s = GEAR_SEED;
        let first = splitmix64(&mut s);
        assert_eq!(GEAR[0], first);
        assert_eq!(GEAR[255], {
            let mut s = GEAR_SEED;
            (0..256).map(|_| splitmix64(&mut s)).last().unwrap()
        });
    }

    /// Same cuts as Algorithm 2 run from the chunk start with min and max enforced.
    #[test]
    fn matches_reference_definition() {
        let params = ChunkerParams {
            min_size: 100,
            avg_size: 512,
            max_size: 2048,
        };
        let mut x = 5u64;
        let data: Vec<u8> = (0..200_000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        let c = GearChunker::new(params);
        let reference = |d: &[u8]| -> usize {
            let mut fp = 0u64;
            for (i, &b) in d.iter().enumerate().take(params.max_size) {
                fp = (fp << 1).wrapping_add(GEAR[b as usize]);
                if i + 1 >= params.min_size && fp >> (64 - 9) == 0 {
                    return i + 1;
                }
            }
            d.len().min(params.max_size)
        };
        let mut pos = 0;
        for r in chunk_all(&c, &data) {
            assert_eq!(r.len(), reference(&data[pos..]));
            pos = r.end;
        }
        assert_eq!(pos, data.len());
    }

    #[test]
    fn short_inputs() {
        let c = GearChunker::new(ChunkerParams::default());
        assert_eq!(c.next_chunk_len(&[1]), 1);
        assert_eq!(c.next_chunk_len(&[7; 2048]), 2048);
        let n = c.next_chunk_len(&vec![0; 100_000]);
        assert!((2048..=65536).contains(&n));
    }
}
