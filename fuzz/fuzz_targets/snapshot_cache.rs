//! The local snapshot cache file: any bytes decode without panicking to entries that lie
//! within the file, one after another.
#![no_main]

use dedelta_store::client::snapshot_cache::decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (entries, _) = decode(data);
    let mut ranges: Vec<_> = entries.into_values().collect();
    ranges.sort_by_key(|r| r.start);
    for pair in ranges.windows(2) {
        assert!(pair[0].end <= pair[1].start);
    }
    assert!(ranges.iter().all(|r| r.start <= r.end && r.end <= data.len()));
});
