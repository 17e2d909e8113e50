//! Runs on: the caller's thread, before the pipeline starts.
//!
//! The parent snapshot: which one a backup compares with (`--parent`, else the newest of the
//! same host and paths), and what it learns from the parent's tree (DupAdj's recipe, the tree
//! chunks' delta bases, the files that may be unchanged).
//!
//! On an object store the tree's containers' metadata is read in one round with that of
//! the parent's other containers (up to the reads in flight: [`read_metas_ahead`]), which
//! the delta stage then finds cached where it read each alone as it met it.

use super::resemble::dupadj::ParentRecipe;
use super::{tree_writer, unchanged, BackupOptions};
use crate::error::Result;
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::repository::IndexedRepository;

/// What the backup learns from its parent snapshot: the one `--parent` names, else the newest
/// of the same host and paths, else (for delta hints only) the newest with the same paths,
/// else the newest.
pub(super) struct Parent<'a> {
    /// Its chunk sequence, for DupAdj (when asked for).
    pub(super) recipe: Option<ParentRecipe>,
    /// Where its tree's records and references lie, for the tree chunks' delta bases.
    pub(super) tree: Option<tree_writer::ParentTree>,
    /// Its files, to skip the unchanged ones (unless every file is read).
    pub(super) files: Option<unchanged::ParentFiles>,
    /// The reader that read its tree from the repository, for the delta bases: its caches
    /// hold the metadata and regions of the tree's containers, which the new tree's bases
    /// (the parent tree's chunks) need again. Shared, each container's metadata is read once
    /// per backup (on 20 SQLAlchemy sdists, backup 20 read it 88 times for ~30 containers).
    pub(super) reader: Option<crate::read::ChunkReader<'a>>,
    /// Its tree's chunks, when they came from the local tree cache instead of a read: the
    /// new tree's delta bases (see [`super::bases::BaseFetcher::hold`]).
    pub(super) tree_chunks: Vec<(dedelta_core::ChunkId, bytes::Bytes)>,
    /// Its id and tree when it is the snapshot the backup continues (`--parent`, or the
    /// newest of the same host and paths): a backup whose tree is this one changed nothing
    /// (`--skip-if-unchanged`).
    pub(super) continued: Option<(SnapshotId, crate::format::snapshot::TreeRef)>,
}

/// What to learn from the parent.
pub(super) struct ParentWants<'a> {
    pub(super) recipe: bool,
    /// Its files, compared by these rules.
    pub(super) files: Option<&'a unchanged::SourceOptions>,
    /// Where its tree may be had without a read: the trees this client wrote last.
    pub(super) tree_cache: Option<&'a crate::client::tree_cache::TreeCache>,
}

/// The parent's tree chunks from memory, given their ids in order (`None`: read the tree from
/// the repository): LoopDelta's dense container holding them, read whole.
pub(super) type TreeChunks<'a> = dyn Fn(&[dedelta_core::ChunkId]) -> Option<Vec<bytes::Bytes>> + 'a;

/// Reads the parent snapshot's tree. A parent that cannot be read only costs the backup its
/// hints and its unchanged files: it goes on without one, with a notice (a damaged tree must
/// not block every later backup of its paths).
///
/// # Errors
/// Only a `--parent` that names no snapshot.
pub(super) fn find<'a>(
    repo: &'a IndexedRepository,
    listed: Option<&crate::repository::snapshots::SnapshotList>,
    paths: &[String],
    opts: &BackupOptions,
    want: ParentWants<'_>,
    tree_chunks: Option<&TreeChunks<'_>>,
    notices: &mut Vec<String>,
) -> Result<Option<Parent<'a>>> {
    let chosen = match &opts.sources.parent {
        Some(spec) => repo.find_snapshot(spec)?,
        None => {
            // Not listed: the listing failed, with a notice.
            let Some(listed) = listed else {
                return Ok(None);
            };
            let all = &listed.snapshots;
            let same_host = all
                .iter()
                .rposition(|(_, s)| s.paths == paths && s.host == opts.host);
            // Files are compared only with a snapshot of the same host and paths.
            let fallback = all.iter().rposition(|(_, s)| s.paths == paths);
            let Some(i) = same_host.or(fallback).or(all.len().checked_sub(1)) else {
                return Ok(None);
            };
            let chosen = all[i].clone();
            if same_host.is_none() {
                return Ok(read_parent(
                    repo,
                    chosen,
                    false,
                    (want.recipe, None, want.tree_cache),
                    tree_chunks,
                    notices,
                ));
            }
            chosen
        }
    };
    Ok(read_parent(
        repo,
        chosen,
        true,
        (want.recipe, want.files, want.tree_cache),
        tree_chunks,
        notices,
    ))
}

