//! Edelta (Xia et al., HotStorage'15: word-enlarging delta compression).
//!
//! Ddelta's pipeline ([`super::ddelta`]) with one change: as soon as a target string is
//! confirmed as a duplicate, the match is *enlarged* word by word (8 bytes per XOR) into the
//! bytes that follow, and the strings it swallows are neither chunked nor fingerprinted.
//! Chunking resumes where the enlargement stops. On similar chunks most of the target lies in
//! long runs that match the base, so Edelta hashes little more than the base and the bytes
//! around each edit, where Ddelta fingerprints every string.
//!
//! The enlargement stops at the exact differing byte (the XOR's trailing zeros give it for
//! free), and the backward scan of the next hit is byte-exact too, so the deltas are as small as
//! Ddelta's or smaller.

use super::format::Writer;
use super::scan::{common_prefix, common_suffix};
use super::strings::{prefix_suffix, Cuts, StringIndex, StringParams};
use super::{DeltaCodec, DeltaError};
use xxhash_rust::xxh3::xxh3_64;

/// Average string length in bytes used by default (as Ddelta).
pub const DEFAULT_AVG_STRING: usize = 32;

/// The Edelta codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdeltaCodec {
    params: StringParams,
}

impl Default for EdeltaCodec {
    fn default() -> Self {
        Self::new(DEFAULT_AVG_STRING)
    }
}

impl EdeltaCodec {
    /// Edelta with strings of `avg_string_bytes` on average (at least 8; smaller is raised).
    pub fn new(avg_string_bytes: usize) -> Self {
        EdeltaCodec {
            params: StringParams::new(avg_string_bytes),
        }
    }
}

impl DeltaCodec for EdeltaCodec {
    fn encode(&self, base: &[u8], target: &[u8], out: &mut Vec<u8>) {
        let p = self.params;
        let mut w = Writer::new(out, target);
        let (pre, suf) = prefix_suffix(base, target);
        let (t_end, b_end) = (target.len() - suf, base.len() - suf);
        w.copy(0, 0, pre);
        if t_end - pre >= p.min && b_end - pre >= p.min {
            let index = StringIndex::build(base, pre, b_end, p);
            let mut cuts = Cuts::new(target, pre, t_end, p);
            // Whether the next string starts at a cut point (and not where an enlargement
            // stopped, which the base has no reason to have cut at).
            let mut aligned = true;
            while !cuts.done() {
                let s = cuts.start();
                let e = cuts.next_cut();
                let string = &target[s..e];
                let hit = if aligned && string.len() > p.min {
                    index.find(xxh3_64(string), base, string)
                } else {
                    None
                };
                aligned = true;
                if let Some(b) = hit {
                    let back = common_suffix(&target[w.cursor()..s], &base[..b]);
                    // Word-enlarging: extend over the following bytes 8 at a time, without
                    // chunking or fingerprinting them.
                    let len =
                        string.len() + common_prefix(&target[e..t_end], &base[b + string.len()..]);
                    w.copy(s - back, b - back, back + len);
                    if s + len > e {
                        cuts.restart(s + len);
                        aligned = false;
                    }
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
        "edelta"
    }
}
