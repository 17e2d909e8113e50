//! Runs on: the dedup thread.
//!
//! Decides, in stream order, which chunks are new: a chunk is a duplicate if the index held it
//! when the backup started (the pool looked it up, see [`super::fingerprint`]) or if this
//! backup already stored it. New chunks go to the delta stage (when resemblance detection is
//! on), which decides per block whether each is stored in full or as a delta, and then to the
//! region packer. The tree stream's records are written as the items arrive, and its chunks
//! take the same way (with the parent snapshot's tree chunks as their first candidate bases).
//!
//! With a [`Rewriting`] strategy (Capping), file data chunks are held a segment at a time and
//! decided together: the duplicates whose old container the strategy gives up are stored again
//! in full (see [`super::rewrite`]). The recipe is written as the chunks arrive; only storing
//! waits for the segment.

use super::bases::{BaseCounts, LocalCacheSave};
use super::caf::{CacheAwareFilter, CafCounts};
use super::delta::{DeltaStage, Stored};
use super::dense::ReuseMonitor;
use super::fingerprint::{Fingerprinted, IndexLookup};
use super::fingerprint_index::FingerprintIndex;
use super::lookahead::{Ahead, Judged, LookAhead};
use super::metrics::StageTimes;
use super::pack::RegionPacker;
use super::rewrite::Rewriting;
use super::tree_writer::TreeWriter;
use super::Item;
use crate::error::Result;
use crate::format::container::{ContainerId, EntryKind};
use crate::format::snapshot::{BackupSummary, TreeRef};
use crate::format::tree::ChunkRef;
use bytes::Bytes;
use crossbeam_channel::Receiver;
use dedelta_core::sketch::{Sketcher, SuperFeatures};
use dedelta_core::ChunkId;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// The index as backup sees it, through the backup's [`FingerprintIndex`] strategy: copies
/// that `check` recorded as damaged count as absent, so that a backup stores those chunks
/// again instead of deduplicating against them (check also takes them out of the index; this
/// guards against an index rebuilt by an older version). The pool and the dedup thread share
/// one strategy (and its cache and counters).
#[derive(Clone)]
pub(super) struct DedupIndex {
    /// The strategy.
    pub lookup: Arc<dyn FingerprintIndex>,
}

impl DedupIndex {
    /// The container of the usable indexed copy of `id`, if any.
    pub fn container_of(&self, id: &ChunkId) -> Result<Option<ContainerId>> {
        self.lookup.container_of(id)
    }
}

/// What the dedup thread hands back when the stream ends.
pub(super) struct DedupOutput {
    /// The counters it kept (the walker and writer add theirs).
    pub summary: BackupSummary,
    /// The stored tree stream.
    pub tree: TreeRef,
    /// Its chunks, when kept for the local tree cache.
    pub tree_chunks: Option<Vec<bytes::Bytes>>,
    /// Notices of the delta stage (unreadable bases, an unusable local cache).
    pub notices: Vec<String>,
    /// The local base cache being written; waited for once the snapshot is saved.
    pub cache_save: LocalCacheSave,
    /// Where delta bases came from.
    pub base_counts: BaseCounts,
    /// Chunks the saving test compressed alone.
    pub saving_test_compressions: u64,
    /// What the rewriting strategy did.
    pub rewritten: RewriteCounts,
    /// The old containers whose copies the backup's duplicates reference (the snapshot
    /// records them with the ones it wrote, see [`crate::format::snapshot::Snapshot::containers`]).
    pub referenced: HashSet<ContainerId>,
    /// LoopDelta's reuse-ratio monitor, when the backup tracks dense containers.
    pub monitor: Option<ReuseMonitor>,
}

