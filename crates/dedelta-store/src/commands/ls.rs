//! Finding one node in a snapshot's tree, and writing one file's content (for `ls` and
//! `dump`).

use crate::error::{Error, Result};
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::format::tree::{ChunkRef, Node, NodeKind};
use crate::read::walk_tree;
use crate::read::{
    FetchedChunk, PipelinedDecoder, PipelinedLocator, RestoreCacheChoice, RestoreCacheStats,
    SendBatch,
};
use crate::repository::IndexedRepository;
use crate::write_behind::WriteBehind;
use std::io::Write;

/// Region cache for `dump`.
const DUMP_CACHE_BYTES: usize = 32 << 20;

/// Normalises a user-given path to the stored form (no leading or trailing `/`).
///
/// Paths are raw bytes, as stored: a file name need not be UTF-8.
pub fn normalize_path(p: &[u8]) -> &[u8] {
    let start = p.iter().position(|b| *b != b'/').unwrap_or(p.len());
    let end = p.iter().rposition(|b| *b != b'/').map_or(start, |i| i + 1);
    &p[start..end]
}

/// Finds the node at `path` (raw bytes, with or without a leading `/`).
///
/// # Errors
/// [`Error::PathNotInSnapshot`] if no node has that path; an unreadable tree.
pub fn find_node(
    repo: &IndexedRepository,
    id: &SnapshotId,
    snapshot: &Snapshot,
    path: &[u8],
) -> Result<(Node, Vec<ChunkRef>)> {
    let want = normalize_path(path);
    let mut found = None;
    walk_tree(repo, snapshot, |n, c| {
        if found.is_none() && n.path == want {
            found = Some((n, c));
        }
        Ok(())
    })?;
    found.ok_or_else(|| Error::PathNotInSnapshot {
        path: String::from_utf8_lossy(path).into_owned(),
        snapshot: id.short(),
    })
}

/// Writes the content of one file of a snapshot to `out`, verifying every chunk.
///
/// `path` is raw bytes (a stored name need not be UTF-8), with or without a leading `/`.
///
/// Two threads, as in restore: a second thread looks chunks up and decompresses their
/// regions while this one decodes deltas, verifies and writes.
pub fn dump(
    repo: &IndexedRepository,
    id: &SnapshotId,
    snapshot: &Snapshot,
    path: &[u8],
    out: &mut (dyn Write + Send),
) -> Result<u64> {
    let cache = RestoreCacheChoice::default();
    dump_with(repo, id, snapshot, path, cache, DUMP_CACHE_BYTES, out).map(|(n, _)| n)
}

/// [`dump`] through the restore cache `cache` (an LRU's regions also bounded by
/// `cache_bytes`); returns the bytes written and what the cache read.
pub fn dump_with(
    repo: &IndexedRepository,
    id: &SnapshotId,
    snapshot: &Snapshot,
    path: &[u8],
    cache: RestoreCacheChoice,
    cache_bytes: usize,
    out: &mut (dyn Write + Send),
) -> Result<(u64, RestoreCacheStats)> {
    let (node, chunks) = find_node(repo, id, snapshot, path)?;
    dump_found(repo, snapshot, &node, chunks, cache, cache_bytes, out)
}

/// [`dump_with`] of a node already found by [`find_node`] (its recipe `chunks`): a caller
/// that looked the path up to see what it is does not walk the tree again (with recipes
/// stored as deltas on their parents', a walk reads one container per version of the
/// chain: 10 of the 17 ms of `ls` on the 20th SQLAlchemy version).
pub fn dump_found(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    node: &Node,
    chunks: Vec<ChunkRef>,
    cache: RestoreCacheChoice,
    cache_bytes: usize,
    out: &mut (dyn Write + Send),
) -> Result<(u64, RestoreCacheStats)> {
    if node.kind != NodeKind::File {
        return Err(Error::InvalidOption(format!(
            "{} is not a regular file",
            String::from_utf8_lossy(&node.path)
        )));
    }
    // Chunks go over in batches (see SendBatch).
    let (tx, rx) = crossbeam_channel::bounded::<Vec<FetchedChunk>>(8);
    let mut decoder = PipelinedDecoder::new(repo.chunk_hasher(), &cache);
    std::thread::scope(|s| {
        let locating = std::thread::Builder::new().name("dedelta-locate".into());
        let producer = locating.spawn_scoped(s, move || -> Result<RestoreCacheStats> {
            let mut locator = PipelinedLocator::new(repo, cache, cache_bytes)?
                .reading_own_copies(&snapshot.containers);
            // On an object store the file's regions are read ahead of its fetches; on a
            // disk, regions are decompressed only as far as the file's chunks need.
            locator.announce(chunks.iter().map(|c| c.id));
            // Forward assembly: areas of the recipe, each assembled before it is fetched.
            let area = locator.area_bytes().unwrap_or(u64::MAX);
            let mut rest: &[ChunkRef] = &chunks;
            let mut batch = SendBatch::default();
            while !rest.is_empty() {
                let (mut n, mut bytes) = (0, 0u64);
                while n < rest.len() && (n == 0 || bytes + u64::from(rest[n].len) <= area) {
                    bytes += u64::from(rest[n].len);
                    n += 1;
                }
                let (now, later) = rest.split_at(n);
                rest = later;
                if area != u64::MAX {
                    locator.assemble(&now.iter().map(|c| c.id).collect::<Vec<_>>());
                }
                for c in now {
                    let fetched = locator.fetch(&c.id)?;
                    if batch.push(fetched, &tx).is_err() {
                        // The writing side failed and reports why.
                        return Ok(locator.cache_stats());
                    }
                }
            }
            // A closed channel: the writing side failed and reports why.
            let _ = batch.flush(&tx);
            Ok(locator.cache_stats())
        });
        // The output is written behind the decoding, from a thread of its own (see
        // crate::write_behind).
        let mut output = WriteBehind::new(s, out, node.size);
        let writing = |e| Error::io("writing to standard output", e);
        let mut written = 0u64;
        let decoded = (|| -> Result<()> {
            for batch in rx.iter() {
                let chunks: Vec<&FetchedChunk> = batch.iter().collect();
                for data in decoder.decode_batch(&chunks) {
                    let data = data?;
                    output.write(data).map_err(writing)?;
                    written += data.len() as u64;
                }
            }
            Ok(())
        })();
        drop(rx);
        let (_, finished) = output.finish();
        let read = producer
            .map_err(|e| Error::io("starting the dump's reading thread", e))?
            .join()
            .unwrap_or_else(|_| Err(Error::ThreadPanicked("dump reader".into())));
        // A read error ends the stream early: it is the cause, not the short output.
        let cache = read?;
        decoded?;
        finished.map_err(writing)?;
        Ok((written, cache))
    })
}

#[cfg(test)]
mod tests {
    use super::normalize_path;

    #[test]
    fn normalize_path_trims_slashes_of_raw_bytes() {
        assert_eq!(normalize_path(b"/a/b/"), b"a/b");
        assert_eq!(normalize_path(b"a"), b"a");
        assert_eq!(normalize_path(b"///"), b"");
        assert_eq!(normalize_path(b""), b"");
        assert_eq!(normalize_path(b"/x\xff/"), b"x\xff");
    }
}
