//! What a reader sees of the index: the runs and container ranges of one committed manifest
//! ([`View`]), and the handle commands read through ([`IndexReader`]).

use super::manifest::{slot_holding, Slot};
use super::run::{self, Run};
use super::{sketch_key, ChunkLocation, Shared};
use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use dedelta_core::sketch::SketchKeep;
use dedelta_core::ChunkId;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// How far a container's metadata agrees with the index (see [`IndexReader::trust`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    /// The index holds every entry of it but copies recorded as damaged (and may name
    /// another copy of a chunk).
    Whole,
    /// Its full entries as [`Trust::Whole`]; delta entries may have been left out.
    FullEntries,
    /// Entries were removed from the index: its metadata may list chunks the index no
    /// longer holds (a prune's dead chunks).
    Nothing,
}

/// The runs and container ranges of one committed manifest: what a reader sees.
#[derive(Debug, Default)]
pub(super) struct View {
    /// Oldest first.
    pub(super) runs: Vec<Arc<Run>>,
    pub(super) slots: Vec<Slot>,
    /// The containers whose metadata the index does not wholly agree with (the newest slot
    /// of each container id decides).
    pub(super) partial: HashMap<ContainerId, Trust>,
    /// Per container, its entries superseded by a newer copy of their chunk (see
    /// [`super::manifest::Manifest::superseded`]), in order.
    pub(super) superseded: HashMap<ContainerId, Vec<u32>>,
}

impl View {
    pub(super) fn new(runs: Vec<Arc<Run>>, slots: Vec<Slot>, superseded: &[u64]) -> Self {
        let mut partial = HashMap::new();
        for s in &slots {
            let t = if s.trimmed {
                Trust::Nothing
            } else if s.deltas_left_out {
                Trust::FullEntries
            } else {
                Trust::Whole
            };
            if t == Trust::Whole {
                partial.remove(&s.id);
            } else {
                partial.insert(s.id, t);
            }
        }
        let mut by_container: HashMap<ContainerId, Vec<u32>> = HashMap::new();
        for &n in superseded {
            if let Some(s) = slot_holding(&slots, n) {
                by_container
                    .entry(s.id)
                    .or_default()
                    .push((n - s.first) as u32);
            }
        }
        View {
            runs,
            slots,
            partial,
            superseded: by_container,
        }
    }

    /// The container and entry of global entry number `n`.
    pub(super) fn location(&self, n: u64, path: &Path) -> Result<ChunkLocation> {
        match slot_holding(&self.slots, n) {
            Some(s) => Ok(ChunkLocation {
                container: s.id,
                entry: (n - s.first) as u32,
            }),
            _ => Err(Error::IndexDamaged(format!(
                "{}: an entry names no container",
                path.display()
            ))),
        }
    }

    pub(super) fn get(&self, id: &ChunkId, path: &Path) -> Result<Option<ChunkLocation>> {
        self.get_counting(id, path, &mut 0)
    }

    /// [`Self::get`], adding to `reads` the runs whose filter let it through (each costs a
    /// read of one bucket).
    pub(super) fn get_counting(
        &self,
        id: &ChunkId,
        path: &Path,
        reads: &mut u64,
    ) -> Result<Option<ChunkLocation>> {
        for run in self.runs.iter().rev() {
            if !run.may_hold(id) {
                continue;
            }
            *reads += 1;
            if let Some(n) = run.get(id)? {
                return self.location(n, path).map(Some);
            }
        }
        Ok(None)
    }

    /// The chunk key `key` names: in the oldest run holding it, or the newest (counting in
    /// `counts` what the lookups cost).
    pub(super) fn sketch(
        &self,
        key: u64,
        keep: SketchKeep,
        counts: &run::SketchCounts,
    ) -> Result<Option<ChunkId>> {
        let mut runs: Box<dyn Iterator<Item = &Arc<Run>>> = match keep {
            SketchKeep::Oldest => Box::new(self.runs.iter()),
            SketchKeep::Newest => Box::new(self.runs.iter().rev()),
        };
        runs.try_fold(None, |found, run| match found {
            Some(id) => Ok(Some(id)),
            None => run.sketch_counting(key, counts),
        })
    }