/// Duplicates stored again by the rewriting strategy (they are also counted as new chunks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RewriteCounts {
    /// Segments decided.
    pub segments: u64,
    /// Duplicate chunks rewritten.
    pub chunks: u64,
    /// Their raw bytes.
    pub bytes: u64,
    /// The cache-aware filter's judgements (its base-fragmented duplicates are not in
    /// `chunks`).
    pub caf: CafCounts,
    /// Old chunks re-stored as inversed deltas.
    pub inversed_chunks: u64,
    /// Bytes of those deltas.
    pub inversed_bytes: u64,
}

/// The file data chunks of the current segment, waiting for the rewriting decision.
struct Segment {
    strategy: Box<dyn Rewriting>,
    chunks: Vec<Fingerprinted>,
    /// Raw bytes of `chunks`.
    len_bytes: u64,
}

/// The dedup thread's state.
pub(super) struct DedupStage<'a> {
    index: DedupIndex,
    /// New chunks of this backup: duplicates of them are duplicates too.
    pending: HashSet<ChunkId>,
    packer: RegionPacker<'a>,
    summary: BackupSummary,
    delta: Option<DeltaStage<'a>>,
    /// The backup's sketch method, for tree chunks (file data is sketched on the pool).
    sketcher: Option<Arc<dyn Sketcher>>,
    times: Arc<StageTimes>,
    /// The segment being gathered, when the backup rewrites.
    segment: Option<Segment>,
    rewritten: RewriteCounts,
    /// Old containers referenced by duplicates so far.
    referenced: HashSet<ContainerId>,
    monitor: Option<ReuseMonitor>,
    /// The cache-aware filter, when on.
    caf: Option<CacheAwareFilter>,
    /// The duplicates it judged base-fragmented as they entered the look-ahead window.
    caf_stored: HashSet<ChunkId>,
    /// Bytes of file data deduplication runs ahead of resemblance detection (see
    /// [`super::lookahead`]).
    lookahead_bytes: u64,
}

impl<'a> DedupStage<'a> {
    /// A stage storing new chunks through `packer` (and `delta`, when resemblance is on).
    pub fn new(
        index: DedupIndex,
        packer: RegionPacker<'a>,
        delta: Option<DeltaStage<'a>>,
        sketcher: Option<Arc<dyn Sketcher>>,
        times: Arc<StageTimes>,
    ) -> Self {
        DedupStage {
            index,
            pending: HashSet::new(),
            packer,
            summary: BackupSummary::default(),
            delta,
            sketcher,
            times,
            segment: None,
            rewritten: RewriteCounts::default(),
            referenced: HashSet::new(),
            monitor: None,
            caf: None,
            caf_stored: HashSet::new(),
            lookahead_bytes: 0,
        }
    }

    /// Deduplicates `bytes` of file data ahead of resemblance detection (see
    /// [`super::lookahead`]; 0 by default: a block at a time).
    pub fn looking_ahead(mut self, bytes: u64) -> Self {
        self.lookahead_bytes = bytes;
        self
    }

    /// Counts the containers this backup references in `monitor` (see [`super::dense`]).
    pub fn monitoring(mut self, monitor: ReuseMonitor) -> Self {
        self.monitor = Some(monitor);
        self
    }

    /// Stores base-fragmented duplicates again (the cache-aware filter, see [`super::caf`]).
    pub fn cache_aware_filter(mut self) -> Self {
        self.caf = Some(CacheAwareFilter::default());
        self
    }

    /// Rewrites duplicates by `strategy` (see [`super::rewrite`]).
    pub fn rewriting(mut self, strategy: Box<dyn Rewriting>) -> Self {
        self.segment = Some(Segment {
            strategy,
            chunks: Vec::new(),
            len_bytes: 0,
        });
        self
    }

