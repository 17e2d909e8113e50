//! Backup's base reads ahead (see `BaseFetcher::prefetch`): the container metadata and the
//! regions a round of candidate bases will read, requested several at a time on
//! [`RequestThreads`] and opened (checksum, decompression) where they arrive, then taken into
//! the locator's caches. Regions of one container that lie close together are read in one
//! ranged request. Where each read is a round trip, a read also takes the container's next
//! regions, up to [`AHEAD_SPAN`]: versioned data meets its bases in the parent's stream order,
//! so the next rounds ask for them. Which chunk comes from where does not change.

use super::ChunkLocator;
use crate::backend::wrap::metered::Purpose;
use crate::backend::{Backend, FileKind};
use crate::error::Result;
use crate::format::config::MAX_DELTA_DEPTH;
use crate::format::container::{self, ContainerId, ContainerMeta, RegionMeta};
use crate::format::index_file::IndexedContainer;
use crate::repository::read_container_record_tail;
use crate::request_threads::{Job, RequestThreads};
use dedelta_core::compress::RegionDecompressor;
use dedelta_core::ChunkId;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Regions of one container are read in one request when the bytes between them are at most
/// this many: on an object store a round trip costs more than reading 128 KiB more, and on a
/// disk the bytes are in the same pages or the next.
pub const COALESCE_GAP: u64 = 128 << 10;
/// One request spans at most this many bytes (4 regions of 256 KiB uncompressed): larger
/// spans would leave fewer requests to run at once, and decompress their regions one after
/// another on one thread.
pub const MAX_SPAN: u64 = 1 << 20;
/// Where reads are round trips, a read of bases extends up to this many bytes with the
/// container's next regions (a default container is 4 MiB): on a Garage cluster a request
/// costs about 50 ms, and backup's bases of the next rounds lie mostly further on in the
/// same containers (6 containers held the 17 MB of 20 SQLAlchemy versions; their bases took
/// 95 requests, one round trip per round, with 1 MiB).
pub const AHEAD_SPAN: u64 = 4 << 20;

thread_local! {
    /// One zstd context per thread that opens regions read ahead.
    static DECOMPRESSOR: std::cell::RefCell<RegionDecompressor> =
        std::cell::RefCell::new(RegionDecompressor::default());
}

/// A region to read: its index in its container, its place, and a buffer for its bytes.
pub(super) struct Wanted {
    pub(super) index: u32,
    pub(super) meta: RegionMeta,
    pub(super) raw: Vec<u8>,
}

/// One ranged read: `len` bytes at `start` of container `container`, holding `regions`.
pub(super) struct Span {
    container: ContainerId,
    start: u64,
    len: u64,
    regions: Vec<Wanted>,
}

/// What a [`Span`] gave: the regions it was to read, those that opened (with their bytes),
/// and the bytes read.
pub(super) struct SpanRead {
    pub(super) container: ContainerId,
    pub(super) wanted: Vec<u32>,
    pub(super) opened: Vec<(u32, Vec<u8>)>,
    pub(super) bytes_read: u64,
}

impl Span {
    /// The regions this span reads.
    pub(super) fn wanted(&self) -> Vec<u32> {
        self.regions.iter().map(|w| w.index).collect()
    }

    /// What a span not read gives: none of its regions.
    pub(super) fn skipped(self) -> SpanRead {
        SpanRead {
            container: self.container,
            wanted: self.wanted(),
            opened: Vec::new(),
            bytes_read: 0,
        }
    }

    /// Reads the span and opens each region on this thread; a region that fails is left
    /// out (reading its chunk one by one reports why), all of them if the read failed.
    pub(super) fn read(self, data: &dyn Backend) -> SpanRead {
        let what = format!("container {}", self.container);
        let wanted = self.wanted();
        let mut bytes = Vec::new();
        let read = i64::try_from(self.start).ok().and_then(|start| {
            data.get_range_into(
                FileKind::Container,
                &self.container.to_hex(),
                start,
                self.len as usize,
                &mut bytes,
            )
            .ok()
        });
        if read.is_none() {
            return SpanRead {
                container: self.container,
                wanted,
                opened: Vec::new(),
                bytes_read: 0,
            };
        }
        let opened = self
            .regions
            .into_iter()
            .filter_map(|mut w| {
                let at = (u64::from(w.meta.offset) - self.start) as usize;
                let stored = bytes.get(at..at + w.meta.stored_len as usize)?;
                DECOMPRESSOR
                    .with(|d| {
                        container::open_region_into(
                            &mut d.borrow_mut(),
                            stored,
                            &w.meta,
                            &what,
                            &mut w.raw,
                        )
                    })
                    .ok()?;
                Some((w.index, w.raw))
            })
            .collect();
        SpanRead {
            container: self.container,
            wanted,
            opened,
            bytes_read: bytes.len() as u64,
        }
    }
}