/// Reads the chosen parent's tree.
fn read_parent<'a>(
    repo: &'a IndexedRepository,
    (id, snap): (SnapshotId, Snapshot),
    continued: bool,
    (want_recipe, files, tree_cache): (
        bool,
        Option<&unchanged::SourceOptions>,
        Option<&crate::client::tree_cache::TreeCache>,
    ),
    tree_chunks: Option<&TreeChunks<'_>>,
    notices: &mut Vec<String>,
) -> Option<Parent<'a>> {
    let mut ids = Vec::new();
    let mut tree = tree_writer::ParentTreeBuilder::new();
    let mut parent_files = files.map(unchanged::ParentFiles::new);
    let visit = |node, chunks: Vec<_>| {
        tree.node(&node, &chunks);
        if want_recipe {
            ids.extend(chunks.iter().map(|c| c.id));
        }
        if let Some(f) = parent_files.as_mut() {
            f.add(&node, &chunks);
        }
        Ok(())
    };
    let mut reader = None;
    let mut held = Vec::new();
    let dense = tree_chunks.and_then(|t| t(&snap.tree.chunks));
    let cached = match (&dense, tree_cache) {
        (None, Some(cache)) => cache.get(&snap.tree.chunks, &repo.chunk_hasher()),
        _ => None,
    };
    if cached.is_some() && repo.reads_are_round_trips() {
        // The bases' metadata ahead, as a tree read takes it (none is requested for the
        // containers this client's metadata cache holds).
        if let Ok(r) = super::bases::base_reader(repo) {
            read_metas_ahead(reader.insert(r), repo, &snap);
        }
    }
    let from_cache = cached.is_some();
    let walked = match dense.or(cached) {
        Some(chunks) => {
            let walked = crate::read::walk_tree_chunks(&chunks, visit);
            if from_cache {
                held = snap.tree.chunks.iter().copied().zip(chunks).collect();
            }
            walked
        }
        None => super::bases::base_reader(repo).and_then(|r| {
            let r = reader.insert(r);
            if repo.reads_are_round_trips() {
                read_metas_ahead(r, repo, &snap);
            }
            crate::read::walk_tree_reading(r, repo, &snap, visit)
        }),
    };
    match walked {
        Ok(lens) => Some(Parent {
            recipe: want_recipe.then(|| ParentRecipe::new(ids)),
            tree: tree.finish(&snap.tree.chunks, &lens),
            files: parent_files,
            reader,
            tree_chunks: held,
            continued: continued.then(|| (id, snap.tree.clone())),
        }),
        Err(e) => {
            notices.push(format!(
                "parent snapshot {} is unreadable ({e}); backing up without a parent",
                id.short()
            ));
            None
        }
    }
}

/// Reads the metadata of the parent tree's containers and of the parent's other containers
/// (those its snapshot names), up to [`IndexedRepository::reads_in_flight`] of them in all,
/// in one round on an object store (each a round trip of 40-60 ms on a Garage cluster).
/// The tree's are needed first; the others hold the chunks the delta stage reads as bases
/// (the parent's chunks are the new ones' DupAdj candidates), whose metadata was read one
/// round after another as the pipeline met them (backup 2 of the SQLAlchemy trace: the
/// tree's container, then two more, each alone). A parent of more containers has the rest
/// read as before, when needed: a parent whose files are all unchanged needs none of them,
/// so the bound keeps what such a backup reads in vain to one round's worth.
fn read_metas_ahead(
    reader: &mut crate::read::ChunkReader<'_>,
    repo: &IndexedRepository,
    snap: &Snapshot,
) {
    let bound = repo.reads_in_flight().max(2);
    let mut want = Vec::new();
    // As far as the tree walk reads ahead.
    for id in snap.tree.chunks.iter().take(4096) {
        if let Ok(Some(c)) = reader.container_of(id) {
            if !want.contains(&c) {
                want.push(c);
            }
        }
    }
    for c in &snap.containers {
        if want.len() >= bound {
            break;
        }
        if !want.contains(c) {
            want.push(*c);
        }
    }
    let mut threads = crate::request_threads::RequestThreads::new(bound.saturating_sub(1));
    reader.read_container_metas_ahead(&want, &mut threads);
}
