//! Runs on: the dedup thread (and, with 4 or more threads, a pool of its own for encoding;
//! with fewer, the worker pool's free threads help with each batch, see [`crate::share`]).
//!
//! The delta stage of backup. New (non-duplicate) chunks are gathered per block, in stream
//! order, with their super-features (computed on the worker pool with the fingerprints; with
//! `delta.sketch_dupadj_misses`, the default, here and only for the chunks DupAdj leaves to
//! the sketch index, DARE §3.1: see delta_misses.rs), and decided as a batch:
//! 1. candidates are found in order ([`super::resemble`]: DupAdj first, then the sketch index;
//!    for a tree chunk, the parent snapshot's tree chunks at the same place, then the sketch
//!    index);
//! 2. one round per candidate rank: each chunk's next candidate base is fetched
//!    ([`super::bases`]) and the chunk is encoded against it ([`DeltaCodec`]); a chunk's second
//!    candidate is fetched only if its first did not give a delta worth keeping;
//! 3. a delta is kept only when it saves space (see [`DeltaConfig::min_saving`]; both sides
//!    compressed with zstd level 1) and is not above the re-anchoring bound
//!    ([`TREE_MAX_DELTA`] for tree chunks, [`DeltaConfig::reanchor`] for file data);
//! 4. full chunks (and deltas less deep than [`DeltaConfig::max_depth`]) become candidates and
//!    bases for later batches.
//!
//! With inversed delta compression ([`super::inverse`]) a candidate in a container the
//! current Capping segment gave up is never a direct base; a chunk left in full whose first
//! such candidate is similar enough gets that old chunk re-stored behind it as a delta. A
//! base-fragmented duplicate of the cache-aware filter ([`super::caf`]) takes its bases from
//! memory only.
//!
//! Detection and acceptance are counted apart ([`BackupSummary::delta_detected`] and the
//! `delta_rejected_*` counts): a chunk is detected when a delta was encoded for it, and its
//! smallest delta says whether it was kept or which test dropped it.
//!
//! Candidates of chunks within one batch come from earlier batches only, so that a base is
//! always decided (and stored) before it is used.

use super::bases::{Base, BaseCounts, BaseFetcher, LocalCacheSave};
use super::inverse::{InversedCopy, Inverter};
use super::metrics::StageTimes;
use super::resemble::{CandidateSearch, CandidateSource};
use super::saving::Compressibility;
use crate::error::Result;
use crate::format::config::DeltaConfig;
use crate::format::container::ContainerId;
use crate::format::snapshot::BackupSummary;
use crate::share::for_each_shared;
use bytes::Bytes;
use dedelta_core::delta::{new_codec, DeltaCodec};
use dedelta_core::sketch::{Sketcher, SuperFeatures};
use dedelta_core::ChunkId;
use rayon::prelude::*;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Largest delta kept for a tree chunk, as a fraction of the chunk's size; above it the chunk
/// is stored in full and becomes the base of the next versions. Deltas are one level deep, so
/// a tree chunk's base ages: with bases never renewed, tree deltas grew from 26% of the
/// chunk (second version) to 55-64% (later ones) on 20 SQLAlchemy versions, where renewing
/// them above half their chunk stored the trees in 1.17 MB instead of 1.54 (0.4: 1.20).
const TREE_MAX_DELTA: f64 = 0.5;

/// What the stage decided for a chunk.
pub enum Stored {
    /// Store in full.
    Full,
    /// Store as a delta against `base`.
    Delta {
        /// The base chunk (stored in full, or a delta less deep than the backup's bound).
        base: ChunkId,
        /// The delta instructions.
        delta: Vec<u8>,
        /// This chunk's depth: its base's plus one.
        depth: u8,
    },
}

