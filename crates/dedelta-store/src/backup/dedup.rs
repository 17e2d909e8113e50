//! Runs on: the dedup thread.
//!
//! Decides, in stream order, which chunks are new: a chunk is a duplicate if the index held it
//! when the backup started (the pool looked it up, see [`super::fingerprint`]) or if this
//! backup already stored it. New chunks go to the delta stage (when resemblance detection is
//! on), which decides per block whether each is stored in full or as a delta, and then to the
//! region packer. The tree stream's records are written as the items arrive.

use super::bases::BaseCounts;
use super::delta::{DeltaStage, Stored};
use super::fingerprint::{Fingerprinted, IndexLookup};
use super::metrics::StageTimes;
use super::pack::RegionPacker;
use super::tree_writer::TreeWriter;
use super::{closed, Item};
use crate::client::index::IndexReader;
use crate::error::Result;
use crate::format::container::{ContainerId, EntryKind};
use crate::format::snapshot::{BackupSummary, TreeRef};
use crate::format::tree::ChunkRef;
use crate::repository::damage::DamageSet;
use bytes::Bytes;
use crossbeam_channel::Receiver;
use dedelta_core::sketch::SuperFeatures;
use dedelta_core::ChunkId;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// The index as backup sees it: copies that `check` recorded as damaged count as absent, so
/// that a backup stores those chunks again instead of deduplicating against them (check also
/// takes them out of the index; this guards against an index rebuilt by an older version).
pub(super) struct DedupIndex {
    /// A read view of the chunk index.
    pub reader: IndexReader,
    /// The repository's damage records.
    pub damage: Arc<DamageSet>,
}

impl DedupIndex {
    /// The container of the usable indexed copy of `id`, if any.
    pub fn container_of(&self, id: &ChunkId) -> Result<Option<ContainerId>> {
        Ok(self
            .reader
            .get(id)?
            .map(|loc| loc.container)
            .filter(|c| self.damage.reason(c, id).is_none()))
    }
}

/// What the dedup thread hands back when the stream ends.
pub(super) struct DedupOutput {
    /// The counters it kept (the walker and writer add theirs).
    pub summary: BackupSummary,
    /// The stored tree stream.
    pub tree: TreeRef,
    /// Notices of the delta stage (unreadable bases, an unusable local cache).
    pub notices: Vec<String>,
    /// Where delta bases came from.
    pub base_counts: BaseCounts,
}

/// The dedup thread's state.
pub(super) struct DedupStage<'a> {
    index: DedupIndex,
    /// New chunks of this backup: duplicates of them are duplicates too.
    pending: HashSet<ChunkId>,
    packer: RegionPacker<'a>,
    summary: BackupSummary,
    delta: Option<DeltaStage<'a>>,
    times: Arc<StageTimes>,
}

impl<'a> DedupStage<'a> {
    /// A stage storing new chunks through `packer` (and `delta`, when resemblance is on).
    pub fn new(
        index: DedupIndex,
        packer: RegionPacker<'a>,
        delta: Option<DeltaStage<'a>>,
        times: Arc<StageTimes>,
    ) -> Self {
        DedupStage {
            index,
            pending: HashSet::new(),
            packer,
            summary: BackupSummary::default(),
            delta,
            times,
        }
    }

    /// Consumes the walker's items until the walker closes the channel.
    pub fn run(mut self, items: Receiver<Item>, mut tree: TreeWriter<'_>) -> Result<DedupOutput> {
        for item in items {
            match item {
                Item::Node(n) => tree.node(&n),
                Item::FileStart(n) => tree.file_start(n),
                Item::FileData(rx) => {
                    for Fingerprinted {
                        id,
                        data,
                        sfs,
                        lookup,
                    } in rx.recv().map_err(closed)?
                    {
                        let len = data.len() as u32;
                        self.add(id, data, sfs, lookup, true)?;
                        tree.file_chunk(ChunkRef { id, len })?;
                    }
                    self.end_block()?;
                }
                Item::FileEnd => tree.file_end()?,
            }
            tree.maybe_drain(&mut self)?;
        }
        self.end_block()?;
        let mut notices: Vec<String> = Vec::new();
        if let Some(d) = self.delta.as_mut() {
            notices.extend(d.take_notices());
            notices.extend(d.save_local_cache());
        }
        let tree = tree.finish(&mut self)?;
        self.summary.tree_bytes = tree.len;
        self.packer.flush()?;
        Ok(DedupOutput {
            summary: self.summary,
            tree,
            notices,
            base_counts: self
                .delta
                .as_ref()
                .map(|d| d.base_counts())
                .unwrap_or_default(),
        })
    }

    /// One chunk of the stream; `allow_delta` is false for metadata (tree) chunks.
    pub fn add(
        &mut self,
        id: ChunkId,
        data: Bytes,
        sfs: Option<SuperFeatures>,
        lookup: IndexLookup,
        allow_delta: bool,
    ) -> Result<()> {
        self.summary.chunks += 1;
        // Some(container if durable) for a duplicate. The pool's view of the index predates
        // this backup, whose own new chunks are all in `pending`.
        let known = if self.pending.contains(&id) {
            Some(None)
        } else {
            match lookup {
                IndexLookup::Stored(c) => Some(Some(c)),
                IndexLookup::Absent => None,
                IndexLookup::NotLookedUp => {
                    let t = Instant::now();
                    let found = self.index.container_of(&id)?.map(Some);
                    StageTimes::add(&self.times.index, t);
                    found
                }
            }
        };
        if let Some(container) = known {
            if let Some(d) = self.delta.as_mut() {
                d.on_duplicate(&id, container)?;
            }
            return Ok(());
        }
        self.pending.insert(id);
        self.summary.new_chunks += 1;
        self.summary.bytes_new += data.len() as u64;
        match self.delta.as_mut() {
            Some(d) if allow_delta => d.push_new(id, data, sfs),
            _ => {
                self.summary.bytes_after_delta += data.len() as u64;
                let len = data.len();
                self.packer
                    .push(id, EntryKind::Full, &data, len, Vec::new())?;
            }
        }
        Ok(())
    }

    /// Decides the chunks waiting in the delta stage and stores them.
    fn end_block(&mut self) -> Result<()> {
        let Some(d) = self.delta.as_mut() else {
            return Ok(());
        };
        if !d.has_pending() {
            return Ok(());
        }
        for c in d.process(&mut self.summary)? {
            match c.stored {
                Stored::Full => {
                    self.packer
                        .push(c.id, EntryKind::Full, &c.data, c.data.len(), c.sfs.0)?
                }
                Stored::Delta { base, delta } => self.packer.push(
                    c.id,
                    EntryKind::Delta { base },
                    &delta,
                    c.data.len(),
                    c.sfs.0,
                )?,
            }
        }
        Ok(())
    }
}
