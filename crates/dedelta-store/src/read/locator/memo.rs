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

/// Slots of the table: 4,096 answers of 72 bytes, 288 KiB.
const SLOTS: usize = 4096;

/// A direct-mapped table of index answers (a slot per id's hash, a newer answer replaces an
/// older one): bounded, and a lookup is one comparison.
pub(super) struct LocationMemo {
    slots: Vec<Option<(ChunkId, Option<ChunkLocation>)>>,
}

impl Default for LocationMemo {
    fn default() -> Self {
        LocationMemo {
            slots: vec![None; SLOTS],
        }
    }
}

impl LocationMemo {
    fn slot(id: &ChunkId) -> usize {
        // Chunk ids are hashes: their first bytes are spread evenly.
        let b = id.as_bytes();
        usize::from(u16::from_le_bytes([b[0], b[1]])) % SLOTS
    }

    /// The answer remembered for `id`: `Some(None)` if it was not indexed.
    pub fn get(&self, id: &ChunkId) -> Option<Option<ChunkLocation>> {
        match &self.slots[Self::slot(id)] {
            Some((k, loc)) if k == id => Some(*loc),
            _ => None,
        }
    }

    /// Remembers the index's answer for `id`.
    pub fn put(&mut self, id: ChunkId, loc: Option<ChunkLocation>) {
        self.slots[Self::slot(&id)] = Some((id, loc));
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
        let same_slot = id(1, (SLOTS >> 8) as u8);
        assert_eq!(
            LocationMemo::slot(&same_slot),
            LocationMemo::slot(&id(1, 0))
        );
        assert_eq!(m.get(&same_slot), None);
        m.put(same_slot, None);
        assert_eq!(m.get(&id(1, 0)), None);
        m.clear();
        assert_eq!(m.get(&id(2, 0)), None);
    }
}
