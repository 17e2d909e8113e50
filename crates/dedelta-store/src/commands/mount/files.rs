//! Reading ranges of a mounted file: the chunks that cover the range, each rebuilt (delta
//! decoding against its base) and verified by [`ChunkReader`], the last ones kept decoded
//! because the kernel reads a file in pieces of 128 KiB, smaller than many chunks' span.

use super::Recipe;
use crate::error::{Error, Result};
use crate::read::{lru, ChunkReader};
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::sync::Arc;

/// Decoded chunks kept for the next read of the same file.
const DECODED_CHUNKS: usize = 64;

/// Reads file ranges through one [`ChunkReader`].
pub struct FileReader<'r> {
    reader: ChunkReader<'r>,
    decoded: LruCache<ChunkId, Arc<Vec<u8>>>,
}

impl<'r> FileReader<'r> {
    /// A reader keeping `cache_bytes` of decompressed regions.
    pub fn new(repo: &'r IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(FileReader {
            reader: ChunkReader::new(repo, cache_bytes)?,
            decoded: lru(DECODED_CHUNKS),
        })
    }

    /// Up to `size` bytes of the file `recipe` rebuilds, from `offset`.
    pub fn read(&mut self, recipe: &Recipe, offset: u64, size: u32) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(size as usize);
        let end = offset.saturating_add(u64::from(size));
        // The chunk holding `offset`: the last one starting at or before it.
        let first = recipe
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        for (i, c) in recipe.chunks.iter().enumerate().skip(first) {
            let start = recipe.starts[i];
            if start >= end {
                break;
            }
            let data = self.chunk(&c.id)?;
            if data.len() != c.len as usize {
                return Err(Error::corrupt(
                    format!("chunk {}", c.id.to_hex()),
                    format!("{} bytes, the recipe says {}", data.len(), c.len),
                ));
            }
            let from = offset.saturating_sub(start) as usize;
            let to = ((end - start) as usize).min(data.len());
            if from < to {
                out.extend_from_slice(&data[from..to]);
            }
        }
        Ok(out)
    }

    /// Chunk `id`, decoded.
    fn chunk(&mut self, id: &ChunkId) -> Result<Arc<Vec<u8>>> {
        if let Some(d) = self.decoded.get(id) {
            return Ok(Arc::clone(d));
        }
        let d = Arc::new(self.reader.read_chunk(id)?);
        self.decoded.put(*id, Arc::clone(&d));
        Ok(d)
    }
}