/// Groups `wanted` regions of one container (sorted by offset) into spans of neighbours
/// ([`COALESCE_GAP`], [`MAX_SPAN`]).
pub(super) fn spans_of(container: ContainerId, wanted: Vec<Wanted>) -> Vec<Span> {
    spans_within(container, wanted, MAX_SPAN)
}

/// [`spans_of`] with spans of up to `max_span` bytes.
pub(super) fn spans_within(
    container: ContainerId,
    wanted: Vec<Wanted>,
    max_span: u64,
) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    for w in wanted {
        let (start, end) = (
            u64::from(w.meta.offset),
            u64::from(w.meta.offset) + u64::from(w.meta.stored_len),
        );
        match spans.last_mut() {
            Some(s) if start <= s.start + s.len + COALESCE_GAP && end - s.start <= max_span => {
                s.len = s.len.max(end - s.start);
                s.regions.push(w);
            }
            _ => spans.push(Span {
                container,
                start,
                len: end - start,
                regions: vec![w],
            }),
        }
    }
    spans
}

impl ChunkLocator<'_> {
    /// Reads the metadata of the containers holding `ids` that the metadata cache lacks,
    /// on `threads` (each in one suffix read, as restore reads it), into the cache. A
    /// container whose metadata cannot be read is left out: reading a chunk of it one by
    /// one reports why.
    pub(crate) fn read_metas_ahead(&mut self, ids: &[ChunkId], threads: &mut RequestThreads) {
        let missing = self.metas_missing(ids, super::CopyRule::Own);
        self.read_metas(missing, threads);
    }

    /// Reads the metadata of `containers` that the metadata cache lacks, on `threads`, into
    /// the cache (as [`Self::read_metas_ahead`], given the containers rather than chunks).
    pub(crate) fn read_container_metas_ahead(
        &mut self,
        containers: &[ContainerId],
        threads: &mut RequestThreads,
    ) {
        let mut missing: Vec<ContainerId> = Vec::new();
        for c in containers {
            if !missing.contains(c) && !self.meta_at_hand(c) {
                missing.push(*c);
            }
        }
        self.read_metas(missing, threads);
    }

    /// The containers (each once) that `ids`, located by `rule`, lie in and whose metadata
    /// the cache lacks; ids that cannot be located are left out.
    pub(super) fn metas_missing(
        &mut self,
        ids: &[ChunkId],
        rule: super::CopyRule,
    ) -> Vec<ContainerId> {
        let mut missing: Vec<ContainerId> = Vec::new();
        for id in ids {
            let Ok(Some(loc)) = self.location(id, rule) else {
                continue;
            };
            if !missing.contains(&loc.container) && !self.meta_at_hand(&loc.container) {
                missing.push(loc.container);
            }
        }
        missing
    }

    /// Reads the metadata of the containers that `ids` and the delta bases down their
    /// chains lie in, on `threads`, a round of requests per level of the chains (each chunk
    /// located as its read will: its own copy, a base's full copy); bases `follow` refuses
    /// are not followed. Returns the bases met, each once, level by level.
    pub(crate) fn read_chain_metas_on(
        &mut self,
        ids: &[ChunkId],
        threads: &mut RequestThreads,
        follow: impl Fn(&ChunkId) -> bool,
    ) -> Vec<ChunkId> {
        let mut bases = Vec::new();
        let mut level: Vec<ChunkId> = ids.to_vec();
        let mut seen: HashSet<ChunkId, dedelta_core::BuildChunkIdHasher> = HashSet::default();
        let mut rule = super::CopyRule::Own;
        for _ in 0..=MAX_DELTA_DEPTH {
            if level.is_empty() {
                break;
            }
            let missing = self.metas_missing(&level, rule);
            self.read_metas(missing, threads);
            let mut next = Vec::new();
            for id in &level {
                if let Some((_, _, Some(b))) = self.place(id, rule) {
                    if follow(&b) && seen.insert(b) {
                        next.push(b);
                    }
                }
            }
            bases.extend_from_slice(&next);
            level = next;
            rule = super::CopyRule::OwnFull;
        }
        bases
    }

    /// Reads the metadata of containers `missing` (none in the metadata cache) on `threads`
    /// into the cache; one alone is left to be read where it is needed, the same way.
    pub(super) fn read_metas(&mut self, missing: Vec<ContainerId>, threads: &mut RequestThreads) {
        if missing.len() < 2 {
            return;
        }
        let backend = self.repo.backend_for(Purpose::ContainerMeta);
        let jobs: Vec<Job<Result<(ContainerMeta, IndexedContainer)>>> = missing
            .iter()
            .map(|cid| {
                let (backend, name) = (backend.clone(), cid.to_hex());
                Box::new(move || read_container_record_tail(backend.as_ref(), &name)) as Job<_>
            })
            .collect();
        for (cid, read) in missing.into_iter().zip(threads.run(jobs)) {
            if let Some(Ok((meta, record))) = read {
                self.stats.container_metas_read += 1;
                self.repo.remember_meta(&record);
                self.metas.put(cid, Arc::new(meta));
            }
        }
    }

    /// Reads the regions holding `ids` that the region cache lacks, each once, on `threads`
    /// (neighbours in one request), opens them where they arrive, and takes them into the
    /// region cache. A chunk that cannot be placed or whose region cannot be read or opened
    /// is left out: reading it one by one reports why. Readers behind a restore cache read
    /// ahead their own way (nothing here).
    pub(crate) fn read_regions_ahead(&mut self, ids: &[ChunkId], threads: &mut RequestThreads) {
        if self.restore_cache.is_some() {
            return;
        }
        // Regions read in the background are left to arrive (a fetch waits for them).
        self.take_arrived();
        let mut seen: HashSet<(ContainerId, u32)> = HashSet::new();
        let mut by_container: BTreeMap<ContainerId, Vec<Wanted>> = BTreeMap::new();
        for id in ids {
            let Some((cid, index, _)) = self.place(id, super::CopyRule::Own) else {
                continue;
            };
            if self.regions.contains(&(cid, index))
                || self.in_flight(&cid, index)
                || !seen.insert((cid, index))
            {
                continue;
            }
            let Some(meta) = self
                .meta(cid)
                .ok()
                .and_then(|m| m.regions.get(index as usize).copied())
            else {
                continue;
            };
            by_container.entry(cid).or_default().push(Wanted {
                index,
                meta,
                raw: self.spare_buffer(meta.raw_len as usize),
            });
        }
        let ahead = self.repo.reads_are_round_trips();
        let mut spans: Vec<Span> = Vec::new();
        for (cid, mut wanted) in by_container {
            wanted.sort_by_key(|w| w.meta.offset);
            let mut of_container = spans_of(cid, wanted);
            if ahead {
                self.extend_ahead(&mut of_container, &mut seen);
            }
            spans.extend(of_container);
        }
        let jobs: Vec<Job<SpanRead>> = spans
            .into_iter()
            .map(|span| {
                let data = self.data.clone();
                Box::new(move || span.read(data.as_ref())) as Job<_>
            })
            .collect();
        for read in threads.run(jobs).into_iter().flatten() {
            self.stats.bytes_read += read.bytes_read;
            for (index, raw) in read.opened {
                self.stats.regions_read += 1;
                self.stats.bytes_decompressed += raw.len() as u64;
                self.cache_region(read.container, index, Arc::new(raw));
            }
        }
    }
}

