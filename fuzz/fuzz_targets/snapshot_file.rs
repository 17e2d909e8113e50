//! Snapshot, config and dense container list files: the envelope and JSON decoders must
//! reject garbage cleanly.
#![no_main]

use dedelta_store::format::config::RepoConfig;
use dedelta_store::format::dense::DenseList;
use dedelta_store::format::snapshot::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Snapshot::from_bytes(data, "fuzz");
    let _ = RepoConfig::from_bytes(data);
    let _ = DenseList::from_bytes(data, "fuzz");
});