    /// Consumes the walker's items until the walker closes the channel, through a window of
    /// [`Self::looking_ahead`]'s bytes (see [`super::lookahead`]).
    pub fn run(mut self, items: Receiver<Item>, mut tree: TreeWriter<'_>) -> Result<DedupOutput> {
        // With Capping a segment is decided whole: its duplicates are all reached before any
        // of its chunks is delta-checked (see `end_segment`).
        let window = if self.segment.is_some() {
            0
        } else {
            self.lookahead_bytes
        };
        let mut ahead = LookAhead::new(items, window);
        while let Some(item) = ahead.next(&mut |c| self.enter(c))? {
            if let Some(d) = self.delta.as_mut() {
                d.flush_predicted();
            }
            match item {
                Ahead::Node(n) => tree.node(&n),
                Ahead::FileStart(n) => tree.file_start(n),
                Ahead::Block(chunks) => {
                    for Judged {
                        chunk: c,
                        base_fragmented,
                    } in chunks
                    {
                        let chunk = ChunkRef {
                            id: c.id,
                            len: c.data.len() as u32,
                        };
                        match self.segment.as_mut() {
                            Some(seg) => {
                                seg.len_bytes += c.data.len() as u64;
                                seg.chunks.push(c);
                                if seg.len_bytes >= seg.strategy.segment_bytes() {
                                    self.end_segment()?;
                                }
                            }
                            None => {
                                self.add_judged(c.id, c.data, c.sfs, c.lookup, base_fragmented)?
                            }
                        }
                        tree.file_chunk(chunk)?;
                    }
                    self.end_block(true)?;
                }
                Ahead::FileEnd => tree.file_end()?,
                // Duplicates of the parent's chunks, shown to the candidate search as a read
                // would have shown them.
                Ahead::Unchanged(n, chunks) => {
                    tree.file_start(n);
                    for (c, container) in chunks {
                        self.is_new(&c.id, IndexLookup::Stored(container), false)?;
                        tree.file_chunk(c)?;
                    }
                    tree.file_end()?;
                }
            }
            tree.maybe_drain(&mut self)?;
        }
        self.end_segment()?;
        self.end_block(false)?;
        let mut notices: Vec<String> = Vec::new();
        let mut cache_save = LocalCacheSave::done(None);
        if let Some(d) = self.delta.as_mut() {
            notices.extend(d.take_notices());
            cache_save = d.save_local_cache();
        }
        let finished = tree.finish(&mut self)?;
        let tree = finished.tree;
        self.summary.tree_bytes = tree.len;
        self.packer.flush()?;
        Ok(DedupOutput {
            summary: self.summary,
            tree,
            tree_chunks: finished.chunks,
            notices,
            cache_save,
            base_counts: self
                .delta
                .as_ref()
                .map(|d| d.base_counts())
                .unwrap_or_default(),
            saving_test_compressions: self
                .delta
                .as_ref()
                .map_or(0, |d| d.saving_test_compressions()),
            rewritten: RewriteCounts {
                caf: self.caf.map(|c| c.counts).unwrap_or_default(),
                ..self.rewritten
            },
            referenced: self.referenced,
            monitor: self.monitor,
        })
    }

