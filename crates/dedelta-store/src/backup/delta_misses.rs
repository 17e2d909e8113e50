//! Runs on: the dedup thread (with the pool's free threads).
//!
//! DARE §3.1 for the delta stage ([`DeltaStage::sketch_dupadj_misses`], the default): new
//! data chunks arrive unsketched, and only those that go on to the sketch index are sketched,
//! those without a DupAdj hint before their lookup, the others after DupAdj's round.

use super::{DeltaStage, NewChunk, StageTimes};
use crate::error::Result;
use dedelta_core::sketch::Sketcher;
use std::sync::Arc;
use std::time::Instant;

impl DeltaStage<'_> {
    /// Sketches only DupAdj's misses (DARE §3.1): new data chunks arrive unsketched, and
    /// `sketcher` gives super-features to those without a DupAdj hint before their candidates
    /// are looked up, and to those whose DupAdj base gave no delta worth keeping after that
    /// attempt; the sketch index's candidates then follow as they would have.
    pub fn sketch_dupadj_misses(&mut self, sketcher: Arc<dyn Sketcher>) {
        self.misses_sketcher = Some(sketcher);
    }

    /// With [`Self::sketch_dupadj_misses`]: sketches the data chunks of `batch` that have no
    /// super-features yet and that `pick` selects by position and chunk (on the stage's pool
    /// when it has one); returns their positions.
    pub(super) fn sketch_picked(
        &self,
        batch: &mut [NewChunk],
        pick: impl Fn(usize, &NewChunk) -> bool,
    ) -> Vec<usize> {
        let Some(sk) = self.misses_sketcher.as_deref() else {
            return Vec::new();
        };
        let t = Instant::now();
        // Empty super-features mark an unsketched chunk: a sketch of M >= 1 has M values.
        let mut picked: Vec<(usize, &mut NewChunk)> = batch
            .iter_mut()
            .enumerate()
            .filter(|(i, c)| c.dupadj_new() && c.sfs.0.is_empty() && pick(*i, c))
            .collect();
        self.for_each(&mut picked, |(_, c)| c.sfs = sk.sketch(&c.data));
        StageTimes::add(&self.times.sketch, t);
        self.times
            .sketched_chunks
            .fetch_add(picked.len() as u64, std::sync::atomic::Ordering::Relaxed);
        picked.into_iter().map(|(i, _)| i).collect()
    }

    /// With [`Self::sketch_dupadj_misses`], after DupAdj's round: sketches the data chunks
    /// that go on to a later candidate ([`Self::tries_more`]: those still stored in full,
    /// DupAdj's misses, and with best-of-N those whose delta is not good enough yet) and
    /// appends the sketch index's candidates to theirs, so that every chunk tries the
    /// candidates it would have tried sketched from the start. Returns the most candidates a
    /// chunk of the batch has.
    ///
    /// Before 2026-11-30 only the chunks still in full were sketched: with best-of-N a
    /// chunk whose DupAdj delta was kept but poor never tried its sketch candidate, and the
    /// 10 Redis dumps stored 0.8 % more than sketched from the start.
    pub(super) fn sketch_dupadj_misses_now(&mut self, batch: &mut [NewChunk]) -> Result<usize> {
        let picked = self.sketch_picked(batch, |_, c| self.tries_more(c));
        let t = Instant::now();
        for i in picked {
            let c = &mut batch[i];
            for found in self
                .search
                .candidates(Vec::new(), &c.sfs, self.cfg.candidates)?
            {
                if !c.candidates.iter().any(|(w, _)| *w == found.0) {
                    c.candidates.push(found);
                }
            }
        }
        StageTimes::add(&self.times.base_read, t);
        Ok(batch.iter().map(|c| c.candidates.len()).max().unwrap_or(0))
    }
}