impl ChunkLocator<'_> {
    /// Requests in the background (see [`Self::read_regions_ahead_in_background`]) the
    /// regions that reading each of `ids` as a delta base will read: its own and, down its
    /// delta chain, its bases' until one `held` says is at hand; only as far as the index
    /// and the metadata at hand tell (nothing is requested to find out). As the blocking
    /// reads do ([`Self::extend_ahead`]), a container's first region wanted brings the
    /// next ones along, up to [`AHEAD_SPAN`] in one request: predictions come a few dozen
    /// chunks at a time, and a request each was five times the requests for the same bytes,
    /// each costing the object store's CPU too. Returns how many bytes of regions were
    /// requested (none without the background reads).
    pub(crate) fn request_base_regions(
        &mut self,
        ids: &[ChunkId],
        held: &dyn Fn(&ChunkId) -> bool,
    ) -> u64 {
        if !self.reads_ahead() {
            return 0;
        }
        let mut wanted = Vec::new();
        for id in ids {
            let mut at = *id;
            for _ in 0..=MAX_DELTA_DEPTH {
                if held(&at) {
                    break;
                }
                let Ok(Some(loc)) = self.location(&at, super::CopyRule::Own) else {
                    break;
                };
                if !self.meta_at_hand(&loc.container) {
                    break;
                }
                let Some((cid, index, base)) = self.place_at(&at, &loc) else {
                    break;
                };
                wanted.push((cid, index));
                match base {
                    Some(b) => at = b,
                    None => break,
                }
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        self.take_arrived();
        let mut extended = Vec::with_capacity(wanted.len());
        let mut covered: Option<(ContainerId, u32)> = None;
        for (cid, index) in wanted {
            if covered.is_some_and(|(c, last)| c == cid && index <= last) {
                continue;
            }
            let Some(meta) = self.metas.peek(&cid).cloned() else {
                continue;
            };
            let Some(first) = meta.regions.get(index as usize) else {
                continue;
            };
            let start = u64::from(first.offset);
            let mut last = index;
            for (i, r) in meta.regions.iter().enumerate().skip(index as usize) {
                if u64::from(r.offset) + u64::from(r.stored_len) - start > AHEAD_SPAN {
                    break;
                }
                last = i as u32;
                extended.push((cid, i as u32));
            }
            covered = Some((cid, last));
        }
        self.request_regions_within(&extended, AHEAD_SPAN)
    }

    /// Extends each span of one container with the regions after it that the region cache
    /// lacks, while it stays within [`AHEAD_SPAN`] and short of the next span.
    fn extend_ahead(&mut self, spans: &mut [Span], seen: &mut HashSet<(ContainerId, u32)>) {
        let Some(cid) = spans.first().map(|s| s.container) else {
            return;
        };
        let Some(meta) = self.metas.peek(&cid).cloned() else {
            return;
        };
        let starts: Vec<u64> = spans.iter().skip(1).map(|s| s.start).collect();
        for (k, span) in spans.iter_mut().enumerate() {
            let limit = starts.get(k).copied().unwrap_or(u64::MAX);
            let Some(last) = span.regions.iter().map(|w| w.index).max() else {
                continue;
            };
            for index in last + 1..meta.regions.len() as u32 {
                let r = meta.regions[index as usize];
                let end = u64::from(r.offset) + u64::from(r.stored_len);
                if u64::from(r.offset) < span.start + span.len
                    || end - span.start > AHEAD_SPAN
                    || end > limit
                    || self.regions.contains(&(cid, index))
                    || self.in_flight(&cid, index)
                    || !seen.insert((cid, index))
                {
                    break;
                }
                span.len = end - span.start;
                let raw = self.spare_buffer(r.raw_len as usize);
                span.regions.push(Wanted {
                    index,
                    meta: r,
                    raw,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(index: u32, offset: u32, stored_len: u32) -> Wanted {
        Wanted {
            index,
            meta: RegionMeta {
                offset,
                stored_len,
                raw_len: stored_len,
                codec: 0,
                crc: 0,
            },
            raw: Vec::new(),
        }
    }

    /// Neighbours share a request; a gap wider than [`COALESCE_GAP`] or a span past
    /// [`MAX_SPAN`] starts another.
    #[test]
    fn neighbours_coalesce_within_bounds() {
        let k = 1u32 << 10;
        let spans = spans_of(
            ContainerId([1; 32]),
            vec![
                wanted(0, 0, 100 * k),
                wanted(1, 100 * k, 100 * k),
                // 100 KiB skipped: still one read.
                wanted(3, 300 * k, 100 * k),
                // 200 KiB skipped: a new read.
                wanted(5, 600 * k, 100 * k),
                wanted(6, 700 * k, 300 * k),
                wanted(7, 1000 * k, 100 * k),
                // Would make the span 1,100 KiB: a new read.
                wanted(8, 1100 * k, 600 * k),
            ],
        );
        let got: Vec<(u64, u64, Vec<u32>)> = spans
            .iter()
            .map(|s| (s.start, s.len, s.regions.iter().map(|w| w.index).collect()))
            .collect();
        let k = u64::from(k);
        assert_eq!(
            got,
            vec![
                (0, 400 * k, vec![0, 1, 3]),
                (600 * k, 500 * k, vec![5, 6, 7]),
                (1100 * k, 600 * k, vec![8]),
            ]
        );
    }
}
