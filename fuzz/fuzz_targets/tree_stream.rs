//! Tree streams read back from chunks: the decoder must never panic on any bytes.
#![no_main]

use dedelta_store::format::tree::TreeDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Both versions the decoder reads, and the raw bytes.
    let v1 = [&b"DDTR\x01"[..], data].concat();
    let v2 = [&b"DDTR\x02"[..], data].concat();
    for bytes in [data, &v1[..], &v2[..]] {
        let mut dec = TreeDecoder::new(bytes);
        for _ in 0..10_000 {
            match dec.next_node() {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
});
