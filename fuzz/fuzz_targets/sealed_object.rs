//! Sealed objects (encrypted repositories): the trailer parser, the length arithmetic and the
//! segment decoder must reject garbage cleanly, whole or from any segment, and a valid object
//! must open to what was sealed.
#![no_main]

use dedelta_store::format::sealed::{self, ObjectName, Trailer};
use libfuzzer_sys::fuzz_target;

const OBJ: ObjectName<'static> = ObjectName {
    kind: "containers",
    name: "fuzz",
};

fuzz_target!(|data: &[u8]| {
    let cipher = sealed::cipher(&[7; 32]);
    let _ = sealed::open(&cipher, OBJ, data);
    let _ = sealed::open_salvaging(&cipher, OBJ, data);
    let _ = sealed::plain_len_of(data.len() as u64);
    if let Ok(t) = Trailer::parse(data) {
        let first = data.first().copied().unwrap_or(0) as u64;
        let mut out = Vec::new();
        let whole = sealed::open_window(&cipher, &t, OBJ, first, data, &mut out);
        let mut window = data.to_vec();
        let mut in_place = Vec::new();
        let opened = sealed::open_window_in_place(&cipher, &t, OBJ, first, &mut window, |p| {
            in_place.extend_from_slice(p)
        });
        assert_eq!(opened, whole);
        assert_eq!(in_place, out);
        let _ = sealed::sealed_span(t.plain_len, first, data.len() as u64);
    }
    // Round trip: what is sealed opens, whole and by ranges.
    let mut sealed_bytes = Vec::new();
    sealed::seal_into(&cipher, [3; 16], OBJ, data, &mut sealed_bytes);
    assert_eq!(sealed::open(&cipher, OBJ, &sealed_bytes).unwrap(), data);
    assert_eq!(
        sealed::plain_len_of(sealed_bytes.len() as u64),
        Some(data.len() as u64)
    );
});
