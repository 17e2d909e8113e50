//! What the full sketch index's lookups in the runs cost (counted per index, reported by
//! backup) and the default budget of the runs' super-feature filters (issue 16).

use super::bloom::FilterBudget;
use super::view::View;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes the runs' super-feature filters may hold by default (see [`FilterBudget`]): at
/// about 9 bits a key, the keys of 76 M full chunks with three keys each (600 GB of unique
/// data at 8 KiB), or of far more chunks of versioned data, whose deltas have none.
pub const DEFAULT_SKETCH_FILTER_BYTES: u64 = 256 << 20;

/// What the full sketch index's lookups cost so far and the filters they hold (a backup
/// reports them; never stored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SketchLookups {
    /// Keys asked of a run (a key is asked of every run until one holds it).
    pub probes: u64,
    /// Of those, asked of a run whose filter is not held (past the budget): a bucket read
    /// each, unless the bucket is empty.
    pub unfiltered: u64,
    /// Of the others, those the run's filter let through.
    pub filter_passes: u64,
    /// Of those, the ones the run did not hold: the filter's false positives.
    pub filter_false_positives: u64,
    /// Buckets read (random reads of the run files).
    pub bucket_reads: u64,
    /// Bytes of the runs' super-feature filters held in memory (within the budget).
    pub filter_bytes: u64,
    /// The budget.
    pub filter_budget: u64,
}

impl SketchLookups {
    /// What was counted since `before` (the filters' bytes and budget as now).
    pub fn since(&self, before: &SketchLookups) -> SketchLookups {
        SketchLookups {
            probes: self.probes.saturating_sub(before.probes),
            unfiltered: self.unfiltered.saturating_sub(before.unfiltered),
            filter_passes: self.filter_passes.saturating_sub(before.filter_passes),
            filter_false_positives: self
                .filter_false_positives
                .saturating_sub(before.filter_false_positives),
            bucket_reads: self.bucket_reads.saturating_sub(before.bucket_reads),
            ..*self
        }
    }
}

/// What the runs' super-feature lookups cost, counted per index (a backup reports them).
#[derive(Debug, Default)]
pub struct SketchCounts {
    /// Keys asked of a run.
    pub probes: AtomicU64,
    /// Of those, asked with no filter held (its budget had no room): each reads the bucket.
    pub unfiltered: AtomicU64,
    /// Of the others, those the run's filter let through.
    pub passed: AtomicU64,
    /// Of those, the ones the run held (the rest are the filter's false positives).
    pub passed_found: AtomicU64,
    /// Buckets read (empty buckets are known from the directory and cost nothing).
    pub bucket_reads: AtomicU64,
}

/// The counts so far, and the filters `view`'s runs hold within `budget`.
pub(super) fn lookups(c: &SketchCounts, budget: &FilterBudget, view: &View) -> SketchLookups {
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    SketchLookups {
        probes: g(&c.probes),
        unfiltered: g(&c.unfiltered),
        filter_passes: g(&c.passed),
        filter_false_positives: g(&c.passed).saturating_sub(g(&c.passed_found)),
        bucket_reads: g(&c.bucket_reads),
        filter_bytes: view
            .runs
            .iter()
            .map(|r| r.sketch_filter_bytes() as u64)
            .sum(),
        filter_budget: budget.limit(),
    }
}
