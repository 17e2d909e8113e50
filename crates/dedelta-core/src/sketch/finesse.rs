//! Finesse (Zhang et al., FAST'19, §4): fine-grained feature locality.
//!
//! # Feature extraction (Algorithm 2)
//!
//! The chunk of `L` bytes is split into `N = M * K` fixed-size subchunks, subchunk `s` covering
//! bytes `s*L/N .. (s+1)*L/N` (sizes differ by at most one byte; Algorithm 2's `L/N` would
//! leave the last `L mod N` bytes out). Feature `s` is the largest 48-byte Rabin fingerprint
//! ([`RABIN_TABLES`], the chunker's polynomial) over the positions of subchunk `s`, with the
//! rolling window restarted at the subchunk's start (its first 47 windows are the shorter
//! prefixes). So a feature depends on its subchunk's bytes only: an edit changes at most the
//! feature of the subchunk it falls in, which is the locality Finesse relies on. No linear
//! transforms: one comparison per byte instead of N multiply-add-compare steps.
//!
//! # Grouping (§4, Figure 3)
//!
//! The N features are divided into K contiguous sets of M features (features `t*M .. t*M + M`
//! form set `t`), each set is sorted by value, and SF `r` is made of the `r`-th largest
//! feature of every set, in set order, hashed as in [`group_features`]. For M = 3, K = 4 this is
//! Figure 3: twelve subchunks, four sets of three, SF 0 = the four set maxima.
//!
//! # Speed
//!
//! Each subchunk's rolling hash is an independent dependency chain (shift, table load, XOR per
//! byte), so four subchunks are hashed in one interleaved loop ([`LANES`]) and the processor
//! overlaps the chains. The features are exactly those of hashing subchunk after subchunk.
//!
//! The alternative rejected: windows crossing subchunk starts (the chunk-global rolling hash
//! of Algorithm 2 read literally). It ties feature `s` to the last 47 bytes of subchunk
//! `s - 1` and costs a 47-byte warm-up per subchunk in the interleaved loop, for no gain.

use super::{group_features, SketchParams, Sketcher, SuperFeatures};
use super::{MAX_FEATURES, MAX_FEATURES_PER_SF, MAX_SF_COUNT};
use crate::chunker::rabin::{RABIN_TABLES, RABIN_WINDOW};

/// Subchunks hashed together in one interleaved loop.
pub const LANES: usize = 4;

/// Finesse super-features.
#[derive(Clone, Debug)]
pub struct FinesseSketcher {
    params: SketchParams,
}

impl FinesseSketcher {
    /// Builds the sketcher; `params` should be checked by [`super::new_sketcher`] (larger
    /// values are clamped to 8 SFs of 16 features).
    pub fn new(params: SketchParams) -> Self {
        FinesseSketcher { params }
    }

    fn shape(&self) -> (usize, usize) {
        (
            self.params.sf_count.clamp(1, MAX_SF_COUNT),
            self.params.features_per_sf.clamp(1, MAX_FEATURES_PER_SF),
        )
    }

    /// The `N = M * K` subchunk features of `chunk` (Algorithm 2), in subchunk order.
    pub fn features(&self, chunk: &[u8]) -> Vec<u64> {
        let (m, k) = self.shape();
        let n = m * k;
        let bound = |s: usize| s * chunk.len() / n;
        let mut out = Vec::with_capacity(n);
        let mut s = 0;
        while s + LANES <= n {
            let sub = |l: usize| &chunk[bound(s + l)..bound(s + l + 1)];
            out.extend_from_slice(&max_fingerprints_4([sub(0), sub(1), sub(2), sub(3)]));
            s += LANES;
        }
        while s < n {
            out.push(max_fingerprint(&chunk[bound(s)..bound(s + 1)], 0, 0, 0));
            s += 1;
        }
        out
    }
}

/// The largest rolling Rabin fingerprint over `sub[from..]`, the rolling state `fp` being that
/// of the positions before `from` and `max` their largest fingerprint. An empty string gives
/// `max`.
fn max_fingerprint(sub: &[u8], from: usize, mut fp: u64, mut max: u64) -> u64 {
    let tab = RABIN_TABLES;
    for (i, &b) in sub.iter().enumerate().skip(from) {
        fp = match i.checked_sub(RABIN_WINDOW) {
            None => tab.append(fp, b),
            Some(o) => tab.slide(fp, sub[o], b),
        };
        max = max.max(fp);
    }
    max
}

