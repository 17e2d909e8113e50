//! FastCDC 2020 through the `fastcdc` crate: Gear hashing with normalized chunking
//! (level 1) and the crate's fixed Gear table (seed 0).
//!
//! The crate version is pinned in Cargo.toml: its table decides every cut point, so a change
//! there would silently stop deduplication against older snapshots.

use super::{Chunker, ChunkerParams};
use ::fastcdc::v2020;

/// FastCDC with normalization level 1.
#[derive(Clone, Debug)]
pub struct FastCdcChunker {
    params: ChunkerParams,
    mask_s: u64,
    mask_l: u64,
}

impl FastCdcChunker {
    /// Builds the chunker; `params` must satisfy [`ChunkerParams::validate`].
    pub fn new(params: ChunkerParams) -> Self {
        let (mask_s, mask_l) = v2020::select_masks(params.avg_size, v2020::Normalization::Level1);
        FastCdcChunker {
            params,
            mask_s,
            mask_l,
        }
    }
}

impl Chunker for FastCdcChunker {
    fn next_chunk_len(&self, data: &[u8]) -> usize {
        let p = self.params;
        if data.len() <= p.min_size {
            return data.len();
        }
        let window = &data[..data.len().min(p.max_size)];
        let (_, len) = v2020::cut(
            window,
            p.min_size,
            p.avg_size,
            p.max_size,
            self.mask_s,
            self.mask_l,
            self.mask_s << 1,
            self.mask_l << 1,
        );
        len.clamp(1, window.len())
    }

    fn params(&self) -> ChunkerParams {
        self.params
    }

    fn name(&self) -> &'static str {
        "fastcdc"
    }
}
