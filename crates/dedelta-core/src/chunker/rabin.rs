//! Rabin CDC as in LBFS and destor: a Rabin fingerprint of a 48-byte sliding window, a cut
//! after byte `i` when the fingerprint's low `log2(avg)` bits are all ones
//! (`fp % avg == avg - 1`), with the minimum and maximum chunk sizes enforced.
//!
//! # The fingerprint
//!
//! The bytes of the window `w_0 .. w_47` (oldest first) are read as a polynomial over GF(2),
//! `W(x) = sum w_k(x) * x^(8 * (47 - k))`, and the fingerprint is `W(x) mod P(x)` with the
//! degree-63 irreducible polynomial [`RABIN_POLY`] `= 0xbfe6b8a5bf378d83` (the one LBFS and
//! destor use; a unit test checks that it is irreducible). Sliding uses two 256-entry tables
//! computed in `const fn`s at compile time:
//!
//! - `T[j] = (j(x) * x^63 mod P) | j << 63`: reduces the byte pushed out of the top by `<< 8`
//!   (the `| j << 63` also clears bit 63, the only bit of the overflow the `u64` keeps);
//! - `U[j] = j(x) * x^(8 * 48) mod P`: the contribution of the byte leaving the window, as it
//!   would be *after* the shift.
//!
//! LBFS and Ddelta Table 2 write one step as `fp = ((fp ^ U'[out]) << 8 | in) ^ T[(fp ^
//! U'[out]) >> 55]` with `U'[j] = j(x) * x^(8 * 47) mod P`. Both tables are linear over GF(2),
//! so the pop can be moved after the push: `fp = ((fp << 8) | in) ^ T[fp >> 55] ^ U[out]`,
//! the same fingerprint with one XOR fewer on the loop-carried dependency chain (a shift, a
//! load and an XOR per byte; Gear's chain is one shift-and-add). The window bytes are read
//! straight from the caller's buffer (no ring buffer), and there is no division: the average
//! is a power of two, so `% avg` is a mask.
//!
//! # Skipping the minimum
//!
//! The fingerprint at byte `i` depends only on bytes `i-47 ..= i` (a fresh fingerprint of 0 is
//! the fingerprint of a window of zero bytes, and zero bytes contribute nothing), so hashing
//! starts `48` bytes before `min_size` instead of at the chunk start: the cut points are exactly
//! those of hashing every byte from the chunk start, as destor does, at a fraction of the cost.
//!
//! The alternative rejected: a byte-at-a-time ring-buffer implementation as in the LBFS C code.
//! It gives the same fingerprints but pays a modulo or branch per byte for the ring index.

use super::{Chunker, ChunkerParams};

/// The Rabin polynomial of LBFS and destor, `P(x)` of degree 63 (bit 63 set), irreducible.
pub const RABIN_POLY: u64 = 0xbfe6_b8a5_bf37_8d83;

/// Length of the sliding window in bytes (LBFS, destor, Finesse).
pub const RABIN_WINDOW: usize = 48;

/// Degree of [`RABIN_POLY`].
const DEGREE: u32 = 63;

/// `fp >> SHIFT` is the byte that `fp << 8` pushes past the degree.
const SHIFT: u32 = DEGREE - 8;

/// The push (`t`) and pop (`u`) tables of the rolling Rabin fingerprint over [`RABIN_POLY`]
/// and a [`RABIN_WINDOW`]-byte window. Computed at compile time; see the module doc.
#[derive(Debug)]
pub struct RabinTables {
    /// Indexed by `fp >> 55`, which is below 256 since fingerprints are below `2^63`; the
    /// upper 256 entries (zero, never read) let the compiler drop the bounds check.
    t: [u64; 512],
    u: [u64; 256],
}

/// The tables for [`RABIN_POLY`] and [`RABIN_WINDOW`], built at compile time (a promoted
/// constant: one copy in read-only memory, no runtime initialisation, no mutable state).
pub const RABIN_TABLES: &RabinTables = &RabinTables::new(RABIN_POLY, RABIN_WINDOW);

/// `a(x) mod p(x)` for a 128-bit polynomial `a` and a polynomial `p` of degree `deg`.
const fn poly_mod(mut a: u128, p: u64, deg: u32) -> u64 {
    let p = p as u128;
    let mut bit = 127;
    while bit >= deg {
        if a & (1u128 << bit) != 0 {
            a ^= p << (bit - deg);
        }
        bit -= 1;
    }
    a as u64
}

