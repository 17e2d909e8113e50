//! Runs on: the caller's thread (the walker).
//!
//! Reads a file in blocks of about [`BLOCK_SIZE`] bytes and cuts each block into chunks with
//! the repository's chunker. A block ends at the last chunk boundary the chunker could decide;
//! the bytes after it are carried over into the next block, so chunk boundaries never depend
//! on the block size (the chunker sees at least its maximum chunk size, or the end of the file).
//!
//! Block buffers are reused ([`crate::buffers`]): a block goes back to the pool when the last
//! of its chunks is dropped.

use super::metrics::StageTimes;
use bytes::Bytes;
use dedelta_core::chunker::{cut_buffer, Chunker, Cuts};
use std::io::Read;
use std::ops::Range;
use std::time::Instant;

/// Bytes read from a file per block (before cutting chunks).
pub(super) const BLOCK_SIZE: usize = 1 << 20;

/// A block and the chunks cut from it.
pub(super) struct Block {
    /// The block's bytes; the chunks are slices of it.
    pub bytes: Bytes,
    /// The chunks, in order, covering `0..len`.
    pub cuts: Vec<Range<usize>>,
    /// Bytes of the file the chunks cover.
    pub len: usize,
}

/// Free block buffers, shared by the readers of one backup and the blocks they made.
pub(super) type BlockPool = crate::buffers::BufferPool;

/// A block's buffer, back to its pool when the last [`Bytes`] of it is dropped.
struct Pooled {
    buf: Vec<u8>,
    pool: BlockPool,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

/// `buf` as shared bytes, back to `pool` when the last slice of it is dropped.
pub(super) fn pooled_bytes(buf: Vec<u8>, pool: BlockPool) -> Bytes {
    Bytes::from_owner(Pooled { buf, pool })
}

/// Reads one file as blocks of chunks.
pub(super) struct BlockReader<'c> {
    chunker: &'c dyn Chunker,
    pool: BlockPool,
    buf: Vec<u8>,
    eof: bool,
    /// The read error that ended the file early, if one did (the file is stored as read).
    pub error: Option<std::io::Error>,
}

impl<'c> BlockReader<'c> {
    /// A reader cutting with `chunker`, its buffers from `pool`.
    pub fn new(chunker: &'c dyn Chunker, pool: BlockPool) -> Self {
        BlockReader {
            chunker,
            buf: pool.take(BLOCK_SIZE + chunker.max_size()),
            pool,
            eof: false,
            error: None,
        }
    }

    /// The next block of `f`; `None` once the file is consumed. Cutting is timed in `times`.
    pub fn next_block(&mut self, f: &mut dyn Read, times: &StageTimes) -> Option<Block> {
        let max = self.chunker.max_size();
        loop {
            if self.eof && self.buf.is_empty() {
                return None;
            }
            while !self.eof && self.buf.len() < BLOCK_SIZE {
                // Read into the buffer's spare capacity: zero-filling it first (`resize`) cost
                // a memset of every block on the walker's thread. `read_to_end` keeps what was
                // read before an error, and reads short of the limit only at the end of the
                // file (it retries interrupted reads).
                let want = (BLOCK_SIZE.max(self.buf.len() + max) - self.buf.len()) as u64;
                match (&mut *f).take(want).read_to_end(&mut self.buf) {
                    Ok(n) if (n as u64) < want => self.eof = true,
                    Ok(_) => {}
                    Err(e) => {
                        self.error = Some(e);
                        self.eof = true;
                    }
                }
            }
            let t = Instant::now();
            let Cuts {
                ranges: cuts,
                consumed_bytes: len,
            } = cut_buffer(self.chunker, &self.buf, self.eof);
            StageTimes::add(&times.chunk, t);
            let mut next = self.pool.take(BLOCK_SIZE + max);
            next.extend_from_slice(&self.buf[len..]);
            let bytes = pooled_bytes(std::mem::replace(&mut self.buf, next), self.pool.clone());
            if !cuts.is_empty() {
                return Some(Block { bytes, cuts, len });
            }
        }
    }
}

impl Drop for BlockReader<'_> {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}
