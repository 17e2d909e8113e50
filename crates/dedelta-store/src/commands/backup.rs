//! `backup`: the command's options and entry point; the pipeline is in [`crate::backup`].

pub use crate::backup::{
    backup, backup_then_release, caf, dense,
    fingerprint_index::{
        FingerprintIndexKind, FingerprintIndexOptions, LookupCounters, DEFAULT_CACHE_CONTAINERS,
    },
    metrics::BackupMetrics,
    prefetch::PrefetchCounts,
    rewrite,
    select::{self, dry_run, parse_size, DryRun, SelectOptions},
    unchanged::SourceOptions,
    BackupOptions, BackupResult, CopySource, NodeSource, StdinSource, Workers, MAX_THREADS,
};
