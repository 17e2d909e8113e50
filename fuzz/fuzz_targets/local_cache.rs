//! The local base cache's index file: any bytes are rejected with an error or decode to an
//! index whose bounds check never panics, and which encodes back to the same bytes.
#![no_main]

use dedelta_store::client::local_cache::CacheIndex;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = CacheIndex::decode(data) {
        let _ = index.check_within(data.len() as u64);
        let _ = index.check_within(u64::MAX);
        assert_eq!(index.encode(), data);
    }
});
