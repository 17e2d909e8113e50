//! Resemblance sketches: super-features that similar chunks share.
//!
//! A [`Sketcher`] maps a chunk to M super-features ([`SuperFeatures`]); two chunks that share
//! any super-feature are considered similar, and one may be delta-encoded against the other.
//! Every method extracts `N = M * K` features from the chunk and hashes them, K at a time, into
//! the M super-features (xxh3 of the K features' little-endian bytes, seeded with the SF's
//! index; see [`group_features`]). Implementations, one per file:
//! - [`ntransform`]: Broder's N-transform super-features (Finesse §3, Algorithm 1), the
//!   baseline: a 48-byte Rabin fingerprint at every byte, N linear transforms of each.
//! - [`finesse`]: Finesse (FAST'19 §4, Algorithm 2 and Figure 3): one max Rabin fingerprint
//!   per fixed-size subchunk, rank-wise grouping.
//! - [`odess`]: Odess content-defined sampling (Zhang et al., TPDS'21): a Gear hash at every
//!   byte, the N transforms only at the ~1/128 positions the hash selects.
//!
//! Pairing a chunk with a base by its super-features is [`first_fit`]'s [`FirstFitIndex`].
//!
//! All constants (Rabin polynomial, Gear tables, transform multipliers and addends, hash seeds)
//! are fixed in code, so a chunk has the same sketch in every process, forever: the repository
//! stores sketches and compares them across runs.

pub mod finesse;
pub mod first_fit;
pub mod ntransform;
pub mod odess;

pub use first_fit::{FirstFitIndex, SketchKeep};

use serde::{Deserialize, Serialize};

/// The M super-features of one chunk, in a fixed order (SF i is only ever compared with SF i).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct SuperFeatures(pub Vec<u64>);

impl SuperFeatures {
    /// Whether any super-feature is equal in the same position.
    pub fn shares_any(&self, other: &SuperFeatures) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a == b)
    }
}

/// Computes the super-features of a chunk. Pure and deterministic: constants are fixed in code.
pub trait Sketcher: Send + Sync {
    /// The chunk's super-features (`params().sf_count` of them).
    fn sketch(&self, chunk: &[u8]) -> SuperFeatures;
    /// The sketch parameters.
    fn params(&self) -> SketchParams;
    /// The method name used on the command line and in benchmarks.
    fn name(&self) -> &'static str;
}

/// Number of super-features and features per super-feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SketchParams {
    /// M: super-features per chunk.
    pub sf_count: usize,
    /// K: features grouped into each super-feature.
    pub features_per_sf: usize,
}

impl Default for SketchParams {
    /// 3 super-features of 4 features each (SF-4F, as in SIDC and Finesse).
    fn default() -> Self {
        SketchParams {
            sf_count: 3,
            features_per_sf: 4,
        }
    }
}

/// Which sketch method; recorded in the repository config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SketchKind {
    /// Broder's N-transform super-features.
    NTransform,
    /// Finesse.
    Finesse,
    /// Odess.
    Odess,
}

