//! The streaming cut loop: every caller that turns a byte stream into chunks goes through
//! [`cut_buffer`].
//!
//! [`Chunker::next_chunk_len`] answers one question (how long is the chunk that starts here?)
//! and only under a contract: it must see at least [`Chunker::max_size`] bytes, or the whole
//! rest of the stream. A caller that reads a stream in pieces therefore cannot cut the last
//! `max_size - 1` bytes of a piece until more data arrives or the stream ends. This module
//! keeps that rule in one place:
//!
//! 1. append what was read to the buffer;
//! 2. `let cuts = cut_buffer(chunker, &buf, at_end)`: the chunks that can be cut now, and
//!    [`Cuts::consumed_bytes`], where they stop;
//! 3. use the chunks, then drop `buf[..consumed_bytes]` and keep the tail for the next round.
//!
//! Held to, this gives the same cut points as [`chunk_all`](super::chunk_all) over the whole
//! stream, whatever the piece sizes (the proptest below checks it for every chunker kind): the
//! property deduplication rests on, since a file must chunk the same way whether it was read in
//! 1 MiB blocks, from a pipe in 4 KiB reads, or as a tree stream grown entry by entry.
//!
//! The choice: one function that returns the ranges of a whole batch, rather than an iterator
//! that yields one chunk at a time. The callers either ship the batch to a worker pool with the
//! buffer it indexes, or walk it once; a `Vec` of ranges (16 bytes per ~8 KiB chunk) costs
//! nothing next to fingerprinting, and a plain value leaves no borrow of the buffer alive while
//! the caller drains it.

use super::Chunker;
use std::ops::Range;

/// The chunks [`cut_buffer`] could cut from a buffer, and where they stop.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cuts {
    /// Chunk ranges in buffer offsets, in order and contiguous: the first starts at 0, each
    /// starts where the one before ends, and the last ends at `consumed_bytes`. Empty when
    /// nothing could be cut yet.
    pub ranges: Vec<Range<usize>>,
    /// Bytes at the front of the buffer covered by `ranges`. The rest,
    /// `buf[consumed_bytes..]`, is not chunked yet: keep it and put the stream's next bytes
    /// after it. Equal to the buffer's length when the stream ended with this buffer.
    pub consumed_bytes: usize,
}

