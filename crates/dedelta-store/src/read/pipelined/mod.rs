//! Reading chunks on two threads (restore, dump): one locates chunks and decompresses their
//! regions, the other decodes deltas, verifies and writes.

use super::locator::CopyRule;
use super::reader::chain_too_long;
use super::restore_plan::AheadPlan;
use super::{
    id_lru, ChunkLocator, IdLru, LocatedChunk, ReadStats, RestoreCacheChoice, RestoreCacheStats,
    RESTORE_BASE_CACHE_ENTRIES,
};
use crate::error::Result;
use crate::format::config::MAX_DELTA_DEPTH;
use crate::format::container::ContainerId;
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;
use std::collections::HashMap;

mod decode;
pub use decode::PipelinedDecoder;

/// What the locating thread hands over for one chunk: the chunk, and for a delta whose base
/// the decoding thread does not hold yet, the located bases down its chain, nearest first, to
/// a full chunk or one the decoder holds (or why one could not be found).
pub struct FetchedChunk {
    chunk: LocatedChunk,
    bases: Result<Vec<LocatedChunk>>,
}

impl FetchedChunk {
    /// The chunk's fingerprint.
    pub fn id(&self) -> &ChunkId {
        &self.chunk.id
    }

    /// The length of its original bytes.
    pub fn len(&self) -> usize {
        self.chunk.original_len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.chunk.original_len == 0
    }
}

/// The locating half of a two-thread read. It mirrors the decoding half's base cache (same
/// capacity, same sequence of uses, so the same LRU state) to send each base only when the
/// decoder does not hold it. The decoder caches only bases rebuilt from deltas, so a base
/// stored in full is sent each time a delta needs it (found again in the restore cache's
/// regions).
pub struct PipelinedLocator<'a> {
    locator: ChunkLocator<'a>,
    held: IdLru<()>,
    /// Where reads are round trips (an object store) and the cache is an LRU: the chunks
    /// announced ahead and their regions requested (see [`super::restore_plan`]).
    plan: Option<AheadPlan>,
    /// Whether the decoder uses bases stored in full where they lie, not cached
    /// ([`full_bases_in_place`]).
    in_place: bool,
}

/// How far ahead of its fetches a reader announces chunks, in restored bytes, when the
/// locator reads ahead ([`PipelinedLocator::read_ahead_bytes`]). Far enough that the
/// regions of the next files are requested while this one is restored, a few MB of chunk
/// ids and nodes held.
pub const READ_AHEAD_BYTES: u64 = 256 << 20;

/// Whether restore and dump, reading through restore cache `cache`, use delta bases stored in
/// full where they lie in their regions rather than copying them into the decoder's base
/// cache: only with an LRU of at least [`RESTORE_BASE_CACHE_ENTRIES`] containers (the
/// default), which still holds the region of a base when a later delta on it comes, about as
/// long as the base cache would have held the copy. Copied, 36,000 of the 47,337 bases of a
/// 1.2 GB tree's restore were 3 % of its CPU. With the small caches of the papers' runs (4 to
/// 150 containers) a base's container has usually gone by then, and reading it again cost a
/// third of the restore speed factor (SQLAlchemy, caches of 4 1 MiB containers: `greedy`
/// 1.14 -> 0.78), so there the bases are copied.
pub fn full_bases_in_place(cache: &RestoreCacheChoice) -> bool {
    matches!(cache, RestoreCacheChoice::Lru { containers } if *containers >= RESTORE_BASE_CACHE_ENTRIES)
}

/// Whether the decoding half keeps a link of a delta chain in its base cache, and so whether
/// the locating half's mirror of that cache takes it: a link rebuilt from a delta
/// (`link_is_delta`) always, one stored in full only when bases stored in full are not used
/// where they lie ([`full_bases_in_place`]). Both halves cache by this one rule, so that the
/// mirror holds what the decoder holds.
pub(crate) fn decoder_caches(link_is_delta: bool, full_bases_in_place: bool) -> bool {
    link_is_delta || !full_bases_in_place
}

