//! The local tree cache's files: any bytes decode without panicking, to nothing or to chunks
//! that lie within the file.
#![no_main]

use bytes::Bytes;
use dedelta_store::client::tree_cache::decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(chunks) = decode(Bytes::copy_from_slice(data)) {
        let held: usize = chunks.iter().map(|c| c.len() + 4).sum();
        assert!(held <= data.len());
    }
});
