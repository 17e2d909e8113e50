//! Runs on: the caller's thread, before the pipeline starts.
//!
//! The delta and dedup stages as a backup's options make them: the delta stage's candidates
//! (DupAdj on the parent's recipe, the sketch index), its bases (the reader that read the
//! parent's tree, LoopDelta's prefetch cache, the parent's tree chunks, the local base cache)
//! and the options that change how it decides; the dedup stage's Capping, LoopDelta parts and
//! look-ahead window.

use super::bases::BaseFetcher;
use super::dedup::DedupStage;
use super::delta::DeltaStage;
use super::dense::ReuseMonitor;
use super::metrics::StageTimes;
use super::parent::Parent;
use super::prefetch::PrefetchedBases;
use super::resemble::dupadj::DupAdj;
use super::resemble::CandidateSearch;
use super::tree_writer::ParentTree;
use super::{indexes, BackupOptions, Workers};
use crate::error::Result;
use crate::format::config::DeltaConfig;
use crate::repository::IndexedRepository;
use dedelta_core::sketch::Sketcher;
use std::sync::Arc;

/// The delta stage for `delta` (`None` when it detects no resemblance), and the parent's
/// tree for the new tree's delta bases (`None` then too). It takes from `parent` DupAdj's
/// recipe, the reader that read the parent's tree (whose caches hold what the bases need
/// again, see [`Parent`]) and the tree's chunks from the local tree cache; without deltas the
/// parent goes here, with its reader's view of the index. `dupadj_misses_sketcher` is given
/// when the stage sketches DupAdj's misses itself (`delta.sketch_dupadj_misses`).
#[allow(clippy::too_many_arguments)]
pub(super) fn delta_stage<'a>(
    repo: &'a IndexedRepository,
    delta: DeltaConfig,
    parent: Option<Parent<'a>>,
    prefetched: Option<&(Arc<PrefetchedBases>, usize)>,
    opts: &BackupOptions,
    workers: &'a Workers,
    dupadj_misses_sketcher: Option<&Arc<dyn Sketcher>>,
    times: &Arc<StageTimes>,
    notices: &mut Vec<String>,
) -> Result<(Option<DeltaStage<'a>>, Option<ParentTree>)> {
    if !delta.enabled() {
        return Ok((None, None));
    }
    let (recipe, reader, tree_chunks, tree) = match parent {
        Some(p) => (p.recipe, p.reader, p.tree_chunks, p.tree),
        None => (None, None, Vec::new(), None),
    };
    // Without a parent, DupAdj still walks this backup's own stored stream.
    let dupadj = delta
        .dupadj
        .then(|| DupAdj::new(recipe.unwrap_or_default()));
    let sketches = indexes::sketch_index(repo, &delta, prefetched)?;
    let mut bases = match reader {
        Some(r) => BaseFetcher::with_reader(repo, r, delta.base_cache_bytes, delta.max_depth)?,
        None => BaseFetcher::new(repo, delta.base_cache_bytes, delta.max_depth)?,
    };
    if let Some((p, _)) = prefetched {
        bases = bases.only_cached(p.clone());
    }
    bases.hold(tree_chunks);
    let mut stage = DeltaStage::new(
        delta,
        CandidateSearch::new(dupadj, sketches),
        bases,
        times.clone(),
        workers.delta.as_ref(),
        Some(&workers.pool),
    )?;
    if let Some(sk) = dupadj_misses_sketcher {
        stage.sketch_dupadj_misses(sk.clone());
    }
    if opts.loopdelta.inversed_delta {
        stage.inversed_delta();
    }
    // Where reads are round trips DupAdj's bases are read ahead of the stream (LoopDelta's
    // come from its prefetch cache; Capping decides a segment whole; `predict_bases` is on
    // only with DupAdj and a parent).
    if repo.reads_are_round_trips() && prefetched.is_none() && opts.rewriting.is_none() {
        stage.predict_bases();
    }
    // LoopDelta's bases come from its prefetch cache only (no local base cache).
    if let (Some(root), None) = (&opts.cache_dir, prefetched) {
        match crate::client::cache::repo_dir(root, &repo.config().id) {
            Ok(dir) => {
                // A backup that stores chunks again may change depths as it goes.
                let stores_again = opts.rewriting.is_some()
                    || opts.loopdelta.cache_aware_filter
                    || opts.loopdelta.inversed_delta;
                notices.extend(stage.use_local_cache(dir, !stores_again))
            }
            Err(e) => notices.push(format!("{e}; no local base cache")),
        }
    }
    Ok((Some(stage), tree))
}

/// `dedup` with the parts the options ask for: Capping's rewriting (taken from `opts`),
/// LoopDelta's reuse monitor over its prefetch cache, the cache-aware filter, and a
/// look-ahead window: LoopDelta's (`lookahead_bytes`), or, where the delta stage predicts
/// DupAdj's bases on an object store, one that gives their reads time
/// ([`super::BASE_READ_AHEAD_BYTES`]).
pub(super) fn dedup_options<'a>(
    mut dedup: DedupStage<'a>,
    opts: &mut BackupOptions,
    prefetched: Option<&(Arc<PrefetchedBases>, usize)>,
    lookahead_bytes: u64,
    predicting_bases: bool,
) -> DedupStage<'a> {
    if let Some(r) = opts.rewriting.take() {
        dedup = dedup.rewriting(r);
    }
    if let Some((p, _)) = prefetched {
        dedup = dedup.monitoring(ReuseMonitor::new(p.clone()));
    }
    if opts.loopdelta.cache_aware_filter {
        dedup = dedup.cache_aware_filter();
    }
    if prefetched.is_some() {
        dedup = dedup.looking_ahead(lookahead_bytes);
    } else if predicting_bases {
        dedup = dedup.looking_ahead(super::BASE_READ_AHEAD_BYTES);
    }
    dedup
}
