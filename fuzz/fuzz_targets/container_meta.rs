//! Container files from disk: the footer and metadata decoders (versions 1 and 2) and region
//! opening (whole, or only its front, as restore opens it) must reject any damage with an error, never
//! panic or read out of bounds.
//!
//! The input is tried twice: as a whole container file, and as the parts of a container whose
//! framing (header, footer, metadata length and checksum) is made right, so that the fuzzer
//! reaches the metadata decoders of both versions past the checksum: byte 0 picks the version
//! (0: 1, 1: 2, else itself, which must be refused), bytes 1-2 the length of the region bytes
//! that follow (little-endian, cut to what there is), and the rest is the metadata section.
//! Version 2's entry kinds 0-2 (2: the inversed delta of format version 4) decode; kind 3 and
//! a back-reference to a full entry must be refused.
#![no_main]

use dedelta_core::compress::RegionDecompressor;
use dedelta_store::format::container::{
    decode_container_meta, open_region, open_region_prefix_into, EntryKind, CONTAINER_MAGIC, CONTAINER_V1,
    CONTAINER_V2, HEADER_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    read_all(data);
    if data.len() >= 3 {
        let version = match data[0] {
            0 => CONTAINER_V1,
            1 => CONTAINER_V2,
            v => u16::from(v),
        };
        let rest = &data[3..];
        let (regions, meta) = rest.split_at(usize::from(u16::from_le_bytes([data[1], data[2]])).min(rest.len()));
        let mut file = Vec::with_capacity(HEADER_LEN + rest.len() + 24);
        file.extend_from_slice(CONTAINER_MAGIC);
        file.extend_from_slice(&version.to_le_bytes());
        file.extend_from_slice(&[0; 10]); // flags, reserved
        file.extend_from_slice(regions);
        file.extend_from_slice(meta);
        file.extend_from_slice(&((HEADER_LEN + regions.len()) as u64).to_le_bytes());
        file.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        file.extend_from_slice(&crc32c::crc32c(meta).to_le_bytes());
        file.extend_from_slice(CONTAINER_MAGIC);
        file.extend_from_slice(&version.to_le_bytes());
        file.extend_from_slice(&[0; 2]);
        read_all(&file);
    }
});

/// Decodes the metadata and reads every region and entry it describes.
fn read_all(file: &[u8]) {
    if let Ok(meta) = decode_container_meta(file, "fuzz") {
        // A back-reference names the base of a delta of either kind: a full entry has none.
        for e in &meta.entries {
            if e.kind.is_inversed() {
                assert!(matches!(e.kind, EntryKind::Delta { .. }));
            }
        }
        for (i, r) in meta.regions.iter().enumerate() {
            // decode_meta guarantees every region lies inside the file.
            let stored = &file[r.offset as usize..(r.offset + r.stored_len) as usize];
            // ... and every entry inside its region's raw length.
            for e in meta.entries.iter().filter(|e| e.region as usize == i) {
                assert!(u64::from(e.offset) + u64::from(e.stored_len) <= u64::from(r.raw_len));
            }
            let whole = open_region(stored, r, "fuzz");
            if let Ok(raw) = &whole {
                assert_eq!(raw.len(), r.raw_len as usize);
            }
            // Opened only as far as its first entry, or a third of it (restore and dump): at
            // least that much, and the front of the whole region when that opens.
            let first = meta.entries.iter().find(|e| e.region as usize == i);
            let upto = first.map_or(r.raw_len as usize / 3, |e| (e.offset + e.stored_len) as usize);
            let mut part = Vec::new();
            let mut dec = RegionDecompressor::default();
            if open_region_prefix_into(&mut dec, stored, r, upto, "fuzz", &mut part).is_ok() {
                assert!(part.len() >= upto.min(r.raw_len as usize));
                if let Ok(raw) = &whole {
                    assert!(part.len() <= raw.len() && part[..] == raw[..part.len()]);
                }
            }
        }
    }
}