    /// Decides the gathered segment (if any): which of its duplicates are rewritten, then
    /// stores its chunks in stream order.
    fn end_segment(&mut self) -> Result<()> {
        let Some(seg) = self.segment.as_mut() else {
            return Ok(());
        };
        if seg.chunks.is_empty() {
            return Ok(());
        }
        let chunks = std::mem::take(&mut seg.chunks);
        seg.len_bytes = 0;
        // The old container of each chunk: None for a chunk new to the repository, or one
        // this backup stored (at this point, or earlier in the segment: the second is decided
        // when it is stored, below).
        let mut old = Vec::with_capacity(chunks.len());
        for c in &chunks {
            old.push(if self.pending.contains(&c.id) {
                None
            } else {
                self.old_container(&c.id, c.lookup)?
            });
        }
        let refs: Vec<ContainerId> = old.iter().flatten().copied().collect();
        let keep = match self.segment.as_ref() {
            Some(seg) => seg.strategy.keep(&refs),
            None => return Ok(()),
        };
        // The segment's infrequently reused containers: their chunks may not serve as bases
        // (LoopDelta §3.3), which the cache-aware filter and inversed deltas follow.
        let given_up: HashSet<ContainerId> =
            refs.iter().filter(|c| !keep.contains(c)).copied().collect();
        if let Some(d) = self.delta.as_mut() {
            d.set_infrequent(given_up.clone());
        }
        self.rewritten.segments += 1;
        for (c, container) in chunks.into_iter().zip(old) {
            if let Some(cid) = &container {
                self.index.lookup.reached(cid);
            }
            let lookup = match container {
                Some(cid) if !keep.contains(&cid) && !self.pending.contains(&c.id) => {
                    self.rewrite(c.id, c.data, c.sfs)?;
                    continue;
                }
                Some(_)
                    if !self.pending.contains(&c.id) && self.base_fragmented(&c.id, &given_up) =>
                {
                    self.rewrite_base_fragmented(c.id, c.data, c.sfs)?;
                    continue;
                }
                Some(cid) => IndexLookup::Stored(cid),
                None => match c.lookup {
                    // Looked up above, and not found.
                    IndexLookup::NotLookedUp => IndexLookup::Absent,
                    l => l,
                },
            };
            self.add(c.id, c.data, c.sfs, lookup)?;
        }
        self.end_block(true)
    }

    /// The container that held `id` when the backup started, if any.
    fn old_container(&self, id: &ChunkId, lookup: IndexLookup) -> Result<Option<ContainerId>> {
        Ok(match lookup {
            IndexLookup::Stored(c) => Some(c),
            IndexLookup::Absent => None,
            IndexLookup::NotLookedUp => {
                let t = Instant::now();
                let found = self.index.container_of(id)?;
                StageTimes::add(&self.times.index, t);
                found
            }
        })
    }

    /// Stores duplicate `id` again, in full (see [`super::rewrite`] for why not as a delta);
    /// it counts as a new chunk, and DupAdj sees it as a duplicate of the parent's stream.
    fn rewrite(&mut self, id: ChunkId, data: Bytes, sfs: Option<SuperFeatures>) -> Result<()> {
        self.summary.chunks += 1;
        self.rewritten.chunks += 1;
        self.rewritten.bytes += data.len() as u64;
        if let Some(d) = self.delta.as_mut() {
            d.on_duplicate(&id, None, false)?;
        }
        self.pending.insert(id);
        self.summary.new_chunks += 1;
        self.summary.bytes_new += data.len() as u64;
        self.summary.bytes_after_delta += data.len() as u64;
        let len = data.len();
        let sfs = sfs.map(|s| s.0).unwrap_or_default();
        self.packer.push(id, EntryKind::Full, &data, len, sfs)
    }

    /// Whether duplicate `id` of an old chunk is base-fragmented (always false without the
    /// cache-aware filter).
    fn base_fragmented(&mut self, id: &ChunkId, given_up: &HashSet<ContainerId>) -> bool {
        match self.caf.as_mut() {
            Some(caf) => caf.base_fragmented(self.index.lookup.as_ref(), id, given_up),
            None => false,
        }
    }

    /// Stores base-fragmented duplicate `id` again: as a delta against a base in memory if
    /// one is similar enough, else in full (see [`super::caf`]). It counts as a new chunk,
    /// and DupAdj sees it as a duplicate of the parent's stream.
    fn rewrite_base_fragmented(
        &mut self,
        id: ChunkId,
        data: Bytes,
        sfs: Option<SuperFeatures>,
    ) -> Result<()> {
        self.summary.chunks += 1;
        if let Some(caf) = self.caf.as_mut() {
            caf.counts.bytes += data.len() as u64;
        }
        self.pending.insert(id);
        self.summary.new_chunks += 1;
        self.summary.bytes_new += data.len() as u64;
        // The pool sketches only the chunks it did not find: a duplicate comes unsketched,
        // and without super-features it has no candidate base (LoopDelta §4.5 looks for the
        // base of every base-fragmented chunk in the potential base chunk cache).
        let sfs = sfs.or_else(|| self.sketch(&data));
        match self.delta.as_mut() {
            Some(d) => {
                d.on_duplicate(&id, None, false)?;
                d.push_cached_only(id, data, sfs);
                Ok(())
            }
            None => {
                self.summary.bytes_after_delta += data.len() as u64;
                let len = data.len();
                self.packer
                    .push(id, EntryKind::Full, &data, len, Vec::new())
            }
        }
    }

