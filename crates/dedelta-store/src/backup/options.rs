//! What a backup is asked to do ([`BackupOptions`], [`StdinSource`], [`CopySource`]), with which threads
//! ([`Workers`]), and what it reports ([`BackupResult`]).

use super::fingerprint_index::FingerprintIndexOptions;
use super::metrics::BackupMetrics;
use super::{caf, rewrite, unchanged};
use crate::error::{Error, Result};
use crate::format::config::DeltaConfig;
use crate::format::snapshot::{BackupSummary, SnapshotId};
use crate::format::tree::Node;
use std::io::Read;
use std::path::PathBuf;

/// Most worker threads a backup starts: beyond this, threads only cost memory and start-up
/// time (100,000 took minutes to create and then failed).
pub const MAX_THREADS: usize = 256;

/// A source read from standard input (or any reader).
pub struct StdinSource {
    /// The stream.
    pub reader: Box<dyn Read + Send>,
    /// The file name it is stored under.
    pub name: String,
    /// Modification time to record (seconds since the epoch).
    pub mtime_secs: i64,
    /// A read error fails the backup (no snapshot is saved) instead of storing the stream
    /// as far as it was read, with a warning. For a command's output
    /// (`--stdin-from-command`), whose reader reports the command's failure as a read error
    /// at the end: a dump cut short by a failing `pg_dump` must not become a snapshot.
    pub whole_or_nothing: bool,
}

/// What a [`NodeSource`] calls with each node: the node and, for a file, a reader of its
/// content.
pub type NodeSink<'a> = dyn FnMut(Node, Option<&mut dyn Read>) -> Result<()> + 'a;

/// Nodes and file contents from somewhere other than the file system: a snapshot of another
/// repository, for `copy`.
pub trait NodeSource: Send + Sync {
    /// The paths the snapshot records.
    fn paths(&self) -> Vec<String>;

    /// Calls `emit` with each node in tree order (paths as stored, metadata as recorded) and,
    /// for a file, a reader of its content.
    ///
    /// # Errors
    /// The source cannot be read, or `emit` failed.
    fn walk(&self, emit: &mut NodeSink<'_>) -> Result<()>;
}

/// A snapshot stored again from a [`NodeSource`] (`copy`).
pub struct CopySource {
    /// Its nodes and content; a read error fails the backup (no snapshot).
    pub nodes: std::sync::Arc<dyn NodeSource>,
    /// What the new snapshot's `original` names: the first snapshot of the chain it copies.
    pub original: String,
    /// The source snapshot's files whose content `repair snapshots` left incomplete.
    pub damaged_paths: Vec<String>,
    /// The source snapshot's tree was cut short by `repair snapshots`.
    pub tree_truncated: bool,
}

/// What to back up and how.
pub struct BackupOptions {
    /// Files and directories to back up (made absolute).
    pub paths: Vec<PathBuf>,
    /// Glob patterns; a path is skipped when a pattern matches its full path or its name.
    pub excludes: Vec<String>,
    /// Tags recorded in the snapshot.
    pub tags: Vec<String>,
    /// Back up one stream instead of `paths`.
    pub stdin: Option<StdinSource>,
    /// Back up another repository's snapshot instead of `paths` (`copy`).
    pub copy: Option<CopySource>,
    /// Save no snapshot when the new tree is the parent's (restic's `--skip-if-unchanged`):
    /// the parent of the same host and paths, or `--parent`, already records every file.
    pub skip_if_unchanged: bool,
    /// Host name recorded in the snapshot.
    pub host: String,
    /// Start time recorded in the snapshot (RFC 3339).
    pub time: String,
    /// Delta settings for this backup; `None` uses the repository's.
    pub delta: Option<DeltaConfig>,
    /// Directory of this client's local caches (see [`crate::client::local_cache`]); `None`
    /// for none. The repository's base cache is in `<cache_dir>/<repository id>/`.
    pub cache_dir: Option<PathBuf>,
    /// How duplicates of chunks stored before are found (see [`super::fingerprint_index`]).
    pub lookup: FingerprintIndexOptions,
    /// Which duplicates to store again for restore speed (see [`super::rewrite`]); `None` rewrites
    /// nothing.
    pub rewriting: Option<Box<dyn rewrite::Rewriting>>,
    /// The parent snapshot, which files are read, which file systems are crossed.
    pub sources: unchanged::SourceOptions,
    /// The cache-aware filter and inversed delta compression (LoopDelta §4.4-4.5).
    pub loopdelta: caf::LoopDeltaOptions,
}

/// The result of a backup.
#[derive(Debug)]
pub struct BackupResult {
    /// The new snapshot; with [`Self::skipped`], the parent that records the same tree.
    pub snapshot_id: SnapshotId,
    /// No snapshot was saved: nothing changed since the parent (`skip_if_unchanged`).
    pub skipped: bool,
    /// What was done.
    pub summary: BackupSummary,
    /// Sources that could not be read.
    pub warnings: Vec<String>,
    /// Problems that do not touch the snapshot (an unusable local cache).
    pub notices: Vec<String>,
    /// Where the time went and where delta bases came from (not stored).
    pub metrics: BackupMetrics,
}

/// The worker threads of a backup: a pool for fingerprinting, sketching and compression, and,
/// with 4 or more threads, a second pool for delta encoding (see [`super::delta::DeltaStage`]).
pub struct Workers {
    pub(super) pool: rayon::ThreadPool,
    pub(super) delta: Option<rayon::ThreadPool>,
    /// Set when the requested thread count was capped at [`MAX_THREADS`].
    pub capped_from: Option<usize>,
}

impl Workers {
    /// Starts the pools for `threads` threads (at least 1, at most [`MAX_THREADS`]).
    pub fn new(threads: usize) -> Result<Self> {
        let n = threads.clamp(1, MAX_THREADS);
        let build = |threads: usize, name: &'static str| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(move |i| format!("dedelta-{name}-{i}"))
                .build()
                .map_err(|e| Error::InvalidOption(format!("thread pool: {e}")))
        };
        Ok(Workers {
            pool: build(n, "worker")?,
            delta: if n >= 4 {
                Some(build(n / 2, "delta")?)
            } else {
                None
            },
            capped_from: (n != threads.max(1)).then_some(threads),
        })
    }
}