/// A new chunk on its way through the stage.
pub struct NewChunk {
    /// Fingerprint.
    pub id: ChunkId,
    /// Bytes, in an allocation of their own (never a slice of a reader's block, which the
    /// chunk would keep alive as a base): the fingerprinting job copies the chunks the index
    /// did not hold (off the dedup thread), tree chunks are built apart, and a
    /// base-fragmented duplicate is copied on entry.
    pub data: Bytes,
    /// Super-features (empty without a sketch method).
    pub sfs: SuperFeatures,
    /// The decision.
    pub stored: Stored,
    /// Stored in full, an old similar chunk re-stored as a delta against it (inversed delta
    /// compression, see [`super::inverse`]), to be stored right behind it.
    pub inversed: Option<InversedCopy>,
    /// A base-fragmented duplicate stored again (see [`super::caf`]): its bases come from
    /// memory only.
    cached_only: bool,
    /// The first candidate met in an infrequently reused container, with its bytes: the
    /// chunk to invert if no other base is found.
    to_invert: Option<Base>,
    /// Candidate chunks in the order they are tried (before resolving deltas to bases).
    candidates: Vec<(ChunkId, CandidateSource)>,
    /// For a tree chunk, its positional hints (the parent's tree chunks at its place); `None`
    /// for file data, whose hint DupAdj gives.
    tree_hints: Option<Vec<ChunkId>>,
    /// Whether it is a tree chunk: those try every candidate and keep the smallest delta (a
    /// handful per backup, and a hint that overlaps its chunk only in part can save enough
    /// to pass while a later one saves much more).
    tree: bool,
    /// Bases already tried.
    bases_tried: Vec<ChunkId>,
    /// The base to try next, with its bytes.
    next_base: Option<(Base, CandidateSource)>,
    /// Stored size of the chunk alone, once computed.
    full_cost: Option<usize>,
    /// Where the base of the kept delta came from.
    source: Option<CandidateSource>,
    /// The smallest delta encoded for the chunk so far (its length), and why it was not kept
    /// (`None`: kept): the detection and acceptance counts of [`BackupSummary`].
    smallest: Option<(usize, Option<Rejected>)>,
}

impl NewChunk {
    fn new(
        id: ChunkId,
        data: Bytes,
        sfs: Option<SuperFeatures>,
        tree_hints: Option<Vec<ChunkId>>,
    ) -> Self {
        NewChunk {
            id,
            data,
            sfs: sfs.unwrap_or_default(),
            stored: Stored::Full,
            inversed: None,
            cached_only: false,
            to_invert: None,
            candidates: Vec::new(),
            tree: tree_hints.is_some(),
            tree_hints,
            bases_tried: Vec::new(),
            next_base: None,
            full_cost: None,
            source: None,
            smallest: None,
        }
    }

    /// The infrequent candidate to invert, taken (see [`super::inverse`]).
    pub(super) fn take_to_invert(&mut self) -> Option<Base> {
        self.to_invert.take()
    }

    /// A data chunk that DupAdj saw as new (and so has a place in its hints).
    fn dupadj_new(&self) -> bool {
        !self.tree && !self.cached_only
    }
}

/// Why an encoded delta was not kept; a delta that fails both tests counts under the bound,
/// which is tested first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rejected {
    /// Above the re-anchoring bound ([`DeltaConfig::reanchor`]).
    Reanchor,
    /// Above the tree bound ([`TREE_MAX_DELTA`]).
    TreeBound,
    /// Saves less than [`DeltaConfig::min_saving`].
    MinSaving,
}

