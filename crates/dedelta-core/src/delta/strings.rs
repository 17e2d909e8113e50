//! Gear-based string chunking and the fingerprint index of base strings, shared by Ddelta and
//! Edelta (Ddelta §3.1–3.2, Algorithms 1 and 2).
//!
//! A chunk is cut into *strings* where the Gear hash `h = (h << 1) + GEAR[byte]` (32-bit, as in
//! the paper) falls below a threshold: a condition on its most significant bits, as §3.2
//! prescribes. Because the hash shifts left by one per byte, it depends only on the last 32
//! bytes; restarting it 32 bytes before any position therefore reproduces the hash a
//! continuous scan would have, which lets Ddelta and Edelta chunk the target lazily (only
//! where it does not already match) and still cut where the base was cut.
//!
//! Two guards the paper leaves implicit: strings are longer than `avg / 4` bytes (a 2-byte
//! string is not worth a fingerprint and a Copy) and at most `avg * 8` (a low-entropy run would
//! otherwise become one huge string that a single edit spoils). The threshold is set so that
//! the mean string length, minimum included, is `avg`.
//!
//! Strings are fingerprinted with 64-bit xxh3 in place of Spooky (§3.1 allows any fast hash);
//! a matching fingerprint is always verified byte by byte before it becomes a Copy.

use super::scan::{common_prefix, common_suffix};
use xxhash_rust::xxh3::xxh3_64;

/// The Gear table: 256 fixed pseudo-random 32-bit values (splitmix64 from a fixed seed).
///
/// Only the encoder uses it, so changing it changes which deltas are written, never whether
/// old deltas decode.
pub(crate) static GEAR: [u32; 256] = gear_table(0x6464_656c_7461_2e31);

const fn gear_table(seed: u64) -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut state = seed;
    let mut i = 0;
    while i < 256 {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        table[i] = (z >> 32) as u32;
        i += 1;
    }
    table
}

/// Bytes of history the 32-bit Gear hash (and so a cut) depends on.
pub(crate) const GEAR_WINDOW: usize = 32;

/// String-size parameters derived from the average.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StringParams {
    /// Strings are longer than this, except the last of a region.
    pub min: usize,
    /// No string is longer.
    pub max: usize,
    /// A cut follows a byte whose Gear hash is below this.
    pub threshold: u32,
}

impl StringParams {
    /// Parameters for an average string of `avg` bytes (`avg >= 8`; smaller is raised).
    pub(crate) fn new(avg: usize) -> Self {
        let avg = avg.max(8);
        let min = avg / 4;
        // After `min` bytes each byte cuts with probability 1 / (avg - min): mean length avg.
        let threshold = (u64::from(u32::MAX) / (avg - min) as u64) as u32;
        StringParams {
            min,
            max: avg * 8,
            threshold,
        }
    }
}

/// One Gear step.
#[inline(always)]
fn roll(hash: u32, byte: u8) -> u32 {
    (hash << 1).wrapping_add(GEAR[usize::from(byte)])
}

/// The Gear hash of the `GEAR_WINDOW` bytes before `pos`: the state a continuous scan of
/// `data` would have just before `pos`.
#[inline]
pub(crate) fn warm_up(data: &[u8], pos: usize) -> u32 {
    let from = pos.saturating_sub(GEAR_WINDOW);
    data[from..pos].iter().fold(0u32, |h, &b| roll(h, b))
}

/// The Gear contributions of four bytes, to be added to `hash << 4`, and the hashes after
/// each of the four bytes.
///
/// Four steps of `h = (h << 1) + GEAR[b]` are `h4 = (h << 4) + k` with `k` independent of `h`:
/// computing each intermediate hash from `h` directly keeps the loop-carried dependency at one
/// shift and one add per four bytes instead of per byte. Each `k` is built from the one before
/// (a Gear step of its own, from zero): six operations where summing each one's shifted terms
/// took twelve; `bench delta` on two SQLAlchemy releases, Edelta 2,309-2,473 -> 2,507-2,625
/// MB/s (Redis dumps within noise). Tried and not kept: eight bytes per step (27 % slower on
/// the synthetic pairs of `cargo bench --bench delta`), and a bit mask of the cut candidates
/// in place of the `min` test (9 % faster there, 8-17 % slower on the SQLAlchemy pairs,
/// whose runs of low-entropy bytes rarely hold a candidate).
#[inline(always)]
fn roll4(hash: u32, bytes: &[u8]) -> [u32; 4] {
    let g = |i: usize| GEAR[usize::from(bytes[i])];
    let (t0, t1, t2, t3) = (g(0), g(1), g(2), g(3));
    let k1 = t0;
    let k2 = (k1 << 1).wrapping_add(t1);
    let k3 = (k2 << 1).wrapping_add(t2);
    let k4 = (k3 << 1).wrapping_add(t3);
    [
        (hash << 1).wrapping_add(k1),
        (hash << 2).wrapping_add(k2),
        (hash << 3).wrapping_add(k3),
        (hash << 4).wrapping_add(k4),
    ]
}

