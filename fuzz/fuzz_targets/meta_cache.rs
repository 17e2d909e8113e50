//! The local container metadata cache's files: any bytes decode without panicking, to
//! nothing or to metadata whose entries lie in its regions.
#![no_main]

use dedelta_store::client::meta_cache::decode;
use dedelta_store::format::container::ContainerId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(meta) = decode(ContainerId([7; 32]), data) {
        for e in &meta.entries {
            assert!((e.region as usize) < meta.regions.len());
        }
    }
});
