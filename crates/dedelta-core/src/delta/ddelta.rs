//! Ddelta (Xia et al., Performance Evaluation 2014), §3.1–3.5 and Algorithm 1.
//!
//! 1. **Chunk-level greedy scan** (§3.3, Step 1): the common prefix and suffix of base and
//!    target become Copies without any hashing; only the middle is chunked.
//! 2. **Gear chunking and fingerprints** (§3.2, Step 2): the base middle is cut into strings
//!    (32 bytes on average) and their xxh3 fingerprints indexed; the target middle is cut the
//!    same way and each string is looked up, a hit being verified byte by byte.
//! 3. **String-level greedy scan** (§3.3, Step 3): a confirmed string is extended backward
//!    into the unmatched bytes before it, and when the string after a confirmed one is not a
//!    duplicate, the match is extended forward into it byte by byte (8 bytes per XOR).
//! 4. **Encoding** (§3.4, Step 4): merged Copy/Insert in the shared format.
//!
//! As in Algorithm 1 the whole target middle is chunked, string after string. A string that
//! follows a duplicate is first compared byte-wise with the base bytes that follow the
//! duplicate's match (the duplicate-adjacent scan of Step 3): when it matches whole, the Copy
//! simply grows and no fingerprint is needed; otherwise it is fingerprinted like any other,
//! and if that misses, the bytes it shares with the adjacent base bytes still extend the
//! previous Copy. Edelta ([`super::edelta`]) differs exactly here: it skips the chunking of
//! what follows a duplicate, where Ddelta still Gear-hashes every target byte.

use super::format::Writer;
use super::scan::{common_prefix, common_suffix};
use super::strings::{prefix_suffix, Cuts, StringIndex, StringParams};
use super::{DeltaCodec, DeltaError};
use xxhash_rust::xxh3::xxh3_64;

/// Average string length in bytes used by default (the paper's setting for chunk deltas).
pub const DEFAULT_AVG_STRING: usize = 32;

/// The Ddelta codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdeltaCodec {
    params: StringParams,
}

impl Default for DdeltaCodec {
    fn default() -> Self {
        Self::new(DEFAULT_AVG_STRING)
    }
}

impl DdeltaCodec {
    /// Ddelta with strings of `avg_string_bytes` on average (at least 8; smaller is raised).
    pub fn new(avg_string_bytes: usize) -> Self {
        DdeltaCodec {
            params: StringParams::new(avg_string_bytes),
        }
    }
}

impl DeltaCodec for DdeltaCodec {
    fn encode(&self, base: &[u8], target: &[u8], out: &mut Vec<u8>) {
        let p = self.params;
        let mut w = Writer::new(out, target);
        let (pre, suf) = prefix_suffix(base, target);
        let (t_end, b_end) = (target.len() - suf, base.len() - suf);
        w.copy(0, 0, pre);
        if t_end - pre >= p.min && b_end - pre >= p.min {
            let index = StringIndex::build(base, pre, b_end, p);
            let mut cuts = Cuts::new(target, pre, t_end, p);
            // While the strings since the last fingerprint hit keep matching right after it:
            // the base offset where the next string should continue.
            let mut follow: Option<usize> = None;
            while !cuts.done() {
                let s = cuts.start();
                let e = cuts.next_cut();
                let string = &target[s..e];
                // Step 3, forward: a string right after a duplicate is compared byte-wise with
                // the base right after the duplicate's match.
                let mut adjacent = 0;
                if let Some(bf) = follow {
                    adjacent = common_prefix(string, &base[bf..]);
                    if adjacent == string.len() {
                        w.copy(s, bf, adjacent);
                        follow = Some(bf + adjacent);
                        continue;
                    }
                }
                // Step 2: fingerprint, look up, verify.
                let hit = if string.len() > p.min {
                    index.find(xxh3_64(string), base, string)
                } else {
                    None
                };
                if let Some(b) = hit {
                    // Step 3, backward: into the unmatched bytes before the duplicate.
                    let back = common_suffix(&target[w.cursor()..s], &base[..b]);
                    w.copy(s - back, b - back, back + string.len());
                    follow = Some(b + string.len());
                } else if let Some(bf) = follow.take() {
                    // Step 3, forward, into a non-duplicate string: keep what matched.
                    w.copy(s, bf, adjacent);
                }
            }
        }
        w.copy(t_end, b_end, suf);
        w.finish();
    }

    fn decode(&self, base: &[u8], delta: &[u8], out: &mut Vec<u8>) -> Result<(), DeltaError> {
        super::format::decode(base, delta, out)
    }

    fn name(&self) -> &'static str {
        "ddelta"
    }
}
