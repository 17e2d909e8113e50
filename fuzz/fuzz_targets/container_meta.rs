//! Container files from disk: the footer and metadata decoders and region opening must reject
//! any damage with an error, never panic or read out of bounds.
#![no_main]

use dedelta_store::format::container::{decode_container_meta, open_region};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(meta) = decode_container_meta(data, "fuzz") {
        for r in &meta.regions {
            // decode_meta guarantees every region lies inside the file.
            let stored = &data[r.offset as usize..(r.offset + r.stored_len) as usize];
            if let Ok(raw) = open_region(stored, r, "fuzz") {
                for e in meta.entries.iter().filter(|e| meta.regions[e.region as usize] == *r) {
                    let _ = &raw[e.offset as usize..(e.offset + e.stored_len) as usize];
                }
            }
        }
    }
});
