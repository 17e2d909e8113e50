//! Fixed-size chunking: every chunk is `avg_size` bytes. The baseline that shows why CDC
//! matters (an insertion shifts every later boundary).

use super::{Chunker, ChunkerParams};

/// Cuts every `avg_size` bytes.
#[derive(Clone, Debug)]
pub struct FixedChunker {
    params: ChunkerParams,
}

impl FixedChunker {
    /// Builds the chunker; chunks are `params.avg_size` long.
    pub fn new(params: ChunkerParams) -> Self {
        FixedChunker { params }
    }
}

impl Chunker for FixedChunker {
    fn next_chunk_len(&self, data: &[u8]) -> usize {
        data.len().min(self.params.avg_size).max(1)
    }

    fn params(&self) -> ChunkerParams {
        self.params
    }

    fn name(&self) -> &'static str {
        "fixed"
    }
}
