//! Backup's base reads ahead: the regions a round of candidate bases will read, read from the
//! backend first and opened (checksum, decompression) on several threads at once (see
//! `BaseFetcher::prefetch`), then taken into the locator's region cache.

use super::ChunkLocator;
use crate::backend::FileKind;
use crate::error::Result;
use crate::format::container::{self, ContainerId, RegionMeta};
use dedelta_core::compress::RegionDecompressor;
use dedelta_core::ChunkId;
use std::sync::Arc;

/// A region read from the backend but not opened yet (see [`ChunkLocator::read_regions_for`]):
/// opening it (checksum, decompression) needs nothing of the locator, so several can be
/// opened on other threads at once.
pub struct RegionRead {
    container: ContainerId,
    index: u32,
    meta: RegionMeta,
    stored: Vec<u8>,
    /// The decompressed bytes once opened (a reused buffer before).
    raw: Vec<u8>,
    opened: bool,
}

thread_local! {
    /// One zstd context per thread that opens [`RegionRead`]s.
    static DECOMPRESSOR: std::cell::RefCell<RegionDecompressor> =
        std::cell::RefCell::new(RegionDecompressor::default());
}

impl RegionRead {
    /// Checks and decompresses the region. A region that fails is left out when handed back
    /// ([`ChunkLocator::keep_regions`]): reading its chunk one by one reports why.
    pub fn open(&mut self) {
        let what = format!("container {}", self.container);
        self.opened = open_on_this_thread(&self.stored, &self.meta, &what, &mut self.raw).is_ok();
    }
}

/// Checks and decompresses a region's stored bytes into `raw` with this thread's zstd context.
fn open_on_this_thread(
    stored: &[u8],
    meta: &RegionMeta,
    what: &str,
    raw: &mut Vec<u8>,
) -> Result<()> {
    DECOMPRESSOR.with(|d| container::open_region_into(&mut d.borrow_mut(), stored, meta, what, raw))
}

impl ChunkLocator<'_> {
    /// Reads from the backend the regions holding `ids` that the region cache lacks, each
    /// once, without opening them: the caller opens them (on several threads at once, see
    /// [`RegionRead::open`]) and hands them back to [`Self::keep_regions`]. A chunk that
    /// cannot be placed or whose region cannot be read is left out: reading it one by one
    /// reports why. Readers behind a restore cache read ahead their own way (nothing here).
    pub fn read_regions_for(&mut self, ids: &[ChunkId]) -> Vec<RegionRead> {
        let mut reads: Vec<RegionRead> = Vec::new();
        if self.restore_cache.is_some() {
            return reads;
        }
        for id in ids {
            let Some((cid, index, _)) = self.place(id, super::CopyRule::Own) else {
                continue;
            };
            let known = |r: &RegionRead| r.container == cid && r.index == index;
            if self.regions.contains(&(cid, index)) || reads.iter().any(known) {
                continue;
            }
            reads.extend(self.read_stored(cid, index));
        }
        reads
    }

    /// Reads region `index` of `cid` from the backend, unopened; `None` if it cannot be
    /// (the chunk's own read reports why).
    fn read_stored(&mut self, cid: ContainerId, index: u32) -> Option<RegionRead> {
        let meta = self
            .meta(cid)
            .ok()
            .and_then(|m| m.regions.get(index as usize).copied())?;
        let mut stored = Vec::new();
        self.data
            .get_range_into(
                FileKind::Container,
                &cid.to_hex(),
                i64::from(meta.offset),
                meta.stored_len as usize,
                &mut stored,
            )
            .ok()?;
        self.stats.regions_read += 1;
        self.stats.bytes_read += stored.len() as u64;
        Some(RegionRead {
            container: cid,
            index,
            meta,
            stored,
            raw: self.spare_buffer(meta.raw_len as usize),
            opened: false,
        })
    }

    /// Takes the regions of [`Self::read_regions_for`] into the region cache once opened.
    pub fn keep_regions(&mut self, reads: Vec<RegionRead>) {
        for r in reads {
            if r.opened {
                self.cache_region(r.container, r.index, Arc::new(r.raw));
            }
        }
    }
}
