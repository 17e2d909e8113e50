//! Runs on: the caller's thread (the walker).
//!
//! Reads a file in blocks of about [`BLOCK_SIZE`] bytes and cuts each block into chunks with
//! the repository's chunker. A block ends at the last chunk boundary the chunker could decide;
//! the bytes after it are carried over into the next block, so chunk boundaries never depend
//! on the block size (the chunker sees at least its maximum chunk size, or the end of the file).

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

/// Reads one file as blocks of chunks.
pub(super) struct BlockReader<'c> {
    chunker: &'c dyn Chunker,
    buf: Vec<u8>,
    eof: bool,
    /// The read error that ended the file early, if one did (the file is stored as read).
    pub error: Option<std::io::Error>,
}

impl<'c> BlockReader<'c> {
    /// A reader cutting with `chunker`.
    pub fn new(chunker: &'c dyn Chunker) -> Self {
        BlockReader {
            chunker,
            buf: Vec::with_capacity(BLOCK_SIZE + chunker.max_size()),
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
                let old = self.buf.len();
                self.buf.resize(BLOCK_SIZE.max(old + max), 0);
                match f.read(&mut self.buf[old..]) {
                    Ok(0) => {
                        self.buf.truncate(old);
                        self.eof = true;
                    }
                    Ok(n) => self.buf.truncate(old + n),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => self.buf.truncate(old),
                    Err(e) => {
                        self.buf.truncate(old);
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
            let mut next = Vec::with_capacity(BLOCK_SIZE + max);
            next.extend_from_slice(&self.buf[len..]);
            let bytes = Bytes::from(std::mem::replace(&mut self.buf, next));
            if !cuts.is_empty() {
                return Some(Block { bytes, cuts, len });
            }
        }
    }
}
