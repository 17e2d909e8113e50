//! Runs on: the dedup thread.
//!
//! The cache-aware filter, CAF (LoopDelta §4.4): a duplicate whose stored copy is a delta
//! (an *old delta*) is restored by reading that delta's base too. Restore meets the chunks in
//! the order backup met them, so if the base's fingerprint is not in the fingerprint cache
//! when the duplicate is met, the base's container will most likely not be in the restore
//! cache either: the duplicate is *base-fragmented*, and the filter stores it again, so that
//! restore needs no extra container read for the base.
//!
//! Two steps, as the paper's:
//! 1. at fingerprint indexing, the old delta's base is looked up in the fingerprint cache
//!    (the [`LocalityIndex`](super::fingerprint_index::LocalityIndex)'s containers, never the
//!    disk): absent, the duplicate is base-fragmented; present, its container is noted;
//! 2. with rewriting (Capping), a duplicate that the strategy keeps is base-fragmented too
//!    when the noted container is one the segment gave up (an *infrequently reused*
//!    container, whose chunks may not serve as bases). A duplicate the strategy rewrites is
//!    rewritten anyway.
//!
//! A base-fragmented chunk is stored again like a new chunk, except that its delta base may
//! only come from memory (the backup's base cache: its own new chunks and the bases it
//! already holds, and with prefetching LoopDelta's "potential base chunk cache"), never read
//! back from the repository: a base read back would be the very extra read the filter
//! removes. It is sketched on the dedup thread (the pool sketches only the chunks it did not
//! find). Without such a base it is stored in full. The old copy becomes garbage, which prune
//! reclaims (the index names the newest copy, see [`super::rewrite`]).
//!
//! The fingerprint cache judged is the one the dedup thread's stream fills
//! ([`super::fingerprint_index::LocalityIndex::judging_in_stream_order`]): the pool's
//! lookups run ahead of the stream, on several threads, and judging by their cache made the
//! judgments depend on thread timing. With LoopDelta's prefetching a duplicate is judged as
//! it enters the dedup thread's look-ahead window ([`super::lookahead`]), right after its
//! container was taken into that view and the potential base chunk cache: the view is the
//! one deduplication has at that position, as at the paper's fingerprint indexing stage.
//!
//! A duplicate stored twice before (the old delta and an earlier rewrite of it) is judged by
//! the copy the index names, the rewrite: the fingerprint cache leaves out copies a newer
//! one superseded (see [`super::fingerprint_index`]). Before, it judged whichever copy's
//! container was loaded last, and asked the on-disk index before calling a duplicate
//! fragmented; the stored bytes of a backup with the filter varied from run to run.
//!
//! The view costs no read of its own: it takes each container's metadata from what the
//! pool's lookups read for deduplication. The paper's filter only looks at "the recently
//! prefetched metadata" and so adds no I/O to backup; before, the view read a container's
//! metadata again whenever the pool's cache, running ahead of the stream, no longer held it,
//! and with caches of a few containers that made the filter's backups re-read most
//! containers they had just read (1.52x deduplication's modelled disk time on the
//! SQLAlchemy tar series with 4-container caches, 1.14x with 8). Metadata either cache
//! evicts while the other does not hold it is now kept a while (64 containers) for the other
//! (see `StreamView` in [`super::fingerprint_index`]); what the view holds at each stream
//! position, and so each judgement, is as before.
//!
//! Choices made:
//! - The filter needs the fingerprint cache: it is refused with the exact index, which has
//!   none (every base would look fragmented).
//! - The paper looks in the first 20 (64 without rewriting) cache slots to save CPU; the cache
//!   here is a hash map over every cached container, so the whole cache is searched at the
//!   same cost.
//! - A duplicate whose own container's metadata cannot be read is not judged. Counted as
//!   `unjudged`.

use super::fingerprint_index::FingerprintIndex;
use crate::format::container::ContainerId;
use dedelta_core::ChunkId;
use std::collections::HashSet;

