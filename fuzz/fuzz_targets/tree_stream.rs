//! Tree streams read back from chunks: the decoder must never panic on any bytes.
#![no_main]

use dedelta_store::format::tree::TreeDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = b"DDTR\x01".to_vec();
    input.extend_from_slice(data);
    for bytes in [data, &input[..]] {
        let mut dec = TreeDecoder::new(bytes);
        for _ in 0..10_000 {
            match dec.next_node() {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
});
