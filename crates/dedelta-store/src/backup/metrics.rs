//! Runtime measurements of a backup: where the time went. Shared by every thread (atomics);
//! reported with the backup's result, never stored in the snapshot.

use super::bases::BaseCounts;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Nanoseconds spent per pipeline stage, summed over threads.
#[derive(Debug, Default)]
pub struct StageTimes {
    /// Cutting chunks.
    pub chunk: AtomicU64,
    /// BLAKE3 fingerprints.
    pub hash: AtomicU64,
    /// Chunk-index lookups.
    pub index: AtomicU64,
    /// Super-features.
    pub sketch: AtomicU64,
    /// Finding candidates and fetching base chunks.
    pub base_read: AtomicU64,
    /// Delta encoding (and the saving test).
    pub delta: AtomicU64,
    /// Region compression.
    pub compress: AtomicU64,
    /// Writing containers and index entries.
    pub write: AtomicU64,
    /// Chunks sketched (a count, not nanoseconds): file data and tree chunks given
    /// super-features.
    pub sketched_chunks: AtomicU64,
}

impl StageTimes {
    /// Adds the time since `start` to `stage`.
    pub fn add(stage: &AtomicU64, start: Instant) {
        stage.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Seconds per stage, by name.
    pub fn seconds(&self) -> BTreeMap<String, f64> {
        let s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e9;
        [
            ("chunk", s(&self.chunk)),
            ("hash", s(&self.hash)),
            ("index", s(&self.index)),
            ("sketch", s(&self.sketch)),
            ("base_read", s(&self.base_read)),
            ("delta", s(&self.delta)),
            ("compress", s(&self.compress)),
            ("write", s(&self.write)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// What a backup measured about itself: returned with its result, printed by `backup
/// --json`, never stored (a new counter must not be a format change).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct BackupMetrics {
    /// Seconds per pipeline stage, summed over threads.
    pub stage_seconds: BTreeMap<String, f64>,
    /// Where delta bases came from.
    pub bases: BaseCounts,
    /// Chunks given super-features: every new chunk, or with `delta.sketch_dupadj_misses`
    /// only those DupAdj did not resolve (DARE §3.1).
    pub sketched_chunks: u64,
    /// What the fingerprint index strategy counted (cache hits, filter answers, on-disk
    /// lookups, prefetches).
    pub lookups: super::fingerprint_index::LookupCounters,
    /// Duplicates stored again by the backup's rewriting (Capping); counted in the summary's
    /// new chunks too.
    pub rewritten: super::dedup::RewriteCounts,
    /// LoopDelta's base prefetching (dense containers loaded whole, bases served, the dense
    /// list written), when the backup's sketch index is `prefetch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<super::prefetch::PrefetchCounts>,
    /// New chunks the saving test compressed alone to weigh a delta against (see
    /// `backup::saving`).
    pub saving_test_compressions: u64,
}
