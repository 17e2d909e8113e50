//! Local compression of compression regions.
//!
//! Chunks are not compressed one by one: consecutive stored chunks are packed into a
//! *compression region* (Data Domain's term) and the region is compressed as a whole, which
//! lets zstd find redundancy across chunk boundaries. The region size trades ratio against
//! restore reads (a chunk costs a whole region to read); see docs/format.md.

use serde::{Deserialize, Serialize};

/// How a region's bytes are stored; recorded per region as a one-byte code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "codec", rename_all = "lowercase")]
pub enum Compression {
    /// Stored as is (code 0).
    None,
    /// zstd at `level` (code 1).
    Zstd {
        /// zstd level, 1..=22.
        level: i32,
    },
}

/// Region codec code for uncompressed bytes.
pub const CODEC_NONE: u8 = 0;
/// Region codec code for zstd.
pub const CODEC_ZSTD: u8 = 1;

/// A region could not be decompressed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompressError {
    /// The codec byte is unknown.
    #[error("unknown region codec {0}")]
    UnknownCodec(u8),
    /// The codec failed or produced a different length than recorded.
    #[error("corrupt compressed region: {0}")]
    Corrupt(String),
}

impl Default for Compression {
    fn default() -> Self {
        Compression::Zstd { level: 3 }
    }
}

impl Compression {
    /// Parses `none` or `zstd:N` (and plain `zstd` for level 3).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Compression::None),
            "zstd" => Some(Compression::Zstd { level: 3 }),
            _ => {
                let level: i32 = s.strip_prefix("zstd:")?.parse().ok()?;
                (1..=22)
                    .contains(&level)
                    .then_some(Compression::Zstd { level })
            }
        }
    }

    /// Compresses `raw`; returns the codec code and the stored bytes. Falls back to storing
    /// raw bytes when compression does not shrink them.
    pub fn compress(&self, raw: &[u8]) -> (u8, Vec<u8>) {
        let mut out = Vec::new();
        let codec = self.compress_into(raw, &mut out);
        (codec, out)
    }

    /// [`Self::compress`] into `out` (cleared first; grown to the bound zstd needs): a caller
    /// that compresses many regions reuses its buffers instead of allocating each anew.
    pub fn compress_into(&self, raw: &[u8], out: &mut Vec<u8>) -> u8 {
        out.clear();
        if let Compression::Zstd { level } = *self {
            out.reserve(zstd::zstd_safe::compress_bound(raw.len()));
            // zstd on an in-memory slice only fails on allocation failure.
            if zstd_compress_into(raw, level, out).is_ok() && out.len() < raw.len() {
                return CODEC_ZSTD;
            }
            out.clear();
        }
        out.extend_from_slice(raw);
        CODEC_NONE
    }
}

thread_local! {
    /// One zstd context per thread: backup compresses thousands of regions and single
    /// chunks (the delta saving test), and a fresh context costs more than a small input.
    static ZSTD_CCTX: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Compresses `raw` into the spare capacity of `out` (which must hold zstd's bound).
fn zstd_compress_into(raw: &[u8], level: i32, out: &mut Vec<u8>) -> std::io::Result<usize> {
    ZSTD_CCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        match slot.as_mut() {
            Some((l, c)) if *l == level => c.compress_to_buffer(raw, out),
            _ => {
                let mut c = zstd::bulk::Compressor::new(level)?;
                let n = c.compress_to_buffer(raw, out);
                *slot = Some((level, c));
                n
            }
        }
    })
}

/// Decompresses a region stored with `codec` whose raw length is `raw_len`.
pub fn decompress(codec: u8, stored: &[u8], raw_len: usize) -> Result<Vec<u8>, CompressError> {
    match codec {
        CODEC_NONE => {
            if stored.len() != raw_len {
                return Err(CompressError::Corrupt(format!(
                    "raw region is {} bytes, expected {raw_len}",
                    stored.len()
                )));
            }
            Ok(stored.to_vec())
        }
        CODEC_ZSTD => {
            let out = zstd::bulk::decompress(stored, raw_len)
                .map_err(|e| CompressError::Corrupt(e.to_string()))?;
            if out.len() != raw_len {
                return Err(CompressError::Corrupt(format!(
                    "region decompressed to {} bytes, expected {raw_len}",
                    out.len()
                )));
            }
            Ok(out)
        }
        c => Err(CompressError::UnknownCodec(c)),
    }
}

