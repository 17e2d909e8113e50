//! Broder's N-transform super-features (Finesse §3, Algorithm 1), the baseline sketch.
//!
//! At every byte position `j` of the chunk, take the Rabin fingerprint `fp_j` of the 48-byte
//! window ending at `j` (the chunker's fingerprint: [`RABIN_TABLES`]; the first 47 windows are
//! the shorter prefixes). Feature `i` (for `i < N = M * K`) is
//! `max_j ((m_i * fp_j + a_i) mod 2^32)`, computed on the low 32 bits of `fp_j`; SF `x` hashes
//! features `x*K .. x*K + K` ([`group_features`]). SF-4F is `M = 3, K = 4` (SIDC, Finesse),
//! SF-2F is `M = 3, K = 2` (DARE).
//!
//! # Constants
//!
//! `m_i` and `a_i` are the low 32 bits of [`transform_constants`]`(`[`NTRANSFORM_SEED`]`)`:
//! splitmix64 outputs, multipliers forced odd (so each transform is a permutation of the
//! 32-bit values, as min-wise hashing wants). Fixed forever: they decide every sketch.
//!
//! # Speed
//!
//! The transforms run in passes of a compile-time width `W` (6 or 12 for the standard
//! configurations, else 4, 8, 12 or 16 with padding lanes discarded), so the per-byte update
//! is a fixed-size array loop the compiler vectorises. A larger N makes several passes over the
//! chunk, each recomputing the (cheaper) Rabin fingerprints. This is the honest baseline:
//! per byte one Rabin step plus N multiplies, adds and maxima, as the paper counts.

use super::{group_features, transform_constants, SketchParams, Sketcher, SuperFeatures};
use super::{MAX_FEATURES, MAX_FEATURES_PER_SF};
use crate::chunker::rabin::{RABIN_TABLES, RABIN_WINDOW};

/// Seed of the transform constants: the ASCII bytes of `"ntransf\0"`.
pub const NTRANSFORM_SEED: u64 = 0x6e74_7261_6e73_6600;

/// Padding so a pass of width 16 may start anywhere below [`MAX_FEATURES`].
const PADDED: usize = MAX_FEATURES + 16;

/// The 32-bit transform constants `(m, a)`, padded; computed at compile time.
const CONSTANTS: &([u32; PADDED], [u32; PADDED]) = &{
    let (m64, a64) = transform_constants(NTRANSFORM_SEED);
    let mut m = [1u32; PADDED];
    let mut a = [0u32; PADDED];
    let mut i = 0;
    while i < MAX_FEATURES {
        m[i] = m64[i] as u32;
        a[i] = a64[i] as u32;
        i += 1;
    }
    (m, a)
};

/// N-transform super-features over 48-byte Rabin fingerprints.
#[derive(Clone, Debug)]
pub struct NTransformSketcher {
    params: SketchParams,
}

impl NTransformSketcher {
    /// Builds the sketcher; `params` should be checked by [`super::new_sketcher`] (larger
    /// values are clamped to 8 SFs of 16 features).
    pub fn new(params: SketchParams) -> Self {
        NTransformSketcher { params }
    }

    /// The `N = M * K` features of `chunk` (Algorithm 1), in order.
    pub fn features(&self, chunk: &[u8]) -> Vec<u32> {
        let n = self.feature_count();
        let mut out = Vec::with_capacity(n + 16);
        while out.len() < n {
            let done = out.len();
            let rest = n - done;
            match rest {
                6 => out.extend_from_slice(&pass::<6>(chunk, done)),
                12 => out.extend_from_slice(&pass::<12>(chunk, done)),
                1..=4 => out.extend_from_slice(&pass::<4>(chunk, done)),
                5..=8 => out.extend_from_slice(&pass::<8>(chunk, done)),
                9..=12 => out.extend_from_slice(&pass::<12>(chunk, done)),
                _ => out.extend_from_slice(&pass::<16>(chunk, done)),
            }
        }
        out.truncate(n);
        out
    }

    fn shape(&self) -> (usize, usize) {
        (
            self.params.sf_count.clamp(1, super::MAX_SF_COUNT),
            self.params.features_per_sf.clamp(1, MAX_FEATURES_PER_SF),
        )
    }

    fn feature_count(&self) -> usize {
        let (m, k) = self.shape();
        m * k
    }
}