/// [`max_fingerprint`] of four strings at once, their four rolling hashes interleaved in one
/// loop over the common length (each string is then finished on its own).
fn max_fingerprints_4(subs: [&[u8]; 4]) -> [u64; 4] {
    let tab = RABIN_TABLES;
    let n = subs.iter().map(|s| s.len()).min().unwrap_or(0);
    let (s0, s1, s2, s3) = (&subs[0][..n], &subs[1][..n], &subs[2][..n], &subs[3][..n]);
    let (mut f0, mut f1, mut f2, mut f3) = (0u64, 0u64, 0u64, 0u64);
    let (mut m0, mut m1, mut m2, mut m3) = (0u64, 0u64, 0u64, 0u64);
    let head = n.min(RABIN_WINDOW);
    for i in 0..head {
        f0 = tab.append(f0, s0[i]);
        f1 = tab.append(f1, s1[i]);
        f2 = tab.append(f2, s2[i]);
        f3 = tab.append(f3, s3[i]);
        m0 = m0.max(f0);
        m1 = m1.max(f1);
        m2 = m2.max(f2);
        m3 = m3.max(f3);
    }
    // Byte `i` enters and byte `i - 48` leaves each window: both ends of 49-byte windows,
    // one pointer per string and no bounds checks.
    let w = RABIN_WINDOW + 1;
    let windows = s0
        .windows(w)
        .zip(s1.windows(w))
        .zip(s2.windows(w))
        .zip(s3.windows(w));
    for (((w0, w1), w2), w3) in windows {
        f0 = tab.slide(f0, w0[0], w0[RABIN_WINDOW]);
        f1 = tab.slide(f1, w1[0], w1[RABIN_WINDOW]);
        f2 = tab.slide(f2, w2[0], w2[RABIN_WINDOW]);
        f3 = tab.slide(f3, w3[0], w3[RABIN_WINDOW]);
        m0 = m0.max(f0);
        m1 = m1.max(f1);
        m2 = m2.max(f2);
        m3 = m3.max(f3);
    }
    // The few bytes by which a string is longer than the shortest.
    [
        max_fingerprint(subs[0], n, f0, m0),
        max_fingerprint(subs[1], n, f1, m1),
        max_fingerprint(subs[2], n, f2, m2),
        max_fingerprint(subs[3], n, f3, m3),
    ]
}

/// Figure 3's rank-wise grouping: `features` (N = m * k of them) are cut into `k` contiguous
/// sets of `m`; SF `r` takes the `r`-th largest of every set.
pub fn rank_group(features: &[u64], m: usize, k: usize) -> SuperFeatures {
    let m = m.clamp(1, MAX_SF_COUNT);
    let k = k.clamp(1, MAX_FEATURES_PER_SF);
    let n = m * k; // <= MAX_FEATURES: every index below is in bounds
    let mut sets = [0u64; MAX_FEATURES];
    for (dst, src) in sets.iter_mut().zip(features).take(n) {
        *dst = *src;
    }
    for set in sets[..n].chunks_exact_mut(m) {
        set.sort_unstable_by(|a, b| b.cmp(a));
    }
    let mut grouped = [0u64; MAX_FEATURES];
    for r in 0..m {
        for t in 0..k {
            // The feature of rank r in set t goes to SF r, position t.
            grouped[r * k + t] = sets[t * m + r];
        }
    }
    group_features(&grouped[..n], m, k)
}

impl Sketcher for FinesseSketcher {
    fn sketch(&self, chunk: &[u8]) -> SuperFeatures {
        let (m, k) = self.shape();
        rank_group(&self.features(chunk), m, k)
    }

    fn params(&self) -> SketchParams {
        self.params
    }

    fn name(&self) -> &'static str {
        "finesse"
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{random_chunk, similarity_rates, Rng};
    use super::*;

    /// Algorithm 2 written plainly, subchunk after subchunk, a fresh fingerprint per window.
    fn reference(chunk: &[u8], n: usize) -> Vec<u64> {
        (0..n)
            .map(|s| {
                let sub = &chunk[s * chunk.len() / n..(s + 1) * chunk.len() / n];
                (0..sub.len())
                    .map(|j| {
                        let lo = (j + 1).saturating_sub(RABIN_WINDOW);
                        RABIN_TABLES.fingerprint(&sub[lo..=j])
                    })
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    #[test]
    fn matches_algorithm_2() {
        let mut rng = Rng(5);
        for (len, m, k) in [
            (0, 3, 4),
            (7, 3, 4),
            (100, 3, 4),
            (8192, 3, 4),
            (8191, 3, 2),
            (5000, 5, 3),
            (2000, 1, 1),
        ] {
            let chunk = random_chunk(&mut rng, len);
            let s = FinesseSketcher::new(SketchParams {
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
    fn figure_3_grouping() {
        // Sets {F0 < F2 < F1}, {F3..F5}, {F6..F8}, {F11 < F10 < F9} as in the paper's example
        // (the middle sets' orders are ours).
        let f = [10, 30, 20, 50, 40, 45, 70, 60, 65, 99, 95, 90];
        let sf = rank_group(&f, 3, 4);
        let expect = group_features(&[30, 50, 70, 99, 20, 45, 65, 95, 10, 40, 60, 90], 3, 4);
        assert_eq!(sf, expect);
    }

    #[test]
    fn an_edit_changes_one_feature_at_most() {
        let mut rng = Rng(77);
        let chunk = random_chunk(&mut rng, 8192);
        let s = FinesseSketcher::new(SketchParams::default());
        let a = s.features(&chunk);
        let mut edited = chunk.clone();
        edited[4000] ^= 0x5a;
        let b = s.features(&edited);
        let changed: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
        // Byte 4000 lies in subchunk 4000 * 12 / 8192 = 5.
        assert!(changed.is_empty() || changed == [5], "{changed:?}");
    }

    #[test]
    fn detects_edited_chunks() {
        for k in [4, 2] {
            let s = FinesseSketcher::new(SketchParams {
                sf_count: 3,
                features_per_sf: k,
            });
            let (hit, false_pos) = similarity_rates(&s, 200, 42);
            eprintln!("finesse 3x{k}: detected {hit:.3}, false positives {false_pos:.5}");
            // Measured (seed 42): see `measure_detection` in sketch/mod.rs for the sweep.
            assert!(hit >= 0.85, "3x{k}: {hit}");
            assert!(false_pos < 0.001, "3x{k}: {false_pos}");
        }
    }
}