    /// A chunk of file data entered the look-ahead window ([`super::lookahead`]), in stream
    /// order: the container of a duplicate is reached (a dense container enters the
    /// potential base chunk cache, the cache-aware filter's view takes it), and the duplicate
    /// judged by the cache-aware filter, as LoopDelta's fingerprint indexing stage does
    /// (§4.4 step 1). Returns whether it is base-fragmented. With Capping nothing is done
    /// here: a segment is reached and judged whole when it is decided.
    fn enter(&mut self, c: &Fingerprinted) -> bool {
        if let Some(d) = self.delta.as_mut() {
            d.predict_entering(&c.id, matches!(c.lookup, IndexLookup::Stored(_)));
        }
        let IndexLookup::Stored(container) = c.lookup else {
            return false;
        };
        if self.segment.is_some() {
            return false;
        }
        self.index.lookup.reached(&container);
        // A chunk judged base-fragmented before is stored again by then: this copy is a
        // duplicate of that one (as `add` skips the chunks already pending).
        if self.caf.is_none() || self.pending.contains(&c.id) || self.caf_stored.contains(&c.id) {
            return false;
        }
        let fragmented = self.base_fragmented(&c.id, &HashSet::new());
        if fragmented {
            self.caf_stored.insert(c.id);
        }
        fragmented
    }

    /// One chunk of file data, judged by the cache-aware filter now.
    fn add(
        &mut self,
        id: ChunkId,
        data: Bytes,
        sfs: Option<SuperFeatures>,
        lookup: IndexLookup,
    ) -> Result<()> {
        let fragmented = matches!(lookup, IndexLookup::Stored(_))
            && !self.pending.contains(&id)
            && self.base_fragmented(&id, &HashSet::new());
        self.add_judged(id, data, sfs, lookup, fragmented)
    }

    /// One chunk of file data, `base_fragmented` as the cache-aware filter judged it.
    fn add_judged(
        &mut self,
        id: ChunkId,
        data: Bytes,
        sfs: Option<SuperFeatures>,
        lookup: IndexLookup,
        base_fragmented: bool,
    ) -> Result<()> {
        if base_fragmented && !self.pending.contains(&id) {
            return self.rewrite_base_fragmented(id, data, sfs);
        }
        if self.is_new(&id, lookup, false)? {
            self.store_new(id, data, sfs, None)?;
        }
        Ok(())
    }

    /// One chunk of the tree stream, with the parent's tree chunks at its place as candidate
    /// bases: a tree changes in scattered references, so nearly every chunk is new and
    /// nearly all of it is in the parent's tree. Tree chunks are sketched here (a tree is
    /// about 0.4% of the data it describes).
    pub fn add_tree(&mut self, id: ChunkId, data: Bytes, hints: Vec<ChunkId>) -> Result<()> {
        if !self.is_new(&id, IndexLookup::NotLookedUp, true)? {
            return Ok(());
        }
        let sfs = self.sketch(&data);
        self.store_new(id, data, sfs, Some(hints))
    }