impl SketchKind {
    /// All kinds.
    pub const ALL: [SketchKind; 3] = [
        SketchKind::NTransform,
        SketchKind::Finesse,
        SketchKind::Odess,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SketchKind::NTransform => "ntransform",
            SketchKind::Finesse => "finesse",
            SketchKind::Odess => "odess",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Invalid sketch parameters.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SketchError {
    /// M or K out of range.
    #[error("invalid sketch parameters: {0}")]
    InvalidParams(&'static str),
}

/// Builds the sketcher of `kind` with `params`.
///
/// # Errors
///
/// [`SketchError::InvalidParams`] unless `1 <= M <= 8` and `1 <= K <= 16`.
pub fn new_sketcher(
    kind: SketchKind,
    params: SketchParams,
) -> Result<Box<dyn Sketcher>, SketchError> {
    if !(1..=MAX_SF_COUNT).contains(&params.sf_count)
        || !(1..=MAX_FEATURES_PER_SF).contains(&params.features_per_sf)
    {
        return Err(SketchError::InvalidParams(
            "need 1 <= M <= 8 and 1 <= K <= 16",
        ));
    }
    Ok(match kind {
        SketchKind::NTransform => Box::new(ntransform::NTransformSketcher::new(params)),
        SketchKind::Finesse => Box::new(finesse::FinesseSketcher::new(params)),
        SketchKind::Odess => Box::new(odess::OdessSketcher::new(params)),
    })
}

/// Largest supported M (super-features per chunk).
pub const MAX_SF_COUNT: usize = 8;

/// Largest supported K (features per super-feature).
pub const MAX_FEATURES_PER_SF: usize = 16;

/// Largest supported N = M * K (features per chunk).
pub const MAX_FEATURES: usize = MAX_SF_COUNT * MAX_FEATURES_PER_SF;

/// Hashes features into super-features: SF `j` is xxh3-64, seeded with `j`, of the
/// little-endian bytes of `features[j * k .. (j + 1) * k]` (as Finesse equation (2), with xxh3
/// in place of a Rabin hash of the concatenation). Extra features beyond `m * k` are ignored
/// and missing ones count as zero, so this never panics.
pub fn group_features(features: &[u64], m: usize, k: usize) -> SuperFeatures {
    let k = k.min(MAX_FEATURES_PER_SF);
    let mut buf = [0u8; MAX_FEATURES_PER_SF * 8];
    SuperFeatures(
        (0..m)
            .map(|j| {
                for (i, slot) in buf.chunks_exact_mut(8).take(k).enumerate() {
                    let f = features.get(j * k + i).copied().unwrap_or(0);
                    slot.copy_from_slice(&f.to_le_bytes());
                }
                xxhash_rust::xxh3::xxh3_64_with_seed(&buf[..k * 8], j as u64)
            })
            .collect(),
    )
}

/// Fixed constants of the linear transforms `m_i * x + a_i` used by N-transform and Odess: the
/// splitmix64 sequence from `seed` (the `i`-th pair takes outputs `2i` and `2i + 1`), each
/// multiplier forced odd so that every transform is a bijection. Evaluated at compile time.
pub const fn transform_constants(seed: u64) -> ([u64; MAX_FEATURES], [u64; MAX_FEATURES]) {
    let mut state = seed;
    let mut m = [0u64; MAX_FEATURES];
    let mut a = [0u64; MAX_FEATURES];
    let mut i = 0;
    while i < MAX_FEATURES {
        m[i] = crate::chunker::gear::splitmix64(&mut state) | 1;
        a[i] = crate::chunker::gear::splitmix64(&mut state);
        i += 1;
    }
    (m, a)
}

#[cfg(test)]
pub(crate) mod testutil {
    //! A generated corpus for the similarity tests of every method.
    use super::*;

    /// xorshift64 stream.
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    pub fn random_chunk(rng: &mut Rng, len: usize) -> Vec<u8> {
        (0..len).map(|_| (rng.next() >> 32) as u8).collect()
    }

    /// Rates measured on `n` pseudo-random 8 KiB chunks, each with 1..=8 scattered byte
    /// substitutions: (fraction of edited chunks sharing >= 1 SF with their original,
    /// fraction of unrelated pairs sharing >= 1 SF).
    pub fn similarity_rates(s: &dyn Sketcher, n: usize, seed: u64) -> (f64, f64) {
        let mut rng = Rng(seed | 1);
        let originals: Vec<Vec<u8>> = (0..n).map(|_| random_chunk(&mut rng, 8192)).collect();
        let sketches: Vec<SuperFeatures> = originals.iter().map(|c| s.sketch(c)).collect();
        let mut detected = 0;
        for (i, orig) in originals.iter().enumerate() {
            let mut edited = orig.clone();
            let edits = 1 + (i % 8);
            for _ in 0..edits {
                let pos = (rng.next() % edited.len() as u64) as usize;
                edited[pos] = edited[pos].wrapping_add(1 + (rng.next() % 255) as u8);
            }
            assert_eq!(s.sketch(orig), sketches[i], "deterministic");
            if s.sketch(&edited).shares_any(&sketches[i]) {
                detected += 1;
            }
        }
        let mut false_pos = 0;
        let mut pairs = 0;
        for i in 0..n {
            for j in i + 1..n {
                pairs += 1;
                if sketches[i].shares_any(&sketches[j]) {
                    false_pos += 1;
                }
            }
        }
        (detected as f64 / n as f64, false_pos as f64 / pairs as f64)
    }

    /// Detection rate by number of edits (1..=8), over `n` chunks per count.
    pub fn rate_by_edits(s: &dyn Sketcher, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng(seed | 1);
        (1..=8)
            .map(|edits| {
                let mut hit = 0;
                for _ in 0..n {
                    let orig = random_chunk(&mut rng, 8192);
                    let mut edited = orig.clone();
                    for _ in 0..edits {
                        let pos = (rng.next() % 8192) as usize;
                        edited[pos] = edited[pos].wrapping_add(1 + (rng.next() % 255) as u8);
                    }
                    if s.sketch(&edited).shares_any(&s.sketch(&orig)) {
                        hit += 1;
                    }
                }
                hit as f64 / n as f64
            })
            .collect()
    }

    /// Detection rate when one run of 1..=16 bytes is inserted at a random position (shifting
    /// everything after it), over `n` chunks.
    pub fn rate_with_insertion(s: &dyn Sketcher, n: usize, seed: u64) -> f64 {
        let mut rng = Rng(seed | 1);
        let mut hit = 0;
        for _ in 0..n {
            let orig = random_chunk(&mut rng, 8192);
            let pos = (rng.next() % 8192) as usize;
            let ins_len = 1 + (rng.next() % 16) as usize;
            let mut edited = orig[..pos].to_vec();
            edited.extend(random_chunk(&mut rng, ins_len));
            edited.extend_from_slice(&orig[pos..]);
            if s.sketch(&edited).shares_any(&s.sketch(&orig)) {
                hit += 1;
            }
        }
        hit as f64 / n as f64
    }

    /// Sketches of degenerate inputs: no panic, the right number of SFs.
    pub fn check_edge_cases(s: &dyn Sketcher) {
        let m = s.params().sf_count;
        for len in [0usize, 1, 2, 5, 11, 12, 13, 47, 48, 49, 100, 1000, 70_000] {
            for fill in [0u8, 0xff] {
                let sf = s.sketch(&vec![fill; len]);
                assert_eq!(sf.0.len(), m, "len {len}");
            }
            let mut rng = Rng(len as u64 + 1);
            let c = random_chunk(&mut rng, len);
            assert_eq!(s.sketch(&c), s.sketch(&c.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factory_checks_params() {
        for kind in SketchKind::ALL {
            assert!(new_sketcher(kind, SketchParams::default()).is_ok());
            let bad = SketchParams {
                sf_count: 0,
                features_per_sf: 4,
            };
            assert!(new_sketcher(kind, bad).is_err());
            let bad = SketchParams {
                sf_count: 3,
                features_per_sf: 17,
            };
            assert!(new_sketcher(kind, bad).is_err());
            let s = new_sketcher(kind, SketchParams::default()).unwrap();
            assert_eq!(s.name(), kind.name());
        }
    }

    #[test]
    fn every_shape_works() {
        for kind in SketchKind::ALL {
            for m in 1..=MAX_SF_COUNT {
                for k in [1, 2, 3, 4, 5, 7, 8, 16] {
                    let p = SketchParams {
                        sf_count: m,
                        features_per_sf: k,
                    };
                    let s = new_sketcher(kind, p).unwrap();
                    testutil::check_edge_cases(s.as_ref());
                }
            }
        }
    }

    /// The measurement behind the thresholds of the per-method tests (run with
    /// `cargo test -p dedelta-core measure_detection -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn measure_detection() {
        let methods = [
            (SketchKind::NTransform, 4),
            (SketchKind::NTransform, 2),
            (SketchKind::Finesse, 4),
            (SketchKind::Finesse, 2),
            (SketchKind::Odess, 4),
            (SketchKind::Odess, 2),
        ];
        for (kind, k) in methods {
            let p = SketchParams {
                sf_count: 3,
                features_per_sf: k,
            };
            let s = new_sketcher(kind, p).unwrap();
            let by_edits = testutil::rate_by_edits(s.as_ref(), 500, 1234);
            let mixed: Vec<(f64, f64)> = (0..5)
                .map(|seed| testutil::similarity_rates(s.as_ref(), 200, seed * 7 + 1))
                .collect();
            let min_hit = mixed.iter().map(|x| x.0).fold(1.0, f64::min);
            let max_fp = mixed.iter().map(|x| x.1).fold(0.0, f64::max);
            let insertion = testutil::rate_with_insertion(s.as_ref(), 1000, 99);
            let rates: Vec<String> = by_edits.iter().map(|r| format!("{r:.3}")).collect();
            eprintln!(
                "{} 3x{k}: by edits 1..8 [{}]; 200-chunk corpus over 5 seeds: min {min_hit:.3}, \
                 max false positives {max_fp:.5}; one insertion: {insertion:.3}",
                kind.name(),
                rates.join(" ")
            );
        }
    }

    #[test]
    fn grouping_is_positional() {
        let f: Vec<u64> = (0..12).collect();
        let a = group_features(&f, 3, 4);
        let mut g = f.clone();
        g[5] = 99;
        let b = group_features(&g, 3, 4);
        assert_eq!(a.0[0], b.0[0]);
        assert_ne!(a.0[1], b.0[1]);
        assert_eq!(a.0[2], b.0[2]);
        // Equal features in different SF slots hash differently (the seed is the index).
        let z = group_features(&[0; 8], 2, 4);
        assert_ne!(z.0[0], z.0[1]);
    }
}
