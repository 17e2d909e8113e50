//! `prune`: mark and sweep, with delta bases kept alive. [`plan`] marks and decides what to
//! delete or rewrite (all a `--dry-run` does); [`execute`] sweeps.
//!
//! Mark: every chunk a remaining snapshot references (tree and file content), plus the base of
//! every live delta, down every delta chain. A stored entry is live when its chunk is live
//! *and* the index points at it (other copies of the same chunk, left by interrupted backups,
//! are garbage), or when it is a remaining snapshot's own copy (its container named by the
//! snapshot, see [`crate::read::ChunkLocator::reading_own_copies`]). Plan: containers with no live entry are deleted; containers whose live
//! fraction (of entry bytes) is below `1 - max_unused` are rewritten: their live entries, full
//! or delta, are copied as they are into new containers. Sweep, in an order that a crash at any
//! point cannot turn into data loss:
//!
//! 1. new containers are written and durable, and indexed (the index now points at the copies);
//! 2. index entries (and sketches) of dead chunks are removed, so no backup can deduplicate
//!    against them any more;
//! 3. only then are old containers deleted;
//! 4. the index files are replaced by ones that cover the containers left.
//!
//! A prune killed anywhere leaves every snapshot restorable; the next prune finishes the job.
//! Prune reads only metadata of the containers it does not rewrite, and its memory is bounded by
//! the number of stored entries (the index size), not by the data size.

mod execute;
mod plan;

use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use crate::progress::Progress;
use crate::repository::lock::RepoLock;
use crate::repository::IndexedRepository;
use std::time::Instant;

/// Options of a prune.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Rewrite containers with more than this fraction of unused bytes (0.0 ..= 1.0).
    pub max_unused: f64,
    /// Only plan.
    pub dry_run: bool,
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions {
            max_unused: 0.1,
            dry_run: false,
        }
    }
}

/// What prune will do (and, after it ran, did).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PrunePlan {
    /// Chunks referenced by snapshots.
    pub referenced_chunks: u64,
    /// Chunks kept only because a live delta needs them as base.
    pub bases_kept: u64,
    /// Chunks that are no longer needed.
    pub dead_chunks: u64,
    /// Inversed deltas that become their chunk's copy, so that its full copy is reclaimed
    /// (see [`crate::backup::inverse`]).
    pub inversed_promoted: u64,
    /// Containers to delete outright.
    pub delete: Vec<ContainerId>,
    /// Containers to rewrite (live entries copied forward).
    pub rewrite: Vec<ContainerId>,
    /// Containers kept as they are.
    pub keep: u64,
    /// Stored bytes before.
    pub bytes_before: u64,
    /// Bytes of the containers deleted or rewritten.
    pub bytes_removed: u64,
    /// Live entry bytes (raw) that will be copied.
    pub bytes_to_copy: u64,
}

/// What a prune did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PruneStats {
    /// The plan it executed.
    pub plan: PrunePlan,
    /// Containers written by the rewrite.
    pub containers_written: u64,
    /// Bytes those containers hold.
    pub bytes_written: u64,
    /// Net bytes freed.
    pub bytes_freed: i64,
    /// Dense container lists rewritten without the containers this prune removed
    /// (LoopDelta §4.6).
    pub dense_lists_updated: u64,
    /// Dense container lists deleted (their snapshot is gone, or they were unreadable).
    pub dense_lists_deleted: u64,
    /// The index files rewritten for the containers left (see
    /// [`crate::repository::index_files::consolidate`]).
    pub index_files: crate::repository::index_files::Consolidated,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Plans and (unless `dry_run`) executes a prune; the caller holds the exclusive lock.
pub fn prune(
    repo: &IndexedRepository,
    _lock: &RepoLock,
    opts: &PruneOptions,
    progress: &dyn Progress,
) -> Result<PruneStats> {
    let started = Instant::now();
    if !(0.0..=1.0).contains(&opts.max_unused) {
        return Err(Error::InvalidOption(
            "--max-unused must be within 0..=100 percent".into(),
        ));
    }
    let (plan, work) = plan::plan(repo, opts, progress)?;
    let mut stats = if opts.dry_run {
        PruneStats {
            plan,
            ..Default::default()
        }
    } else {
        execute::execute(repo, plan, &work, progress)?
    };
    stats.seconds = started.elapsed().as_secs_f64();
    Ok(stats)
}
