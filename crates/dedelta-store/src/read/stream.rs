//! A byte stream stored as chunks (a tree stream), read through a [`ChunkReader`].

use super::ChunkReader;
use dedelta_core::ChunkId;

/// A [`std::io::Read`] over a sequence of chunks (a stored byte stream such as a tree).
pub struct ChunkStreamReader<'r, 'a> {
    reader: &'r mut ChunkReader<'a>,
    ids: std::vec::IntoIter<ChunkId>,
    current: Vec<u8>,
    pos: usize,
    lens: Vec<u32>,
    /// The error that ended the stream, as it was: `Read` can only pass on a string of it.
    error: Option<crate::Error>,
}

impl<'r, 'a> ChunkStreamReader<'r, 'a> {
    /// Reads the concatenation of `ids`.
    pub fn new(reader: &'r mut ChunkReader<'a>, ids: Vec<ChunkId>) -> Self {
        ChunkStreamReader {
            reader,
            ids: ids.into_iter(),
            current: Vec::new(),
            pos: 0,
            lens: Vec::new(),
            error: None,
        }
    }

    /// The error a chunk read ended the stream with, if one did: what a decoder that read
    /// through this reader reports as a truncated stream was really this (an index found
    /// damaged, a missing container), and the caller should say so.
    pub fn take_error(&mut self) -> Option<crate::Error> {
        self.error.take()
    }

    /// The lengths of the chunks read so far, in order.
    pub fn chunk_lens(&self) -> &[u32] {
        &self.lens
    }
}

impl std::io::Read for ChunkStreamReader<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.current.len() {
            let Some(id) = self.ids.next() else {
                return Ok(0);
            };
            self.current = match self.reader.read_chunk(&id) {
                Ok(c) => c,
                Err(e) => {
                    let io = std::io::Error::other(e.to_string());
                    self.error = Some(e);
                    return Err(io);
                }
            };
            self.pos = 0;
            self.lens.push(self.current.len() as u32);
        }
        let n = buf.len().min(self.current.len() - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
