//! The zstd context behind [`super::RegionDecompressor::decompress_prefix_into`]: zstd's
//! buffer-less streaming decompression (`ZSTD_decompressContinue`), which the safe bindings do
//! not offer, so the only unsafe code of the crate's codecs lives here.

use super::CompressError;
use zstd::zstd_safe::zstd_sys;

/// A zstd context for buffer-less streaming decompression (`ZSTD_decompressContinue`), which
/// the safe bindings do not offer.
pub(super) struct BlockDecoder(std::ptr::NonNull<zstd_sys::ZSTD_DCtx>);

// SAFETY: a zstd context has no affinity to a thread; it is used by one at a time (`&mut`).
unsafe impl Send for BlockDecoder {}

impl Drop for BlockDecoder {
    fn drop(&mut self) {
        // SAFETY: the context was made by ZSTD_createDCtx and is freed once.
        unsafe {
            zstd_sys::ZSTD_freeDCtx(self.0.as_ptr());
        }
    }
}

impl BlockDecoder {
    pub(super) fn new() -> Option<Self> {
        // SAFETY: plain constructor; null on allocation failure.
        std::ptr::NonNull::new(unsafe { zstd_sys::ZSTD_createDCtx() }).map(BlockDecoder)
    }

    /// Decodes the frame `stored` into `out` (empty, with at least `room` bytes of
    /// capacity), block after block, until it holds `upto` bytes or the frame ends.
    pub(super) fn decode_prefix(
        &mut self,
        stored: &[u8],
        upto: usize,
        room: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CompressError> {
        debug_assert!(out.is_empty() && out.capacity() >= room);
        let room = room.min(out.capacity());
        let dctx = self.0.as_ptr();
        let check = |code: usize| -> Result<usize, CompressError> {
            // SAFETY: ZSTD_isError and ZSTD_getErrorName take any value; the name is a
            // static C string.
            unsafe {
                if zstd_sys::ZSTD_isError(code) == 0 {
                    return Ok(code);
                }
                let name = std::ffi::CStr::from_ptr(zstd_sys::ZSTD_getErrorName(code));
                Err(CompressError::Corrupt(name.to_string_lossy().into_owned()))
            }
        };
        // SAFETY: `dctx` is a live context owned by `self`.
        check(unsafe { zstd_sys::ZSTD_decompressBegin(dctx) })?;
        let (mut read, mut written) = (0usize, 0usize);
        while written < upto {
            // SAFETY: as above.
            let next = unsafe { zstd_sys::ZSTD_nextSrcSizeToDecompress(dctx) };
            if next == 0 {
                break; // the frame ended
            }
            let Some(src) = stored.get(read..read.saturating_add(next)) else {
                return Err(CompressError::Corrupt("truncated zstd frame".into()));
            };
            // SAFETY: `src` is `next` readable bytes; the destination is the vector's spare
            // capacity after the `written` bytes decoded so far (`room - written` bytes, all
            // within its allocation), contiguous with them as zstd's back-references need;
            // zstd writes at most that many bytes and returns how many, or an error.
            let n = check(unsafe {
                zstd_sys::ZSTD_decompressContinue(
                    dctx,
                    out.as_mut_ptr().add(written).cast(),
                    room - written,
                    src.as_ptr().cast(),
                    src.len(),
                )
            })?;
            read += next;
            written += n.min(room - written);
        }
        // SAFETY: the first `written` bytes were initialized by zstd, within the capacity.
        unsafe { out.set_len(written) };
        Ok(())
    }
}