/// Carry-less product `a(x) * b(x)` (no reduction).
const fn clmul(a: u64, b: u64) -> u128 {
    let mut r = 0u128;
    let mut i = 0;
    while i < 64 {
        if b & (1u64 << i) != 0 {
            r ^= (a as u128) << i;
        }
        i += 1;
    }
    r
}

/// `a(x) * b(x) mod p(x)`.
const fn poly_mulmod(a: u64, b: u64, p: u64, deg: u32) -> u64 {
    poly_mod(clmul(a, b), p, deg)
}

impl RabinTables {
    /// Builds the tables for polynomial `poly` (degree 63: bit 63 set) and a window of
    /// `window` bytes. A `const fn`: evaluated by the compiler for [`RABIN_TABLES`].
    const fn new(poly: u64, window: usize) -> Self {
        // x^63 mod P: P with its leading term removed.
        let x63 = poly_mod(1u128 << DEGREE, poly, DEGREE);
        // x^(8 * window) mod P.
        let mut size_shift = 1u64;
        let mut i = 0;
        while i < window {
            size_shift = poly_mulmod(size_shift, 1 << 8, poly, DEGREE);
            i += 1;
        }
        let mut t = [0u64; 512];
        let mut u = [0u64; 256];
        let mut j = 0;
        while j < 256 {
            t[j] = poly_mulmod(j as u64, x63, poly, DEGREE) | ((j as u64) << DEGREE);
            u[j] = poly_mulmod(j as u64, size_shift, poly, DEGREE);
            j += 1;
        }
        RabinTables { t, u }
    }

    /// Appends byte `b` to a fingerprint whose window is not yet full (nothing leaves it).
    #[inline(always)]
    pub fn append(&self, fp: u64, b: u8) -> u64 {
        ((fp << 8) | b as u64) ^ self.t[(fp >> SHIFT) as usize]
    }

    /// Slides the window by one byte: `out` leaves it, `b` enters it.
    #[inline(always)]
    pub fn slide(&self, fp: u64, out: u8, b: u8) -> u64 {
        self.append(fp, b) ^ self.u[out as usize]
    }

    /// The fingerprint of `bytes` taken as a whole (any length); for tests and for checking
    /// the rolling form: equals the rolling fingerprint when `bytes` is the window.
    pub fn fingerprint(&self, bytes: &[u8]) -> u64 {
        bytes.iter().fold(0, |fp, &b| self.append(fp, b))
    }
}

/// Rabin CDC with a 48-byte window; cuts where `fp & (avg - 1) == avg - 1`.
#[derive(Clone, Debug)]
pub struct RabinChunker {
    params: ChunkerParams,
    mask: u64,
}

impl RabinChunker {
    /// Builds the chunker; `params` must satisfy [`ChunkerParams::validate`] (in particular a
    /// power-of-two average and `min_size >= 64`, which is at least the window).
    pub fn new(params: ChunkerParams) -> Self {
        RabinChunker {
            params,
            mask: (params.avg_size as u64).wrapping_sub(1),
        }
    }
}

impl Chunker for RabinChunker {
    fn next_chunk_len(&self, data: &[u8]) -> usize {
        let p = self.params;
        let len = data.len().min(p.max_size);
        if len <= p.min_size {
            // The short end of the stream (or a chunk that cannot be cut before min).
            return len;
        }
        let data = &data[..len];
        let tab = RABIN_TABLES;
        let mask = self.mask;
        // The first byte that may end a chunk is `min_size - 1`; its window starts at
        // `start`. The window is filled with `append` (nothing leaves), then slides.
        let start = p.min_size.saturating_sub(RABIN_WINDOW);
        let first_end = start + RABIN_WINDOW; // index after the first full window
        let mut fp = 0u64;
        for &b in &data[start..first_end.min(len)] {
            fp = tab.append(fp, b);
        }
        // With min_size >= RABIN_WINDOW, `first_end == min_size`: the window ending at byte
        // `min_size - 1` is checked first. (A smaller min_size, which validate() forbids,
        // would only check from `first_end - 1` on: still a valid chunking.)
        if first_end <= len && fp & mask == mask {
            return first_end;
        }
        if first_end >= len {
            return len;
        }
        // Slide: byte `i` enters, byte `i - 48` leaves. Zipping the two sub-slices lets the
        // compiler drop every bounds check.
        let ins = &data[first_end..];
        let outs = &data[start..len - RABIN_WINDOW];
        for (k, (&b, &out)) in ins.iter().zip(outs).enumerate() {
            fp = tab.slide(fp, out, b);
            if fp & mask == mask {
                return first_end + k + 1;
            }
        }
        len
    }

