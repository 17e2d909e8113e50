//! The envelope of small repository files (config, snapshots): magic, version, length, payload,
//! CRC32C.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic (`DDCF` config, `DDSN` snapshot) |
//! | 4 | 2 | format version, u16 LE |
//! | 6 | 2 | flags, u16 LE, 0 |
//! | 8 | 4 | payload length N, u32 LE |
//! | 12 | N | payload (JSON, UTF-8) |
//! | 12+N | 4 | CRC32C of bytes 0..12+N, u32 LE |

use crate::error::{Error, Result};

/// Size of the fixed header.
pub const HEADER_LEN: usize = 12;
/// Size of the trailing checksum.
pub const TRAILER_LEN: usize = 4;

/// Wraps `payload` in an envelope.
pub fn seal(magic: &[u8; 4], version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks an envelope and returns its payload. `what` names the file in errors; versions above
/// `max_version` are refused.
pub fn open<'a>(
    bytes: &'a [u8],
    magic: &[u8; 4],
    max_version: u16,
    what: &str,
) -> Result<&'a [u8]> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err(Error::corrupt(what, "file too short"));
    }
    if &bytes[0..4] != magic {
        return Err(Error::corrupt(what, "bad magic number"));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version == 0 || version > max_version {
        return Err(Error::UnsupportedVersion {
            what: what.to_string(),
            found: version.into(),
            supported: max_version.into(),
        });
    }
    let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    if bytes.len() != HEADER_LEN + len + TRAILER_LEN {
        return Err(Error::corrupt(
            what,
            "length field does not match file size",
        ));
    }
    let body_end = HEADER_LEN + len;
    let stored = u32::from_le_bytes([
        bytes[body_end],
        bytes[body_end + 1],
        bytes[body_end + 2],
        bytes[body_end + 3],
    ]);
    if crc32c::crc32c(&bytes[..body_end]) != stored {
        return Err(Error::corrupt(what, "checksum mismatch"));
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
        let mut bad = sealed.clone();
        bad[12] ^= 1;
        assert!(open(&bad, b"DDSN", 1, "x").is_err());
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = open(&bytes, b"DDSN", 1, "x");
        }
    }
}
