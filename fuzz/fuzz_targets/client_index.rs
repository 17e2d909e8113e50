//! The client chunk index's files: any bytes, as a manifest, a run file, a fingerprint
//! filter file or a locality backup's hints file, are rejected with an error or read without
//! a panic; a manifest, filter or hints file that decodes encodes back to the same bytes.
#![no_main]

use dedelta_store::client::index::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which % 4 == 0 {
        fuzzing::manifest(rest);
    } else if which % 4 == 2 {
        fuzzing::filter(rest);
    } else if which % 4 == 3 {
        fuzzing::recent(rest);
    } else {
        let dir = std::env::temp_dir().join(format!("dedelta-fuzz-index-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("run");
        if std::fs::write(&path, rest).is_ok() {
            fuzzing::run(&path);
        }
    }
});
