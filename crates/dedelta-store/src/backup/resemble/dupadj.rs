//! Duplicate-adjacency detection (DARE §3.2): new chunks next to a duplicate are probably
//! similar to the chunks next to that duplicate in the previous version of the stream.
//!
//! The parent snapshot's chunk sequence is loaded once. When a duplicate is found at position
//! `p` of that sequence, the new chunks after it are paired with positions `p+1, p+2, ...`
//! (the forward walk) and the new chunks just before it with `p-1, p-2, ...` (the backward
//! walk, for chunks that have no pair yet). DARE stops walking at the first dissimilar pair;
//! here every pair is judged on its own by the delta saving test, which costs an extra encode
//! per failed pair and never detects less. Walks do not cross a batch (a block of a file), so
//! that every base is decided before it is used.

use dedelta_core::ChunkId;
use std::collections::HashMap;

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

    /// The pairs of the batch's new chunks, in order; the next batch starts empty.
    pub fn take_hints(&mut self) -> Vec<Option<ChunkId>> {
        self.new_run.clear();
        std::mem::take(&mut self.hints)
    }
}
