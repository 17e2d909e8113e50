//! A snapshot's tree, streamed node by node from its chunks (for ls, restore, check, prune,
//! repair and backup's parent recipe).

use super::{ChunkReader, ChunkStreamReader, Subtree};
use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::format::tree::{ChunkRef, Node, TreeDecoder};
use crate::repository::IndexedRepository;
use crate::request_threads::RequestThreads;
use std::io::BufReader;

/// Region cache for metadata reads.
const TREE_CACHE_BYTES: usize = 16 << 20;
/// Where reads are round trips (an object store), the tree's first chunks up to this many
/// are read ahead, several requests in flight, before the tree is decoded: read as the
/// decoder asks, one round trip after another, a backup's parent tree took 400 ms of its
/// 2.7 s on the Garage benchmark. What the region cache cannot hold is read again from the
/// backend's own cache of bytes read (the S3 backend keeps them).
const TREE_AHEAD_CHUNKS: usize = 4096;
/// Calls `f` for every node of a snapshot, in stored order, streaming the tree.
pub fn walk_tree(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    f: impl FnMut(Node, Vec<ChunkRef>) -> Result<()>,
) -> Result<()> {
    walk_tree_measured(repo, snapshot, f).map(|_| ())
}

/// [`walk_tree`] for a restore: its reader reads a container's metadata in one suffix read
/// and takes metadata known without a request (read by the open, or in the local metadata
/// cache: [`crate::read::ChunkLocator::reading_metas_whole`]). Every tree chunk is still
/// verified against its id. Check, prune and the repairs walk with [`walk_tree`], which reads
/// every byte of metadata it judges by.
///
/// Only the nodes of `subtree` reach `f`, with their paths below it.
pub fn walk_tree_restoring(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    subtree: &Subtree,
    mut f: impl FnMut(Node, Vec<ChunkRef>) -> Result<()>,
) -> Result<()> {
    let mut reader = ChunkReader::new(repo, TREE_CACHE_BYTES)?.reading_metas_whole();
    walk_tree_reading(&mut reader, repo, snapshot, |node, chunks| {
        match subtree.view(node) {
            Some(node) => f(node, chunks),
            None => Ok(()),
        }
    })
    .map(|_| ())
}

/// [`walk_tree`], returning the lengths of the tree's chunks (where each lies in the stream,
/// for backup's choice of delta bases for the next tree).
pub fn walk_tree_measured(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    f: impl FnMut(Node, Vec<ChunkRef>) -> Result<()>,
) -> Result<Vec<u32>> {
    let mut reader = ChunkReader::new(repo, TREE_CACHE_BYTES)?;
    walk_tree_reading(&mut reader, repo, snapshot, f)
}

/// [`walk_tree_measured`] through `reader`, whose caches then hold the metadata and regions
/// of the tree's containers (down its chunks' delta chains) for a caller that goes on
/// reading from them: a backup's delta bases, among which are the parent tree's chunks.
pub fn walk_tree_reading(
    reader: &mut ChunkReader<'_>,
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    mut f: impl FnMut(Node, Vec<ChunkRef>) -> Result<()>,
) -> Result<Vec<u32>> {
    let ids = snapshot.tree.chunks.clone();
    if repo.reads_are_round_trips() && ids.len() > 1 {
        let mut threads = RequestThreads::new(repo.reads_in_flight().saturating_sub(1));
        let first = &ids[..ids.len().min(TREE_AHEAD_CHUNKS)];
        reader.read_chains_ahead(first, &mut threads);
    }
    let mut dec = TreeDecoder::new(BufReader::with_capacity(
        64 * 1024,
        ChunkStreamReader::new(reader, ids),
    ));
    loop {
        match dec.next_node() {
            Ok(Some((node, chunks))) => f(node, chunks)?,
            Ok(None) => break,
            // An index found damaged while reading a tree chunk must reach the caller as
            // such (the next command rebuilds it, and callers retry on it), not as a
            // truncated tree; other read errors stay a corrupt tree.
            Err(e) => {
                return Err(match dec.get_mut().get_mut().take_error() {
                    Some(inner @ Error::IndexDamaged(_)) => inner,
                    _ => e,
                })
            }
        }
    }
    Ok(dec.into_inner().into_inner().chunk_lens().to_vec())
}

/// [`walk_tree_measured`] over a tree whose chunks are already in memory (`chunks`, in the
/// tree's order): a LoopDelta backup's parent tree, which came with a dense container read
/// whole ([`crate::backup::prefetch::DensePrefetcher::preload`]).
pub fn walk_tree_chunks(
    chunks: &[bytes::Bytes],
    mut f: impl FnMut(Node, Vec<ChunkRef>) -> Result<()>,
) -> Result<Vec<u32>> {
    let mut dec = TreeDecoder::new(std::io::Cursor::new(chunks.concat()));
    while let Some((node, refs)) = dec.next_node()? {
        f(node, refs)?;
    }
    Ok(chunks.iter().map(|c| c.len() as u32).collect())
}
