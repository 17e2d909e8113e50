//! Runs on: the dedup thread.
//!
//! Resemblance detection: for a new chunk, which stored chunks it is probably similar to.
//! Two sources, tried in this order, as in DARE: duplicate-adjacency ([`dupadj`], DARE §3.2)
//! and the sketch index ([`sketch_index`]: super-features, FirstFit as in Finesse). A candidate
//! is only a hint: the delta stage fetches its base and keeps a delta only if it saves space.

pub mod dupadj;
pub mod sketch_index;

use crate::error::Result;
use crate::format::container::ContainerId;
use dedelta_core::sketch::SuperFeatures;
use dedelta_core::ChunkId;
use dupadj::DupAdj;
use sketch_index::SketchIndex;

/// Where a candidate base came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidateSource {
    /// Duplicate-adjacency: the chunk at the same distance from a duplicate in the parent.
    DupAdj,
    /// A shared super-feature.
    Sketch,
    /// For a tree chunk: the parent snapshot's tree chunk at the same place in its stream.
    ParentTree,
}

/// The candidate search of one backup.
pub struct CandidateSearch<'a> {
    dupadj: Option<DupAdj>,
    sketches: Option<Box<dyn SketchIndex + 'a>>,
}

impl<'a> CandidateSearch<'a> {
    /// A search using DupAdj (when the backup has a parent recipe) and a sketch index (when
    /// it sketches).
    pub fn new(dupadj: Option<DupAdj>, sketches: Option<Box<dyn SketchIndex + 'a>>) -> Self {
        CandidateSearch { dupadj, sketches }
    }

    /// A duplicate went by, stored in `container` if that is already durable; `in_recipe`
    /// is false for a tree chunk, which is no position of the parent's recipe and must not
    /// end DupAdj's walk through it.
    pub fn on_duplicate(
        &mut self,
        id: &ChunkId,
        container: Option<ContainerId>,
        in_recipe: bool,
    ) -> Result<()> {
        if let (Some(c), Some(s)) = (container, self.sketches.as_mut()) {
            s.consulted(c)?;
        }
        if let (Some(d), true) = (self.dupadj.as_mut(), in_recipe) {
            d.on_duplicate(id);
        }
        Ok(())
    }

    /// DupAdj's state, when it is on.
    pub fn dupadj(&self) -> Option<&DupAdj> {
        self.dupadj.as_ref()
    }

    /// New chunk `id` went by (the next one of the batch being gathered).
    pub fn on_new(&mut self, id: ChunkId) {
        if let Some(d) = self.dupadj.as_mut() {
            d.on_new(id);
        }
    }

    /// The DupAdj hints of the gathered batch's `batch_len` new data chunks, in order; with
    /// `hold`, fewer: the unpaired ones at the end are held for the next batch
    /// ([`DupAdj::take_hints`]), and the caller keeps those chunks for it.
    pub fn take_dupadj_hints(&mut self, batch_len: usize, hold: bool) -> Vec<Option<ChunkId>> {
        match self.dupadj.as_mut() {
            Some(d) => d.take_hints(hold),
            None => vec![None; batch_len],
        }
    }

    /// The candidates of a new chunk, in the order to try them: its positional hints
    /// (DupAdj's, or a tree chunk's parent tree chunks), then the sketch index's FirstFit
    /// match and, up to `sketch_limit`, its further matches (each once).
    pub fn candidates(
        &mut self,
        hints: Vec<(ChunkId, CandidateSource)>,
        sfs: &SuperFeatures,
        sketch_limit: usize,
    ) -> Result<Vec<(ChunkId, CandidateSource)>> {
        let mut out = hints;
        out.reserve(sketch_limit);
        if let Some(s) = self.sketches.as_mut() {
            for c in s.lookup(sfs, sketch_limit)? {
                if !out.iter().any(|(w, _)| *w == c) {
                    out.push((c, CandidateSource::Sketch));
                }
            }
        }
        Ok(out)
    }

    /// A new chunk was stored in full: it can be a base for later chunks of this backup.
    pub fn stored_full(&mut self, id: ChunkId, sfs: &SuperFeatures) {
        if let (Some(s), false) = (self.sketches.as_mut(), sfs.0.is_empty()) {
            s.insert(id, sfs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dupadj::ParentRecipe;
    use super::*;

    fn id(n: u8) -> ChunkId {
        ChunkId([n; 32])
    }

    /// Issue 15: duplicate tree chunks between the data chunks (a directory backup's tree
    /// stream goes through dedup too) neither end DupAdj's forward walk nor start a backward
    /// one: the data chunks get the same hints as without them.
    #[test]
    fn tree_chunks_interleaved_do_not_move_the_walk() {
        let hints = |with_trees: bool| {
            let parent = ParentRecipe::new((1..=9).map(id).collect());
            let mut s = CandidateSearch::new(Some(DupAdj::new(parent)), None);
            let tree = |s: &mut CandidateSearch<'_>, n: u8| {
                if with_trees {
                    // A duplicate tree chunk; one that is also a data chunk of the parent.
                    s.on_duplicate(&id(n), None, false).unwrap();
                }
            };
            s.on_duplicate(&id(2), None, true).unwrap();
            tree(&mut s, 200);
            s.on_new(id(101));
            tree(&mut s, 7);
            s.on_new(id(102));
            s.on_new(id(103));
            tree(&mut s, 201);
            s.on_duplicate(&id(8), None, true).unwrap();
            s.take_dupadj_hints(3, false)
        };
        let expected = vec![Some(id(3)), Some(id(4)), Some(id(5))];
        assert_eq!(hints(false), expected);
        assert_eq!(hints(true), expected);
    }
}
