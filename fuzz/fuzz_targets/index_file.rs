//! Index files from the repository: the envelope, the decompression bound and the record
//! decoder must reject any damage with an error, never panic or allocate past the bound.
//!
//! The input is tried twice: as a whole index file, and as a decompressed body (what the
//! fuzzer cannot reach through a checksum and a zstd frame), whose records must come back in
//! strictly ascending container order, each with metadata that decodes again from its bytes.
#![no_main]

use dedelta_store::format::index_file::{decode, decode_body};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode(data, "fuzz");
    if let Ok(records) = decode_body(data, "fuzz") {
        for pair in records.windows(2) {
            assert!(pair[0].0.id < pair[1].0.id);
        }
        for (rec, meta) in &records {
            assert_eq!(&rec.meta("fuzz").expect("decodes again"), meta);
        }
    }
});