/// One pass over the chunk: features `first .. first + W`. `first + W <= PADDED` holds for
/// every call from [`NTransformSketcher::features`]; `first` is clamped anyway so that the
/// constant slices are always in bounds.
#[inline(always)]
fn pass<const W: usize>(chunk: &[u8], first: usize) -> [u32; W] {
    let (m_all, a_all) = CONSTANTS;
    let first = first.min(PADDED - W);
    let mut m = [1u32; W];
    let mut a = [0u32; W];
    m.copy_from_slice(&m_all[first..first + W]);
    a.copy_from_slice(&a_all[first..first + W]);
    let tab = RABIN_TABLES;
    let mut feat = [0u32; W];
    let update = |feat: &mut [u32; W], fp: u64| {
        let x = fp as u32;
        for i in 0..W {
            feat[i] = feat[i].max(m[i].wrapping_mul(x).wrapping_add(a[i]));
        }
    };
    let head = chunk.len().min(RABIN_WINDOW);
    let mut fp = 0u64;
    for &b in &chunk[..head] {
        fp = tab.append(fp, b);
        update(&mut feat, fp);
    }
    for (&b, &out) in chunk[head..].iter().zip(chunk) {
        fp = tab.slide(fp, out, b);
        update(&mut feat, fp);
    }
    feat
}

impl Sketcher for NTransformSketcher {
    fn sketch(&self, chunk: &[u8]) -> SuperFeatures {
        let f: Vec<u64> = self.features(chunk).into_iter().map(u64::from).collect();
        let (m, k) = self.shape();
        group_features(&f, m, k)
    }

    fn params(&self) -> SketchParams {
        self.params
    }

    fn name(&self) -> &'static str {
        "ntransform"
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{random_chunk, similarity_rates, Rng};
    use super::*;

    /// Algorithm 1 written plainly: a fresh window fingerprint at every position.
    fn reference(chunk: &[u8], n: usize) -> Vec<u32> {
        let (m, a) = CONSTANTS;
        let mut feat = vec![0u32; n];
        for j in 0..chunk.len() {
            let lo = (j + 1).saturating_sub(RABIN_WINDOW);
            let fp = RABIN_TABLES.fingerprint(&chunk[lo..=j]) as u32;
            for i in 0..n {
                feat[i] = feat[i].max(m[i].wrapping_mul(fp).wrapping_add(a[i]));
            }
        }
        feat
    }

    #[test]
    fn matches_algorithm_1() {
        let mut rng = Rng(3);
        for (len, k) in [(0, 4), (30, 4), (500, 4), (3000, 2), (999, 5), (1200, 16)] {
            let chunk = random_chunk(&mut rng, len);
            let s = NTransformSketcher::new(SketchParams {
                sf_count: 3,
                features_per_sf: k,
            });
            assert_eq!(
                s.features(&chunk),
                reference(&chunk, 3 * k),
                "len {len} k {k}"
            );
        }
        let s = NTransformSketcher::new(SketchParams {
            sf_count: 8,
            features_per_sf: 16,
        });
        let chunk = random_chunk(&mut rng, 300);
        assert_eq!(s.features(&chunk), reference(&chunk, 128));
    }

    #[test]
    fn constants_are_pinned() {
        let (m, a) = CONSTANTS;
        assert!(m[..MAX_FEATURES].iter().all(|x| x % 2 == 1));
        let mut st = NTRANSFORM_SEED;
        let m0 = crate::chunker::gear::splitmix64(&mut st) | 1;
        let a0 = crate::chunker::gear::splitmix64(&mut st);
        assert_eq!((m[0], a[0]), (m0 as u32, a0 as u32));
    }

    #[test]
    fn detects_edited_chunks() {
        for k in [4, 2] {
            let s = NTransformSketcher::new(SketchParams {
                sf_count: 3,
                features_per_sf: k,
            });
            let (hit, false_pos) = similarity_rates(&s, 200, 42);
            eprintln!("ntransform 3x{k}: detected {hit:.3}, false positives {false_pos:.5}");
            // Measured (seed 42): see `measure_detection` in sketch/mod.rs for the sweep.
            assert!(hit >= 0.95, "3x{k}: {hit}");
            assert!(false_pos < 0.001, "3x{k}: {false_pos}");
        }
    }
}
