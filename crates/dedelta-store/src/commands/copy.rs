//! `copy`: snapshots of one repository stored in another (restic's `copy`), for a second copy
//! of the backups elsewhere: a local repository copied to object storage, or the reverse.
//!
//! Chunk ids are keyed per repository (encrypted ones) and the two may chunk, sketch and
//! compress differently, so no stored byte can be taken over: each snapshot's files are read
//! from the source (verified as a restore verifies them) and backed up into the destination
//! by its own pipeline, which deduplicates and delta-encodes them against what the destination
//! holds, the previous copy of the same host and paths among them. Nodes keep their stored
//! paths and metadata; the snapshot keeps its time, host, paths and tags, and its `original`
//! names the first snapshot of the chain it copies (the source's own `original`, else its id).
//!
//! A snapshot is skipped when the destination holds one with the same `original`, time, host,
//! paths, tags and repaired files, whose summary counts the files, directories, symlinks and
//! bytes the source's tree holds: a copy made before (a source snapshot rewritten or repaired
//! since differs in its counts or repairs). Any read error of the source fails its
//! snapshot's copy (no snapshot is saved; what was stored is garbage for the next prune) and
//! the command.

use crate::backup::{CopySource, NodeSink, NodeSource};
use crate::commands::backup::{self as run_backup, BackupOptions, SourceOptions, Workers};
use crate::error::Result;
use crate::format::snapshot::{BackupSummary, Snapshot, SnapshotId};
use crate::format::tree::NodeKind;
use crate::progress::Progress;
use crate::read::{walk_tree, ChunkReader, ChunkStreamReader};
use crate::repository::lock::RepoLock;
use crate::repository::snapshot_filter::SnapshotFilter;
use crate::repository::IndexedRepository;
use std::path::PathBuf;
use std::sync::Arc;

/// Bytes of decompressed regions the source's reader keeps (as `dump`'s).
const SOURCE_CACHE_BYTES: usize = 64 << 20;

/// How to copy.
#[derive(Clone, Debug, Default)]
pub struct CopyOptions {
    /// The destination client's cache directory (its local base cache); `None` for none.
    pub cache_dir: Option<PathBuf>,
    /// Only report which snapshots would be copied.
    pub dry_run: bool,
}

/// One snapshot copied (or that would be).
#[derive(Clone, Debug, serde::Serialize)]
pub struct CopiedSnapshot {
    /// The snapshot in the source repository.
    pub source: SnapshotId,
    /// Its copy in the destination (none in a dry run).
    pub new: Option<SnapshotId>,
    /// What the copy's backup did in the destination (none in a dry run).
    pub summary: Option<BackupSummary>,
}

/// What `copy` did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CopyStats {
    /// Snapshots copied, oldest first.
    pub copied: Vec<CopiedSnapshot>,
    /// Source snapshots the destination already holds a copy of.
    pub already_copied: Vec<SnapshotId>,
}

/// A snapshot of a repository as a [`NodeSource`]: its tree in order, each file's content read
/// through one [`ChunkReader`] for the whole walk.
pub struct SnapshotNodes {
    repo: Arc<IndexedRepository>,
    snapshot: Snapshot,
}

impl SnapshotNodes {
    /// The nodes of `snapshot` of `repo`.
    pub fn new(repo: Arc<IndexedRepository>, snapshot: Snapshot) -> Self {
        SnapshotNodes { repo, snapshot }
    }
}

impl NodeSource for SnapshotNodes {
    fn paths(&self) -> Vec<String> {
        self.snapshot.paths.clone()
    }

    fn walk(&self, emit: &mut NodeSink<'_>) -> Result<()> {
        let mut content = ChunkReader::new(&self.repo, SOURCE_CACHE_BYTES)?;
        walk_tree(&self.repo, &self.snapshot, |node, chunks| {
            if node.kind != NodeKind::File {
                return emit(node, None);
            }
            let ids = chunks.iter().map(|c| c.id).collect();
            let mut data = ChunkStreamReader::new(&mut content, ids);
            let done = emit(node, Some(&mut data));
            // The source's own error (a damaged chunk) says more than the read's.
            match (done, data.take_error()) {
                (Err(_), Some(cause)) => Err(cause),
                (done, _) => done,
            }
        })
    }
}