/// Cuts the chunks of `buf` whose boundaries are already certain.
///
/// `buf` holds the stream's bytes from a chunk boundary on (its start, or the
/// [`Cuts::consumed_bytes`] of the previous call): the unconsumed tail of the last buffer
/// followed by newly read bytes. `at_end` says that no bytes follow `buf` in the stream.
///
/// A chunk is cut at offset `pos` when at least [`Chunker::max_size`] bytes remain from `pos`,
/// or when `at_end` (then the rest is cut up to the last byte, the final chunk possibly shorter
/// than `min_size`). So with `at_end == false` up to `max_size - 1` bytes (fewer than a
/// chunk's worth of look-ahead) are left over; a buffer of at least `max_size` bytes always
/// yields at least one chunk. An empty buffer yields no chunk.
///
/// The cut points are those of [`chunk_all`](super::chunk_all) over the whole stream, however
/// the stream is split into buffers, provided each call continues from the previous call's
/// tail.
pub fn cut_buffer(chunker: &dyn Chunker, buf: &[u8], at_end: bool) -> Cuts {
    let max = chunker.max_size();
    let mut ranges = Vec::with_capacity(buf.len() / chunker.params().avg_size.max(1) + 1);
    let mut pos = 0;
    while pos < buf.len() && (at_end || buf.len() - pos >= max) {
        let end = (pos + max).min(buf.len());
        let len = chunker.next_chunk_len(&buf[pos..end]);
        debug_assert!(
            (1..=end - pos).contains(&len),
            "{} returned a chunk of {len} bytes from {} available",
            chunker.name(),
            end - pos
        );
        // A chunker that broke its contract must not loop forever or cut past the buffer.
        let len = len.clamp(1, end - pos);
        ranges.push(pos..pos + len);
        pos += len;
    }
    Cuts {
        ranges,
        consumed_bytes: pos,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunker::chunk_all;
    use crate::chunker::testutil::{pseudo_random, small_chunkers};
    use proptest::prelude::*;

    /// Feeds `data` in pieces of the given sizes (cycled; each at least one byte), carrying
    /// the unconsumed tail over, and returns the chunk ranges in stream offsets. With
    /// `late_eof`, the end of the stream is only signalled by one more call without new bytes
    /// (as a reader learns it from a read of 0 bytes).
    fn streamed(
        chunker: &dyn Chunker,
        data: &[u8],
        piece_sizes: &[usize],
        late_eof: bool,
    ) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut base = 0;
        let mut fed = 0;
        let mut eof_seen = false;
        let mut sizes = piece_sizes.iter().cycle();
        loop {
            let size = sizes.next().copied().unwrap_or(data.len()).max(1);
            let n = size.min(data.len() - fed);
            buf.extend_from_slice(&data[fed..fed + n]);
            fed += n;
            let at_end = fed == data.len() && (!late_eof || eof_seen);
            eof_seen = fed == data.len();
            let cuts = cut_buffer(chunker, &buf, at_end);
            let mut expected_start = 0;
            for r in &cuts.ranges {
                assert_eq!(r.start, expected_start, "ranges are contiguous");
                expected_start = r.end;
                out.push(base + r.start..base + r.end);
            }
            assert_eq!(expected_start, cuts.consumed_bytes);
            if !at_end {
                assert!(buf.len() - cuts.consumed_bytes < chunker.max_size());
            }
            base += cuts.consumed_bytes;
            buf.drain(..cuts.consumed_bytes);
            if at_end {
                assert!(
                    buf.is_empty(),
                    "the end of the stream is cut to the last byte"
                );
                return out;
            }
        }
    }

    #[test]
    fn empty_and_short_buffers() {
        let short = pseudo_random(4095, 3);
        let full = pseudo_random(4096, 3);
        for (kind, c) in small_chunkers() {
            let c = c.as_ref();
            assert_eq!(cut_buffer(c, &[], false), Cuts::default(), "{kind:?}");
            assert_eq!(cut_buffer(c, &[], true), Cuts::default(), "{kind:?}");
            assert_eq!(cut_buffer(c, &short, false), Cuts::default(), "{kind:?}");
            let cuts = cut_buffer(c, &short, true);
            assert_eq!(cuts.consumed_bytes, short.len(), "{kind:?}");
            assert_eq!(cuts.ranges, chunk_all(c, &short), "{kind:?}");
            // Exactly max_size bytes are enough look-ahead for one chunk.
            assert!(!cut_buffer(c, &full, false).ranges.is_empty(), "{kind:?}");
        }
    }

    #[test]
    fn byte_at_a_time_matches_whole() {
        let data = pseudo_random(20_000, 5);
        for (kind, c) in small_chunkers() {
            let whole = chunk_all(c.as_ref(), &data);
            assert_eq!(streamed(c.as_ref(), &data, &[1], false), whole, "{kind:?}");
            assert_eq!(streamed(c.as_ref(), &data, &[1], true), whole, "{kind:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Cut points do not depend on how the stream is split into buffers.
        #[test]
        fn cuts_independent_of_buffering(
            seed in any::<u64>(),
            len in 0usize..60_000,
            piece_sizes in prop::collection::vec(1usize..20_000, 1..16),
            late_eof in any::<bool>(),
        ) {
            let data = pseudo_random(len, seed);
            for (kind, c) in small_chunkers() {
                let whole = chunk_all(c.as_ref(), &data);
                let cuts = streamed(c.as_ref(), &data, &piece_sizes, late_eof);
                prop_assert_eq!(&cuts, &whole, "{:?}", kind);
            }
        }
    }
}
