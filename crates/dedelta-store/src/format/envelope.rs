//! The envelope of small repository files (config, snapshots, damage records): magic,
//! version, flags, length, payload, CRC32C.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic (`DDCF` config, `DDSN` snapshot, `DDDM` damage record) |
//! | 4 | 2 | format version, u16 LE |
//! | 6 | 2 | flags, u16 LE, 0 |
//! | 8 | 4 | payload length N, u32 LE |
//! | 12 | N | payload (JSON, UTF-8) |
//! | 12+N | 4 | CRC32C of bytes 0..12+N, u32 LE |
//!
//! Checks run in this order, so that the error says what a user can act on: length, magic,
//! version (a version this build does not read is [`Error::UnsupportedVersion`], never
//! damage: a newer client may have written it), length field, CRC32C (a mismatch is
//! [`Error::Corrupt`]), then flags. Flags are checked after the CRC32C on purpose: once the
//! checksum holds, a set flag was written deliberately, by a writer that knows a meaning this
//! build does not, and a flag may change how the payload reads; so the file is refused as
//! unsupported, like an unknown version, and not reported as damage (which `repair snapshots`
//! may delete). The alternative rejected, ignoring unknown flags, would let a version-1 reader
//! misread a file whose meaning a flag changed.

use crate::error::{Error, Result};

/// Offset of the 4-byte magic.
pub const MAGIC_OFFSET: usize = 0;
/// Offset of the u16 format version.
pub const VERSION_OFFSET: usize = MAGIC_OFFSET + 4;
/// Offset of the u16 flags (0: no flag is defined).
pub const FLAGS_OFFSET: usize = VERSION_OFFSET + 2;
/// Offset of the u32 payload length.
pub const LEN_OFFSET: usize = FLAGS_OFFSET + 2;
/// Size of the fixed header; the payload starts here.
pub const HEADER_LEN: usize = LEN_OFFSET + 4;
/// Size of the trailing checksum.
pub const TRAILER_LEN: usize = 4;
/// The flags every writer of this version writes, and the only value readers accept.
pub const FLAGS_NONE: u16 = 0;