/// The per-backup resemblance detection and delta encoding state.
pub struct DeltaStage<'a> {
    cfg: DeltaConfig,
    codec: Box<dyn DeltaCodec>,
    search: CandidateSearch<'a>,
    bases: BaseFetcher<'a>,
    batch: Vec<NewChunk>,
    times: Arc<StageTimes>,
    /// Delta encoding has a pool of its own when there are cores for it (4 or more threads):
    /// on the shared pool it would queue behind every fingerprinting and compression job in
    /// flight. With 2 cores, encoding on this thread measured 2-3x faster than either pool
    /// (0.04-0.06 s against 0.11-0.15 s per 60 MB version), the pool's cores being busy anyway.
    encode_pool: Option<&'a rayon::ThreadPool>,
    /// Without a pool of its own, the worker pool, whose free threads help this thread
    /// through a batch (see [`crate::share`]).
    share_with: Option<&'a rayon::ThreadPool>,
    /// With `delta.sketch_dupadj_misses` (DARE §3.1): the sketch method, for the new data
    /// chunks DupAdj did not resolve (see [`Self::sketch_dupadj_misses`]).
    misses_sketcher: Option<Arc<dyn Sketcher>>,
    /// Inversed delta compression, when on (see [`super::inverse`]).
    inverse: Option<Inverter>,
    /// DupAdj's candidates predicted as chunks enter the look-ahead window, for their
    /// regions to be read ahead (see [`super::base_ahead`]).
    predictor: Option<super::base_ahead::BasePredictor>,
    /// How well the chunks compressed alone so far: when the saving test may do without
    /// compressing one (see [`super::saving`]).
    compressibility: Compressibility,
}

impl<'a> DeltaStage<'a> {
    /// Sets the stage up for one backup.
    pub fn new(
        cfg: DeltaConfig,
        search: CandidateSearch<'a>,
        bases: BaseFetcher<'a>,
        times: Arc<StageTimes>,
        encode_pool: Option<&'a rayon::ThreadPool>,
        share_with: Option<&'a rayon::ThreadPool>,
    ) -> Result<Self> {
        cfg.validate()?;
        Ok(DeltaStage {
            codec: new_codec(cfg.codec),
            cfg,
            search,
            bases,
            batch: Vec::new(),
            times,
            encode_pool,
            share_with,
            misses_sketcher: None,
            inverse: None,
            predictor: None,
            compressibility: Compressibility::default(),
        })
    }

    /// Predicts DupAdj's candidates as chunks enter the look-ahead window and reads their
    /// regions ahead (see [`super::base_ahead`]); for repositories whose reads are round
    /// trips. Only with DupAdj and a parent to walk: without one there is nothing to
    /// predict, and the window only delayed the stream (a first backup of 306 MB on the
    /// Garage benchmark took 0.92 s against 0.85).
    pub fn predict_bases(&mut self) {
        let walks_a_parent = self.search.dupadj().is_some_and(|d| !d.parent().is_empty());
        if walks_a_parent {
            self.predictor = Some(super::base_ahead::BasePredictor::default());
        }
    }

    /// Whether [`Self::predict_bases`] is on.
    pub fn predicts_bases(&self) -> bool {
        self.predictor.is_some()
    }

    /// A chunk of file data entered the look-ahead window, a duplicate the index holds or not:
    /// the predicted bases are read ahead once enough have gathered ([`Self::flush_predicted`]
    /// reads the rest).
    pub fn predict_entering(&mut self, id: &ChunkId, duplicate: bool) {
        let (Some(p), Some(dupadj)) = (self.predictor.as_mut(), self.search.dupadj()) else {
            return;
        };
        p.enter(dupadj.parent(), id, duplicate);
        if let Some(ids) = p.take(false) {
            self.bases.read_ahead(&ids);
        }
    }

    /// Reads ahead the predictions gathered so far.
    pub fn flush_predicted(&mut self) {
        if let Some(ids) = self.predictor.as_mut().and_then(|p| p.take(true)) {
            self.bases.read_ahead(&ids);
        }
    }

    /// Turns inversed delta compression on (see [`super::inverse`]).
    pub fn inversed_delta(&mut self) {
        self.inverse = Some(Inverter::default());
    }

    /// The containers the current segment gave up (rewriting): their chunks are no direct
    /// bases; with inversed delta compression they are inverted instead.
    pub fn set_infrequent(&mut self, given_up: HashSet<ContainerId>) {
        if let Some(inv) = self.inverse.as_mut() {
            inv.infrequent = given_up;
        }
    }