    /// Sketches `data` here, on the dedup thread (when the backup sketches and resemblance
    /// detection is on): for tree chunks and base-fragmented duplicates, which the pool did
    /// not sketch.
    fn sketch(&self, data: &[u8]) -> Option<SuperFeatures> {
        let (Some(sk), Some(_)) = (&self.sketcher, &self.delta) else {
            return None;
        };
        let t = Instant::now();
        let sfs = sk.sketch(data);
        StageTimes::add(&self.times.sketch, t);
        self.times
            .sketched_chunks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(sfs)
    }

    /// Whether chunk `id` is new to the repository (counting it); a duplicate is shown to the
    /// delta stage's candidate search.
    fn is_new(&mut self, id: &ChunkId, lookup: IndexLookup, tree: bool) -> Result<bool> {
        self.summary.chunks += 1;
        // Some(container if durable) for a duplicate. The pool's view of the index predates
        // this backup, whose own new chunks are all in `pending`.
        let known = if self.pending.contains(id) {
            Some(None)
        } else {
            match lookup {
                IndexLookup::Stored(c) => Some(Some(c)),
                IndexLookup::Absent => None,
                IndexLookup::NotLookedUp => {
                    let t = Instant::now();
                    let found = self.index.container_of(id)?;
                    StageTimes::add(&self.times.index, t);
                    if let Some(c) = &found {
                        self.index.lookup.reached(c);
                    }
                    found.map(Some)
                }
            }
        };
        if let Some(container) = known {
            self.referenced.extend(container);
            if let (Some(m), Some(c)) = (self.monitor.as_mut(), container) {
                m.duplicate(c, *id);
            }
            if let Some(d) = self.delta.as_mut() {
                d.on_duplicate(id, container, tree)?;
            }
            return Ok(false);
        }
        Ok(true)
    }

    /// Stores a new chunk: through the delta stage when resemblance detection is on, else in
    /// full. `tree_hints` are set for a tree chunk.
    fn store_new(
        &mut self,
        id: ChunkId,
        data: Bytes,
        sfs: Option<SuperFeatures>,
        tree_hints: Option<Vec<ChunkId>>,
    ) -> Result<()> {
        self.pending.insert(id);
        self.summary.new_chunks += 1;
        self.summary.bytes_new += data.len() as u64;
        match self.delta.as_mut() {
            Some(d) => d.push_new(id, data, sfs, tree_hints),
            None => {
                self.summary.bytes_after_delta += data.len() as u64;
                let len = data.len();
                self.packer
                    .push(id, EntryKind::Full, &data, len, Vec::new())?;
            }
        }
        Ok(())
    }

    /// Decides the chunks waiting in the delta stage and stores them; with `hold`, the delta
    /// stage may keep a few for the next block (see [`super::delta::DeltaStage::process`]).
    pub fn end_block(&mut self, hold: bool) -> Result<()> {
        let Some(d) = self.delta.as_mut() else {
            return Ok(());
        };
        if !d.has_pending() {
            return Ok(());
        }
        for c in d.process(&mut self.summary, hold)? {
            match c.stored {
                Stored::Full => {
                    self.packer
                        .push(c.id, EntryKind::Full, &c.data, c.data.len(), c.sfs.0)?;
                    // Right behind its base, so that restore finds both in one container.
                    if let Some(inv) = c.inversed {
                        self.rewritten.inversed_chunks += 1;
                        self.rewritten.inversed_bytes += inv.delta.len() as u64;
                        self.summary.bytes_after_delta += inv.delta.len() as u64;
                        self.packer.push(
                            inv.id,
                            EntryKind::Delta {
                                base: c.id,
                                inversed: true,
                            },
                            &inv.delta,
                            inv.original_len,
                            Vec::new(),
                        )?;
                    }
                }
                Stored::Delta { base, delta, .. } => {
                    if let Some(m) = self.monitor.as_mut() {
                        m.delta_base(base);
                    }
                    self.packer
                        .push(c.id, EntryKind::delta(base), &delta, c.data.len(), c.sfs.0)?
                }
            }
        }
        Ok(())
    }
}
