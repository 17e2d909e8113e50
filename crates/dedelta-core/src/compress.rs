//! Local compression of compression regions.
//!
//! Chunks are not compressed one by one: consecutive stored chunks are packed into a
//! *compression region* (Data Domain's term) and the region is compressed as a whole, which
//! lets zstd find redundancy across chunk boundaries. The region size trades ratio against
//! restore reads (a chunk costs a whole region to read); see docs/format.md.
//!
//! The level can depend on the region: [`Compression::Zstd::text_level`] is spent only on
//! regions that [`looks_compressible`] (text, source code, most binaries), not on regions of
//! random-looking bytes (base64 of random data, already compressed files), where a higher
//! level costs 3x the time for nothing. Measured on 20 SQLAlchemy sdists (docs/benchmarks.md
//! section 6): level 6 on text stores the repository in 17.76 MB instead of 19.30 for 11%
//! more backup CPU; on 500 MB of base64 text, zstd -6 is 3.2x slower than -3 and not a byte
//! smaller. The choice is a pure function of the region's bytes, so the stored bytes depend
//! only on the input and the recorded configuration.

use serde::{Deserialize, Serialize};

mod block_decoder;
use block_decoder::BlockDecoder;

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
        /// zstd level, 1..=22, for regions that [`looks_compressible`]; `None`: `level` for
        /// every region. The decoder does not need to know which level wrote a region.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text_level: Option<i32>,
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
    /// zstd level 3, level 6 for regions that look compressible.
    fn default() -> Self {
        Compression::Zstd {
            level: 3,
            text_level: Some(6),
        }
    }
}

/// How many of a region's most frequent byte values [`looks_compressible`] counts.
pub const TEXT_TOP_BYTES: usize = 16;
/// The share, in percent, of a region's bytes that its [`TEXT_TOP_BYTES`] most frequent byte
/// values must reach for the region to look compressible. Text and source code reach 55-85%,
/// executables 40-70%; base64 of random bytes 25%, random or compressed bytes about 6%.
pub const TEXT_TOP_SHARE_PERCENT: usize = 40;

/// Bytes [`looks_compressible`] counts of every [`TEXT_SAMPLE_STRIDE`]: an eighth of the
/// region, so that the test costs a few percent of a level-3 compression.
pub const TEXT_SAMPLE_BYTES: usize = 64;
/// See [`TEXT_SAMPLE_BYTES`].
pub const TEXT_SAMPLE_STRIDE: usize = 512;

/// Whether a region looks compressible enough to spend a higher zstd level on: in a sample of
/// it (the first [`TEXT_SAMPLE_BYTES`] of every [`TEXT_SAMPLE_STRIDE`]), its
/// [`TEXT_TOP_BYTES`] most frequent byte values make up at least [`TEXT_TOP_SHARE_PERCENT`]
/// percent. Integers only (the same answer on every machine).
pub fn looks_compressible(raw: &[u8]) -> bool {
    // Four tables, so that consecutive equal bytes do not wait on each other's increment.
    let mut counts = [[0u32; 256]; 4];
    let mut sampled = 0usize;
    for block in raw.chunks(TEXT_SAMPLE_STRIDE) {
        let sample = &block[..block.len().min(TEXT_SAMPLE_BYTES)];
        for quad in sample.chunks(4) {
            for (table, &b) in counts.iter_mut().zip(quad) {
                table[b as usize] += 1;
            }
        }
        sampled += sample.len();
    }
    let mut total = [0usize; 256];
    for table in &counts {
        for (t, &c) in total.iter_mut().zip(table) {
            *t += c as usize;
        }
    }
    total.sort_unstable_by(|a, b| b.cmp(a));
    let top: usize = total[..TEXT_TOP_BYTES].iter().sum();
    sampled > 0 && top * 100 >= sampled * TEXT_TOP_SHARE_PERCENT
}

impl Compression {
    /// zstd at one level for every region.
    pub const fn zstd(level: i32) -> Self {
        Compression::Zstd {
            level,
            text_level: None,
        }
    }

