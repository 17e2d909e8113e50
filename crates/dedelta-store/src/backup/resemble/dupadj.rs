//! Duplicate-adjacency detection (DARE §3.2): new chunks next to a duplicate are probably
//! similar to the chunks next to that duplicate in the previous version of the stream.
//!
//! The parent snapshot's chunk sequence is loaded once. When a duplicate is found at position
//! `p` of that sequence, the new chunks after it are paired with positions `p+1, p+2, ...`
//! (the forward walk) and the new chunks just before it with `p-1, p-2, ...` (the backward
//! walk, for chunks that have no pair yet). DARE stops walking at the first dissimilar pair;
//! here every pair is judged on its own by the delta saving test, which costs an extra encode
//! per failed pair and never detects less.
//!
//! Chunks are decided in batches (a block of a file), and a base must be decided before it is
//! used, so a walk never pairs a chunk with one of its own batch. The backward walk still
//! crosses a batch boundary: the unpaired new chunks at the end of a batch are *held*
//! ([`DupAdj::take_hints`], at most [`MAX_HELD`]) and decided with the next batch, after the
//! duplicate that may follow them has been seen.

use dedelta_core::ChunkId;
use std::collections::HashMap;

/// The most unpaired new chunks at the end of a batch held for the next batch's backward
/// walk (about 512 KiB at the default 8 KiB chunks): beyond it, a run of new chunks with no
/// duplicate after it is decided without waiting.
pub const MAX_HELD: usize = 64;

/// The chunk sequence of the parent snapshot.
#[derive(Debug, Default)]
pub struct ParentRecipe {
    ids: Vec<ChunkId>,
    position: HashMap<ChunkId, u32>,
}

impl ParentRecipe {
    /// Builds the lookup from a chunk sequence (a chunk's first position wins).
    pub fn new(ids: Vec<ChunkId>) -> Self {
        let mut position = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            position.entry(*id).or_insert(i as u32);
        }
        ParentRecipe { ids, position }
    }
}

/// DupAdj's state while a backup streams by.
#[derive(Debug)]
pub struct DupAdj {
    parent: ParentRecipe,
    /// The parent position paired with the next new chunk (forward walk), if any.
    next_parent_pos: Option<usize>,
    /// Batch positions of the new chunks since the last duplicate (for the backward walk).
    new_run: Vec<usize>,
    /// The pair found for each new chunk of the batch so far.
    hints: Vec<Option<ChunkId>>,
}

impl DupAdj {
    /// DupAdj against `parent`.
    pub fn new(parent: ParentRecipe) -> Self {
        DupAdj {
            parent,
            next_parent_pos: None,
            new_run: Vec::new(),
            hints: Vec::new(),
        }
    }

    /// A new chunk: paired by the forward walk if one is under way.
    pub fn on_new(&mut self) {
        let mut hint = None;
        if let Some(p) = self.next_parent_pos {
            match self.parent.ids.get(p) {
                Some(id) => {
                    hint = Some(*id);
                    self.next_parent_pos = Some(p + 1);
                }
                None => self.next_parent_pos = None,
            }
        }
        self.new_run.push(self.hints.len());
        self.hints.push(hint);
    }

    /// A duplicate: pairs the new chunks just before it (backward walk) and starts a forward
    /// walk after it, if it is in the parent.
    pub fn on_duplicate(&mut self, id: &ChunkId) {
        match self.parent.position.get(id) {
            Some(&p) => {
                let p = p as usize;
                for (k, &i) in self.new_run.iter().rev().enumerate() {
                    let Some(q) = p.checked_sub(k + 1) else { break };
                    if self.hints[i].is_none() {
                        self.hints[i] = Some(self.parent.ids[q]);
                    }
                }
                self.next_parent_pos = Some(p + 1);
            }
            None => self.next_parent_pos = None,
        }
        self.new_run.clear();
    }