impl<'a> PipelinedLocator<'a> {
    /// A locator whose regions go through the restore cache `cache` (an LRU's regions also
    /// bounded by `cache_bytes`).
    pub fn new(
        repo: &'a IndexedRepository,
        cache: RestoreCacheChoice,
        cache_bytes: usize,
    ) -> Result<Self> {
        let mut locator = ChunkLocator::with_restore_cache(repo, cache.build(cache_bytes))?;
        let held = id_lru(RESTORE_BASE_CACHE_ENTRIES);
        let lru = matches!(cache, RestoreCacheChoice::Lru { .. });
        if repo.reads_are_round_trips() {
            locator.read_regions_ahead_of_restore();
        }
        let in_place = full_bases_in_place(&cache);
        let plan = (locator.reads_ahead() && lru)
            .then(|| AheadPlan::new(cache_bytes as u64 / 4, &held, in_place));
        Ok(PipelinedLocator {
            locator,
            held,
            plan,
            in_place,
        })
    }

    /// If this locator reads ahead (where reads are round trips, with an LRU cache): how
    /// far ahead of its fetches, in restored bytes, the reader should [`Self::announce`]
    /// the chunks it will fetch.
    pub fn read_ahead_bytes(&self) -> Option<u64> {
        self.plan.as_ref().map(|_| READ_AHEAD_BYTES)
    }

    /// Chunks `ids` will be fetched next, in this order, after those announced before: their
    /// regions are read ahead (with [`Self::read_ahead_bytes`]), or else decompressed only as
    /// far as the announced chunks in them need. A chunk announced and never fetched (its
    /// file failed) costs only its read.
    pub fn announce(&mut self, ids: impl IntoIterator<Item = ChunkId>) {
        match self.plan.as_mut() {
            Some(plan) => plan.announce(&mut self.locator, ids),
            // Without reading ahead: regions are decompressed only as far as these chunks
            // need (see ChunkLocator::expect_chunks).
            None => self.locator.expect_chunks(ids),
        }
    }

    /// Ranged requests made ahead so far (see [`Self::announce`]).
    pub fn requests_ahead(&self) -> u64 {
        self.locator.requests_ahead()
    }

    /// Reads each chunk from the copy the snapshot's own backup referenced (see
    /// [`ChunkLocator::reading_own_copies`]).
    pub fn reading_own_copies(mut self, containers: &[ContainerId]) -> Self {
        self.locator = self.locator.reading_own_copies(containers);
        self
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.locator.stats()
    }

    /// The restore cache's counters.
    pub fn cache_stats(&self) -> RestoreCacheStats {
        self.locator.restore_cache_stats().unwrap_or_default()
    }

    /// The restore cache's assembly area in restored bytes, if it looks ahead (forward
    /// assembly): then the caller hands each area's chunks to [`Self::assemble`] before
    /// fetching them.
    pub fn area_bytes(&self) -> Option<u64> {
        self.locator.area_bytes()
    }

    /// Starts an assembly area of chunks `ids`, to be fetched next in this order: finds the
    /// regions they and the delta bases the decoder will lack lie in (see
    /// [`Self::regions_for`]), and reads them container by container, each container once
    /// (where reads are round trips, all requested at once, several in flight).
    /// What cannot be found or read here is left to [`Self::fetch`], which reports it for its
    /// file.
    pub fn assemble(&mut self, ids: &[ChunkId]) {
        self.locator.start_area();
        if self.locator.reads_ahead() {
            // Requested all at once, several in flight; each fetch waits for its own.
            let wanted = self.regions_for(ids);
            self.locator.request_regions(&wanted);
            return;
        }
        let mut order: Vec<(ContainerId, Vec<u32>)> = Vec::new();
        let mut slot: HashMap<ContainerId, usize> = HashMap::new();
        for (cid, region) in self.regions_for(ids) {
            let i = *slot.entry(cid).or_insert_with(|| {
                order.push((cid, Vec::new()));
                order.len() - 1
            });
            order[i].1.push(region);
        }
        for (cid, mut regions) in order {
            regions.sort_unstable();
            regions.dedup();
            // An error is the chunk's, reported when it is fetched.
            let _ = self.locator.read_regions(cid, &regions);
        }
    }