/// Gear chunking of `data[..end]` into strings (Algorithm 2, with the minimum and maximum
/// lengths above), one cut at a time.
///
/// The hash runs continuously over the region four bytes per step (see [`roll4`]) and the
/// cut test is one comparison per four bytes, so strings cost no loop restarts; only a quad
/// holding a cut candidate is looked at byte by byte.
pub(crate) struct Cuts<'a> {
    data: &'a [u8],
    end: usize,
    /// Bytes before `pos` have been hashed into `hash`.
    pos: usize,
    hash: u32,
    /// Start of the current string (the previous cut).
    start: usize,
    p: StringParams,
}

impl<'a> Cuts<'a> {
    /// Chunks `data[start..end]`, the hash warmed up on the bytes before `start`.
    pub(crate) fn new(data: &'a [u8], start: usize, end: usize, p: StringParams) -> Self {
        Cuts {
            data,
            end,
            pos: start,
            hash: warm_up(data, start),
            start,
            p,
        }
    }

    /// Starts over at `at` (after bytes that needed no chunking), warming the hash up again.
    pub(crate) fn restart(&mut self, at: usize) {
        self.pos = at;
        self.hash = warm_up(self.data, at);
        self.start = at;
    }

    /// Start of the next string (the end of the previous one).
    #[inline]
    pub(crate) fn start(&self) -> usize {
        self.start
    }

    /// Whether the region is exhausted.
    #[inline]
    pub(crate) fn done(&self) -> bool {
        self.start >= self.end
    }

    /// End of the string that starts at [`Cuts::start`]; requires `!self.done()`.
    #[inline]
    pub(crate) fn next_cut(&mut self) -> usize {
        let p = self.p;
        let max_end = (self.start + p.max).min(self.end);
        // A string ending before `min_end` would be no longer than `min`.
        let min_end = self.start + p.min + 1;
        let mut pos = self.pos;
        let mut hash = self.hash;
        while pos + 4 <= max_end {
            let hs = roll4(hash, &self.data[pos..pos + 4]);
            if hs[0].min(hs[1]).min(hs[2]).min(hs[3]) < p.threshold {
                for (i, &h) in hs.iter().enumerate() {
                    let cut = pos + i + 1;
                    if h < p.threshold && cut >= min_end {
                        return self.cut_at(cut, h);
                    }
                }
            }
            hash = hs[3];
            pos += 4;
        }
        while pos < max_end {
            hash = roll(hash, self.data[pos]);
            pos += 1;
            if hash < p.threshold && pos >= min_end {
                return self.cut_at(pos, hash);
            }
        }
        self.cut_at(max_end, hash)
    }

    #[inline(always)]
    fn cut_at(&mut self, cut: usize, hash: u32) -> usize {
        self.pos = cut;
        self.hash = hash;
        self.start = cut;
        cut
    }
}

/// Ddelta Step 1 (§3.3, chunk-level search): the lengths of the common prefix and of the
/// common suffix of `base` and `target`, the suffix taken from what the prefix leaves.
#[inline]
pub(crate) fn prefix_suffix(base: &[u8], target: &[u8]) -> (usize, usize) {
    let pre = common_prefix(base, target);
    let suf = common_suffix(&base[pre..], &target[pre..]);
    (pre, suf)
}

/// Open-addressing table from string fingerprint to base offset.
///
/// A slot holds `(fingerprint >> 32) << 32 | (offset + 1)`; 0 is empty. The first string with a
/// given fingerprint wins (later duplicates would only lengthen probe chains). The table is
/// sized to twice the expected string count and stops accepting strings at 3/4 load, so
/// probing always ends at an empty slot.
pub(crate) struct StringIndex {
    slots: Vec<u64>,
    mask: usize,
    room: usize,
}

impl StringIndex {
    /// Chunks `base[start..end]` into strings and indexes those at least `p.min` long.
    /// Offsets beyond `u32::MAX - 1` are not indexed.
    pub(crate) fn build(base: &[u8], start: usize, end: usize, p: StringParams) -> Self {
        let expected = (end - start) / (p.min * 4).max(1) + 1;
        let size = (expected * 2).next_power_of_two().max(16);
        let mut index = StringIndex {
            slots: vec![0; size],
            mask: size - 1,
            room: size / 4 * 3,
        };
        let end = end.min(u32::MAX as usize - 1);
        let mut cuts = Cuts::new(base, start, end, p);
        while !cuts.done() && index.room > 0 {
            let s = cuts.start();
            let e = cuts.next_cut();
            if e - s > p.min {
                index.insert(xxh3_64(&base[s..e]), s);
            }
        }
        index
    }

