//! The local base cache file's header and index: any bytes, at any claimed file length, are
//! rejected with an error or yield entries that lie inside the file.
#![no_main]

use dedelta_store::local_cache::decode_index;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = decode_index(data, data.len() as u64) {
        for &(offset, len) in index.values() {
            let _ = &data[offset as usize..offset as usize + len as usize];
        }
    }
    // A file that claims to be longer than the bytes read: must still not panic.
    let _ = decode_index(data, u64::MAX);
});
