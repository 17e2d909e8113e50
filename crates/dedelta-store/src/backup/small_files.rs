//! Runs on: the caller's thread (the walker).
//!
//! Small files packed into runs: the walker reads each file of at most [`SMALL_FILE_BYTES`]
//! (under a block) whole into a shared block buffer and gathers it with the directories, symlinks and
//! unchanged files around it into one [`Item::Packed`] run. One pool job cuts the run's files
//! (each alone, the end of the file the end of its stream, as [`super::chunk::BlockReader`]
//! cuts a file: the same chunks) and fingerprints their chunks. The dedup thread unpacks a
//! run into the items the files would have been one by one ([`super::lookahead`]), so
//! nothing downstream changes.
//!
//! Why: a tree of many small files sent as a pool job, a one-shot channel and three items
//! per file spent more time waking threads than hashing. Backing up the 20 unpacked
//! SQLAlchemy versions again with every file read (1.2 GB, 23,269 files, 8 items in flight
//! between walker and dedup thread: under three files) made 290,882 `sched_yield` and 29,545
//! `futex` calls, the pool's threads spinning between jobs, and the kernel's task switches
//! were a tenth of the CPU samples; each small file also held a block buffer of 1 MiB of its
//! own until the dedup thread was done with it. Once packed, the walker's own cutting
//! (FastCDC) bounded that backup, 28 % of its CPU samples on the walker's thread: a run's
//! files are cut on the pool, and every file that fits in a block is packed (in that tree,
//! 58 % of the bytes are in files above 128 KiB, 12 % above 1 MiB).
//!
//! [`Item::Packed`]: super::Item::Packed

use super::chunk::{pooled_bytes, BlockPool, BLOCK_SIZE};
use super::fingerprint::{FingerprintJob, Fingerprinted};
use super::metrics::StageTimes;
use crate::format::container::ContainerId;
use crate::format::tree::{ChunkRef, Node};
use bytes::Bytes;
use crossbeam_channel::Receiver;
use dedelta_core::chunker::{cut_buffer, Chunker, Cuts};
use std::io::Read;
use std::ops::Range;
use std::time::Instant;

/// Files of at most this many bytes (by `stat`) are packed into runs: those that the block
/// reader reads as one block (it reads a file of exactly [`BLOCK_SIZE`] bytes as two, and the
/// delta stage decides a block's new chunks together). A run's buffer is a block's.
pub(super) const SMALL_FILE_BYTES: usize = BLOCK_SIZE - 1;

/// Entries a run holds at most, so that a tree of empty files or directories still reaches
/// the dedup thread in steps.
const RUN_ENTRIES: usize = 1024;

/// One entry of a packed run, in stream order.
pub(super) enum Packed {
    /// A directory, symlink or special file ([`super::Item::Node`]).
    Node(Node),
    /// A small file read whole (its chunks: the run's next list of chunks).
    File(Node),
    /// A file stored with its parent's recipe ([`super::Item::Unchanged`]).
    Unchanged(Node, Vec<(ChunkRef, ContainerId)>),
}

/// A run of entries and, when it holds small files, the receiver of their chunks (one list
/// per file, in order), cut and fingerprinted in one job.
pub(super) struct PackedRun {
    pub entries: Vec<Packed>,
    pub chunks: Option<Receiver<Vec<Vec<Fingerprinted>>>>,
}

/// A run's small files: their bytes, one after the other, and each file's range of them.
pub(super) struct RunFiles {
    pub bytes: Bytes,
    pub files: Vec<Range<usize>>,
}

/// What reading a small file into the run gave.
pub(super) enum SmallRead {
    /// The file, read whole (or up to a read error, which is given): its length.
    Read {
        len: usize,
        error: Option<std::io::Error>,
    },
    /// The file held more than the run had room for after all (it grew since its `stat`):
    /// the bytes read, which are not in the run; the rest is still to be read.
    TooBig(Vec<u8>),
}

/// The run the walker is filling.
pub(super) struct RunBuilder {
    entries: Vec<Packed>,
    /// The small files' bytes, one after the other (a buffer of the block pool).
    buf: Vec<u8>,
    /// Each file's range of `buf`.
    files: Vec<Range<usize>>,
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
            files: Vec::new(),
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

    /// Whether a file of `size` bytes still fits (else the run is sent first; an empty run
    /// has room for any file of at most [`SMALL_FILE_BYTES`]).
    pub fn has_room_for(&self, size: u64) -> bool {
        !self.is_full() && (self.buf.len() as u64).saturating_add(size) < self.capacity as u64
    }

    /// Adds an entry: a node, an unchanged file, or the [`Packed::File`] of the file
    /// [`Self::read_file`] just read.
    pub fn push(&mut self, entry: Packed) {
        self.entries.push(entry);
    }

    /// Reads `f` into the run if it fits in what room the run has left; the caller then
    /// [`Self::push`]es its [`Packed::File`]. A file that does not fit is given back
    /// ([`SmallRead::TooBig`]): check [`Self::has_room_for`] its size first.
    pub fn read_file(&mut self, f: &mut dyn Read) -> SmallRead {
        if self.buf.capacity() == 0 {
            self.buf = self.pool.take(self.capacity);
        }
        let start = self.buf.len();
        let room = self.capacity.saturating_sub(start + 1);
        // `read_to_end` keeps what was read before an error and retries interrupted reads.
        // At most one byte more than the room: within the buffer, no reallocation.
        let error = f.take(room as u64 + 1).read_to_end(&mut self.buf).err();
        let len = self.buf.len() - start;
        if len > room {
            let head = self.buf[start..].to_vec();
            self.buf.truncate(start);
            return SmallRead::TooBig(head);
        }
        self.files.push(start..start + len);
        SmallRead::Read { len, error }
    }

