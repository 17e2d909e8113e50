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
use std::io::Write;

/// Region cache for `dump`.
const DUMP_CACHE_BYTES: usize = 32 << 20;
/// Bytes of verified output the decoding thread gathers before handing them to the writing
/// thread (see [`dump_found`]).
const OUTPUT_BUFFER_BYTES: usize = 1 << 20;
/// Output buffers on their way to the writing thread at most: the decoder runs this far
/// ahead of the writes, and as many buffers go round.
const OUTPUT_BUFFERS_AHEAD: usize = 2;

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
        let mut output = OutputThread::start(s, out);
        let mut decoder = PipelinedDecoder::new(repo.chunk_hasher());
        let decoded = (|| -> Result<()> {
            for batch in rx.iter() {
                let chunks: Vec<&FetchedChunk> = batch.iter().collect();
                for data in decoder.decode_batch(&chunks) {
                    if !output.write(data?) {
                        // The writing thread failed: it reports why.
                        return Ok(());
                    }
                }
            }
            Ok(())
        })();
        drop(rx);
        let written = output.finish();
        let read = producer
            .map_err(|e| Error::io("starting the dump's reading thread", e))?
            .join()
            .unwrap_or_else(|_| Err(Error::ThreadPanicked("dump reader".into())));
        // A read error ends the stream early: it is the cause, not the short output.
        let cache = read?;
        decoded?;
        written.map(|n| (n, cache))
    })
}

/// The writing end of a dump: verified bytes gathered into buffers of
/// [`OUTPUT_BUFFER_BYTES`], written out on a thread of their own.
///
/// Why: writing a dump's output (into the page cache, a pipe, tmpfs) cost the decoding thread
/// as much system time as all its decoding: restoring a 1.24 GB file to tmpfs, that thread
/// held 73 % of the CPU time and bounded the dump, 0.7 s of it in `write`. The bytes are
/// copied into the buffer as a `BufWriter` copied them; the writes now run beside the next
/// batch's decoding and verification. A dump that fits in one buffer starts no thread.
struct OutputThread<'scope> {
    /// The buffer being filled.
    buf: Vec<u8>,
    /// Full buffers for the writing thread; `None` before it starts (and after it failed).
    full: Option<crossbeam_channel::Sender<Vec<u8>>>,
    /// Buffers written, back for reuse.
    free: crossbeam_channel::Receiver<Vec<u8>>,
    /// Starts the writing thread, on the first full buffer.
    start: Option<Box<dyn FnOnce() -> WriterHandle<'scope> + 'scope>>,
    writer: Option<WriterHandle<'scope>>,
    /// Bytes taken so far.
    written: u64,
}

/// The writing thread, giving the outcome of its writes.
type WriterHandle<'scope> = std::thread::ScopedJoinHandle<'scope, std::io::Result<()>>;

impl<'scope> OutputThread<'scope> {
    fn start<'env>(
        s: &'scope std::thread::Scope<'scope, 'env>,
        out: &'scope mut (dyn Write + Send),
    ) -> Self {
        let (full, to_write) = crossbeam_channel::bounded::<Vec<u8>>(OUTPUT_BUFFERS_AHEAD);
        let (give_back, free) = crossbeam_channel::unbounded::<Vec<u8>>();
        let start = move || {
            s.spawn(move || -> std::io::Result<()> {
                for buf in to_write {
                    out.write_all(&buf)?;
                    let _ = give_back.send(buf);
                }
                out.flush()
            })
        };
        OutputThread {
            buf: Vec::with_capacity(OUTPUT_BUFFER_BYTES),
            full: Some(full),
            free,
            start: Some(Box::new(start)),
            writer: None,
            written: 0,
        }
    }

    /// Appends `data`; `false` once the writing thread has failed (nothing more is taken).
    fn write(&mut self, data: &[u8]) -> bool {
        self.buf.extend_from_slice(data);
        self.written += data.len() as u64;
        if self.buf.len() < OUTPUT_BUFFER_BYTES {
            return true;
        }
        self.send()
    }

    /// Hands the buffer to the writing thread (starting it), takes a free one back.
    fn send(&mut self) -> bool {
        if let Some(start) = self.start.take() {
            self.writer = Some(start());
        }
        let Some(full) = &self.full else {
            return false;
        };
        let next = match self.free.try_recv() {
            Ok(mut b) => {
                b.clear();
                b
            }
            Err(_) => Vec::with_capacity(OUTPUT_BUFFER_BYTES),
        };
        if full.send(std::mem::replace(&mut self.buf, next)).is_err() {
            self.full = None;
            return false;
        }
        true
    }

    /// Writes what is left, waits for the writing thread and gives the bytes written, or
    /// why the output failed.
    fn finish(mut self) -> Result<u64> {
        if !self.buf.is_empty() || self.writer.is_none() {
            self.send();
        }
        drop(self.full.take());
        let outcome = match self.writer.take() {
            Some(w) => w
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the writing thread panicked"))),
            None => Ok(()),
        };
        outcome
            .map(|()| self.written)
            .map_err(|e| Error::io("writing to standard output", e))
    }
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
