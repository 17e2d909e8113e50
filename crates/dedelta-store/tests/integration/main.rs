//! The store's integration tests, as one binary (one link instead of one per file): a module
//! per command or concern, and `support` with what they share.
//!
//! ```text
//! cargo test -p dedelta-store --test integration                  # everything
//! cargo test -p dedelta-store --test integration -- faults::      # one module
//! ```
//!
//! Tests marked `#[ignore = "bug: ..."]` reproduce open bugs: run them with `-- --ignored`,
//! and un-ignore one with its fix.

/// Backup's delta bases read back in bounded batches, bit-exact, failures read again.
mod base_reads;
/// Browsing snapshots: the mount tree, and `tag`'s rewrite at every crash point.
mod browse;
/// The reliability campaign: seeded random operations against a model (docs/reliability.md).
mod campaign;
/// Several clients, each with its own index, catching up with each other's changes.
mod clients;
/// Damage at rest found by `check`, healed by backups, salvaged by `repair packs`, dropped by
/// `repair snapshots`; damaged and half-built indexes.
mod damage;
/// Delta compression end to end, and the local base cache.
mod delta;
/// Every crash point and disk-full of backup, prune and forget; damaged reads; regressions the
/// campaign found.
mod faults;
/// docs/format.md and the code say the same thing.
mod format;
/// Retention and garbage collection: forget, prune, and what they must never free.
mod gc;
/// Container names for a fixed input series: the stored bytes do not change by accident.
mod golden;
/// The client index after a crash that lost its manifest's last writes.
mod index_crash;
/// Index files: written per backup, used by fresh and catching-up clients, ignored where
/// stale or damaged, consolidated by prune, sealed when encrypted.
mod index_files;
/// The one forwarding backend the tests' probes are built from.
mod intercept;
/// LoopDelta's cache-aware filter and inversed delta compression (issue 17 items 3-4).
mod inverse;
/// I/O accounting: a metered repository's requests by purpose (issue 16 item 4).
mod io;
/// The locality fingerprint index: deduplicates like the exact one, bounded cache, never
/// against a chunk the index dropped; its filter file rebuilt when damaged.
mod locality;
/// LoopDelta: dense container lists, base prefetching, prune updating the lists.
mod loopdelta;
/// Complete file metadata: owners, times, attributes, hard links, special and sparse files.
mod metadata;
/// The metrics of issue 15 on hand-made repositories: detection against acceptance, and the
/// papers' restore speed factor.
mod metrics;
/// A backup's fixed costs: damage records listed once, the lock taken beside the key.
mod open_costs;
/// Restore reading a snapshot's own copies stored as deltas (issue 17).
mod own_copies;
/// Restore and dump on an object store: regions read ahead, several at a time, bit-exact.
mod restore_ahead;
/// Every restore cache restores bit-exact, within its bounds and reading what it says.
mod restore_cache;
/// Restore against hostile snapshots, damaged repositories and concurrent prunes.
mod restore_safety;
/// Capping: rewriting duplicates for restore speed, and prune reclaiming what they replace.
mod rewrite;
/// restore(backup(x)) == x on random trees.
mod roundtrip;
/// Small files packed into runs store what files sent alone store.
mod small_files;
/// The client's snapshot cache: reads that do not grow with the snapshots, damaged entries
/// read again, forgotten snapshots dropped, the same parent.
mod snapshot_cache;
/// Test data, configs, locks, and commands as the tests run them.
mod support;
/// Snapshot trees stored as deltas of their parent's tree.
mod trees;
/// Unchanged files are not read again: the parent snapshot, restic's change rules.
mod unchanged;