/// Wraps `payload` in an envelope.
///
/// # Panics
/// If `payload` is 4 GiB or longer (the length field is a u32); repository files are small
/// JSON documents.
pub fn seal(magic: &[u8; 4], version: u16, payload: &[u8]) -> Vec<u8> {
    // Config, snapshot and damage record payloads are kilobytes to megabytes of JSON.
    let len = u32::try_from(payload.len()).expect("envelope payload below 4 GiB");
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&FLAGS_NONE.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Checks an envelope and returns its payload. `what` names the file in errors; versions
/// 1 ..= `max_version` are accepted.
///
/// # Errors
/// [`Error::UnsupportedVersion`] for version 0, a version above `max_version`, or (with a
/// valid checksum) non-zero flags; [`Error::Corrupt`] for a short file, a wrong magic, a
/// length field that does not match the file size, or a checksum mismatch.
pub fn open<'a>(
    bytes: &'a [u8],
    magic: &[u8; 4],
    max_version: u16,
    what: &str,
) -> Result<&'a [u8]> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err(Error::corrupt(what, "file too short"));
    }
    if &bytes[MAGIC_OFFSET..VERSION_OFFSET] != magic {
        return Err(Error::corrupt(what, "bad magic number"));
    }
    let version = u16_at(bytes, VERSION_OFFSET);
    if version == 0 || version > max_version {
        return Err(Error::UnsupportedVersion {
            what: what.to_string(),
            found: version.into(),
            supported: max_version.into(),
        });
    }
    let len = u32_at(bytes, LEN_OFFSET) as usize;
    if bytes.len() - HEADER_LEN - TRAILER_LEN != len {
        return Err(Error::corrupt(
            what,
            "length field does not match file size",
        ));
    }
    let body_end = HEADER_LEN + len;
    if crc32c::crc32c(&bytes[..body_end]) != u32_at(bytes, body_end) {
        return Err(Error::corrupt(what, "checksum mismatch"));
    }
    let flags = u16_at(bytes, FLAGS_OFFSET);
    if flags != FLAGS_NONE {
        // `Error` has no variant for an unknown feature; an unknown version is the same case
        // for the user (a newer writer, not damage), so the file is named with its flags.
        return Err(Error::UnsupportedVersion {
            what: format!("{what} with unknown flags {flags:#06x}"),
            found: version.into(),
            supported: max_version.into(),
        });
    }
    Ok(&bytes[HEADER_LEN..body_end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_rejects() {
        let sealed = seal(b"DDSN", 1, b"{}");
        assert_eq!(sealed.len(), HEADER_LEN + 2 + TRAILER_LEN);
        assert_eq!(open(&sealed, b"DDSN", 1, "x").unwrap(), b"{}");
        assert!(open(&sealed, b"DDCF", 1, "x").is_err());
        let v2 = seal(b"DDSN", 2, b"{}");
        assert!(matches!(
            open(&v2, b"DDSN", 1, "x"),
            Err(Error::UnsupportedVersion { found: 2, .. })
        ));
        assert_eq!(open(&v2, b"DDSN", 2, "x").unwrap(), b"{}");
        assert_eq!(open(&sealed, b"DDSN", 2, "x").unwrap(), b"{}");
        let v0 = seal(b"DDSN", 0, b"{}");
        assert!(matches!(
            open(&v0, b"DDSN", 1, "x"),
            Err(Error::UnsupportedVersion { found: 0, .. })
        ));
        let mut bad = sealed.clone();
        bad[12] ^= 1;
        assert!(matches!(
            open(&bad, b"DDSN", 1, "x"),
            Err(Error::Corrupt { .. })
        ));
    }

    /// The byte table of docs/format.md ("Envelope"), field by field.
    #[test]
    fn layout_matches_the_doc() {
        assert_eq!(
            (MAGIC_OFFSET, VERSION_OFFSET, FLAGS_OFFSET, LEN_OFFSET),
            (0, 4, 6, 8)
        );
        assert_eq!((HEADER_LEN, TRAILER_LEN), (12, 4));
        let payload = br#"{"a":1}"#;
        let sealed = seal(b"DDDM", 0x0102, payload);
        assert_eq!(sealed.len(), 12 + payload.len() + 4);
        assert_eq!(&sealed[0..4], b"DDDM");
        assert_eq!(&sealed[4..6], &[0x02, 0x01]);
        assert_eq!(&sealed[6..8], &[0, 0]);
        assert_eq!(&sealed[8..12], &(payload.len() as u32).to_le_bytes());
        assert_eq!(&sealed[12..12 + payload.len()], payload);
        let crc = crc32c::crc32c(&sealed[..12 + payload.len()]);
        assert_eq!(&sealed[12 + payload.len()..], &crc.to_le_bytes());
    }

    /// Flags are reserved: a version-1 reader refuses any set flag (docs/format.md, "Envelope"),
    /// as unsupported rather than damaged when the checksum holds.
    #[test]
    fn non_zero_flags_are_refused() {
        for flag in [1u16, 0x8000, 0xffff] {
            let mut file = seal(b"DDSN", 1, b"{}");
            file[FLAGS_OFFSET..LEN_OFFSET].copy_from_slice(&flag.to_le_bytes());
            let end = file.len() - TRAILER_LEN;
            let crc = crc32c::crc32c(&file[..end]);
            file[end..].copy_from_slice(&crc.to_le_bytes());
            match open(&file, b"DDSN", 1, "snapshot x") {
                Err(Error::UnsupportedVersion { what, found: 1, .. }) => {
                    assert!(what.contains("flags"), "{what}")
                }
                other => panic!("flags {flag:#x} accepted or misreported: {other:?}"),
            }
            // A flag set by damage fails the checksum first.
            let mut damaged = seal(b"DDSN", 1, b"{}");
            damaged[FLAGS_OFFSET] = flag as u8 | 1;
            assert!(matches!(
                open(&damaged, b"DDSN", 1, "x"),
                Err(Error::Corrupt { .. })
            ));
        }
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = open(&bytes, b"DDSN", 1, "x");
        }

        #[test]
        fn round_trips(payload in proptest::collection::vec(any::<u8>(), 0..200), version in 1u16..=3) {
            let sealed = seal(b"DDCF", version, &payload);
            prop_assert_eq!(open(&sealed, b"DDCF", 3, "x").unwrap(), &payload[..]);
        }
    }
}
