//! Placeholder, replaced by the algorithm-library work.

use super::{Chunker, ChunkerParams};

/// Placeholder chunker (cuts like fixed-size) until the real one lands.
#[derive(Clone, Debug)]
pub struct GearChunker {
    params: ChunkerParams,
}

impl GearChunker {
    /// Builds the chunker.
    pub fn new(params: ChunkerParams) -> Self {
        GearChunker { params }
    }
}

impl Chunker for GearChunker {
    fn next_chunk_len(&self, data: &[u8]) -> usize {
        data.len().min(self.params.avg_size).max(1)
    }

    fn params(&self) -> ChunkerParams {
        self.params
    }

    fn name(&self) -> &'static str {
        "gear"
    }
}