    #[inline]
    fn insert(&mut self, fp: u64, offset: usize) {
        let tag = fp & !0xffff_ffff;
        let mut i = fp as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                self.slots[i] = tag | (offset as u64 + 1);
                self.room -= 1;
                return;
            }
            if slot & !0xffff_ffff == tag {
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Base offset of a string equal to `s` (fingerprint `fp`), verified byte by byte.
    #[inline]
    pub(crate) fn find(&self, fp: u64, base: &[u8], s: &[u8]) -> Option<usize> {
        let tag = fp & !0xffff_ffff;
        let mut i = fp as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return None;
            }
            if slot & !0xffff_ffff == tag {
                let offset = (slot & 0xffff_ffff) as usize - 1;
                if let Some(candidate) = base.get(offset..) {
                    if common_prefix(s, candidate) == s.len() {
                        return Some(offset);
                    }
                }
            }
            i = (i + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn cuts(data: &[u8], start: usize, p: StringParams) -> Vec<usize> {
        let mut c = Cuts::new(data, start, data.len(), p);
        let mut out = Vec::new();
        while !c.done() {
            out.push(c.next_cut());
        }
        out
    }

    /// Algorithm 2 byte by byte, with the same minimum and maximum.
    fn naive_cut(data: &[u8], start: usize, end: usize, h: &mut u32, p: StringParams) -> usize {
        let mut pos = start;
        while pos < end.min(start + p.max) {
            *h = roll(*h, data[pos]);
            pos += 1;
            if pos - start > p.min && *h < p.threshold {
                return pos;
            }
        }
        pos
    }

    #[test]
    fn unrolled_cut_matches_naive() {
        for (seed, avg) in [(1, 8), (2, 16), (3, 32), (4, 64), (5, 33)] {
            let mut data = noise(20_000, seed);
            data[5000..6000].fill(0); // a low-entropy run
            let p = StringParams::new(avg);
            let mut c = Cuts::new(&data, 0, data.len(), p);
            let mut h = warm_up(&data, 0);
            let mut t = 0;
            while !c.done() {
                let s = c.next_cut();
                t = naive_cut(&data, t, data.len(), &mut h, p);
                assert_eq!((s, c.hash), (t, h), "avg {avg}");
            }
            assert_eq!(t, data.len());
            // Restarting gives the cuts of a fresh chunker at that point.
            let mut c = Cuts::new(&data, 0, data.len(), p);
            c.next_cut();
            c.restart(4321);
            let mut fresh = Cuts::new(&data, 4321, data.len(), p);
            for _ in 0..50 {
                assert_eq!(c.next_cut(), fresh.next_cut());
            }
        }
    }

    #[test]
    fn mean_string_length_is_close_to_avg() {
        let data = noise(1 << 20, 7);
        for avg in [16, 32, 64, 128] {
            let p = StringParams::new(avg);
            let n = cuts(&data, 0, p).len();
            let mean = data.len() as f64 / n as f64;
            assert!(
                (mean - avg as f64).abs() < avg as f64 * 0.1,
                "avg {avg}: mean {mean}"
            );
        }
    }

    #[test]
    fn restarting_resynchronises() {
        // Chunking from an arbitrary position with warm-up meets the continuous cut points
        // after its first cut that is not constrained by the minimum length.
        let data = noise(64 * 1024, 3);
        let p = StringParams::new(32);
        let full = cuts(&data, 0, p);
        for start in [1, 100, 777, 5000] {
            let lazy = cuts(&data, start, p);
            let meet = lazy.iter().position(|c| full.binary_search(c).is_ok());
            let meet = meet.expect("resynchronises");
            assert!(meet <= 3, "start {start}: met after {meet} strings");
            let from = full.binary_search(&lazy[meet]).unwrap();
            assert_eq!(&lazy[meet..], &full[from..]);
        }
    }

    #[test]
    fn index_finds_verified_strings() {
        let base = noise(8192, 11);
        let p = StringParams::new(32);
        let index = StringIndex::build(&base, 0, base.len(), p);
        let mut c = Cuts::new(&base, 0, base.len(), p);
        let mut found = 0;
        while !c.done() {
            let s = c.start();
            let e = c.next_cut();
            if e - s > p.min {
                let hit = index.find(xxh3_64(&base[s..e]), &base, &base[s..e]);
                assert_eq!(hit, Some(s));
                found += 1;
            }
        }
        assert!(found > 100);
        assert_eq!(
            index.find(xxh3_64(b"not in base!"), &base, b"not in base!"),
            None
        );
    }

    #[test]
    fn low_entropy_base_does_not_overfill() {
        let base = vec![0u8; 100_000];
        let p = StringParams::new(32);
        let index = StringIndex::build(&base, 0, base.len(), p);
        let first = cuts(&base, 0, p)[0];
        let s = &base[..first];
        assert_eq!(index.find(xxh3_64(s), &base, s), Some(0));
        let other = vec![1u8; first];
        assert_eq!(index.find(xxh3_64(&other), &base, &other), None);
    }
}