    /// Parses `none`, `zstd:L` (one level), `zstd:L,T` (level T for regions that look
    /// compressible, L for the others) and plain `zstd` (the default, `zstd:3,6`).
    pub fn parse(s: &str) -> Option<Self> {
        let level = |v: &str| v.parse().ok().filter(|l| (1..=22).contains(l));
        match s {
            "none" => Some(Compression::None),
            "zstd" => Some(Compression::default()),
            _ => {
                let spec = s.strip_prefix("zstd:")?;
                Some(match spec.split_once(',') {
                    None => Compression::zstd(level(spec)?),
                    Some((l, t)) => Compression::Zstd {
                        level: level(l)?,
                        text_level: Some(level(t)?),
                    },
                })
            }
        }
    }

    /// The level a region's bytes are compressed at (`None` for no compression).
    pub fn level_for(&self, raw: &[u8]) -> Option<i32> {
        match *self {
            Compression::None => None,
            Compression::Zstd { level, text_level } => Some(match text_level {
                Some(t) if looks_compressible(raw) => t,
                _ => level,
            }),
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
        if let Some(level) = self.level_for(raw) {
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

/// zstd contexts a thread keeps, one per level (the most a backup uses: a region level, a
/// text level and level 1 for the delta saving test).
const CCTX_LEVELS: usize = 4;

thread_local! {
    /// zstd contexts of this thread, one per level, most recently used first: backup
    /// compresses thousands of regions and single chunks (the delta saving test), and a fresh
    /// context costs more than a small input. One context per level, not one per thread: the
    /// pool's threads alternate between regions (level 3 or 6) and the saving test (level 1),
    /// and re-creating a context at each switch mapped and zeroed its tables afresh (page
    /// faults under `ZSTD_CCtx_init_compressStream2`, 3 % of a backup's CPU).
    static ZSTD_CCTX: std::cell::RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Compresses `raw` into the spare capacity of `out` (which must hold zstd's bound).
fn zstd_compress_into(raw: &[u8], level: i32, out: &mut Vec<u8>) -> std::io::Result<usize> {
    ZSTD_CCTX.with(|cell| {
        let mut held = cell.borrow_mut();
        let i = match held.iter().position(|(l, _)| *l == level) {
            Some(i) => i,
            None => {
                if held.len() >= CCTX_LEVELS {
                    held.pop();
                }
                held.push((level, zstd::bulk::Compressor::new(level)?));
                held.len() - 1
            }
        };
        // Most recently used first: the least recently used level goes when a new one comes.
        held[..=i].rotate_right(1);
        held[0].1.compress_to_buffer(raw, out)
    })
}

/// The bytes of a region stored raw (codec 0), which must be `raw_len` long.
fn stored_raw(stored: &[u8], raw_len: usize) -> Result<&[u8], CompressError> {
    if stored.len() != raw_len {
        return Err(CompressError::Corrupt(format!(
            "raw region is {} bytes, expected {raw_len}",
            stored.len()
        )));
    }
    Ok(stored)
}

/// Decompresses a region stored with `codec` whose raw length is `raw_len`.
pub fn decompress(codec: u8, stored: &[u8], raw_len: usize) -> Result<Vec<u8>, CompressError> {
    match codec {
        CODEC_NONE => Ok(stored_raw(stored, raw_len)?.to_vec()),
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
    /// A context for [`Self::decompress_prefix_into`] (made on first use).
    blocks: Option<BlockDecoder>,
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
            blocks: None,
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

    /// Like [`Self::decompress_into`], but stops once `out` holds at least the region's first
    /// `upto` bytes (the whole region if `upto >= raw_len`): at most [`PREFIX_SLACK`] bytes
    /// more, the rest of the zstd block holding byte `upto`.
    ///
    /// Why: a restore often needs a few chunks at the front of an old region, and a whole
    /// region (512 KiB) decompressed for them, into fresh pages, was most of a dump's
    /// locating thread. The frame is decoded block by block straight into `out` (zstd's
    /// buffer-less streaming: its streaming API either copies every byte out of the
    /// context's window, a third of the time saved, or wants room for the whole frame), so
    /// the blocks past `upto` are never decoded. The region's checksum covers the stored
    /// bytes as before.
    pub fn decompress_prefix_into(
        &mut self,
        codec: u8,
        stored: &[u8],
        raw_len: usize,
        upto: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CompressError> {
        if upto >= raw_len {
            return self.decompress_into(codec, stored, raw_len, out);
        }
        out.clear();
        match codec {
            CODEC_NONE => {
                out.extend_from_slice(&stored_raw(stored, raw_len)?[..upto]);
                Ok(())
            }
            CODEC_ZSTD => {
                if self.blocks.is_none() {
                    self.blocks = BlockDecoder::new();
                }
                let blocks = self.blocks.as_mut().ok_or_else(|| {
                    CompressError::Corrupt("no zstd decompression context".into())
                })?;
                // Room for the whole block holding byte `upto`.
                let room = raw_len.min(upto.saturating_add(PREFIX_SLACK));
                out.reserve(room);
                blocks.decode_prefix(stored, upto, room, out)?;
                if out.len() < upto {
                    return Err(CompressError::Corrupt(format!(
                        "region decompressed to {} bytes, expected at least {upto}",
                        out.len()
                    )));
                }
                Ok(())
            }
            c => Err(CompressError::UnknownCodec(c)),
        }
    }
}

/// How many bytes past the `upto` asked for
/// [`RegionDecompressor::decompress_prefix_into`] may decompress: a zstd block's largest
/// size (`ZSTD_BLOCKSIZE_MAX`).
pub const PREFIX_SLACK: usize = 128 << 10;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunker::testutil::pseudo_random as noise;

    /// The thread's contexts, kept one per level and reused across levels in any order (more
    /// levels than it keeps, so some are dropped and made again), give the bytes a fresh
    /// context gives at that level: what is stored does not depend on what the thread
    /// compressed before.
    #[test]
    fn contexts_kept_per_level_compress_as_fresh_ones() {
        let text: Vec<u8> = b"def f(x):\n    return x + 1\n".repeat(2000);
        let levels = [6, 1, 3, 6, 1, 1, 9, 2, 6, 3, 1, 6];
        for (n, &level) in levels.iter().enumerate() {
            let raw = &text[n * 7..];
            let mut out = Vec::new();
            let (code, stored) = Compression::zstd(level).compress(raw);
            assert_eq!(code, CODEC_ZSTD);
            assert_eq!(
                stored,
                zstd::bulk::compress(raw, level).unwrap(),
                "level {level}"
            );
            assert_eq!(Compression::zstd(level).compress_into(raw, &mut out), code);
            assert_eq!(out, stored);
        }
        ZSTD_CCTX.with(|c| assert!(c.borrow().len() <= CCTX_LEVELS));
    }

    /// A reused buffer (too small, or holding an earlier region) gives the bytes a fresh one
    /// gives, for compressible and incompressible input.
    /// The delta stage's saving test relies on it: a raw delta within the bound is kept
    /// without compressing it, since compressed it can only be as long or shorter.
    #[test]
    fn output_is_never_longer_than_the_input() {
        for raw in [
            noise(20_000, 7),
            noise(1, 3),
            Vec::new(),
            b"ab".repeat(5000),
        ] {
            for c in [
                Compression::None,
                Compression::zstd(1),
                Compression::zstd(19),
            ] {
                assert!(c.compress(&raw).1.len() <= raw.len());
            }
        }
    }

    #[test]
    fn compress_into_a_used_buffer_is_compress() {
        let text: Vec<u8> = b"abcabcabd".repeat(3000);
        let noise = noise(20_000, 1);
        let mut buf = vec![9u8; 10];
        for c in [
            Compression::None,
            Compression::zstd(3),
            Compression::default(),
        ] {
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
        for c in [
            Compression::None,
            Compression::zstd(3),
            Compression::default(),
        ] {
            let (code, stored) = c.compress(&raw);
            assert_eq!(decompress(code, &stored, raw.len()).unwrap(), raw);
        }
        assert_eq!(Compression::parse("zstd:19"), Some(Compression::zstd(19)));
        assert_eq!(
            Compression::parse("zstd:3,9"),
            Some(Compression::Zstd {
                level: 3,
                text_level: Some(9)
            })
        );
        assert_eq!(Compression::parse("zstd"), Some(Compression::default()));
        for bad in [
            "zstd:99",
            "zstd:3,0",
            "zstd:3,",
            "zstd:,6",
            "zstd:3,6,9",
            "lz4",
        ] {
            assert_eq!(Compression::parse(bad), None, "{bad}");
        }
        assert!(decompress(CODEC_ZSTD, b"garbage", 10).is_err());
        assert!(decompress(7, b"", 0).is_err());
        let mut d = RegionDecompressor::default();
        let (code, stored) = Compression::zstd(3).compress(&raw);
        assert_eq!(d.decompress(code, &stored, raw.len()).unwrap(), raw);
        assert!(d.decompress(code, &stored, raw.len() - 1).is_err());
        assert!(d.decompress(code, b"junk", 10).is_err());
    }

    /// Text gets the text level, base64 of random bytes and random bytes the base level.
    #[test]
    fn text_level_only_for_regions_that_look_compressible() {
        let text = b"fn main() { println!(\"hello, world\"); }\n".repeat(100);
        let random = noise(4096, 0x9E37_79B9_7F4A_7C15);
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let base64: Vec<u8> = random.iter().map(|b| B64[(b & 63) as usize]).collect();
        assert!(looks_compressible(&text));
        assert!(!looks_compressible(&base64));
        assert!(!looks_compressible(&random));
        assert!(!looks_compressible(b""));
        let c = Compression::default();
        assert_eq!(c.level_for(&text), Some(6));
        assert_eq!(c.level_for(&base64), Some(3));
        assert_eq!(Compression::zstd(3).level_for(&text), Some(3));
        assert_eq!(Compression::None.level_for(&text), None);
    }

    /// A prefix decompressed alone is the same bytes as the front of the whole region, for
    /// every length and both codecs, whatever the reused buffer held; a damaged or short
    /// frame is an error, never fewer bytes.
    #[test]
    fn a_prefix_is_the_front_of_the_whole_region() {
        let text: Vec<u8> = b"def f(x):\n    return x + 1\n".repeat(20_000);
        let mut raw = text.clone();
        raw.extend(noise(300_000, 7));
        let mut d = RegionDecompressor::default();
        let mut out = vec![9u8; 1000];
        for level in [1, 6] {
            let (code, stored) = Compression::zstd(level).compress(&raw);
            assert_eq!(code, CODEC_ZSTD);
            for upto in [
                0,
                1,
                4095,
                131_072,
                131_073,
                600_000,
                raw.len() - 1,
                raw.len(),
            ] {
                d.decompress_prefix_into(code, &stored, raw.len(), upto, &mut out)
                    .unwrap();
                assert!(out.len() >= upto && out.len() <= upto + PREFIX_SLACK);
                assert!(out == raw[..out.len()], "level {level}, {upto} bytes");
            }
            // Past the end: the whole region.
            d.decompress_prefix_into(code, &stored, raw.len(), usize::MAX, &mut out)
                .unwrap();
            assert!(out == raw);
            // A frame cut short gives fewer bytes than asked: an error.
            let cut = &stored[..stored.len() / 2];
            assert!(d
                .decompress_prefix_into(code, cut, raw.len(), raw.len() - 10, &mut out)
                .is_err());
            assert!(d
                .decompress_prefix_into(code, b"junk", raw.len(), 10, &mut out)
                .is_err());
            // The context is usable again after an error.
            d.decompress_prefix_into(code, &stored, raw.len(), 5000, &mut out)
                .unwrap();
            assert!(out.len() >= 5000 && out == raw[..out.len()]);
        }
        d.decompress_prefix_into(CODEC_NONE, &raw, raw.len(), 100, &mut out)
            .unwrap();
        assert!(out == raw[..100]);
        assert!(d
            .decompress_prefix_into(CODEC_NONE, &raw[1..], raw.len(), 100, &mut out)
            .is_err());
        assert!(d
            .decompress_prefix_into(7, &raw, raw.len(), 100, &mut out)
            .is_err());
        // Damaged frames of every kind: an error or the right bytes, never a panic.
        let (code, stored) = Compression::zstd(3).compress(&raw[..200_000]);
        let mut seed = 1u64;
        for round in 0..300 {
            let mut bad = stored.clone();
            for _ in 0..1 + round % 4 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let at = (seed >> 33) as usize % bad.len();
                bad[at] ^= 1 << (seed % 8);
            }
            bad.truncate(bad.len() - round % 3);
            let upto = (seed >> 40) as usize % 200_000;
            if d.decompress_prefix_into(code, &bad, 200_000, upto, &mut out)
                .is_ok()
            {
                assert!(out.len() >= upto && out.len() <= 200_000);
            }
        }
    }
}