/// Decompresses regions, reusing one zstd context (creating a context per region costs a few
/// percent of restore time).
pub struct RegionDecompressor {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl std::fmt::Debug for RegionDecompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RegionDecompressor")
    }
}

impl Default for RegionDecompressor {
    fn default() -> Self {
        RegionDecompressor {
            zstd: zstd::bulk::Decompressor::new().ok(),
        }
    }
}

impl RegionDecompressor {
    /// Like [`decompress`], with the reused context.
    pub fn decompress(
        &mut self,
        codec: u8,
        stored: &[u8],
        raw_len: usize,
    ) -> Result<Vec<u8>, CompressError> {
        let mut out = Vec::new();
        self.decompress_into(codec, stored, raw_len, &mut out)?;
        Ok(out)
    }

    /// Like [`Self::decompress`], into `out` (cleared first): reusing one buffer region after
    /// region spares the allocator handing out fresh pages that the kernel must zero.
    pub fn decompress_into(
        &mut self,
        codec: u8,
        stored: &[u8],
        raw_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CompressError> {
        out.clear();
        if out.capacity() < raw_len {
            // A fresh buffer with headroom, so that it fits the next regions too (growing a
            // reused buffer would copy its stale contents).
            *out = Vec::with_capacity(raw_len + raw_len / 4);
        }
        match (codec, self.zstd.as_mut()) {
            (CODEC_ZSTD, Some(z)) => {
                z.decompress_to_buffer(stored, out)
                    .map_err(|e| CompressError::Corrupt(e.to_string()))?;
                if out.len() != raw_len {
                    return Err(CompressError::Corrupt(format!(
                        "region decompressed to {} bytes, expected {raw_len}",
                        out.len()
                    )));
                }
                Ok(())
            }
            _ => {
                *out = decompress(codec, stored, raw_len)?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reused buffer (too small, or holding an earlier region) gives the bytes a fresh one
    /// gives, for compressible and incompressible input.
    #[test]
    fn compress_into_a_used_buffer_is_compress() {
        let text: Vec<u8> = b"abcabcabd".repeat(3000);
        let mut x = 1u64;
        let noise: Vec<u8> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut buf = vec![9u8; 10];
        for c in [Compression::None, Compression::Zstd { level: 3 }] {
            for raw in [&text, &noise, &text] {
                let code = c.compress_into(raw, &mut buf);
                assert_eq!((code, buf.clone()), c.compress(raw));
                assert_eq!(&decompress(code, &buf, raw.len()).unwrap(), raw);
            }
        }
    }

    #[test]
    fn round_trip_and_parse() {
        let raw: Vec<u8> = b"abcabcabc".repeat(1000);
        for c in [Compression::None, Compression::Zstd { level: 3 }] {
            let (code, stored) = c.compress(&raw);
            assert_eq!(decompress(code, &stored, raw.len()).unwrap(), raw);
        }
        assert_eq!(
            Compression::parse("zstd:19"),
            Some(Compression::Zstd { level: 19 })
        );
        assert_eq!(Compression::parse("zstd:99"), None);
        assert!(decompress(CODEC_ZSTD, b"garbage", 10).is_err());
        assert!(decompress(7, b"", 0).is_err());
        let mut d = RegionDecompressor::default();
        let (code, stored) = Compression::Zstd { level: 3 }.compress(&raw);
        assert_eq!(d.decompress(code, &stored, raw.len()).unwrap(), raw);
        assert!(d.decompress(code, &stored, raw.len() - 1).is_err());
        assert!(d.decompress(code, b"junk", 10).is_err());
    }
}
