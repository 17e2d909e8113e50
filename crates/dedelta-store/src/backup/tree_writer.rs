//! Runs on: the dedup thread.
//!
//! Encodes the snapshot's tree stream as the walk goes (see [`crate::format::tree`]) and stores
//! it through the chunk store like file data (cut with the same chunker, deduplicated,
//! compressed, but never delta-encoded), a few chunks at a time, so no snapshot needs its whole
//! tree in memory. A file's record is written when the file ends: its size is then the bytes
//! actually read (a file that shrinks or grows while it is read must not be recorded with its
//! old size). The price is that one file's recipe is held until its end (36 bytes per chunk,
//! about 0.4% of the file's size), as restore holds it too.

use super::dedup::DedupStage;
use super::fingerprint::IndexLookup;
use crate::error::{Error, Result};
use crate::format::snapshot::TreeRef;
use crate::format::tree::{ChunkRef, Node, TreeEncoder};
use bytes::Bytes;
use dedelta_core::chunker::{cut_buffer, Chunker, Cuts};
use dedelta_core::ChunkId;

/// The tree stream being written.
pub(super) struct TreeWriter<'c> {
    encoder: TreeEncoder,
    buf: Vec<u8>,
    chunks: Vec<ChunkId>,
    len: u64,
    chunker: &'c dyn Chunker,
    open_file: Option<(Node, Vec<ChunkRef>)>,
}

impl<'c> TreeWriter<'c> {
    /// A writer that cuts the stream with `chunker`.
    pub fn new(chunker: &'c dyn Chunker) -> Self {
        let mut w = TreeWriter {
            encoder: TreeEncoder::default(),
            buf: Vec::new(),
            chunks: Vec::new(),
            len: 0,
            chunker,
            open_file: None,
        };
        w.encoder.begin(&mut w.buf);
        w
    }

    /// A directory or symlink.
    pub fn node(&mut self, node: &Node) {
        self.encoder.node(node, &mut self.buf);
    }

    /// A file begins.
    pub fn file_start(&mut self, node: Node) {
        self.open_file = Some((node, Vec::new()));
    }

    /// The next chunk of the open file.
    pub fn file_chunk(&mut self, chunk: ChunkRef) -> Result<()> {
        match self.open_file.as_mut() {
            Some((_, recipe)) => {
                recipe.push(chunk);
                Ok(())
            }
            None => Err(Error::Pipeline("file data outside a file".into())),
        }
    }

    /// The open file ends: its record is encoded with the size its chunks hold.
    pub fn file_end(&mut self) -> Result<()> {
        let Some((mut node, recipe)) = self.open_file.take() else {
            return Err(Error::Pipeline("file end outside a file".into()));
        };
        node.size = recipe.iter().map(|c| u64::from(c.len)).sum();
        self.encoder.file_start(&node, &mut self.buf);
        for c in &recipe {
            self.encoder.chunk(c, &mut self.buf);
        }
        self.encoder.file_end(&mut self.buf);
        Ok(())
    }

    /// Stores the complete chunks of the encoded stream once a few have gathered.
    pub fn maybe_drain(&mut self, dedup: &mut DedupStage<'_>) -> Result<()> {
        if self.buf.len() >= 4 * self.chunker.max_size() {
            self.drain(dedup, false)?;
        }
        Ok(())
    }

    /// Ends the stream, stores the rest, and returns the snapshot's reference to it.
    pub fn finish(mut self, dedup: &mut DedupStage<'_>) -> Result<TreeRef> {
        self.encoder.end(&mut self.buf);
        self.drain(dedup, true)?;
        Ok(TreeRef {
            chunks: self.chunks,
            len: self.len,
        })
    }

    /// Stores the chunks that can be cut now; with `all`, the rest too.
    fn drain(&mut self, dedup: &mut DedupStage<'_>, all: bool) -> Result<()> {
        let Cuts {
            ranges,
            consumed_bytes,
        } = cut_buffer(self.chunker, &self.buf, all);
        for r in ranges {
            let chunk = Bytes::copy_from_slice(&self.buf[r]);
            let id = ChunkId::of(&chunk);
            self.len += chunk.len() as u64;
            dedup.add(id, chunk, None, IndexLookup::NotLookedUp, false)?;
            self.chunks.push(id);
        }
        self.buf.drain(..consumed_bytes);
        Ok(())
    }
}
