//! Zstd with the base as reference prefix: the modern equivalent of zdelta (a compressor whose
//! window starts with the base), and what `zstd --patch-from` does for whole files.
//!
//! Where Ddelta finds copies with Gear-chunked strings and leaves the literals to the container
//! compressor, zstd searches the base and the target already written with its own match
//! finder and entropy-codes what is left, so its deltas are compressed already and usually
//! smaller; it is slower to encode. Its output is delta format version 2 (see
//! [`super::format`]): the version byte, the target length, then one zstd frame without
//! checksum, dictionary id or content size (the chunk's fingerprint checks the result, and the
//! length is declared before the frame). Decoding needs the same base as prefix.

use super::{format, DeltaCodec, DeltaError};
use crate::varint;
use zstd::zstd_safe::{CCtx, CParameter, DCtx};

/// The delta's first byte: a zstd frame with the base as prefix.
pub const ZSTD_FORMAT_VERSION: u8 = 2;

/// The most a zstd frame can produce per byte of input: an RLE block of 128 KiB costs four
/// bytes. A declared length beyond it is refused before anything is reserved.
const MAX_EXPANSION: usize = 32 * 1024;

/// Zstd with the base as reference prefix, at a fixed level.
#[derive(Clone, Copy, Debug)]
pub struct ZstdRefCodec {
    /// The zstd level (1..=22).
    pub level: i32,
}

impl Default for ZstdRefCodec {
    fn default() -> Self {
        ZstdRefCodec { level: 3 }
    }
}

impl ZstdRefCodec {
    fn compress(&self, base: &[u8], target: &[u8]) -> Option<Vec<u8>> {
        let mut cctx = CCtx::try_create()?;
        for p in [
            CParameter::CompressionLevel(self.level),
            CParameter::ChecksumFlag(false),
            CParameter::ContentSizeFlag(false),
            CParameter::DictIdFlag(false),
            CParameter::WindowLog(window_log(base.len() + target.len())),
        ] {
            cctx.set_parameter(p).ok()?;
        }
        cctx.ref_prefix(base).ok()?;
        let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(target.len()));
        cctx.compress2(&mut frame, target).ok()?;
        Some(frame)
    }
}

impl DeltaCodec for ZstdRefCodec {
    fn encode(&self, base: &[u8], target: &[u8], out: &mut Vec<u8>) {
        assert!(
            target.len() <= format::MAX_TARGET_LEN,
            "target longer than the delta format allows"
        );
        if !target.is_empty() && base.starts_with(target) {
            // zstd ignores a prefix that the target repeats whole (measured: an identical 8 KiB
            // target compresses as if alone); one Copy says it in a few bytes.
            return format::write_copy_of_prefix(target, out);
        }
        match self.compress(base, target) {
            Some(frame) => {
                out.push(ZSTD_FORMAT_VERSION);
                varint::put(out, target.len() as u64);
                out.extend_from_slice(&frame);
            }
            // zstd refused (memory): an instruction delta that carries the target is valid too.
            None => format::write_literal(target, out),
        }
    }

    fn decode(&self, base: &[u8], delta: &[u8], out: &mut Vec<u8>) -> Result<(), DeltaError> {
        format::decode(base, delta, out)
    }

    fn name(&self) -> &'static str {
        "zstd"
    }
}

/// Decodes a version-2 delta whose declared target length is `target_len` and whose frame is
/// `frame`, appending the target to `out` (untouched on error).
pub(super) fn decode_frame(
    base: &[u8],
    target_len: usize,
    frame: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), DeltaError> {
    if target_len > frame.len().saturating_mul(MAX_EXPANSION) {
        return Err(DeltaError::Malformed(
            "zstd delta declares more than its frame can produce",
        ));
    }
    let mut dctx = DCtx::try_create().ok_or(DeltaError::Malformed("zstd context"))?;
    dctx.ref_prefix(base)
        .map_err(|_| DeltaError::Malformed("zstd prefix refused"))?;
    // One byte more than declared, so a frame that produces more is caught rather than cut.
    let mut buf = Vec::with_capacity(target_len + 1);
    let produced = dctx
        .decompress(&mut buf, frame)
        .map_err(|_| DeltaError::Malformed("bad zstd frame"))?;
    if produced != target_len {
        return Err(DeltaError::WrongLength {
            declared: target_len,
            produced,
        });
    }
    out.extend_from_slice(&buf);
    Ok(())
}

/// The window that covers the base and the target: zstd sizes it from the target alone
/// otherwise, and the base would fall outside it.
fn window_log(len: usize) -> u32 {
    len.next_power_of_two().trailing_zeros().clamp(10, 27)
}
