//! Runs on: the dedup thread (filling regions) and the worker pool (compressing them).
//!
//! Stored entries (full chunks and deltas) are appended to a raw region in stream order; a
//! region is closed once its raw bytes reach the repository's region size and compressed on
//! the pool. The writer thread receives the regions in order through one-shot receivers.

use super::closed;
use super::fingerprint::submit;
use super::metrics::StageTimes;
use crate::buffers::BufferPool;
use crate::error::Result;
use crate::format::container::{CompressedRegion, EntryKind, RegionBuilder};
use crossbeam_channel::{Receiver, Sender};
use dedelta_core::compress::Compression;
use dedelta_core::ChunkId;
use std::sync::Arc;
use std::time::Instant;

/// Fills regions and hands them, compressed, to the writer thread.
pub(super) struct RegionPacker<'a> {
    region: RegionBuilder,
    region_size: usize,
    compression: Compression,
    pool: &'a rayon::ThreadPool,
    tx: Sender<Receiver<CompressedRegion>>,
    times: Arc<StageTimes>,
    /// Raw and compressed region buffers: raw ones come back after compression, compressed
    /// ones from the writer once it copied them into a container (see [`crate::buffers`]).
    buffers: BufferPool,
}

impl<'a> RegionPacker<'a> {
    /// A packer closing regions at `region_size` raw bytes, its buffers from `buffers`.
    pub fn new(
        region_size: usize,
        compression: Compression,
        pool: &'a rayon::ThreadPool,
        tx: Sender<Receiver<CompressedRegion>>,
        times: Arc<StageTimes>,
        buffers: BufferPool,
    ) -> Self {
        RegionPacker {
            region: RegionBuilder::default(),
            region_size,
            compression,
            pool,
            tx,
            times,
            buffers,
        }
    }

    /// Appends one stored entry.
    pub fn push(
        &mut self,
        id: ChunkId,
        kind: EntryKind,
        bytes: &[u8],
        original_len: usize,
        super_features: Vec<u64>,
    ) -> Result<()> {
        if self.region.raw.capacity() == 0 {
            // A region ends with the entry that takes it past the region size: room for
            // that entry too, most of the time.
            self.region.raw = self.buffers.take(self.region_size + self.region_size / 2);
        }
        self.region
            .push(id, kind, bytes, original_len, super_features);
        if self.region.raw.len() >= self.region_size {
            self.flush()?;
        }
        Ok(())
    }

    /// Closes the open region, if it holds anything, and sends it for compression.
    pub fn flush(&mut self) -> Result<()> {
        if self.region.is_empty() {
            return Ok(());
        }
        let region = std::mem::take(&mut self.region);
        let compression = self.compression;
        let times = self.times.clone();
        let buffers = self.buffers.clone();
        let rx = submit(self.pool, move || {
            let t = Instant::now();
            let out = buffers.take(0);
            let (r, raw) = region.compress_into(compression, out);
            buffers.give(raw);
            StageTimes::add(&times.compress, t);
            r
        });
        self.tx.send(rx).map_err(closed)
    }
}