    /// The regions (container, region) that fetching `ids` in this order reads, in that
    /// order: each chunk's, and those of the delta bases down its chain that the decoder will
    /// not hold (following the decoder's base cache as [`Self::fetch`] will). A chunk that
    /// cannot be placed is left out.
    fn regions_for(&mut self, ids: &[ChunkId]) -> Vec<(ContainerId, u32)> {
        let mut held = self.held.clone();
        let mut wanted = Vec::new();
        for id in ids {
            chain_regions(&mut self.locator, id, &mut held, &mut wanted, self.in_place);
        }
        wanted
    }

    /// Locates chunk `id` (and the bases down its delta chain that the decoder will need).
    ///
    /// Reading own copies, the chunk's copy is located by [`CopyRule::Own`] and its bases by
    /// [`CopyRule::OwnFull`] (at most one own delta, at the top of the chain). If the chain
    /// fails that way (a base's copy damaged, or a chain too long), it is located again from
    /// the index's copies alone, the copies `check` verifies: reading own copies never fails
    /// a chunk that the index's copies restore.
    pub fn fetch(&mut self, id: &ChunkId) -> Result<FetchedChunk> {
        if let Some(plan) = self.plan.as_mut() {
            plan.fetching(&mut self.locator, id);
        }
        let chunk = self.locator.locate(id)?;
        let fetched = self.fetch_bases(chunk, CopyRule::OwnFull);
        if fetched.bases.is_err() && self.locator.reads_own_copies() {
            if let Ok(chunk) = self.locator.locate_by(id, CopyRule::Index) {
                let retried = self.fetch_bases(chunk, CopyRule::Index);
                if retried.bases.is_ok() {
                    return Ok(retried);
                }
            }
        }
        Ok(fetched)
    }

    /// `chunk` with the bases down its delta chain that the decoder will need, each located
    /// by `rule`.
    fn fetch_bases(&mut self, chunk: LocatedChunk, rule: CopyRule) -> FetchedChunk {
        let mut bases = Vec::new();
        let mut next = chunk.delta_base;
        let found = loop {
            let Some(b) = next else { break Ok(()) };
            if self.held.get(&b).is_some() {
                break Ok(());
            }
            if bases.len() >= usize::from(MAX_DELTA_DEPTH) {
                break Err(chain_too_long(&chunk));
            }
            match self.locator.locate_by(&b, rule) {
                Ok(located) => {
                    next = located.delta_base;
                    bases.push(located);
                }
                Err(e) => break Err(e),
            }
        };
        // The decoder caches the bases it rebuilds from deltas, farthest first, and none if
        // one fails; a base stored in full it uses in place, so it is located again next time.
        let bases = found.map(|()| {
            for b in bases
                .iter()
                .rev()
                .filter(|b| decoder_caches(b.delta_base.is_some(), self.in_place))
            {
                self.held.put(b.id, ());
            }
            bases
        });
        FetchedChunk { chunk, bases }
    }
}

