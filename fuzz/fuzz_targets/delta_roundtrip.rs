//! Every codec must round-trip: decode(base, encode(base, target)) == target, on unrelated
//! pairs and on pairs where the target is the base with fuzzer-chosen edits.
//!
//! Input layout: one byte splits the rest into a base and an edit script (as a fraction of
//! 256); the unrelated pair is (base, script) itself; the similar pair applies the script to
//! the base, four bytes per edit: kind, position (two bytes, modulo the length), length.
#![no_main]

use dedelta_core::delta::{format, new_codec, DeltaKind};
use libfuzzer_sys::fuzz_target;

fn apply(base: &[u8], script: &[u8]) -> Vec<u8> {
    let mut t = base.to_vec();
    for op in script.chunks_exact(4) {
        let at = (usize::from(op[1]) | usize::from(op[2]) << 8) % (t.len() + 1);
        let n = usize::from(op[3]);
        match op[0] % 3 {
            0 => {
                for x in t.iter_mut().skip(at).take(n) {
                    *x = x.wrapping_add(op[0] | 1);
                }
            }
            1 => {
                let fill = std::iter::repeat(op[0]).take(n);
                t.splice(at..at, fill);
            }
            _ => {
                let end = (at + n).min(t.len());
                t.drain(at..end);
            }
        }
    }
    t
}

fn check(base: &[u8], target: &[u8]) {
    for kind in DeltaKind::ALL {
        let codec = new_codec(kind);
        let mut delta = Vec::new();
        codec.encode(base, target, &mut delta);
        assert_eq!(format::target_len(&delta), Ok(target.len()));
        let mut out = Vec::new();
        codec
            .decode(base, &delta, &mut out)
            .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        assert!(out == target, "{}: round trip differs", kind.name());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = rest.len() * usize::from(split) / 256;
    let (base, script) = rest.split_at(at);
    check(base, script);
    check(base, &apply(base, script));
});
