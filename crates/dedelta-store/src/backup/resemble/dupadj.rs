//! Duplicate-adjacency detection (DARE §3.2): new chunks next to a duplicate are probably
//! similar to the chunks next to that duplicate where it was stored before.
//!
//! DARE walks a doubly linked list over the whole stored stream. Here a duplicate is looked up
//! in two sequences: the parent snapshot's chunk sequence (loaded once: the previous version of
//! the same paths, whose chunks at a duplicate's sides are the previous versions of the new
//! chunks at its sides), and, when the parent does not hold it, this backup's own stored stream
//! (its new chunks in order, the last [`OWN_WINDOW`]; a chunk repeated within one backup,
//! such as a file copied under two names with edits, or content moved). Stored streams of
//! older backups are not walked (they would need their containers' metadata read). When a
//! duplicate is found at position `p`, the new chunks after it are paired with positions
//! `p+1, p+2, ...` (the forward walk) and the new chunks just before it with `p-1, p-2, ...`
//! (the backward walk, for chunks that have no pair yet). DARE stops walking at the first
//! dissimilar pair; here every pair is judged on its own by the delta saving test, which costs
//! an extra encode per failed pair and never detects less.
//!
//! Chunks are decided in batches (a block of a file), and a base must be decided before it is
//! used, so a walk never pairs a chunk with one of the chunks not yet decided. The backward
//! walk still crosses a batch boundary: the unpaired new chunks at the end of a batch are
//! *held* ([`DupAdj::take_hints`], at most [`MAX_HELD`]) and decided with the next batch,
//! after the duplicate that may follow them has been seen.

use dedelta_core::ChunkId;
use std::collections::{HashMap, VecDeque};

/// The most unpaired new chunks at the end of a batch held for the next batch's backward
/// walk (about 512 KiB at the default 8 KiB chunks): beyond it, a run of new chunks with no
/// duplicate after it is decided without waiting.
pub const MAX_HELD: usize = 64;

/// How many of this backup's latest new chunks the own-stream walk remembers (512 MiB of
/// data at 8 KiB chunks, about 5 MiB of memory), so that memory does not grow with the
/// backup.
pub const OWN_WINDOW: usize = 65_536;

/// The chunk sequence of the parent snapshot.
#[derive(Debug, Default)]
pub struct ParentRecipe {
    ids: Vec<ChunkId>,
    position: HashMap<ChunkId, u32>,
}

impl ParentRecipe {
    /// The position of `id` in the sequence (its first), if there.
    pub fn position(&self, id: &ChunkId) -> Option<usize> {
        self.position.get(id).map(|&p| p as usize)
    }

    /// Whether the sequence is empty (no parent).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The chunk at position `at`, if any.
    pub fn at(&self, at: usize) -> Option<ChunkId> {
        self.ids.get(at).copied()
    }

    /// Builds the lookup from a chunk sequence (a chunk's first position wins).
    pub fn new(ids: Vec<ChunkId>) -> Self {
        let mut position = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            position.entry(*id).or_insert(i as u32);
        }
        ParentRecipe { ids, position }
    }
}

/// The last [`OWN_WINDOW`] new chunks of this backup, by absolute position in its stream of
/// new chunks.
#[derive(Debug, Default)]
struct OwnStream {
    ids: VecDeque<ChunkId>,
    /// Absolute position of `ids[0]`.
    first: u64,
    position: HashMap<ChunkId, u64>,
    /// Absolute position of the first chunk not decided yet: pairs start below it.
    decided_end: u64,
}

impl OwnStream {
    fn end(&self) -> u64 {
        self.first + self.ids.len() as u64
    }

    fn push(&mut self, id: ChunkId) {
        if self.ids.len() == OWN_WINDOW {
            if let Some(old) = self.ids.pop_front() {
                self.position.remove(&old);
            }
            self.first += 1;
        }
        self.position.insert(id, self.end());
        self.ids.push_back(id);
    }

    /// The decided chunk at absolute position `pos`, if remembered.
    fn get(&self, pos: u64) -> Option<ChunkId> {
        if pos < self.first || pos >= self.decided_end {
            return None;
        }
        self.ids.get((pos - self.first) as usize).copied()
    }
}

/// Where a walk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    /// At this position of the parent's sequence.
    Parent(usize),
    /// At this absolute position of the own stream.
    Own(u64),
}

/// DupAdj's state while a backup streams by.
#[derive(Debug)]
pub struct DupAdj {
    parent: ParentRecipe,
    own: OwnStream,
    /// Where the next new chunk's pair is (forward walk), if a walk is under way.
    next: Option<Walk>,
    /// Batch positions of the new chunks since the last duplicate (for the backward walk).
    new_run: Vec<usize>,
    /// The pair found for each new chunk of the batch so far.
    hints: Vec<Option<ChunkId>>,
}

impl DupAdj {
    /// DupAdj against `parent` (empty when the backup has none: then only the own stream is
    /// walked).
    pub fn new(parent: ParentRecipe) -> Self {
        DupAdj {
            parent,
            own: OwnStream::default(),
            next: None,
            new_run: Vec::new(),
            hints: Vec::new(),
        }
    }

    /// The parent's chunk sequence.
    pub fn parent(&self) -> &ParentRecipe {
        &self.parent
    }