/// Pushes onto `wanted` the regions (container, region) that fetching `id` next reads: its
/// own, and those of the delta bases down its chain that the decoder will not hold, `held`
/// being the decoder's base cache before the fetch, updated as the fetch will update it. A
/// chunk that cannot be placed adds nothing.
pub(super) fn chain_regions(
    locator: &mut ChunkLocator<'_>,
    id: &ChunkId,
    held: &mut IdLru<()>,
    wanted: &mut Vec<(ContainerId, u32)>,
    full_bases_in_place: bool,
) {
    let Some((cid, region, mut next)) = locator.place(id, CopyRule::Own) else {
        return;
    };
    wanted.push((cid, region));
    let mut chain = Vec::new();
    while let Some(b) = next {
        if held.get(&b).is_some() {
            break;
        }
        if chain.len() >= usize::from(MAX_DELTA_DEPTH) {
            chain.clear();
            break;
        }
        let Some((cid, region, below)) = locator.place(&b, CopyRule::OwnFull) else {
            chain.clear();
            break;
        };
        wanted.push((cid, region));
        chain.push((b, below.is_some()));
        next = below;
    }
    // As fetch_bases: only the bases rebuilt from deltas are cached.
    for (b, _) in chain
        .iter()
        .rev()
        .filter(|(_, is_delta)| decoder_caches(*is_delta, full_bases_in_place))
    {
        held.put(*b, ());
    }
}

/// Chunks a batch of [`receive_batch`] or [`SendBatch`] holds at most.
const BATCH_ITEMS: usize = 128;
/// Bytes of chunks a batch of [`receive_batch`] holds at most: each delta of a batch is
/// rebuilt into a buffer of its own, and at 2 MiB those buffers' first touch cost a dump of
/// 8 MB (prettier) 900 more page faults than decoding one chunk at a time.
const BATCH_BYTES: usize = 512 << 10;

/// Receives the next batch from the locating half into `batch` (emptied first): waits for one
/// item, then takes what the channel already holds, up to [`BATCH_ITEMS`] items or
/// [`BATCH_BYTES`] by `bytes`. False once the channel is closed and empty. When the decoding
/// thread keeps up, batches stay small and nothing waits for them to fill.
pub fn receive_batch<T>(
    rx: &crossbeam_channel::Receiver<T>,
    batch: &mut Vec<T>,
    bytes: impl Fn(&T) -> usize,
) -> bool {
    batch.clear();
    let Ok(first) = rx.recv() else {
        return false;
    };
    let mut held = bytes(&first);
    batch.push(first);
    while batch.len() < BATCH_ITEMS && held < BATCH_BYTES {
        let Ok(next) = rx.try_recv() else { break };
        held += bytes(&next);
        batch.push(next);
    }
    true
}

/// Bytes of located chunks a [`SendBatch`] gathers before it sends them (at least): a batch
/// the decoding thread shares with its helper (see [`PipelinedDecoder::decode_batch`]).
const SEND_BYTES: usize = 256 << 10;

/// Located chunks gathered for one send to the decoding thread, which [`receive_batch`]
/// would otherwise take one at a time: sent one by one, each woke the decoding thread, which
/// keeps up and waits on the channel (a futex wake per chunk, 5 % of a dump's locating
/// thread, the thread that bounds its time). Full at [`BATCH_ITEMS`] chunks or
/// [`SEND_BYTES`].
#[derive(Default)]
pub(crate) struct SendBatch {
    chunks: Vec<FetchedChunk>,
    bytes: usize,
}

impl SendBatch {
    /// Adds `fetched`, and sends the batch once it is full; an error if the decoding side is
    /// gone.
    pub(crate) fn push(
        &mut self,
        fetched: FetchedChunk,
        tx: &crossbeam_channel::Sender<Vec<FetchedChunk>>,
    ) -> std::result::Result<(), ()> {
        self.bytes += fetched.len();
        self.chunks.push(fetched);
        if self.chunks.len() >= BATCH_ITEMS || self.bytes >= SEND_BYTES {
            return self.flush(tx);
        }
        Ok(())
    }

    /// Sends what is gathered, if anything.
    pub(crate) fn flush(
        &mut self,
        tx: &crossbeam_channel::Sender<Vec<FetchedChunk>>,
    ) -> std::result::Result<(), ()> {
        self.bytes = 0;
        if self.chunks.is_empty() {
            return Ok(());
        }
        tx.send(std::mem::take(&mut self.chunks)).map_err(|_| ())
    }
}