    pub(super) fn has_sketch(&self, key: u64, counts: &run::SketchCounts) -> Result<bool> {
        for run in &self.runs {
            if run.sketch_counting(key, counts)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Calls `f` for every chunk once, with its newest entry, in id order.
    pub(super) fn for_each(
        &self,
        path: &Path,
        mut f: impl FnMut(ChunkId, ChunkLocation),
    ) -> Result<()> {
        let mut cursors: Vec<run::Cursor<'_>> =
            self.runs.iter().map(|r| r.chunk_cursor()).collect();
        let mut heads = Vec::with_capacity(cursors.len());
        for c in &mut cursors {
            heads.push(next_chunk(c)?);
        }
        while let Some(min) = heads.iter().flatten().map(|h: &([u8; 32], u64)| h.0).min() {
            let newest = heads
                .iter()
                .rposition(|h| h.is_some_and(|h| h.0 == min))
                .unwrap_or(0);
            let n = heads[newest].map(|h| h.1).unwrap_or(0);
            f(ChunkId(min), self.location(n, path)?);
            for (h, c) in heads.iter_mut().zip(cursors.iter_mut()) {
                if h.is_some_and(|h| h.0 == min) {
                    *h = next_chunk(c)?;
                }
            }
        }
        Ok(())
    }
}

fn next_chunk(c: &mut run::Cursor<'_>) -> Result<Option<([u8; 32], u64)>> {
    Ok(match c.next()? {
        Some(run::Entry::Chunk(id, n)) => Some((id, n)),
        _ => None,
    })
}

/// A read view of the index: the runs of one commit (their files stay readable after a
/// later merge deletes them, while the view holds them open).
pub struct IndexReader {
    pub(super) view: Arc<View>,
    pub(super) shared: Arc<Shared>,
}

impl IndexReader {
    /// Moves this reader to the index as last committed (what [`ChunkIndex::reader`] would
    /// return now): a long-lived reader sees what was indexed since it was made.
    pub fn refresh(&mut self) {
        self.view = self.shared.current();
    }

    /// Looks up a chunk.
    pub fn get(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        self.shared.guard(self.view.get(id, &self.shared.path))
    }

    /// [`Self::get`], adding to `reads` the buckets it read from run files (the lookups a
    /// run's own Bloom filter did not spare).
    pub fn get_counting(&self, id: &ChunkId, reads: &mut u64) -> Result<Option<ChunkLocation>> {
        self.shared
            .guard(self.view.get_counting(id, &self.shared.path, reads))
    }

    /// Whether any run's fingerprint filter lets `id` through: `false` means the index does
    /// not hold it, known without reading a file (a [`Self::get`] would read no bucket).
    pub fn may_hold(&self, id: &ChunkId) -> bool {
        self.view.runs.iter().any(|r| r.may_hold(id))
    }

    /// How far container `id`'s metadata agrees with this view of the index: whether a
    /// chunk its metadata lists can be taken as indexed without looking it up.
    pub fn trust(&self, id: &ContainerId) -> Trust {
        self.view.partial.get(id).copied().unwrap_or(Trust::Whole)
    }

    /// The entries of container `id` whose chunk the index names in a newer copy, in order
    /// (as far as recorded: see [`super::manifest::Manifest::superseded`]).
    pub fn superseded(&self, id: &ContainerId) -> &[u32] {
        self.view.superseded.get(id).map_or(&[], |v| v.as_slice())
    }

    /// The first full chunk recorded with super-feature `sf` at `position`, or the last one
    /// when the index keeps the newest ([`ChunkIndex::set_sketch_keep`]); rarely another whose
    /// super-feature has the same truncated key: a candidate only.
    pub fn sketch(&self, position: usize, sf: u64) -> Result<Option<ChunkId>> {
        let keep = self.shared.keep();
        self.shared.guard(self.view.sketch(
            sketch_key(position, sf),
            keep,
            &self.shared.sketch_counts,
        ))
    }

    /// What the index's super-feature lookups cost so far, and the filters they hold (see
    /// [`super::SketchLookups`]).
    pub fn sketch_lookups(&self) -> super::SketchLookups {
        self.shared.sketch_lookups(&self.view)
    }
}
