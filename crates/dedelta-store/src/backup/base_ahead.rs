//! Runs on: the dedup thread.
//!
//! Predicting the delta bases a stream will ask for, to read them ahead where each read is a
//! round trip (an object store). DupAdj pairs a new chunk with the parent's chunk at the same
//! distance from a duplicate ([`super::resemble::dupadj`]); the delta stage then reads the
//! bases it lacks, a block (1 MiB of file data) at a time, on this thread, the backup's
//! critical path: on the Garage benchmark 5-9 reads per backup, one after another, each a
//! round trip of 3-50 ms. Here the same walk is run over the chunks as they enter the
//! look-ahead window ([`super::lookahead`], some megabytes before the delta stage reaches
//! them), with what the window knows of each chunk (a duplicate the index holds, or not):
//! the parent chunks it would pair are read in the background
//! ([`super::bases::BaseFetcher::read_ahead`]) and are there when their fetch comes. A
//! duplicate of a chunk of this backup counts as new here (DupAdj then walks this backup's
//! own chunks, which are in memory anyway): a prediction may read a region that is not
//! needed, never change which base is used.

use super::resemble::dupadj::ParentRecipe;
use dedelta_core::ChunkId;

/// The most new chunks before a duplicate that the backward walk predicts.
const MAX_BACKWARD: usize = 64;
/// Predictions gathered before they are requested.
const BATCH: usize = 64;

/// DupAdj's walk over the parent, run ahead of the delta stage (see the module doc).
#[derive(Debug, Default)]
pub(super) struct BasePredictor {
    /// The parent position the next new chunk pairs with, while a forward walk is under way.
    walk: Option<usize>,
    /// New chunks since the last duplicate.
    run: usize,
    /// Parent chunks predicted, not requested yet.
    pending: Vec<ChunkId>,
}

impl BasePredictor {
    /// Chunk `id` entered the window, a duplicate the index holds or not (`duplicate`).
    pub fn enter(&mut self, parent: &ParentRecipe, id: &ChunkId, duplicate: bool) {
        if !duplicate {
            if let Some(q) = self.walk {
                self.walk = parent.at(q).map(|c| {
                    self.pending.push(c);
                    q + 1
                });
            }
            self.run += 1;
            return;
        }
        match duplicate.then(|| parent.position(id)).flatten() {
            Some(p) => {
                let back = self.run.min(MAX_BACKWARD).min(p);
                self.pending
                    .extend((p - back..p).rev().filter_map(|q| parent.at(q)));
                self.walk = Some(p + 1);
            }
            None => self.walk = None,
        }
        self.run = 0;
    }

    /// The predictions gathered, once there are enough to request (all of them with `all`).
    pub fn take(&mut self, all: bool) -> Option<Vec<ChunkId>> {
        (self.pending.len() >= BATCH || (all && !self.pending.is_empty()))
            .then(|| std::mem::take(&mut self.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ChunkId {
        ChunkId([n; 32])
    }

    /// The walk predicts what DupAdj pairs: new chunks after a duplicate with the parent's
    /// chunks after it, new chunks before one with those before it; a duplicate outside the
    /// parent ends the walk.
    #[test]
    fn predicts_dupadjs_pairs() {
        let parent = ParentRecipe::new((0..10).map(id).collect());
        let mut p = BasePredictor::default();
        // new, new, dup(5), new, new, dup(outside), new
        p.enter(&parent, &id(100), false);
        p.enter(&parent, &id(101), false);
        p.enter(&parent, &id(5), true);
        p.enter(&parent, &id(102), false);
        p.enter(&parent, &id(103), false);
        p.enter(&parent, &id(200), true);
        p.enter(&parent, &id(104), false);
        assert_eq!(p.take(false), None, "fewer than a batch");
        assert_eq!(p.take(true), Some(vec![id(4), id(3), id(6), id(7)]));
        assert_eq!(p.take(true), None);
        // The new chunk before it pairs backwards; the walk stops at the parent's end.
        p.enter(&parent, &id(9), true);
        p.enter(&parent, &id(105), false);
        p.enter(&parent, &id(106), false);
        assert_eq!(p.take(true), Some(vec![id(8)]));
    }
}