    fn params(&self) -> ChunkerParams {
        self.params
    }

    fn name(&self) -> &'static str {
        "rabin"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunker::chunk_all;

    /// `x^(2^k) mod P` by repeated squaring.
    fn x_pow_2k(k: u32) -> u64 {
        let mut r = 2u64; // x
        for _ in 0..k {
            r = poly_mulmod(r, r, RABIN_POLY, DEGREE);
        }
        r
    }

    fn poly_gcd(mut a: u128, mut b: u128) -> u128 {
        let deg = |v: u128| 127 - v.leading_zeros() as i32;
        while b != 0 {
            while a != 0 && deg(a) >= deg(b) {
                a ^= b << (deg(a) - deg(b));
            }
            std::mem::swap(&mut a, &mut b);
        }
        a
    }

    /// Rabin's irreducibility test: P of degree n = 63 is irreducible iff x^(2^n) = x mod P
    /// and gcd(x^(2^(n/q)) - x, P) = 1 for the prime divisors q = 3, 7 of 63.
    #[test]
    fn polynomial_is_irreducible() {
        assert_eq!(x_pow_2k(63), 2);
        for q in [3, 7] {
            let h = x_pow_2k(63 / q) ^ 2;
            assert_eq!(poly_gcd(RABIN_POLY as u128, h as u128), 1, "q={q}");
        }
    }

    #[test]
    fn rolling_equals_direct() {
        let data: Vec<u8> = (0..500u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let tab = RABIN_TABLES;
        let mut fp = 0;
        for i in 0..data.len() {
            fp = if i < RABIN_WINDOW {
                tab.append(fp, data[i])
            } else {
                tab.slide(fp, data[i - RABIN_WINDOW], data[i])
            };
            let lo = (i + 1).saturating_sub(RABIN_WINDOW);
            assert_eq!(fp, tab.fingerprint(&data[lo..=i]), "at {i}");
            assert!(fp < 1 << 63);
        }
        // Leading zero bytes do not change a fingerprint.
        assert_eq!(tab.fingerprint(&[0, 0, 0, 7, 9]), tab.fingerprint(&[7, 9]));
    }

    /// The chunker finds the same cuts as the plain definition: hash every byte from the
    /// chunk start, cut at the first `i >= min - 1` whose window fingerprint matches.
    #[test]
    fn matches_reference_definition() {
        let params = ChunkerParams {
            min_size: 64,
            avg_size: 256,
            max_size: 1024,
        };
        let mut x = 99u64;
        let data: Vec<u8> = (0..100_000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        let c = RabinChunker::new(params);
        let reference = |d: &[u8]| -> usize {
            let tab = RABIN_TABLES;
            let mut fp = 0;
            for i in 0..d.len().min(params.max_size) {
                fp = if i < RABIN_WINDOW {
                    tab.append(fp, d[i])
                } else {
                    tab.slide(fp, d[i - RABIN_WINDOW], d[i])
                };
                if i + 1 >= params.min_size && fp & 255 == 255 {
                    return i + 1;
                }
            }
            d.len().min(params.max_size)
        };
        let mut pos = 0;
        for r in chunk_all(&c, &data) {
            assert_eq!(r.start, pos);
            assert_eq!(r.len(), reference(&data[pos..]));
            pos = r.end;
        }
        assert_eq!(pos, data.len());
    }

    #[test]
    fn short_inputs() {
        let c = RabinChunker::new(ChunkerParams::default());
        assert_eq!(c.next_chunk_len(&[1]), 1);
        assert_eq!(c.next_chunk_len(&[0; 2048]), 2048);
        assert_eq!(c.next_chunk_len(&[0; 2049]), 2049);
        assert_eq!(c.next_chunk_len(&vec![0; 100_000]), 65536);
    }
}
