//! `rewrite`: removes files from existing snapshots (restic's `rewrite --exclude`), for data
//! that should never have been backed up: a secret, a huge cache directory.
//!
//! Each chosen snapshot's tree is read, the nodes the exclude patterns match (and everything
//! below them) are dropped, and a snapshot with the rest is written: same time, host, paths and
//! tags, `original` naming the snapshot it replaces, its summary's file, directory and byte
//! counts those of the new tree. The new tree's chunks go into new containers (durable and
//! indexed before the snapshot); file content is referenced as before, nothing is read. With
//! `forget` the originals are then deleted (new before old: a crash in between leaves both).
//! A snapshot the patterns would empty is left alone and reported: an empty snapshot restores
//! nothing, and deleting one is `forget`'s decision, not a side effect of a pattern.
//! The removed files' data stays in the repository until no snapshot needs it and `prune`
//! runs.

use crate::backend::FileKind;
use crate::commands::repair_snapshots::store_tree;
use crate::commands::restore::select::Selector;
use crate::error::Result;
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::format::tree::{ChunkRef, Node};
use crate::progress::Progress;
use crate::read::walk_tree;
use crate::repository::lock::RepoLock;
use crate::repository::snapshot_filter::SnapshotFilter;
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;

/// What to remove, and how.
#[derive(Clone, Debug, Default)]
pub struct RewriteOptions {
    /// Globs of the nodes to remove (with what is below them), as restore's `--exclude`: one
    /// starting with `/` is anchored at the snapshot's root, any other matches at any depth.
    pub exclude: Vec<Vec<u8>>,
    /// As `exclude`, ignoring case.
    pub iexclude: Vec<Vec<u8>>,
    /// Delete each original once its rewritten snapshot is saved.
    pub forget: bool,
    /// Only report what would be removed; write nothing.
    pub dry_run: bool,
}

/// One snapshot rewritten (or that would be).
#[derive(Clone, Debug, serde::Serialize)]
pub struct RewrittenSnapshot {
    /// The snapshot as it was.
    pub original: SnapshotId,
    /// The snapshot written in its place (none in a dry run).
    pub new: Option<SnapshotId>,
    /// The nodes removed (paths with a leading `/`), in tree order.
    pub removed: Vec<String>,
    /// File bytes removed.
    pub removed_bytes: u64,
}

/// What `rewrite` did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RewriteStats {
    /// Snapshots with something to remove.
    pub rewritten: Vec<RewrittenSnapshot>,
    /// Snapshots the patterns match nothing in (left as they are).
    pub unchanged: u64,
    /// Snapshots the patterns match every node of: left as they are, not rewritten empty nor
    /// deleted (restic deletes them; removing a whole snapshot is `forget`'s to do).
    pub would_be_empty: Vec<SnapshotId>,
}

/// Rewrites the snapshots named in `ids` (or, with none, every snapshot `filter` selects),
/// without the nodes `opts` excludes. The caller holds the exclusive lock.
///
/// # Errors
/// No exclude pattern; a pattern that is not a glob; a snapshot that cannot be found or whose
/// tree cannot be read; the repository's write errors.
pub fn rewrite(
    repo: &IndexedRepository,
    _lock: &RepoLock,
    ids: &[String],
    filter: &SnapshotFilter,
    opts: &RewriteOptions,
    progress: &dyn Progress,
) -> Result<RewriteStats> {
    if opts.exclude.is_empty() && opts.iexclude.is_empty() {
        return Err(crate::error::Error::InvalidOption(
            "nothing to remove: give --exclude or --iexclude patterns".into(),
        ));
    }
    let selector =
        Selector::new(&[], &opts.exclude)?.merged(Selector::with_case(&[], &opts.iexclude, true)?);
    let backend = repo.backend().clone();
    let chosen = crate::commands::tag::chosen_snapshots(repo, ids, filter)?;
    let index = repo.index().reader()?;
    let mut indexed = |id: &ChunkId| index.get(id).ok().flatten().is_some();
    let mut stats = RewriteStats::default();
    for (sid, snap) in chosen {
        progress.message(&format!("snapshot {}", sid.short()));
        let mut kept: Vec<(Node, Vec<ChunkRef>)> = Vec::new();
        let mut done = RewrittenSnapshot {
            original: sid,
            new: None,
            removed: Vec::new(),
            removed_bytes: 0,
        };
        walk_tree(repo, &snap, |n, c| {
            if selector.excluded(&n.path) {
                done.removed_bytes += n.size;
                done.removed.push(format!("/{}", n.path_lossy()));
            } else {
                kept.push((n, c));
            }
            Ok(())
        })?;
        if done.removed.is_empty() {
            stats.unchanged += 1;
            continue;
        }
        if kept.is_empty() {
            stats.would_be_empty.push(sid);
            continue;
        }
        if !opts.dry_run {
            let tree = store_tree(repo, &kept, &mut indexed)?;
            let mut summary = snap.summary.clone();
            summary.files = 0;
            summary.dirs = 0;
            summary.symlinks = 0;
            summary.bytes_read = 0;
            for (n, _) in &kept {
                summary.count_node(n);
            }
            summary.tree_bytes = tree.len;
            let removed = &done.removed;
            let new = Snapshot {
                tree,
                summary,
                original: Some(snap.original.clone().unwrap_or_else(|| sid.to_hex())),
                damaged_paths: snap
                    .damaged_paths
                    .iter()
                    .filter(|p| !removed.contains(&format!("/{p}")))
                    .cloned()
                    .collect(),
                ..snap
            };
            let new_id = crate::repository::snapshots::save(backend.as_ref(), &new)?;
            done.new = Some(new_id);
            if opts.forget && new_id != sid {
                backend.delete(FileKind::Snapshot, &sid.to_hex())?;
            }
        }
        stats.rewritten.push(done);
    }
    Ok(stats)
}
