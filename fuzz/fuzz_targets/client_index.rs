//! The client chunk index's files: any bytes, as a manifest, a run file or a fingerprint
//! filter file, are rejected with an error or read without a panic; a manifest or filter
//! that decodes encodes back to the same bytes.
#![no_main]

use dedelta_store::client::index::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which % 3 == 0 {
        fuzzing::manifest(rest);
    } else if which % 3 == 2 {
        fuzzing::filter(rest);
    } else {
        let dir = std::env::temp_dir().join(format!("dedelta-fuzz-index-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("run");
        if std::fs::write(&path, rest).is_ok() {
            fuzzing::run(&path);
        }
    }
});
