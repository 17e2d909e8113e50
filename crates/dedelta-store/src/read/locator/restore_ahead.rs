//! Restore's regions read ahead where each read is a round trip (an object store): the
//! locating thread names the regions the coming chunks will need
//! ([`crate::read::PipelinedLocator`] plans them), and they are requested here several at a
//! time on [`RequestThreads`] (the repository's reads in flight), neighbours of one
//! container in one ranged request ([`super::read_ahead`]'s spans), opened (checksum,
//! decompression) on the thread that read them, and taken into the restore cache as they
//! arrive. A chunk whose region is still in flight waits for it; one whose read failed is
//! read again the ordinary way, which reports why. Which chunk comes from where does not
//! change, and the chunk is verified as before.
//!
//! On a local disk restore keeps reading region by region on its locating thread: a
//! read-ahead there cost 20 % more CPU for no gain in time (the page cache answers at once).

use super::read_ahead::{spans_within, SpanRead, Wanted};
use super::ChunkLocator;
use crate::format::container::ContainerId;
use crate::request_threads::RequestThreads;
use crossbeam_channel::{unbounded, Receiver, Sender};
use dedelta_core::ChunkId;
use std::collections::{BTreeMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Index answers kept for the chunks planned ahead: planning looks each chunk up (its
/// container's metadata, then its region, then its delta base's) and its fetch looks it up
/// again, each lookup a bucket read and checksum in the client index (4 times a local
/// restore's lookups on the Garage benchmark, most of the S3 restore's extra user time).
/// A read-ahead plans at most a quarter of the restore cache's bytes ahead, fewer chunks
/// than this; an answer let go is only looked up again. 32,768 answers, about 3 MiB.
pub(super) const AHEAD_ANSWERS: usize = 32 << 10;

/// The read-ahead's state in the locator: the reads in flight and where they arrive.
pub(crate) struct RegionsAhead {
    threads: RequestThreads,
    sender: Sender<SpanRead>,
    arrived: Receiver<SpanRead>,
    in_flight: HashSet<(ContainerId, u32)>,
    /// Set when the locator goes: reads still queued are skipped.
    cancelled: Arc<AtomicBool>,
    /// Ranged requests made ahead.
    requests: u64,
}

impl Drop for RegionsAhead {
    fn drop(&mut self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

impl ChunkLocator<'_> {
    /// Reads regions ahead (see the module doc) with the repository's reads in flight.
    pub(crate) fn read_regions_ahead_of_restore(&mut self) {
        self.read_regions_ahead_in_background(self.repo.reads_in_flight());
        self.ahead_answers = Some(crate::read::id_lru(AHEAD_ANSWERS));
    }

    /// Lets [`Self::request_regions`] read regions in the background, `in_flight` requests
    /// at once: into the restore cache if there is one, else into the region cache
    /// (backup's delta bases read ahead of the stream, `BaseFetcher::read_ahead`).
    pub(crate) fn read_regions_ahead_in_background(&mut self, in_flight: usize) {
        let (sender, arrived) = unbounded();
        self.ahead = Some(RegionsAhead {
            threads: RequestThreads::new(in_flight),
            sender,
            arrived,
            in_flight: HashSet::new(),
            cancelled: Arc::new(AtomicBool::new(false)),
            requests: 0,
        });
    }

    /// Whether region `index` of `cid` is being read in the background.
    pub(super) fn in_flight(&self, cid: &ContainerId, index: u32) -> bool {
        self.ahead
            .as_ref()
            .is_some_and(|a| a.in_flight.contains(&(*cid, index)))
    }

    /// Whether region `index` of `cid` is held already: in the restore cache if there is one,
    /// else in the region cache.
    fn region_held(&self, cid: &ContainerId, index: u32) -> bool {
        match self.restore_cache.as_ref() {
            Some(c) => c.has(cid, index),
            None => self.regions.contains(&(*cid, index)),
        }
    }

    /// Whether regions are read ahead.
    pub(crate) fn reads_ahead(&self) -> bool {
        self.ahead.is_some()
    }

    /// Ranged requests made ahead so far.
    pub(crate) fn requests_ahead(&self) -> u64 {
        self.ahead.as_ref().map_or(0, |a| a.requests)
    }

    /// Reads the metadata of the containers that `ids` and the delta bases down their
    /// chains lie in, several at a time, level by level of the chains; bases in `held` (the
    /// decoder will hold them) are not followed.
    pub(crate) fn read_chain_metas(&mut self, ids: &[ChunkId], held: &crate::read::IdLru<()>) {
        let Some(mut ahead) = self.ahead.take() else {
            return;
        };
        self.read_chain_metas_on(ids, &mut ahead.threads, |b| !held.contains(b));
        self.ahead = Some(ahead);
    }

    /// Requests the regions of `wanted` (container, region) that the restore cache lacks
    /// and that are not in flight yet; returns their decompressed bytes.
    pub(crate) fn request_regions(&mut self, wanted: &[(ContainerId, u32)]) -> u64 {
        self.request_regions_within(wanted, super::read_ahead::MAX_SPAN)
    }

    /// [`Self::request_regions`] with ranged requests of up to `max_span` bytes.
    pub(super) fn request_regions_within(
        &mut self,
        wanted: &[(ContainerId, u32)],
        max_span: u64,
    ) -> u64 {
        let Some(mut ahead) = self.ahead.take() else {
            return 0;
        };
        let mut by_container: BTreeMap<ContainerId, Vec<Wanted>> = BTreeMap::new();
        let mut bytes = 0u64;
        for &(cid, index) in wanted {
            if self.region_held(&cid, index) || !ahead.in_flight.insert((cid, index)) {
                continue;
            }
            let Some(meta) = self
                .metas
                .peek(&cid)
                .and_then(|m| m.regions.get(index as usize).copied())
            else {
                ahead.in_flight.remove(&(cid, index));
                continue;
            };
            bytes += u64::from(meta.raw_len);
            by_container.entry(cid).or_default().push(Wanted {
                index,
                meta,
                raw: self.spare_buffer(meta.raw_len as usize),
            });
        }
        for (cid, mut regions) in by_container {
            regions.sort_by_key(|w| w.meta.offset);
            for span in spans_within(cid, regions, max_span) {
                let (data, sender) = (self.data.clone(), ahead.sender.clone());
                let cancelled = ahead.cancelled.clone();
                let wanted = span.wanted();
                ahead.requests += 1;
                ahead.threads.submit(Box::new(move || {
                    // Every span sends once, even if it panics: a fetch may wait for it.
                    let read = catch_unwind(AssertUnwindSafe(|| {
                        if cancelled.load(Ordering::SeqCst) {
                            span.skipped()
                        } else {
                            span.read(data.as_ref())
                        }
                    }))
                    .unwrap_or(SpanRead {
                        container: cid,
                        wanted,
                        opened: Vec::new(),
                        bytes_read: 0,
                    });
                    let _ = sender.send(read);
                }));
            }
        }
        self.ahead = Some(ahead);
        bytes
    }

    /// Takes the regions that have arrived into the restore cache, without waiting.
    pub(crate) fn take_arrived(&mut self) {
        while let Some(read) = self.ahead.as_ref().and_then(|a| a.arrived.try_recv().ok()) {
            self.take_read(read);
        }
    }

    /// If region `index` of `cid` is in flight, waits for it (taking what arrives meanwhile
    /// into the cache); `true` if it waited.
    pub(super) fn await_region(&mut self, cid: ContainerId, index: u32) -> bool {
        let mut waited = false;
        loop {
            let Some(ahead) = self.ahead.as_ref() else {
                return waited;
            };
            if !ahead.in_flight.contains(&(cid, index)) {
                return waited;
            }
            // Every read in flight sends once, and the sender lives in `ahead`.
            let Ok(read) = ahead.arrived.recv() else {
                return waited;
            };
            waited = true;
            self.take_read(read);
        }
    }

    /// Takes one span's regions into the restore cache; those that did not open are read
    /// again where they are needed.
    fn take_read(&mut self, read: SpanRead) {
        let Some(ahead) = self.ahead.as_mut() else {
            return;
        };
        for i in &read.wanted {
            ahead.in_flight.remove(&(read.container, *i));
        }
        self.stats.bytes_read += read.bytes_read;
        let meta = self.metas.peek(&read.container).cloned();
        for (index, raw) in read.opened {
            let held = self.region_held(&read.container, index);
            match &meta {
                Some(meta) if !held => {
                    self.stats.regions_read += 1;
                    self.stats.bytes_decompressed += raw.len() as u64;
                    self.keep(read.container, meta, index, Arc::new(raw));
                }
                _ => self.recycle(Arc::new(raw)),
            }
        }
    }
}
