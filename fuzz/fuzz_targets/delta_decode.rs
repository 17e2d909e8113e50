//! Feeds arbitrary (base, delta) splits to the one delta decoder: it must never panic, and
//! what it accepts must agree with the instruction parser and the declared length.
//!
//! Input layout: two little-endian bytes give the base length (clamped to what is left), then
//! the base, then the delta.
#![no_main]

use dedelta_core::delta::{format, new_codec, DeltaError, DeltaKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let base_len = (usize::from(data[0]) | usize::from(data[1]) << 8).min(data.len() - 2);
    let (base, delta) = data[2..].split_at(base_len);

    let mut out = vec![0xEE; 3];
    let result = format::decode(base, delta, &mut out);
    let parsed = format::instructions(base.len(), delta);
    match result {
        Ok(()) => {
            let declared = format::target_len(delta).expect("decoded, so the header is valid");
            assert_eq!(out.len(), 3 + declared);
            assert_eq!(&out[..3], &[0xEE; 3]);
            // A version-2 delta (zstd with the base as prefix) has no instruction list: the
            // parser names its version, and the decoder alone checks it.
            if let Err(DeltaError::UnsupportedVersion { version: 2 }) = parsed {
                return;
            }
            let list = parsed.expect("decode accepted it, so must the parser");
            let mut rebuilt = Vec::new();
            for i in list {
                match i {
                    format::Instruction::Copy { offset, len } => {
                        rebuilt.extend_from_slice(&base[offset..offset + len])
                    }
                    format::Instruction::Insert(bytes) => rebuilt.extend_from_slice(bytes),
                }
            }
            assert_eq!(rebuilt, out[3..]);
        }
        Err(_) => {
            assert_eq!(out, [0xEE; 3], "a failed decode leaves the output as it was");
            assert!(parsed.is_err(), "the parser accepted what decode refused");
        }
    }
    // Every codec decodes through the same decoder.
    for kind in DeltaKind::ALL {
        let mut again = Vec::new();
        assert_eq!(
            new_codec(kind).decode(base, delta, &mut again).is_ok(),
            result.is_ok()
        );
    }
});