    /// New chunk `id`: paired by the forward walk if one is under way.
    pub fn on_new(&mut self, id: ChunkId) {
        let hint = match self.next {
            Some(Walk::Parent(p)) => {
                self.next = (p + 1 < self.parent.ids.len()).then_some(Walk::Parent(p + 1));
                self.parent.ids.get(p).copied()
            }
            Some(Walk::Own(p)) => {
                let h = self.own.get(p);
                self.next = h.map(|_| Walk::Own(p + 1));
                h
            }
            None => None,
        };
        self.own.push(id);
        self.new_run.push(self.hints.len());
        self.hints.push(hint);
    }

    /// A duplicate: pairs the new chunks just before it (backward walk) and starts a forward
    /// walk after it, in the parent's sequence if it is there, else in the own stream.
    pub fn on_duplicate(&mut self, id: &ChunkId) {
        let at = match self.parent.position.get(id) {
            Some(&p) => Some(Walk::Parent(p as usize)),
            None => self.own.position.get(id).map(|&p| Walk::Own(p)),
        };
        if let Some(at) = at {
            for (k, &i) in self.new_run.iter().rev().enumerate() {
                let back = k as u64 + 1;
                let pair = match at {
                    Walk::Parent(p) => (p as u64)
                        .checked_sub(back)
                        .map(|q| self.parent.ids[q as usize]),
                    Walk::Own(p) => p.checked_sub(back).and_then(|q| self.own.get(q)),
                };
                let Some(pair) = pair else { break };
                if self.hints[i].is_none() {
                    self.hints[i] = Some(pair);
                }
            }
        }
        self.next = at.map(|w| match w {
            Walk::Parent(p) => Walk::Parent(p + 1),
            Walk::Own(p) => Walk::Own(p + 1),
        });
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
        // Every new chunk but the held ones is decided once these hints are used.
        self.own.decided_end = self.own.end() - held as u64;
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
        d.on_new(id(101));
        d.on_new(id(102));
        d.on_duplicate(&id(5));
        d.on_new(id(103));
        assert_eq!(
            d.take_hints(false),
            vec![Some(id(3)), Some(id(4)), Some(id(6))]
        );
    }

    #[test]
    fn backward_walk_pairs_the_chunks_before_a_duplicate() {
        let mut d = dupadj();
        d.on_new(id(104));
        d.on_new(id(105));
        d.on_duplicate(&id(4));
        assert_eq!(d.take_hints(false), vec![Some(id(2)), Some(id(3))]);
    }

    /// The batch ends after two unpaired new chunks; the duplicate that follows them comes in
    /// the next batch and still pairs them backwards.
    #[test]
    fn backward_walk_crosses_a_batch_boundary() {
        let mut d = dupadj();
        d.on_duplicate(&id(99)); // not in the parent: no forward walk
        d.on_new(id(106));
        d.on_new(id(107));
        assert_eq!(d.take_hints(true), Vec::<Option<ChunkId>>::new());
        d.on_duplicate(&id(7));
        d.on_new(id(108));
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
        d.on_new(id(109)); // paired with 9
        d.on_new(id(110)); // past the parent's end: unpaired
        assert_eq!(d.take_hints(true), vec![Some(id(9))]);
        assert_eq!(d.take_hints(false), vec![None]);
    }

    #[test]
    fn at_most_max_held_chunks_are_held() {
        let mut d = dupadj();
        for _ in 0..MAX_HELD + 10 {
            d.on_new(id(111));
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
        d.on_new(id(112));
        assert_eq!(d.take_hints(false), vec![None]);
        assert_eq!(d.take_hints(false), Vec::<Option<ChunkId>>::new());
    }

    /// Without the duplicate in the parent, the walk follows this backup's own stream: a
    /// file stored twice with edits pairs the second copy's new chunks with the first's.
    #[test]
    fn own_stream_walk_pairs_a_repeated_sequence() {
        let mut d = DupAdj::new(ParentRecipe::default());
        // First copy: 50, 51 (shared), 52, 53 (edited later), all new; decided in one batch.
        for n in [50, 51, 52, 53] {
            d.on_new(id(n));
        }
        assert_eq!(d.take_hints(false), vec![None; 4]);
        // Second copy: 60 (edited 50), 51 (duplicate), 62, 63 (edited 52, 53).
        d.on_new(id(60));
        d.on_duplicate(&id(51));
        d.on_new(id(62));
        d.on_new(id(63));
        assert_eq!(
            d.take_hints(false),
            vec![Some(id(50)), Some(id(52)), Some(id(53))]
        );
    }

    /// Chunks of the batch being gathered are not decided yet: never paired with.
    #[test]
    fn own_stream_never_pairs_with_an_undecided_chunk() {
        let mut d = DupAdj::new(ParentRecipe::default());
        d.on_new(id(50));
        d.on_new(id(51));
        d.on_duplicate(&id(50));
        d.on_new(id(52));
        assert_eq!(d.take_hints(false), vec![None; 3]);
    }

    /// The parent's sequence wins over the own stream, and the own stream forgets what is
    /// older than its window.
    #[test]
    fn own_stream_is_a_bounded_window() {
        let mut d = dupadj();
        for n in 0..OWN_WINDOW as u64 + 2 {
            let mut b = [0u8; 32];
            b[..8].copy_from_slice(&n.to_le_bytes());
            b[31] = 0xAA;
            d.on_new(ChunkId(b));
        }
        d.take_hints(false);
        assert_eq!(d.own.ids.len(), OWN_WINDOW);
        assert_eq!(d.own.position.len(), OWN_WINDOW);
        let mut first = [0u8; 32];
        first[31] = 0xAA;
        assert!(!d.own.position.contains_key(&ChunkId(first)));
        d.on_duplicate(&id(3));
        d.on_new(id(200));
        assert_eq!(d.take_hints(false), vec![Some(id(4))]);
    }
}