/// The LoopDelta refinements of a backup beyond rewriting (issue 17 items 3 and 4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopDeltaOptions {
    /// Store base-fragmented duplicates again (see this module).
    pub cache_aware_filter: bool,
    /// Inversed delta compression (see [`super::inverse`]).
    pub inversed_delta: bool,
    /// Keep dense containers on the client's disk between backups (a dedelta deviation from
    /// LoopDelta §4.3: see [`super::dense::LocalDenseContainers`]); needs a cache directory.
    pub keep_dense_local: bool,
}

/// What the fingerprint cache says of a duplicate's stored copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachedCopy {
    /// The copy's container is not cached: its kind is unknown without a disk read.
    Unknown,
    /// Stored in full (nothing to filter).
    Full,
    /// A delta whose base's fingerprint is cached, in this container.
    DeltaBaseCached(ContainerId),
    /// A delta whose base's fingerprint is not cached: base-fragmented.
    DeltaBaseMissing,
}

/// The filter's counters (a backup reports them; never stored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CafCounts {
    /// Duplicates of old deltas judged.
    pub old_deltas: u64,
    /// Of those, base-fragmented because the base was not cached (step 1).
    pub base_not_cached: u64,
    /// Of those, base-fragmented because the base's container was given up (step 2).
    pub base_given_up: u64,
    /// Duplicates not judged (their copy's container left the cache).
    pub unjudged: u64,
    /// Raw bytes of the base-fragmented duplicates stored again.
    pub bytes: u64,
}

/// The cache-aware filter of one backup.
#[derive(Debug, Default)]
pub struct CacheAwareFilter {
    /// What it did.
    pub counts: CafCounts,
}

impl CacheAwareFilter {
    /// Whether duplicate `id` is base-fragmented: its cached copy is a delta whose base is
    /// not in the fingerprint cache, or sits in one of `given_up`, the containers rewriting
    /// gave up for the current segment.
    pub fn base_fragmented(
        &mut self,
        index: &dyn FingerprintIndex,
        id: &ChunkId,
        given_up: &HashSet<ContainerId>,
    ) -> bool {
        let fragmented = match index.cached_copy(id) {
            CachedCopy::Full => return false,
            CachedCopy::Unknown => {
                self.counts.unjudged += 1;
                return false;
            }
            CachedCopy::DeltaBaseMissing => {
                self.counts.base_not_cached += 1;
                true
            }
            CachedCopy::DeltaBaseCached(c) if given_up.contains(&c) => {
                self.counts.base_given_up += 1;
                true
            }
            CachedCopy::DeltaBaseCached(_) => false,
        };
        self.counts.old_deltas += 1;
        fragmented
    }
}

/// Refuses LoopDelta options the backup cannot honour, before anything is written.
pub(super) fn check_options(
    config: &crate::format::config::RepoConfig,
    delta: &crate::format::config::DeltaConfig,
    opts: &super::BackupOptions,
) -> crate::error::Result<()> {
    let ld = opts.loopdelta;
    // LoopDelta's prefetching runs on the locality index whatever `--fingerprint-index` says.
    let locality = opts.lookup.kind == super::fingerprint_index::FingerprintIndexKind::Locality
        || delta.sketch_index == crate::format::config::SketchIndexKind::Prefetch;
    if ld.cache_aware_filter && !locality {
        return Err(crate::error::Error::InvalidOption(
            "the cache-aware filter needs the fingerprint cache: add --fingerprint-index \
             locality"
                .into(),
        ));
    }
    if ld.inversed_delta {
        config.check_inversed()?;
        if opts.rewriting.is_none() {
            return Err(crate::error::Error::InvalidOption(
                "inversed delta compression works with rewriting (LoopDelta §4.5): add \
                 --capping-level"
                    .into(),
            ));
        }
    }
    Ok(())
}
