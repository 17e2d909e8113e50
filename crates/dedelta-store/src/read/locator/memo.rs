//! The locator's last index answers, so that a chunk looked up again costs no index read.
//!
//! Why: a backup's base candidate is looked up several times in a row (its kind while
//! walking its delta chain, the metadata read ahead, the plan of the regions to read, the
//! read itself), and each lookup in the client index reads a bucket from its file (a `pread`
//! and a checksum): 42,503 `pread`s for one 62 MB SQLAlchemy version, 21,012 with this table.
//! The answers come from one index view, which does not change until the locator refreshes
//! it (and then forgets them all).

use crate::client::index::ChunkLocation;
use dedelta_core::ChunkId;

/// Slots of the table at most: 4,096 answers of 72 bytes, 288 KiB.
const SLOTS: usize = 4096;
/// Slots of the table at its first answer (18 KiB); it grows fourfold, up to [`SLOTS`], each
/// time it has taken as many answers as it has slots.
const FIRST_SLOTS: usize = 256;

/// A direct-mapped table of index answers (a slot per id's hash, a newer answer replaces an
/// older one): bounded, and a lookup is one comparison. It starts small and grows with the
/// answers it takes: a locator that asks the index a few times (the tree's reads of `ls`,
/// restore and dump) does not pay for writing 288 KiB (72 page faults of every such
/// command, issue 14), one that asks thousands of times (backup's bases) soon has them all.
#[derive(Default)]
pub(super) struct LocationMemo {
    slots: Vec<Option<(ChunkId, Option<ChunkLocation>)>>,
    /// Answers taken since the table last grew.
    taken: usize,
}

impl LocationMemo {
    /// The slot of `id` in a table of `slots` slots (a power of two).
    fn slot(id: &ChunkId, slots: usize) -> usize {
        // Chunk ids are hashes: their first bytes are spread evenly.
        let b = id.as_bytes();
        usize::from(u16::from_le_bytes([b[0], b[1]])) & (slots - 1)
    }

    /// The answer remembered for `id`: `Some(None)` if it was not indexed.
    pub fn get(&self, id: &ChunkId) -> Option<Option<ChunkLocation>> {
        if self.slots.is_empty() {
            return None;
        }
        match &self.slots[Self::slot(id, self.slots.len())] {
            Some((k, loc)) if k == id => Some(*loc),
            _ => None,
        }
    }

    /// Remembers the index's answer for `id`.
    pub fn put(&mut self, id: ChunkId, loc: Option<ChunkLocation>) {
        if self.slots.is_empty() || (self.taken >= self.slots.len() && self.slots.len() < SLOTS) {
            self.grow();
        }
        self.taken += 1;
        let at = Self::slot(&id, self.slots.len());
        self.slots[at] = Some((id, loc));
    }

    /// Makes the table larger (its first: [`FIRST_SLOTS`]), keeping its answers.
    fn grow(&mut self) {
        let len = (self.slots.len() * 4).clamp(FIRST_SLOTS, SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![None; len]);
        for (id, loc) in old.into_iter().flatten() {
            self.slots[Self::slot(&id, len)] = Some((id, loc));
        }
        self.taken = 0;
    }

    /// Forgets every answer (the index view changed).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::container::ContainerId;

    fn id(a: u8, b: u8) -> ChunkId {
        let mut x = [7u8; 32];
        x[0] = a;
        x[1] = b;
        ChunkId(x)
    }

    #[test]
    fn remembers_answers_until_cleared_and_never_confuses_ids() {
        let mut m = LocationMemo::default();
        assert!(m.slots.is_empty(), "no table before the first answer");
        let loc = ChunkLocation {
            container: ContainerId([3; 32]),
            entry: 5,
        };
        assert_eq!(m.get(&id(1, 0)), None);
        m.put(id(1, 0), Some(loc));
        m.put(id(2, 0), None);
        assert_eq!(m.get(&id(1, 0)), Some(Some(loc)));
        assert_eq!(m.get(&id(2, 0)), Some(None), "a miss is remembered");
        // Another id in the same slot replaces the answer; the old id is asked again.
        let same_slot = id(1, 1);
        assert_eq!(m.slots.len(), FIRST_SLOTS);
        assert_eq!(
            LocationMemo::slot(&same_slot, FIRST_SLOTS),
            LocationMemo::slot(&id(1, 0), FIRST_SLOTS)
        );
        assert_eq!(m.get(&same_slot), None);
        m.put(same_slot, None);
        assert_eq!(m.get(&id(1, 0)), None);
        m.clear();
        assert_eq!(m.get(&id(2, 0)), None);
    }

    /// The table grows with the answers it takes, keeping them, up to its bound.
    #[test]
    fn grows_with_its_answers_and_keeps_them() {
        let mut m = LocationMemo::default();
        let ids: Vec<ChunkId> = (0..SLOTS as u16)
            .map(|n| id(n as u8, (n >> 8) as u8))
            .collect();
        let loc = |n: usize| {
            Some(ChunkLocation {
                container: ContainerId([n as u8; 32]),
                entry: n as u32,
            })
        };
        for (n, i) in ids.iter().take(FIRST_SLOTS).enumerate() {
            m.put(*i, loc(n));
        }
        assert_eq!(m.slots.len(), FIRST_SLOTS, "no growth before it is full");
        m.put(ids[FIRST_SLOTS], loc(FIRST_SLOTS));
        assert_eq!(m.slots.len(), 4 * FIRST_SLOTS);
        for (n, i) in ids.iter().take(FIRST_SLOTS + 1).enumerate() {
            assert_eq!(m.get(i), Some(loc(n)), "answer {n} kept");
        }
        for _ in 0..4 {
            for (n, i) in ids.iter().enumerate() {
                m.put(*i, loc(n));
            }
        }
        assert_eq!(m.slots.len(), SLOTS, "bounded");
        for (n, i) in ids.iter().enumerate() {
            assert_eq!(m.get(i), Some(loc(n)));
        }
    }
}