    /// A base-fragmented duplicate stored again (see [`super::caf`]): decided with the next
    /// batch, against bases in memory only. DupAdj saw it as a duplicate.
    pub fn push_cached_only(&mut self, id: ChunkId, data: Bytes, sfs: Option<SuperFeatures>) {
        self.batch.push(NewChunk {
            cached_only: true,
            // No positional hint: DupAdj counts it as a duplicate, not a new chunk.
            tree_hints: Some(Vec::new()),
            // A duplicate's bytes are a slice of the block (see `NewChunk::data`).
            ..NewChunk::new(id, Bytes::copy_from_slice(&data), sfs, None)
        });
    }

    /// Reads bases from the local base cache in directory `path` (see
    /// [`BaseFetcher::use_local_cache`]).
    pub fn use_local_cache(&mut self, path: PathBuf, depths: bool) -> Option<String> {
        self.bases.use_local_cache(path, depths)
    }

    /// Updates the local base cache (see [`BaseFetcher::save_local_cache`]).
    pub fn save_local_cache(&mut self) -> LocalCacheSave {
        self.bases.save_local_cache()
    }

    /// Why candidate bases were skipped, for the backup's notices.
    pub fn take_notices(&mut self) -> Vec<String> {
        self.bases.take_notices()
    }

    /// Chunks the saving test compressed alone (see [`super::saving`]).
    pub fn saving_test_compressions(&self) -> u64 {
        self.compressibility.measured()
    }

    /// Where the bases came from so far.
    pub fn base_counts(&self) -> BaseCounts {
        self.bases.counts
    }

    /// A duplicate chunk went by, stored in `container` if already durable; `tree` for a
    /// chunk of the tree stream.
    pub fn on_duplicate(
        &mut self,
        id: &ChunkId,
        container: Option<ContainerId>,
        tree: bool,
    ) -> Result<()> {
        self.bases.note_duplicate(id);
        self.search.on_duplicate(id, container, !tree)
    }

    /// A new chunk, to be decided at the next [`Self::process`]; `sfs` are its super-features
    /// when the backup sketches; `tree_hints` are set for a chunk of the tree stream (see
    /// [`NewChunk::tree_hints`]), which DupAdj does not see.
    pub fn push_new(
        &mut self,
        id: ChunkId,
        data: Bytes,
        sfs: Option<SuperFeatures>,
        tree_hints: Option<Vec<ChunkId>>,
    ) {
        if tree_hints.is_none() {
            self.search.on_new(id);
        }
        self.batch.push(NewChunk::new(id, data, sfs, tree_hints));
    }

    /// Whether chunks are waiting.
    pub fn has_pending(&self) -> bool {
        !self.batch.is_empty()
    }

    /// Runs `job` on every item: on the stage's own pool when it has one, else on this
    /// thread with the worker pool's free threads helping.
    fn for_each<T: Send>(&self, items: &mut [T], job: impl Fn(&mut T) + Sync + Send) {
        match (self.encode_pool, self.share_with) {
            (Some(p), _) => p.install(|| items.par_iter_mut().for_each(job)),
            (None, Some(p)) => for_each_shared(p, p.current_num_threads(), items, job),
            (None, None) => items.iter_mut().for_each(job),
        }
    }

    /// Whether `c`'s candidate from `source` is taken only from memory, never read back:
    /// a chunk of LoopDelta's cache-aware filter, or a tree chunk's sketch candidate when the
    /// backup holds its parent's tree without having read it (the local tree cache): the
    /// parent's tree chunks at its place are its bases then, and an older tree's chunk
    /// that shares a super-feature would be read back at the end of the backup, on its
    /// critical path (the read of the parent's tree that the cache saved brought such
    /// chunks along, as the bases of the parent's).
    fn in_memory_only(&self, c: &NewChunk, source: CandidateSource) -> bool {
        c.cached_only
            || (c.tree && source != CandidateSource::ParentTree && self.bases.holds_a_tree())
    }

