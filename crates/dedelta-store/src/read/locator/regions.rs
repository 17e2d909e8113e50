//! The regions a locator reads: its region cache (or the restore cache it hands them to), a
//! region's read and decompression (whole, or as far as the chunks expected), forward
//! assembly's reads of several regions at once, and the recycling of region buffers.

use super::ChunkLocator;
use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::container::{self, ContainerId, ContainerMeta};
use std::sync::Arc;

impl ChunkLocator<'_> {
    /// Region `index` of `cid`, decompressed at least through byte `need` (a chunk's end).
    pub(super) fn region(
        &mut self,
        cid: ContainerId,
        meta: &ContainerMeta,
        index: u32,
        need: usize,
    ) -> Result<Arc<Vec<u8>>> {
        if self.restore_cache.is_some() {
            // How far to decompress is worked out on a miss only (most chunks hit).
            let mut whole = false;
            if let Some(r) = self.restore_cache.as_mut().and_then(|c| c.get(&cid, index)) {
                if r.len() >= need {
                    self.stats.region_cache_hits += 1;
                    return Ok(r);
                }
                // Decompressed partway (expect_chunks), and this chunk lies past it.
                self.stats.regions_decoded_again += 1;
                whole = true;
            } else if self.await_region(cid, index) {
                if let Some(r) = self.restore_cache.as_mut().and_then(|c| c.get(&cid, index)) {
                    self.stats.region_cache_hits += 1;
                    return Ok(r);
                }
            }
            let upto = if whole || self.ahead.is_some() {
                usize::MAX
            } else {
                self.expected.upto(cid, meta, index, need)
            };
            let r = self.read_region(cid, meta, index, upto)?;
            self.keep(cid, meta, index, r.clone());
            return Ok(r);
        }
        if let Some(r) = self.regions.get(&(cid, index)) {
            self.stats.region_cache_hits += 1;
            return Ok(r.clone());
        }
        // Read in the background (backup's bases read ahead): wait for it.
        if self.await_region(cid, index) {
            if let Some(r) = self.regions.get(&(cid, index)) {
                self.stats.region_cache_hits += 1;
                return Ok(r.clone());
            }
        }
        let raw = self.read_region(cid, meta, index, usize::MAX)?;
        self.cache_region(cid, index, raw.clone());
        Ok(raw)
    }

    /// Puts a region in the LRU region cache, evicting beyond its budget.
    pub(super) fn cache_region(&mut self, cid: ContainerId, index: u32, raw: Arc<Vec<u8>>) {
        self.region_bytes += raw.len();
        if let Some(old) = self.regions.put((cid, index), raw) {
            self.region_bytes -= old.len();
        }
        while self.region_bytes > self.cache_bytes && self.regions.len() > 1 {
            let Some((_, old)) = self.regions.pop_lru() else {
                break;
            };
            self.region_bytes -= old.len();
            self.recycle(old);
        }
    }

    /// Reads region `index` of `cid` from the backend and decompresses its first `upto` bytes
    /// (all of them if it is shorter).
    pub(super) fn read_region(
        &mut self,
        cid: ContainerId,
        meta: &ContainerMeta,
        index: u32,
        upto: usize,
    ) -> Result<Arc<Vec<u8>>> {
        let what = format!("container {cid}");
        let r = meta
            .regions
            .get(index as usize)
            .ok_or_else(|| Error::corrupt(&what, format!("no region {index}")))?;
        self.data.get_range_into(
            FileKind::Container,
            &cid.to_hex(),
            i64::from(r.offset),
            r.stored_len as usize,
            &mut self.stored,
        )?;
        self.stats.regions_read += 1;
        self.stats.bytes_read += self.stored.len() as u64;
        let mut raw = self.spare_buffer(
            (r.raw_len as usize).min(upto.saturating_add(dedelta_core::compress::PREFIX_SLACK)),
        );
        container::open_region_prefix_into(
            &mut self.decompressor,
            &self.stored,
            r,
            upto,
            &what,
            &mut raw,
        )?;
        self.stats.bytes_decompressed += raw.len() as u64;
        Ok(Arc::new(raw))
    }

    /// Forward assembly: reads the regions `wanted` of container `cid` that the restore cache
    /// does not hold, in one backend read spanning them (the container's regions lie back to
    /// back), decompresses each and hands it to the cache. Nothing is read if the cache holds
    /// them all.
    ///
    /// # Errors
    /// The container or its metadata cannot be read, or a region is damaged; the caller
    /// leaves it to the chunk's own [`Self::locate`] to report, with its retry.
    pub(crate) fn read_regions(&mut self, cid: ContainerId, wanted: &[u32]) -> Result<()> {
        let meta = self.meta(cid)?;
        let what = format!("container {cid}");
        let mut regions = Vec::with_capacity(wanted.len());
        for &i in wanted {
            let held = self.restore_cache.as_ref().is_some_and(|c| c.has(&cid, i));
            if held {
                continue;
            }
            let r = meta
                .regions
                .get(i as usize)
                .ok_or_else(|| Error::corrupt(&what, format!("no region {i}")))?;
            regions.push((i, r));
        }
        let (Some(start), Some(end)) = (
            regions.iter().map(|(_, r)| r.offset).min(),
            regions
                .iter()
                .map(|(_, r)| u64::from(r.offset) + u64::from(r.stored_len))
                .max(),
        ) else {
            return Ok(());
        };
        let mut span = std::mem::take(&mut self.stored);
        let read = self.data.get_range_into(
            FileKind::Container,
            &cid.to_hex(),
            i64::from(start),
            (end - u64::from(start)) as usize,
            &mut span,
        );
        let opened = read.map_err(Error::from).and_then(|()| {
            self.stats.bytes_read += span.len() as u64;
            for (i, r) in regions {
                let at = (r.offset - start) as usize;
                let stored = span
                    .get(at..at + r.stored_len as usize)
                    .ok_or_else(|| Error::corrupt(&what, "a short read".to_string()))?;
                let mut raw = self.spare_buffer(r.raw_len as usize);
                container::open_region_into(&mut self.decompressor, stored, r, &what, &mut raw)?;
                self.stats.regions_read += 1;
                self.stats.bytes_decompressed += raw.len() as u64;
                self.keep(cid, &meta, i, Arc::new(raw));
            }
            Ok(())
        });
        self.stored = span;
        opened
    }

    /// The next assembly area starts: the restore cache lets go of the last one's regions.
    pub(crate) fn start_area(&mut self) {
        let mut evicted = Vec::new();
        if let Some(c) = self.restore_cache.as_mut() {
            c.start_area(&mut evicted);
        }
        for old in evicted {
            self.recycle(old);
        }
    }

    /// Hands a region just read to the restore cache (or, without one, the region cache),
    /// recycling what it lets go of.
    pub(super) fn keep(
        &mut self,
        cid: ContainerId,
        meta: &ContainerMeta,
        index: u32,
        r: Arc<Vec<u8>>,
    ) {
        let Some(cache) = self.restore_cache.as_mut() else {
            self.cache_region(cid, index, r);
            return;
        };
        let container_bytes = meta.regions.iter().map(|r| u64::from(r.stored_len)).sum();
        let mut evicted = Vec::new();
        cache.put(cid, index, r, container_bytes, &mut evicted);
        for old in evicted {
            self.recycle(old);
        }
    }

    /// Keeps the buffer of a region let go of, for reuse.
    pub(super) fn recycle(&mut self, old: Arc<Vec<u8>>) {
        match Arc::try_unwrap(old) {
            Ok(buf) if self.spare.len() < self.spare_cap => self.spare.push(buf),
            Ok(_) => {}
            Err(shared) if self.retired.len() < self.spare_cap => self.retired.push(shared),
            Err(_) => {}
        }
    }

    /// A buffer for the next region, of `raw_len` bytes: an evicted one if any is free again
    /// and large enough, else a new one with its pages mapped ([`crate::buffers::populated`])
    /// and headroom, so that it fits the next regions too (growing a reused buffer would copy
    /// its stale contents).
    pub(super) fn spare_buffer(&mut self, raw_len: usize) -> Vec<u8> {
        let free = match self.spare.pop() {
            Some(b) => Some(b),
            None => self
                .retired
                .iter()
                .position(|r| Arc::strong_count(r) == 1)
                .and_then(|i| Arc::try_unwrap(self.retired.swap_remove(i)).ok()),
        };
        match free {
            Some(b) if b.capacity() >= raw_len => b,
            _ => crate::buffers::populated(raw_len + raw_len / 4, raw_len),
        }
    }
}
