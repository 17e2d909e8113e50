//! Runs on: the caller's thread (the walker).
//!
//! Small files packed into runs: the walker reads each file of at most [`SMALL_FILE_BYTES`]
//! whole into a shared block buffer, cuts it there (with the end of the file as the end of its
//! stream, as [`super::chunk::BlockReader`] does: the same chunks), and gathers it with the
//! directories, symlinks and unchanged files around it into one [`Item::Packed`] run, whose
//! chunks one pool job fingerprints. The dedup thread unpacks a run into the items the files
//! would have been one by one ([`super::lookahead`]), so nothing downstream changes.
//!
//! Why: a tree of many small files sent as a pool job, a one-shot channel and three items
//! per file spent more time waking threads than hashing. Backing up the 20 unpacked
//! SQLAlchemy versions again with every file read (1.2 GB, 23,269 files, 8 items in flight
//! between walker and dedup thread: under three files) made 290,882 `sched_yield` and 29,545
//! `futex` calls, the pool's threads spinning between jobs, and the kernel's task switches
//! were a tenth of the CPU samples; each small file also held a block buffer of 1 MiB of its
//! own until the dedup thread was done with it.
//!
//! [`Item::Packed`]: super::Item::Packed

use super::chunk::{pooled_bytes, BlockPool, BLOCK_SIZE};
use super::fingerprint::Fingerprinted;
use super::metrics::StageTimes;
use crate::format::container::ContainerId;
use crate::format::tree::{ChunkRef, Node};
use bytes::Bytes;
use crossbeam_channel::Receiver;
use dedelta_core::chunker::{cut_buffer, Chunker, Cuts};
use std::io::Read;
use std::ops::Range;
use std::time::Instant;

/// Files of at most this many bytes (by `stat`, and as read) are packed into runs.
pub(super) const SMALL_FILE_BYTES: usize = 128 << 10;

/// Entries a run holds at most, so that a tree of empty files or directories still reaches
/// the dedup thread in steps.
const RUN_ENTRIES: usize = 1024;

/// One entry of a packed run, in stream order.
pub(super) enum Packed {
    /// A directory, symlink or special file ([`super::Item::Node`]).
    Node(Node),
    /// A small file read whole: its node and the number of its chunks in the run's job (0
    /// for an empty file).
    File(Node, usize),
    /// A file stored with its parent's recipe ([`super::Item::Unchanged`]).
    Unchanged(Node, Vec<(ChunkRef, ContainerId)>),
}

/// A run of entries and, when it holds file data, the receiver of its chunks, fingerprinted
/// in one job, in order.
pub(super) struct PackedRun {
    pub entries: Vec<Packed>,
    pub chunks: Option<Receiver<Vec<Fingerprinted>>>,
}

/// A run's file data: the bytes and their chunks, to fingerprint in one job.
pub(super) type RunData = (Bytes, Vec<Range<usize>>);

/// What reading a small file into the run gave.
pub(super) enum SmallRead {
    /// The file, read whole (or up to a read error, which is given): its length and chunks.
    Read {
        len: usize,
        chunks: usize,
        error: Option<std::io::Error>,
    },
    /// The file held more than [`SMALL_FILE_BYTES`] after all (it grew since its `stat`):
    /// the bytes read, which are not in the run; the rest is still to be read.
    TooBig(Vec<u8>),
}

/// The run the walker is filling.
pub(super) struct RunBuilder {
    entries: Vec<Packed>,
    /// The small files' bytes, one after the other (a buffer of the block pool).
    buf: Vec<u8>,
    /// Their chunks, as ranges of `buf`.
    cuts: Vec<Range<usize>>,
    pool: BlockPool,
    /// The buffer's size, as the block reader's.
    capacity: usize,
}

impl RunBuilder {
    /// An empty run whose buffers come from `pool`, each `capacity` bytes (at least
    /// [`BLOCK_SIZE`]).
    pub fn new(pool: BlockPool, capacity: usize) -> Self {
        RunBuilder {
            entries: Vec::new(),
            buf: Vec::new(),
            cuts: Vec::new(),
            pool,
            capacity: capacity.max(BLOCK_SIZE),
        }
    }

    /// Whether the run holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the run must be sent before anything else enters it.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= RUN_ENTRIES
    }

    /// Whether a small file still fits (else the run is sent first).
    pub fn has_room_for_a_file(&self) -> bool {
        !self.is_full() && self.buf.len() + SMALL_FILE_BYTES < self.capacity
    }

    /// Adds an entry that carries no file data.
    pub fn push(&mut self, entry: Packed) {
        self.entries.push(entry);
    }

    /// Reads `f` into the run and cuts it, if it holds at most [`SMALL_FILE_BYTES`]; the
    /// caller then [`Self::push`]es its [`Packed::File`]. Requires
    /// [`Self::has_room_for_a_file`].
    pub fn read_file(
        &mut self,
        chunker: &dyn Chunker,
        f: &mut dyn Read,
        times: &StageTimes,
    ) -> SmallRead {
        if self.buf.capacity() == 0 {
            self.buf = self.pool.take(self.capacity);
        }
        let start = self.buf.len();
        // `read_to_end` keeps what was read before an error and retries interrupted reads.
        let error = f
            .take(SMALL_FILE_BYTES as u64 + 1)
            .read_to_end(&mut self.buf)
            .err();
        let len = self.buf.len() - start;
        if len > SMALL_FILE_BYTES {
            let head = self.buf[start..].to_vec();
            self.buf.truncate(start);
            return SmallRead::TooBig(head);
        }
        let t = Instant::now();
        let Cuts { ranges, .. } = cut_buffer(chunker, &self.buf[start..], true);
        StageTimes::add(&times.chunk, t);
        let chunks = ranges.len();
        self.cuts
            .extend(ranges.into_iter().map(|r| r.start + start..r.end + start));
        SmallRead::Read { len, chunks, error }
    }

    /// Empties the run: its entries and, when it holds file data, the bytes and their chunks
    /// to fingerprint.
    pub fn take(&mut self) -> (Vec<Packed>, Option<RunData>) {
        let entries = std::mem::take(&mut self.entries);
        let cuts = std::mem::take(&mut self.cuts);
        let buf = std::mem::take(&mut self.buf);
        let data = if cuts.is_empty() {
            self.pool.give(buf);
            None
        } else {
            Some((pooled_bytes(buf, self.pool.clone()), cuts))
        };
        (entries, data)
    }
}

