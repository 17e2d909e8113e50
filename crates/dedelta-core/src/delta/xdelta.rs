//! The Xdelta-style baseline: a hash index of base windows and a byte-wise sliding window
//! over the target (Ddelta §2.2, Fig. 1(a)).
//!
//! The base is indexed at every `step`-th position by a hash of the `window` bytes there;
//! the target is hashed at *every* position that is not already covered by a match, each hit is
//! verified and extended greedily forward and backward, and the result is Copy/Insert in the
//! shared format. The defaults, a 9-byte window and a step of 8, are those of the matcher
//! xdelta3 uses at its default compression level, `-3` (its "fast" matcher, `LLOOK 9`,
//! `LSTEP 8`): any match of 16 bytes or more is found. `XdeltaCodec::new(9, 3)` is xdelta3's
//! level 6 matcher, a little smaller and slower.
//!
//! What is left out of xdelta3, on purpose: matches against the target itself (our format has
//! no target copies), lazy matching and the VCDIFF instruction optimiser. What is kept honest:
//! the window hash is two unaligned loads and two multiplies with no serial dependency, so the
//! per-byte scan runs at full speed, and the index is a flat table rebuilt per call.

use super::format::Writer;
use super::scan::{common_prefix, common_suffix};
use super::{DeltaCodec, DeltaError};

/// Bytes hashed per base window: xdelta3's `LLOOK` at its default level.
pub const DEFAULT_WINDOW: usize = 9;
/// Distance between indexed base windows: xdelta3's `LSTEP` at its default level.
pub const DEFAULT_STEP: usize = 8;

/// The Xdelta-style baseline codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdeltaCodec {
    window: usize,
    step: usize,
}

impl Default for XdeltaCodec {
    fn default() -> Self {
        XdeltaCodec {
            window: DEFAULT_WINDOW,
            step: DEFAULT_STEP,
        }
    }
}

impl XdeltaCodec {
    /// A baseline hashing `window`-byte windows of the base every `step` bytes.
    ///
    /// # Panics
    /// If `window` is outside `8..=16` or `step` is 0.
    pub fn new(window: usize, step: usize) -> Self {
        assert!((8..=16).contains(&window), "window must be 8..=16 bytes");
        assert!(step >= 1, "step must be at least 1");
        XdeltaCodec { window, step }
    }
}

#[inline(always)]
fn load(data: &[u8], at: usize) -> u64 {
    // Cannot fail: callers check `at + 8 <= data.len()`.
    u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"))
}

/// Hash of the window at `at` (`window` in 8..=16 bytes, read as two overlapping words).
#[inline(always)]
fn window_hash(data: &[u8], at: usize, window: usize, shift: u32) -> usize {
    let a = load(data, at);
    let b = load(data, at + window - 8);
    let h = (a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (h >> shift) as usize
}

impl DeltaCodec for XdeltaCodec {
    fn encode(&self, base: &[u8], target: &[u8], out: &mut Vec<u8>) {
        let w = self.window;
        let mut writer = Writer::new(out, target);
        if base.len() < w || target.len() < w {
            writer.finish();
            return;
        }
        // Index: slot -> base position + 1 (0 = empty); the last position hashed there wins.
        let positions = (base.len() - w) / self.step + 1;
        let bits = (positions * 2).next_power_of_two().max(64).trailing_zeros();
        let shift = 64 - bits;
        let mut table = vec![0u32; 1 << bits];
        let indexable = (base.len() - w + 1).min(u32::MAX as usize - 1);
        for p in (0..indexable).step_by(self.step) {
            table[window_hash(base, p, w, shift)] = p as u32 + 1;
        }

        let last = target.len() - w;
        let mut t = 0;
        while t <= last {
            let slot = table[window_hash(target, t, w, shift)];
            if slot != 0 {
                let b = slot as usize - 1;
                if load(base, b) == load(target, t)
                    && load(base, b + w - 8) == load(target, t + w - 8)
                {
                    let fwd = common_prefix(&target[t + w..], &base[b + w..]);
                    let back = common_suffix(&target[writer.cursor()..t], &base[..b]);
                    writer.copy(t - back, b - back, back + w + fwd);
                    t += w + fwd;
                    continue;
                }
            }
            t += 1;
        }
        writer.finish();
    }

    fn decode(&self, base: &[u8], delta: &[u8], out: &mut Vec<u8>) -> Result<(), DeltaError> {
        super::format::decode(base, delta, out)
    }

    fn name(&self) -> &'static str {
        "xdelta"
    }
}