    /// The pairs of the batch's new chunks, in order. With `hold`, the unpaired new chunks
    /// at the end of the batch after its last duplicate (at most [`MAX_HELD`]) are left out:
    /// they stay first in the next batch, where a duplicate that follows them can still pair
    /// them backwards. Without `hold` (the end of the stream), every chunk's pair is returned
    /// and the next batch starts empty.
    pub fn take_hints(&mut self, hold: bool) -> Vec<Option<ChunkId>> {
        let held = if hold {
            self.new_run
                .iter()
                .rev()
                .take(MAX_HELD)
                .take_while(|&&i| self.hints[i].is_none())
                .count()
        } else {
            0
        };
        let kept = self.hints.split_off(self.hints.len() - held);
        // The held chunks are the last of the batch and of the run: renumbered from 0.
        self.new_run = (0..held).collect();
        std::mem::replace(&mut self.hints, kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ChunkId {
        ChunkId([n; 32])
    }

    /// A parent stream 1..=9; the new stream replaces some chunks (new chunks are `on_new`).
    fn dupadj() -> DupAdj {
        DupAdj::new(ParentRecipe::new((1..=9).map(id).collect()))
    }

    #[test]
    fn forward_walk_pairs_the_chunks_after_a_duplicate() {
        let mut d = dupadj();
        d.on_duplicate(&id(2));
        d.on_new();
        d.on_new();
        d.on_duplicate(&id(5));
        d.on_new();
        assert_eq!(
            d.take_hints(false),
            vec![Some(id(3)), Some(id(4)), Some(id(6))]
        );
    }

    #[test]
    fn backward_walk_pairs_the_chunks_before_a_duplicate() {
        let mut d = dupadj();
        d.on_new();
        d.on_new();
        d.on_duplicate(&id(4));
        assert_eq!(d.take_hints(false), vec![Some(id(2)), Some(id(3))]);
    }

    /// The batch ends after two unpaired new chunks; the duplicate that follows them comes in
    /// the next batch and still pairs them backwards.
    #[test]
    fn backward_walk_crosses_a_batch_boundary() {
        let mut d = dupadj();
        d.on_duplicate(&id(99)); // not in the parent: no forward walk
        d.on_new();
        d.on_new();
        assert_eq!(d.take_hints(true), Vec::<Option<ChunkId>>::new());
        d.on_duplicate(&id(7));
        d.on_new();
        assert_eq!(
            d.take_hints(true),
            vec![Some(id(5)), Some(id(6)), Some(id(8))]
        );
    }

    /// Only the unpaired tail is held; a chunk the forward walk paired is returned.
    #[test]
    fn only_the_unpaired_tail_is_held() {
        let mut d = dupadj();
        d.on_duplicate(&id(8));
        d.on_new(); // paired with 9
        d.on_new(); // past the parent's end: unpaired
        assert_eq!(d.take_hints(true), vec![Some(id(9))]);
        assert_eq!(d.take_hints(false), vec![None]);
    }

    #[test]
    fn at_most_max_held_chunks_are_held() {
        let mut d = dupadj();
        for _ in 0..MAX_HELD + 10 {
            d.on_new();
        }
        assert_eq!(d.take_hints(true).len(), 10);
        d.on_duplicate(&id(9));
        let hints = d.take_hints(true);
        assert_eq!(hints.len(), MAX_HELD);
        // The held chunks right before the duplicate at parent position 8 (0-based) pair with
        // positions 7, 6, ... backwards; older ones run out of parent.
        assert_eq!(hints[MAX_HELD - 1], Some(id(8)));
        assert_eq!(hints[MAX_HELD - 8], Some(id(1)));
        assert_eq!(hints[MAX_HELD - 9], None);
    }

    #[test]
    fn end_of_stream_holds_nothing() {
        let mut d = dupadj();
        d.on_new();
        assert_eq!(d.take_hints(false), vec![None]);
        assert_eq!(d.take_hints(false), Vec::<Option<ChunkId>>::new());
    }
}
