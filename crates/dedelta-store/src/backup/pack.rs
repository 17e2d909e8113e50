//! Runs on: the dedup thread (filling regions) and the worker pool (compressing them).
//!
//! Stored entries (full chunks and deltas) are appended to a raw region in stream order; a
//! region is closed once its raw bytes reach the repository's region size and compressed on
//! the pool. The writer thread receives the regions in order through one-shot receivers.

use super::closed;
use super::fingerprint::submit;
use super::metrics::StageTimes;
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
}

impl<'a> RegionPacker<'a> {
    /// A packer closing regions at `region_size` raw bytes.
    pub fn new(
        region_size: usize,
        compression: Compression,
        pool: &'a rayon::ThreadPool,
        tx: Sender<Receiver<CompressedRegion>>,
        times: Arc<StageTimes>,
    ) -> Self {
        RegionPacker {
            region: RegionBuilder::default(),
            region_size,
            compression,
            pool,
            tx,
            times,
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
        let rx = submit(self.pool, move || {
            let t = Instant::now();
            let r = region.compress(compression);
            StageTimes::add(&times.compress, t);
            r
        });
        self.tx.send(rx).map_err(closed)
    }
}
