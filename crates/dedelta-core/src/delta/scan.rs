//! Byte-comparison kernels: how far two slices agree from the front or from the back.
//!
//! Ddelta's footnote 1: compare 8 bytes at a time with one 64-bit XOR; a non-zero XOR locates
//! the first differing byte by its trailing (from the front, little-endian loads) or leading
//! (from the back) zero bits. Long equal runs are skipped 32 bytes (four XORs) per branch
//! first. Safe code: the loads are `chunks_exact` slices turned into `u64`, which the compiler
//! lowers to plain unaligned loads.

/// Reads 8 bytes as a little-endian `u64`.
#[inline(always)]
fn load(bytes: &[u8]) -> u64 {
    // Cannot fail: every caller passes an 8-byte slice of a `chunks_exact` chunk.
    u64::from_le_bytes(bytes[..8].try_into().expect("8-byte chunk"))
}

/// Whether two 32-byte blocks differ: four XORs folded by OR, one branch for 32 bytes.
#[inline(always)]
fn blocks_differ(x: &[u8], y: &[u8]) -> bool {
    let d0 = load(&x[0..]) ^ load(&y[0..]);
    let d1 = load(&x[8..]) ^ load(&y[8..]);
    let d2 = load(&x[16..]) ^ load(&y[16..]);
    let d3 = load(&x[24..]) ^ load(&y[24..]);
    (d0 | d1 | d2 | d3) != 0
}

/// Length of the longest common prefix of `a` and `b`.
#[inline]
pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut done = 0;
    for (x, y) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
        if blocks_differ(x, y) {
            break;
        }
        done += 32;
    }
    let (a, b) = (&a[done..], &b[done..]);
    let mut words = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let diff = load(x) ^ load(y);
        if diff != 0 {
            return done + words + (diff.trailing_zeros() / 8) as usize;
        }
        words += 8;
    }
    done + words
        + a[words..]
            .iter()
            .zip(&b[words..])
            .take_while(|(x, y)| x == y)
            .count()
}

/// Length of the longest common suffix of `a` and `b`.
#[inline]
pub(crate) fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut done = 0;
    for (x, y) in a.rchunks_exact(32).zip(b.rchunks_exact(32)) {
        if blocks_differ(x, y) {
            break;
        }
        done += 32;
    }
    let (a, b) = (&a[..n - done], &b[..n - done]);
    let mut words = 0;
    for (x, y) in a.rchunks_exact(8).zip(b.rchunks_exact(8)) {
        let diff = load(x) ^ load(y);
        if diff != 0 {
            return done + words + (diff.leading_zeros() / 8) as usize;
        }
        words += 8;
    }
    let rest = a.len() - words;
    done + words
        + a[..rest]
            .iter()
            .rev()
            .zip(b[..rest].iter().rev())
            .take_while(|(x, y)| x == y)
            .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive_prefix(a: &[u8], b: &[u8]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    fn naive_suffix(a: &[u8], b: &[u8]) -> usize {
        a.iter()
            .rev()
            .zip(b.iter().rev())
            .take_while(|(x, y)| x == y)
            .count()
    }

    #[test]
    fn edges() {
        assert_eq!(common_prefix(b"", b"abc"), 0);
        assert_eq!(common_suffix(b"abc", b""), 0);
        let a = b"0123456789abcdefghij";
        for i in 0..a.len() {
            let mut b = a.to_vec();
            b[i] = b'#';
            assert_eq!(common_prefix(a, &b), i);
            assert_eq!(common_suffix(a, &b), a.len() - 1 - i);
        }
        assert_eq!(common_prefix(a, a), a.len());
        assert_eq!(common_suffix(a, &a[3..]), a.len() - 3);
    }

    proptest! {
        #[test]
        fn matches_naive(
            common in proptest::collection::vec(any::<u8>(), 0..150),
            a_tail in proptest::collection::vec(any::<u8>(), 0..20),
            b_tail in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let a = [&common[..], &a_tail[..]].concat();
            let b = [&common[..], &b_tail[..]].concat();
            prop_assert_eq!(common_prefix(&a, &b), naive_prefix(&a, &b));
            let a = [&a_tail[..], &common[..]].concat();
            let b = [&b_tail[..], &common[..]].concat();
            prop_assert_eq!(common_suffix(&a, &b), naive_suffix(&a, &b));
        }
    }
}