impl Drop for RunBuilder {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dedelta_core::chunker::{chunk_all, new_chunker, ChunkerKind, ChunkerParams};

    fn chunker() -> Box<dyn Chunker> {
        new_chunker(
            ChunkerKind::FastCdc,
            ChunkerParams {
                min_size: 512,
                avg_size: 2048,
                max_size: 8192,
            },
        )
        .expect("valid parameters")
    }

    fn file_node() -> Node {
        Node {
            path: b"f".to_vec(),
            kind: crate::format::tree::NodeKind::File,
            mode: 0o100644,
            mtime_secs: 0,
            mtime_nanos: 0,
            size: 0,
            target: Vec::new(),
            meta: crate::format::tree::NodeMeta::default(),
        }
    }

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// Files read into one run are cut as each file alone, and the run's chunks are theirs,
    /// in order.
    #[test]
    fn files_in_a_run_are_cut_as_each_alone() {
        let c = chunker();
        let times = StageTimes::default();
        let mut run = RunBuilder::new(BlockPool::default(), BLOCK_SIZE);
        let files = [
            noise(30_000, 1),
            Vec::new(),
            noise(SMALL_FILE_BYTES, 2),
            noise(7, 3),
        ];
        let mut want = Vec::new();
        for f in &files {
            assert!(run.has_room_for_a_file());
            let SmallRead::Read { len, chunks, error } =
                run.read_file(c.as_ref(), &mut f.as_slice(), &times)
            else {
                panic!("a small file was refused");
            };
            assert!(error.is_none());
            assert_eq!(len, f.len());
            let alone: Vec<&[u8]> = chunk_all(c.as_ref(), f)
                .into_iter()
                .map(|r| &f[r])
                .collect();
            assert_eq!(chunks, alone.len());
            want.extend(alone.iter().map(|s| s.to_vec()));
            run.push(Packed::File(file_node(), chunks));
        }
        let (entries, data) = run.take();
        assert_eq!(entries.len(), files.len());
        let (bytes, cuts) = data.expect("file data");
        let got: Vec<Vec<u8>> = cuts.into_iter().map(|r| bytes[r].to_vec()).collect();
        assert_eq!(got, want);
        assert!(run.is_empty());
    }

    /// A file that grew past the bound since its `stat` is given back whole so far, and the
    /// run is as before.
    #[test]
    fn a_file_larger_than_its_stat_said_is_given_back() {
        let c = chunker();
        let times = StageTimes::default();
        let mut run = RunBuilder::new(BlockPool::default(), BLOCK_SIZE);
        let small = noise(100, 4);
        let SmallRead::Read { .. } = run.read_file(c.as_ref(), &mut small.as_slice(), &times)
        else {
            panic!("a small file was refused");
        };
        run.push(Packed::File(file_node(), 1));
        let big = noise(SMALL_FILE_BYTES + 5, 5);
        let mut reader = big.as_slice();
        let SmallRead::TooBig(head) = run.read_file(c.as_ref(), &mut reader, &times) else {
            panic!("a large file was packed");
        };
        let mut whole = head;
        whole.extend_from_slice(reader);
        assert_eq!(whole, big);
        let (entries, data) = run.take();
        assert_eq!(entries.len(), 1);
        let (bytes, cuts) = data.expect("file data");
        assert_eq!(&bytes[..], &small[..]);
        assert_eq!(cuts, vec![0..100]);
    }

    /// A read error keeps what was read before it, as the block reader does.
    #[test]
    fn a_read_error_keeps_what_was_read() {
        struct Failing(Vec<u8>, bool);
        impl Read for Failing {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                if self.1 {
                    return Err(std::io::Error::other("bad sector"));
                }
                self.1 = true;
                let n = self.0.len().min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                Ok(n)
            }
        }
        let c = chunker();
        let mut run = RunBuilder::new(BlockPool::default(), BLOCK_SIZE);
        let data = noise(3000, 6);
        let mut f = Failing(data.clone(), false);
        let SmallRead::Read { len, error, .. } =
            run.read_file(c.as_ref(), &mut f, &StageTimes::default())
        else {
            panic!("refused");
        };
        assert_eq!(len, 3000);
        assert!(error.is_some());
        let (_, got) = run.take();
        assert_eq!(&got.expect("data").0[..], &data[..]);
    }
}
