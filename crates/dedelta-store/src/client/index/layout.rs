//! The index's layout mark: what the delta depths of the indexed chunks depend on, for the
//! local base cache's recorded depths (`crate::client::local_cache`).

use super::manifest::Manifest;

/// What the delta depths of the indexed chunks depend on: which copy of each chunk the index
/// names. Taken at one time and compared later ([`super::ChunkIndex::layout_kept_since`]): equal when
/// the index only took in new containers since, so that every chunk then indexed is still
/// indexed at the same copy, whose delta chain (a chain of copies) is the same. A prune, a
/// rebuild, damage recorded, a container forgotten or a newer copy of an indexed chunk (a
/// rewrite, a catch-up meeting two copies) all change it: the epoch, and the slots' flags
/// or the superseded entries. The local base cache keeps the
/// depths of its chunks under such a mark (`crate::client::local_cache`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayoutMark {
    /// The index manifest's layout epoch (drawn afresh at every change that is not only an
    /// addition).
    pub epoch: u64,
    /// Containers (slots) the index had.
    pub slots: u64,
    /// XXH3 of those slots: container, range and flags.
    pub slots_hash: u64,
    /// XXH3 of the superseded entry numbers.
    pub superseded_hash: u64,
}

impl Manifest {
    /// The index's [`LayoutMark`] now.
    pub fn layout_mark(&self) -> LayoutMark {
        self.mark_over(self.slots.len())
    }

    /// Whether every chunk indexed when `mark` was taken is still indexed at the same copy:
    /// its containers are still the first ones, unchanged (only containers were added since),
    /// and no entry was superseded since.
    pub fn layout_kept_since(&self, mark: &LayoutMark) -> bool {
        usize::try_from(mark.slots)
            .is_ok_and(|n| n <= self.slots.len() && self.mark_over(n) == *mark)
    }

    /// The mark over the first `n` slots.
    fn mark_over(&self, n: usize) -> LayoutMark {
        let mut slots = xxhash_rust::xxh3::Xxh3::new();
        for s in &self.slots[..n] {
            slots.update(&s.id.0);
            slots.update(&s.first.to_le_bytes());
            slots.update(&s.entries.to_le_bytes());
            slots.update(&[s.flags()]);
        }
        let mut superseded = xxhash_rust::xxh3::Xxh3::new();
        for e in &self.superseded {
            superseded.update(&e.to_le_bytes());
        }
        LayoutMark {
            epoch: self.epoch,
            slots: n as u64,
            slots_hash: slots.digest(),
            superseded_hash: superseded.digest(),
        }
    }
}
