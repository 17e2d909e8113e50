//! Reading chunks on one thread: locate, then decode and verify (check, backup's base reads,
//! tree streams).

use super::decoder::base_unreadable;
use super::{corrupt, ChunkDecoder, ChunkLocator, ReadStats};
use crate::error::{Error, Result};
use crate::format::container::{ContainerId, EntryKind};
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;

/// Reads chunks on one thread, verifying every chunk returned.
pub struct ChunkReader<'a> {
    locator: ChunkLocator<'a>,
    decoder: ChunkDecoder,
    scratch: Vec<u8>,
}

impl<'a> ChunkReader<'a> {
    /// A reader with `cache_bytes` of decompressed regions.
    pub fn new(repo: &'a IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(ChunkReader {
            locator: ChunkLocator::new(repo, cache_bytes)?,
            decoder: ChunkDecoder::default(),
            scratch: Vec::new(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.locator.stats().merged(self.decoder.stats())
    }

    /// Re-reads the index, to see chunks committed since this reader was made.
    pub fn refresh_index(&mut self) -> Result<()> {
        self.locator.refresh_index()
    }

    /// The full chunk to use as a delta base for `id`: `id` itself if it is stored in full,
    /// else the base of its delta (deltas are one level deep). `None` if it is not indexed.
    pub fn base_of(&mut self, id: &ChunkId) -> Result<Option<ChunkId>> {
        Ok(match self.locator.kind_of(id)? {
            Some(EntryKind::Full) => Some(*id),
            Some(EntryKind::Delta { base }) => Some(base),
            None => None,
        })
    }

    /// The verified bytes of `base`, which must be stored in full; `None` if not indexed.
    pub fn read_base(&mut self, base: &ChunkId) -> Result<Option<Vec<u8>>> {
        match self.read(base, false) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Error::ChunkMissing(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads chunk `id`, decoding a delta against its base, and verifies its fingerprint.
    ///
    /// # Errors
    /// [`Error::ChunkMissing`] if it is not indexed; [`Error::CorruptChunk`] naming the
    /// container and chunk if any check fails (also when a delta's base is damaged).
    pub fn read_chunk(&mut self, id: &ChunkId) -> Result<Vec<u8>> {
        self.read(id, true)
    }

    fn read(&mut self, id: &ChunkId, allow_delta: bool) -> Result<Vec<u8>> {
        let c = self.locator.locate(id)?;
        let base = match c.delta_base {
            None => None,
            Some(_) if !allow_delta => {
                return Err(c.corrupt("a delta is used as a delta base".into()))
            }
            Some(b) => Some(match self.decoder.cached_base(&b) {
                Some(bytes) => bytes,
                None => {
                    let located = self
                        .locator
                        .locate(&b)
                        .map_err(|e| base_unreadable(&c, &b, &e))?;
                    self.decoder
                        .accept_base(&located)
                        .map_err(|e| base_unreadable(&c, &b, &e))?
                }
            }),
        };
        self.decoder
            .decode(
                &c,
                base.as_deref().map(|b| b.as_slice()),
                &mut self.scratch,
                true,
            )
            .map(|d| d.to_vec())
    }
}

/// Checks bytes against their fingerprint.
pub fn verify_chunk(id: &ChunkId, container: &ContainerId, data: &[u8]) -> Result<()> {
    if ChunkId::of(data) == *id {
        Ok(())
    } else {
        Err(corrupt(
            container,
            id,
            "content does not match its fingerprint".into(),
        ))
    }
}
