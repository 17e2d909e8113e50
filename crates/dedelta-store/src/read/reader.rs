//! Reading chunks on one thread: locate, then decode and verify (check, backup's base reads,
//! tree streams).

use super::decoder::base_unreadable;
use super::{corrupt, ChunkDecoder, ChunkLocator, LocatedChunk, ReadStats};
use crate::error::{Error, Result};
use crate::format::config::MAX_DELTA_DEPTH;
use crate::format::container::{ContainerId, EntryKind};
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;
use std::sync::Arc;

/// Reads chunks on one thread, verifying every chunk returned.
pub struct ChunkReader<'a> {
    locator: ChunkLocator<'a>,
    decoder: ChunkDecoder,
    scratch: Vec<u8>,
    hasher: dedelta_core::ChunkHasher,
}

impl<'a> ChunkReader<'a> {
    /// A reader with `cache_bytes` of decompressed regions.
    pub fn new(repo: &'a IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(ChunkReader {
            locator: ChunkLocator::new(repo, cache_bytes)?,
            decoder: ChunkDecoder::new(repo.chunk_hasher()),
            scratch: Vec::new(),
            hasher: repo.chunk_hasher(),
        })
    }

    /// Meters the regions this reader reads as read for `purpose` (see
    /// [`ChunkLocator::reading_for`]).
    pub fn reading_for(mut self, purpose: crate::backend::wrap::metered::Purpose) -> Self {
        self.locator = self.locator.reading_for(purpose);
        self
    }

    /// Reads metadata sections whole (see [`ChunkLocator::reading_metas_whole`]).
    pub fn reading_metas_whole(mut self) -> Self {
        self.locator = self.locator.reading_metas_whole();
        self
    }

    /// Lets [`Self::request_base_regions`] read in the background, `in_flight` requests at
    /// once (where reads are round trips: backup's delta bases).
    pub(crate) fn reading_regions_in_background(mut self, in_flight: usize) -> Self {
        self.locator.read_regions_ahead_in_background(in_flight);
        self
    }

    /// Requests the regions of bases `ids` in the background (see
    /// [`ChunkLocator::request_base_regions`]).
    pub(crate) fn request_base_regions(
        &mut self,
        ids: &[ChunkId],
        held: &dyn Fn(&ChunkId) -> bool,
    ) -> u64 {
        self.locator.request_base_regions(ids, held)
    }

    /// Ranged requests made in the background so far.
    pub(crate) fn requests_in_background(&self) -> u64 {
        self.locator.requests_ahead()
    }

    /// How this reader's repository computes chunk ids.
    pub fn hasher(&self) -> dedelta_core::ChunkHasher {
        self.hasher
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.locator.stats().merged(self.decoder.stats())
    }

    /// Re-reads the index, to see chunks committed since this reader was made.
    pub fn refresh_index(&mut self) -> Result<()> {
        self.locator.refresh_index()
    }

    /// Reads ahead the metadata of the containers of `ids` (see
    /// [`ChunkLocator::read_metas_ahead`]).
    pub(crate) fn read_metas_ahead(
        &mut self,
        ids: &[ChunkId],
        threads: &mut crate::request_threads::RequestThreads,
    ) {
        self.locator.read_metas_ahead(ids, threads)
    }

    /// Reads ahead the metadata of `containers` (see
    /// [`ChunkLocator::read_container_metas_ahead`]).
    pub(crate) fn read_container_metas_ahead(
        &mut self,
        containers: &[crate::format::container::ContainerId],
        threads: &mut crate::request_threads::RequestThreads,
    ) {
        self.locator.read_container_metas_ahead(containers, threads)
    }

    /// Reads ahead the regions of `ids` (see [`ChunkLocator::read_regions_ahead`]).
    pub(crate) fn read_regions_ahead(
        &mut self,
        ids: &[ChunkId],
        threads: &mut crate::request_threads::RequestThreads,
    ) {
        self.locator.read_regions_ahead(ids, threads)
    }

    /// Reads ahead what reading `ids` will read: their containers' metadata, then their delta
    /// bases' down each chain (a level per round of requests), then the regions of all of
    /// them. A tree's chunks are deltas on its parent's (backup picks them as bases): read
    /// ahead without their bases, a restore's tree walk on the Garage benchmark then read
    /// six base regions one after another, three of them stalled 45 ms in the cluster.
    pub(crate) fn read_chains_ahead(
        &mut self,
        ids: &[ChunkId],
        threads: &mut crate::request_threads::RequestThreads,
    ) {
        let bases = self.locator.read_chain_metas_on(ids, threads, |_| true);
        let all = [ids, &bases].concat();
        self.locator.read_regions_ahead(&all, threads);
    }

    /// The container of the copy of `id` the index names, `None` if it is not indexed.
    pub fn container_of(&mut self, id: &ChunkId) -> Result<Option<ContainerId>> {
        self.locator.container_of(id)
    }

    /// How `id` is stored (from its container's metadata), `None` if it is not indexed.
    pub fn kind_of(&mut self, id: &ChunkId) -> Result<Option<EntryKind>> {
        self.locator.kind_of(id)
    }

    /// How `id` is stored, if that is known without a request (see
    /// [`ChunkLocator::kind_at_hand`]).
    pub fn kind_at_hand(&mut self, id: &ChunkId) -> Option<EntryKind> {
        self.locator.kind_at_hand(id)
    }

    /// The verified bytes of chunk `id` (a delta rebuilt along its chain), for use as a
    /// delta base; `None` if it is not indexed.
    pub fn read_base(&mut self, id: &ChunkId) -> Result<Option<Vec<u8>>> {
        match self.read(id, 0) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Error::ChunkMissing { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The verified bytes of delta `id`, decoded against `base_bytes`, the bytes of its base
    /// `base` (which the caller has verified). An error if `id` is not stored as a delta on
    /// `base`.
    pub fn read_on_base(
        &mut self,
        id: &ChunkId,
        base: &ChunkId,
        base_bytes: &[u8],
    ) -> Result<Vec<u8>> {
        let c = self.locator.locate(id)?;
        if c.delta_base != Some(*base) {
            return Err(c.corrupt(format!("is no longer a delta on {base}")));
        }
        self.decoder
            .decode(&c, Some(base_bytes), &mut self.scratch, true)
            .map(|d| d.to_vec())
    }

    /// Reads chunk `id`, decoding a delta against its base (a delta base may itself be a
    /// delta, up to [`MAX_DELTA_DEPTH`] deep), and verifies its fingerprint.
    ///
    /// # Errors
    /// [`Error::ChunkMissing`] if it is not indexed; [`Error::CorruptChunk`] naming the
    /// container and chunk if any check fails (also when a delta's base is damaged, or the
    /// chain is longer than [`MAX_DELTA_DEPTH`]).
    pub fn read_chunk(&mut self, id: &ChunkId) -> Result<Vec<u8>> {
        self.read(id, 0)
    }

    /// Reads chunk `id`, which is `depth` links down a delta chain.
    fn read(&mut self, id: &ChunkId, depth: u8) -> Result<Vec<u8>> {
        let c = self.locator.locate(id)?;
        let base = match c.delta_base {
            None => None,
            Some(_) if depth >= MAX_DELTA_DEPTH => return Err(chain_too_long(&c)),
            Some(b) => Some(match self.decoder.cached_base(&b) {
                Some(bytes) => bytes,
                None => {
                    let bytes = self
                        .read(&b, depth + 1)
                        .map_err(|e| base_unreadable(&c, &b, &e))?;
                    self.decoder.put_base(b, Arc::new(bytes))
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

/// The error for a delta chain longer than readers follow.
pub(crate) fn chain_too_long(c: &LocatedChunk) -> Error {
    c.corrupt(format!(
        "its delta chain is longer than {MAX_DELTA_DEPTH} (or loops)"
    ))
}

/// Checks bytes against their fingerprint, computed by `hasher` (the repository's).
pub fn verify_chunk(
    hasher: &dedelta_core::ChunkHasher,
    id: &ChunkId,
    container: &ContainerId,
    data: &[u8],
) -> Result<()> {
    if hasher.id(data) == *id {
        Ok(())
    } else {
        Err(corrupt(
            container,
            id,
            "content does not match its fingerprint".into(),
        ))
    }
}
