//! Unsigned LEB128 varints, as used by the delta instruction format and the tree stream.
//!
//! Decoding is bounded: at most 10 bytes are read and a value that overflows `u64` is an error,
//! so hostile input can neither loop nor panic.

/// Appends `v` as an unsigned LEB128 varint.
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint from `buf` at `*pos`, advancing `*pos`. `None` when truncated or overlong.
pub fn get(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for i in 0..10u32 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        let low = u64::from(b & 0x7f);
        if i == 9 && low > 1 {
            return None;
        }
        v |= low << (7 * i);
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Number of bytes `put` writes for `v`.
pub fn len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(v in any::<u64>()) {
            let mut buf = Vec::new();
            put(&mut buf, v);
            prop_assert_eq!(buf.len(), len(v));
            let mut pos = 0;
            prop_assert_eq!(get(&buf, &mut pos), Some(v));
            prop_assert_eq!(pos, buf.len());
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut pos = 0;
            let _ = get(&bytes, &mut pos);
            prop_assert!(pos <= bytes.len());
        }
    }
}