    /// The candidate chunk `c` tries in round `round`, if it tries one.
    fn round_candidate(&self, c: &NewChunk, round: usize) -> Option<(ChunkId, CandidateSource)> {
        if !self.tries_more(c) {
            return None;
        }
        c.candidates.get(round).copied()
    }

    /// Whether `c` goes on to its next candidate, if it has one: a chunk still in full or of
    /// the tree stream always does; one with a delta only under best-of-N, until the delta
    /// is good enough.
    fn tries_more(&self, c: &NewChunk) -> bool {
        let Stored::Delta { delta, .. } = &c.stored else {
            return true;
        };
        if c.tree {
            return true;
        }
        // FirstFit keeps the first delta that saves enough; best-of-N tries them all.
        if self.cfg.candidates == 1 {
            return false;
        }
        // Best-of-N stops at a delta that is good enough (`candidates_enough`).
        self.cfg
            .candidates_enough
            .is_none_or(|enough| delta.len() as f64 > c.data.len() as f64 * enough)
    }

    /// Decides the waiting chunks; returns them in stream order, except that with `hold` the
    /// unpaired new data chunks at the end of the batch (at most
    /// [`super::resemble::dupadj::MAX_HELD`]) wait for the next call, so that a duplicate
    /// right after them can still pair them (DupAdj's backward walk across a batch boundary);
    /// tree chunks behind them do not wait. Without `hold` (end of the stream) every chunk is
    /// decided.
    pub fn process(&mut self, summary: &mut BackupSummary, hold: bool) -> Result<Vec<NewChunk>> {
        let mut batch = std::mem::take(&mut self.batch);
        let data_chunks = batch.iter().filter(|c| c.dupadj_new()).count();
        let hints = self.search.take_dupadj_hints(data_chunks, hold);
        if hints.len() < data_chunks {
            // The held chunks are the batch's last data chunks.
            let mut data_seen = 0;
            let (now, held): (Vec<_>, Vec<_>) = batch.into_iter().partition(|c| {
                if !c.dupadj_new() {
                    return true;
                }
                data_seen += 1;
                data_seen <= hints.len()
            });
            batch = now;
            self.batch = held;
        }
        // Sketching DupAdj's misses only: the data chunks without a hint are sketched now, the
        // others after DupAdj's round (see `sketch_dupadj_misses_now`).
        if self.misses_sketcher.is_some() {
            let mut data_hints = hints.iter();
            let hinted: Vec<bool> = batch
                .iter()
                .map(|c| c.dupadj_new() && data_hints.next().is_some_and(Option::is_some))
                .collect();
            self.sketch_picked(&mut batch, |i, _| !hinted[i]);
        }
        let mut dupadj_hints = hints.into_iter();
        if batch.is_empty() {
            return Ok(batch);
        }
        // 1. Candidates, in order: the positional hints first (DupAdj's, or the parent's tree
        // chunks), then the sketch index's.
        let t = Instant::now();
        for c in batch.iter_mut() {
            let hints = match c.tree_hints.take() {
                Some(h) => h
                    .into_iter()
                    .map(|id| (id, CandidateSource::ParentTree))
                    .collect(),
                None => dupadj_hints
                    .next()
                    .flatten()
                    .map(|id| vec![(id, CandidateSource::DupAdj)])
                    .unwrap_or_default(),
            };
            c.candidates = self.search.candidates(hints, &c.sfs, self.cfg.candidates)?;
        }
        StageTimes::add(&self.times.base_read, t);
        // 2. Bases and delta encoding, one round per candidate rank.
        let mut rounds = batch.iter().map(|c| c.candidates.len()).max().unwrap_or(0);
        let mut round = 0;
        // Sketching DupAdj's misses only, round 1 comes even if no chunk had two candidates:
        // the misses' sketch candidates are found at its start.
        while round < rounds || (round == 1 && self.misses_sketcher.is_some()) {
            if round == 1 {
                rounds = rounds.max(self.sketch_dupadj_misses_now(&mut batch)?);
                if round >= rounds {
                    break;
                }
            }
            let t = Instant::now();
            let mut any = false;
            let wanted: Vec<ChunkId> = batch
                .iter()
                .filter_map(|c| {
                    let (id, source) = self.round_candidate(c, round)?;
                    (!self.in_memory_only(c, source)).then_some(id)
                })
                .collect();
            self.bases.prefetch(&wanted)?;
            for c in batch.iter_mut() {
                let Some((candidate, source)) = self.round_candidate(c, round) else {
                    continue;
                };
                let fetched = if self.in_memory_only(c, source) {
                    self.bases.fetch_in_memory(candidate)
                } else {
                    self.bases.fetch(candidate)?
                };
                if let Some(base) = fetched {
                    if let Some(inv) = self.inverse.as_mut() {
                        if inv.is_infrequent(&mut self.bases, &base)? {
                            if c.to_invert.is_none() && !c.tree && !c.cached_only {
                                c.to_invert = Some(base);
                            }
                            continue;
                        }
                    }
                    if base.id != c.id && !c.bases_tried.contains(&base.id) {
                        c.bases_tried.push(base.id);
                        c.next_base = Some((base, source));
                        any = true;
                    }
                }
            }
            StageTimes::add(&self.times.base_read, t);
            if any {
                let t = Instant::now();
                self.encode_candidates(&mut batch);
                StageTimes::add(&self.times.delta, t);
            }
            round += 1;
        }
        // Inversed deltas for the chunks left in full whose only base was infrequent.
        if let Some(inv) = self.inverse.as_mut() {
            let t = Instant::now();
            inv.invert(self.codec.as_ref(), &self.cfg, &mut batch);
            StageTimes::add(&self.times.delta, t);
        }
        // 3. Bookkeeping in order: full chunks become candidates and bases for later chunks.
        for c in &batch {
            if let Some(cost) = c.full_cost {
                self.compressibility.learn(c.data.len(), cost);
            }
            if let Some((len, why)) = c.smallest {
                summary.delta_detected += 1;
                summary.detected_source_bytes += c.data.len() as u64;
                summary.detected_delta_bytes += len as u64;
                match why {
                    None => {}
                    Some(Rejected::MinSaving) => summary.delta_rejected_min_saving += 1,
                    Some(Rejected::Reanchor) => summary.delta_rejected_reanchor += 1,
                    Some(Rejected::TreeBound) => summary.delta_rejected_tree_bound += 1,
                }
            }
            match &c.stored {
                Stored::Full => {
                    summary.bytes_after_delta += c.data.len() as u64;
                    self.search.stored_full(c.id, &c.sfs);
                    self.bases.remember(c.id, c.data.clone(), 0);
                }
                Stored::Delta { delta, depth, .. } => {
                    // A base for later chunks too, while shallow enough (bounded chains).
                    self.bases.remember(c.id, c.data.clone(), *depth);
                    summary.bytes_after_delta += delta.len() as u64;
                    summary.delta_chunks += 1;
                    summary.delta_source_bytes += c.data.len() as u64;
                    summary.delta_bytes += delta.len() as u64;
                    // The parent's tree chunk at the same place is duplicate adjacency's idea
                    // applied to the tree stream.
                    match c.source {
                        Some(CandidateSource::DupAdj | CandidateSource::ParentTree) => {
                            summary.dupadj_deltas += 1
                        }
                        _ => summary.sketch_deltas += 1,
                    }
                }
            }
        }
        Ok(batch)
    }
}

#[path = "delta_encode.rs"]
mod encode;
#[path = "delta_misses.rs"]
mod misses;
