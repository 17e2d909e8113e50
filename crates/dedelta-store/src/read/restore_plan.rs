//! Runs on: restore's (and dump's) locating thread, inside its
//! [`super::PipelinedLocator`].
//!
//! Which regions to read ahead, where each read is a round trip (issue 19: a Garage cluster
//! answers a request in about 40 ms, and a restore that asked for its regions one at a time
//! spent 10 s on 229 of them). The reader announces the chunks it will fetch, in order, a
//! horizon ahead of their fetch ([`PipelinedLocator::read_ahead_bytes`]); batches of them are
//! planned here: their containers' metadata read several at a time, then the regions they
//! and the delta bases the decoder will lack lie in (following the decoder's base cache as
//! the fetches will, [`super::pipelined`]) requested through the locator
//! ([`ChunkLocator::request_regions`]). Memory: the regions requested but not yet fetched
//! are bounded in decompressed bytes (a quarter of the restore cache's budget, so that they
//! stay in the cache until used); past it, planning waits for fetches to catch up.
//!
//! [`PipelinedLocator::read_ahead_bytes`]: super::PipelinedLocator::read_ahead_bytes

use super::pipelined::chain_regions;
use super::ChunkLocator;
use dedelta_core::ChunkId;
use std::collections::VecDeque;

/// Chunks planned at once: their metadata is read in one batch of requests.
const PLAN_BATCH: usize = 256;

/// The chunks announced and not yet fetched, and what their regions read ahead cost.
pub(super) struct AheadPlan {
    /// Announced, not planned yet.
    upcoming: VecDeque<ChunkId>,
    /// Planned, not fetched yet, each with the decompressed bytes it keeps requested (a
    /// batch's bytes on its last chunk).
    planned: VecDeque<(ChunkId, u64)>,
    charged: u64,
    budget: u64,
    /// The decoder's base cache as it will be once the planned chunks are fetched.
    projected: super::IdLru<()>,
    /// Whether the decoder caches bases stored in full ([`super::full_bases_in_place`]).
    full_bases_in_place: bool,
}

impl AheadPlan {
    /// A plan keeping at most `budget` decompressed bytes requested ahead, the decoder
    /// holding the bases of `held` now.
    pub(super) fn new(budget: u64, held: &super::IdLru<()>, full_bases_in_place: bool) -> Self {
        AheadPlan {
            full_bases_in_place,
            upcoming: VecDeque::new(),
            planned: VecDeque::new(),
            charged: 0,
            budget: budget.max(1),
            projected: held.clone(),
        }
    }

    /// Chunks `ids` will be fetched next, after those announced before.
    pub(super) fn announce(
        &mut self,
        locator: &mut ChunkLocator<'_>,
        ids: impl IntoIterator<Item = ChunkId>,
    ) {
        self.upcoming.extend(ids);
        self.plan(locator);
    }

    /// Chunk `id` is fetched now: what was planned up to it is done with (chunks skipped,
    /// a failed file's, are passed over), arrived regions go into the cache, and more is
    /// planned.
    pub(super) fn fetching(&mut self, locator: &mut ChunkLocator<'_>, id: &ChunkId) {
        locator.take_arrived();
        if let Some(p) = self.planned.iter().position(|(i, _)| i == id) {
            for (_, c) in self.planned.drain(..=p) {
                self.charged -= c;
            }
        } else if let Some(p) = self.upcoming.iter().position(|i| i == id) {
            for (_, c) in self.planned.drain(..) {
                self.charged -= c;
            }
            self.upcoming.drain(..=p);
        }
        self.plan(locator);
    }

    /// Plans batches while the budget allows: a full batch, or what there is once the
    /// planned chunks run short.
    fn plan(&mut self, locator: &mut ChunkLocator<'_>) {
        while self.charged < self.budget
            && !self.upcoming.is_empty()
            && (self.upcoming.len() >= PLAN_BATCH || self.planned.len() < PLAN_BATCH)
        {
            let n = self.upcoming.len().min(PLAN_BATCH);
            let batch: Vec<ChunkId> = self.upcoming.drain(..n).collect();
            locator.read_chain_metas(&batch, &self.projected);
            let mut wanted = Vec::new();
            for id in &batch {
                chain_regions(
                    locator,
                    id,
                    &mut self.projected,
                    &mut wanted,
                    self.full_bases_in_place,
                );
            }
            let bytes = locator.request_regions(&wanted);
            self.charged += bytes;
            let last = batch.len() - 1;
            self.planned.extend(
                batch
                    .into_iter()
                    .enumerate()
                    .map(|(i, id)| (id, if i == last { bytes } else { 0 })),
            );
        }
    }
}