    /// Empties the run: its entries and, when it holds small files, their bytes.
    pub fn take(&mut self) -> (Vec<Packed>, Option<RunFiles>) {
        let entries = std::mem::take(&mut self.entries);
        let files = std::mem::take(&mut self.files);
        let buf = std::mem::take(&mut self.buf);
        let data = if files.is_empty() {
            self.pool.give(buf);
            None
        } else {
            Some(RunFiles {
                bytes: pooled_bytes(buf, self.pool.clone()),
                files,
            })
        };
        (entries, data)
    }
}

/// The chunks of each of `files` (ranges of `bytes`), each file cut alone as a whole stream:
/// all the cuts, as ranges of `bytes`, and how many each file has.
pub(super) fn cut_files(
    chunker: &dyn Chunker,
    bytes: &[u8],
    files: &[Range<usize>],
) -> (Vec<Range<usize>>, Vec<usize>) {
    let mut cuts = Vec::new();
    let mut counts = Vec::with_capacity(files.len());
    for f in files {
        let Cuts { ranges, .. } = cut_buffer(chunker, &bytes[f.clone()], true);
        counts.push(ranges.len());
        cuts.extend(
            ranges
                .into_iter()
                .map(|r| r.start + f.start..r.end + f.start),
        );
    }
    (cuts, counts)
}

/// The pool's job for a run: cuts its files ([`cut_files`]) and fingerprints their chunks
/// ([`FingerprintJob::run`]); one list of chunks per file, in order.
pub(super) fn fingerprint_run(
    job: &FingerprintJob,
    chunker: &dyn Chunker,
    run: RunFiles,
) -> Vec<Vec<Fingerprinted>> {
    let t = Instant::now();
    let (cuts, counts) = cut_files(chunker, &run.bytes, &run.files);
    StageTimes::add(&job.times.chunk, t);
    let mut chunks = job.run(run.bytes, cuts).into_iter();
    counts
        .into_iter()
        .map(|n| chunks.by_ref().take(n).collect())
        .collect()
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

    /// `len` pseudo-random bytes (BLAKE3's output stream of `seed`).
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut out = vec![0; len];
        let mut h = blake3::Hasher::new();
        h.update(&seed.to_le_bytes());
        h.finalize_xof().fill(&mut out);
        out
    }

    /// Files read into one run are cut as each file alone, and the run's chunks are theirs,
    /// in order.
    #[test]
    fn files_in_a_run_are_cut_as_each_alone() {
        let c = chunker();
        let mut run = RunBuilder::new(BlockPool::default(), BLOCK_SIZE);
        let files = [noise(30_000, 1), Vec::new(), noise(100_000, 2), noise(7, 3)];
        let mut want = Vec::new();
        let mut want_counts = Vec::new();
        for f in &files {
            assert!(run.has_room_for(f.len() as u64));
            let SmallRead::Read { len, error } = run.read_file(&mut f.as_slice()) else {
                panic!("a small file was refused");
            };
            assert!(error.is_none());
            assert_eq!(len, f.len());
            let alone = chunk_all(c.as_ref(), f);
            want_counts.push(alone.len());
            want.extend(alone.into_iter().map(|r| f[r].to_vec()));
            run.push(Packed::File(file_node()));
        }
        let (entries, data) = run.take();
        assert_eq!(entries.len(), files.len());
        let data = data.expect("file data");
        let (cuts, counts) = cut_files(c.as_ref(), &data.bytes, &data.files);
        assert_eq!(counts, want_counts);
        let got: Vec<Vec<u8>> = cuts.into_iter().map(|r| data.bytes[r].to_vec()).collect();
        assert_eq!(got, want);
        assert!(run.is_empty());
    }

    /// A file that grew past the bound since its `stat` is given back whole so far, and the
    /// run is as before.
    #[test]
    fn a_file_larger_than_its_stat_said_is_given_back() {
        let mut run = RunBuilder::new(BlockPool::default(), BLOCK_SIZE);
        let small = noise(100, 4);
        let SmallRead::Read { .. } = run.read_file(&mut small.as_slice()) else {
            panic!("a small file was refused");
        };
        run.push(Packed::File(file_node()));
        assert!(!run.has_room_for(BLOCK_SIZE as u64));
        let big = noise(BLOCK_SIZE, 5);
        let mut reader = big.as_slice();
        let SmallRead::TooBig(head) = run.read_file(&mut reader) else {
            panic!("a large file was packed");
        };
        let mut whole = head;
        whole.extend_from_slice(reader);
        assert_eq!(whole, big);
        let (entries, data) = run.take();
        assert_eq!(entries.len(), 1);
        let data = data.expect("file data");
        assert_eq!(&data.bytes[..], &small[..]);
        assert_eq!(data.files, vec![0..100]);
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
        let mut run = RunBuilder::new(BlockPool::default(), BLOCK_SIZE);
        let data = noise(3000, 6);
        let mut f = Failing(data.clone(), false);
        let SmallRead::Read { len, error } = run.read_file(&mut f) else {
            panic!("refused");
        };
        assert_eq!(len, 3000);
        assert!(error.is_some());
        let (_, got) = run.take();
        assert_eq!(&got.expect("data").bytes[..], &data[..]);
    }
}
