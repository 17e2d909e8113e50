//! Runs on: the dedup thread.
//!
//! Deduplication a fixed distance ahead of resemblance detection (LoopDelta §4.3, Figure 5:
//! stage 2, fingerprint indexing with its prefetches, feeds stage 4, delta compression,
//! through a buffer). The dedup thread takes the walker's items through a [`LookAhead`]: when
//! a block of file data enters it, each of the block's duplicates is *reached* in stream
//! order ([`FingerprintIndex::reached`](super::fingerprint_index::FingerprintIndex::reached):
//! a dense container enters the potential base chunk cache, the cache-aware filter's view of
//! the fingerprint cache takes the container) and judged by the cache-aware filter; the block
//! is handed on (deduplicated, its new chunks delta-checked) only once the blocks behind it
//! hold `window_bytes` of file data, or the stream has ended. So a dense container offers its
//! bases to the new chunks up to `window_bytes` before the stream's first duplicate in it.
//!
//! Every position is counted in the stream's bytes, never in thread timing: which
//! containers are cached when a chunk is delta-checked, and which were evicted, is the same
//! in every run (the pool still reads containers ahead, on several threads; they take effect
//! only here, see [`super::prefetch::DensePrefetcher`]).
//!
//! Why a sliding window and not batches: a batch of N bytes whose duplicates are all reached
//! before any of its chunks is delta-checked gives its first chunks N bytes of look-ahead and
//! its last ones none; the window gives every chunk at least `window_bytes`. Why not read
//! the dense list's containers at the start instead: LoopDelta prefetches a dense container
//! when deduplication accesses it (§4.3), and the cache is bounded (150 containers).
//! Why this matters: on the Redis RDB series, whose dumps change everywhere, a container's
//! first duplicate often comes after new chunks similar to its chunks; before the window
//! (a container entered at its first duplicate's block) `loopdelta` stored 5.9 % more than
//! `greedy` (docs/eval/papers.md).
//!
//! With Capping the window is 0: a segment (20 MiB) is decided whole, its duplicates all
//! reached before any of its chunks is delta-checked ([`super::dedup`]).

use super::fingerprint::Fingerprinted;
use super::small_files::{Packed, PackedRun};
use super::{closed, Item};
use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use crate::format::tree::{ChunkRef, Node};
use crossbeam_channel::Receiver;
use std::collections::VecDeque;

/// A chunk of file data that entered the window, with what was judged of it there.
pub(super) struct Judged {
    /// The chunk as the pool handed it over.
    pub chunk: Fingerprinted,
    /// The cache-aware filter found it base-fragmented (see [`super::caf`]) when it entered.
    pub base_fragmented: bool,
}

/// An item of the stream ([`Item`]), its file data received from the pool and judged.
pub(super) enum Ahead {
    /// A directory or symlink.
    Node(Node),
    /// Start of a regular file.
    FileStart(Node),
    /// A regular file stored with its parent's recipe (see [`Item::Unchanged`]).
    Unchanged(Node, Vec<(ChunkRef, ContainerId)>),
    /// The next chunks of the current file.
    Block(Vec<Judged>),
    /// End of the current file.
    FileEnd,
}

/// The dedup thread's window over the walker's items (see the module doc).
pub(super) struct LookAhead {
    items: Receiver<Item>,
    /// Bytes of file data the window holds behind the item handed on.
    window_bytes: u64,
    queue: VecDeque<Ahead>,
    /// Bytes of file data in `queue`.
    queued_bytes: u64,
    /// The walker closed the channel: the stream has ended.
    ended: bool,
}

impl LookAhead {
    /// A window of `window_bytes` over `items` (0: every item is handed on as it comes).
    pub fn new(items: Receiver<Item>, window_bytes: u64) -> Self {
        LookAhead {
            items,
            window_bytes,
            queue: VecDeque::new(),
            queued_bytes: 0,
            ended: false,
        }
    }

    /// Takes the next item into the window; `false` at the end of the stream. `enter` is
    /// called on each chunk of file data, in stream order, and says whether it is
    /// base-fragmented.
    ///
    /// # Errors
    /// The pool dropped a block's result (the pipeline is stopping).
    fn pull(&mut self, enter: &mut dyn FnMut(&Fingerprinted) -> bool) -> Result<bool> {
        if self.ended {
            return Ok(false);
        }
        let Ok(item) = self.items.recv() else {
            self.ended = true;
            return Ok(false);
        };
        let ahead = match item {
            Item::FileData(rx) => {
                let chunks = rx.recv().map_err(closed)?;
                self.block(chunks.into_iter(), enter)
            }
            Item::Node(n) => Ahead::Node(n),
            Item::FileStart(n) => Ahead::FileStart(n),
            Item::Unchanged(n, chunks) => Ahead::Unchanged(n, chunks),
            Item::FileEnd => Ahead::FileEnd,
            Item::Packed(run) => return self.unpack(run, enter),
        };
        self.queue.push_back(ahead);
        Ok(true)
    }

    /// A block of file data entering the window: each chunk judged, in order.
    fn block(
        &mut self,
        chunks: impl Iterator<Item = Fingerprinted>,
        enter: &mut dyn FnMut(&Fingerprinted) -> bool,
    ) -> Ahead {
        let block = chunks
            .map(|chunk| {
                self.queued_bytes += chunk.data.len() as u64;
                Judged {
                    base_fragmented: enter(&chunk),
                    chunk,
                }
            })
            .collect();
        Ahead::Block(block)
    }

    /// A packed run entering the window as the items its entries would have been alone (a
    /// small file: its start, its one block, its end).
    ///
    /// # Errors
    /// The pool dropped the run's result, or it held fewer files than the run.
    fn unpack(
        &mut self,
        run: PackedRun,
        enter: &mut dyn FnMut(&Fingerprinted) -> bool,
    ) -> Result<bool> {
        let mut files = match run.chunks {
            Some(rx) => rx.recv().map_err(closed)?.into_iter(),
            None => Vec::new().into_iter(),
        };
        for entry in run.entries {
            match entry {
                Packed::Node(n) => self.queue.push_back(Ahead::Node(n)),
                Packed::Unchanged(n, c) => self.queue.push_back(Ahead::Unchanged(n, c)),
                Packed::File(n) => {
                    let Some(chunks) = files.next() else {
                        return Err(Error::Pipeline(
                            "a packed run's chunks ended before its files".into(),
                        ));
                    };
                    self.queue.push_back(Ahead::FileStart(n));
                    if !chunks.is_empty() {
                        let block = self.block(chunks.into_iter(), enter);
                        self.queue.push_back(block);
                    }
                    self.queue.push_back(Ahead::FileEnd);
                }
            }
        }
        Ok(true)
    }

    /// The next item of the stream, once the items behind it hold `window_bytes` of file
    /// data (or the stream has ended); `None` at the end. `enter`: see [`Self::pull`].
    ///
    /// # Errors
    /// The pool dropped a block's result (the pipeline is stopping).
    pub fn next(&mut self, enter: &mut dyn FnMut(&Fingerprinted) -> bool) -> Result<Option<Ahead>> {
        if self.queue.is_empty() && !self.pull(enter)? {
            return Ok(None);
        }
        let Some(first) = self.queue.pop_front() else {
            return Ok(None);
        };
        if let Ahead::Block(b) = &first {
            self.queued_bytes -= b.iter().map(|j| j.chunk.data.len() as u64).sum::<u64>();
        }
        while self.queued_bytes < self.window_bytes && self.pull(enter)? {}
        Ok(Some(first))
    }
}

#[cfg(test)]
mod tests;