/// What a snapshot's tree holds: files, directories, symlinks and file bytes, the counts a
/// backup's summary records. Counted from the tree, not taken from the source's summary,
/// which `repair snapshots` keeps from before its repair.
type TreeCounts = (u64, u64, u64, u64);

fn tree_counts(repo: &IndexedRepository, snap: &Snapshot) -> Result<TreeCounts> {
    let mut s = BackupSummary::default();
    walk_tree(repo, snap, |node, _| {
        s.count_node(&node);
        Ok(())
    })?;
    Ok((s.files, s.dirs, s.symlinks, s.bytes_read))
}

/// Whether `copy` in the destination is a copy of `source` (see the module doc): the same
/// chain, time, host, paths, tags and repairs, and the counts of what `source`'s tree holds
/// (`counts`, computed only when the rest matches).
fn is_copy_of(
    copy: &Snapshot,
    source: &Snapshot,
    origin: &str,
    counts: &mut dyn FnMut() -> Result<TreeCounts>,
) -> Result<bool> {
    let same = copy.original.as_deref() == Some(origin)
        && copy.time == source.time
        && copy.host == source.host
        && copy.paths == source.paths
        && copy.tags == source.tags
        && copy.damaged_paths == source.damaged_paths
        && copy.tree_truncated == source.tree_truncated;
    if !same {
        return Ok(false);
    }
    let s = &copy.summary;
    Ok((s.files, s.dirs, s.symlinks, s.bytes_read) == counts()?)
}

/// Copies the snapshots of `src` named in `ids` (or, with none, every snapshot `filter`
/// selects) into `dst`, oldest first, skipping those `dst` holds a copy of. The caller holds a
/// shared lock on each repository (`dst_lock` on the destination).
///
/// # Errors
/// A snapshot that cannot be found or read whole in the source; the destination's errors.
#[allow(clippy::too_many_arguments)]
pub fn copy(
    src: &Arc<IndexedRepository>,
    dst: &IndexedRepository,
    dst_lock: &RepoLock,
    ids: &[String],
    filter: &SnapshotFilter,
    opts: &CopyOptions,
    workers: &Workers,
    progress: &dyn Progress,
) -> Result<CopyStats> {
    let mut chosen = crate::commands::tag::chosen_snapshots(src, ids, filter)?;
    // Oldest first, so that each copy finds the one before as its parent (DupAdj's bases).
    chosen.sort_by(crate::repository::snapshots::oldest_first);
    let existing = dst.snapshots()?;
    let mut stats = CopyStats::default();
    for (sid, snap) in chosen {
        let origin = snap.original.clone().unwrap_or_else(|| sid.to_hex());
        let mut counted: Option<TreeCounts> = None;
        let mut counts = || -> Result<TreeCounts> {
            if let Some(c) = counted {
                return Ok(c);
            }
            let c = tree_counts(src, &snap)?;
            counted = Some(c);
            Ok(c)
        };
        let mut copied_before = false;
        for (_, d) in &existing.snapshots {
            if is_copy_of(d, &snap, &origin, &mut counts)? {
                copied_before = true;
                break;
            }
        }
        if copied_before {
            stats.already_copied.push(sid);
            continue;
        }
        if opts.dry_run {
            stats.copied.push(CopiedSnapshot {
                source: sid,
                new: None,
                summary: None,
            });
            continue;
        }
        progress.message(&format!("snapshot {}", sid.short()));
        let backup = BackupOptions {
            paths: Vec::new(),
            excludes: Vec::new(),
            tags: snap.tags.clone(),
            stdin: None,
            copy: Some(CopySource {
                original: origin,
                damaged_paths: snap.damaged_paths.clone(),
                tree_truncated: snap.tree_truncated,
                nodes: Arc::new(SnapshotNodes::new(src.clone(), snap.clone())),
            }),
            skip_if_unchanged: false,
            host: snap.host.clone(),
            time: snap.time.clone(),
            delta: None,
            cache_dir: opts.cache_dir.clone(),
            lookup: Default::default(),
            rewriting: None,
            sources: SourceOptions {
                force: true,
                ..Default::default()
            },
            loopdelta: Default::default(),
        };
        let done = run_backup::backup(dst, dst_lock, backup, workers, progress)?;
        stats.copied.push(CopiedSnapshot {
            source: sid,
            new: Some(done.snapshot_id),
            summary: Some(done.summary),
        });
    }
    Ok(stats)
}
