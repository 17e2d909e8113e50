//! Runs on: restore's and dump's locating thread, inside its [`super::ChunkLocator`].
//!
//! Index lookups spared where a recipe runs on through a container: a backup writes a file's
//! new chunks into its container in recipe order, and the delta bases of consecutive chunks
//! are mostly consecutive in their own (older) containers, so the chunk a restore asks for
//! next is most often the entry after one it located a moment ago. Each index lookup reads
//! and checksums a bucket of a run file (a `pread` of 1-2 KB): 11 % of a dump's CPU.
//!
//! [`Neighbours`] keeps the last few positions located (container, its metadata, entry) and
//! finds a chunk at the entry after one of them, or at the same entry (a chunk repeated),
//! before the index is asked. What it returns is a copy of the chunk in one of the
//! snapshot's own containers: where the chunk has a single copy (nearly always), the copy the
//! index names; where it has several (a rewrite by Capping or the cache-aware filter), the
//! one beside its predecessor, which the restore has just read. Positions are kept only in
//! containers whose entries the index wholly holds ([`crate::client::index::Trust::Whole`]),
//! and [`super::ChunkLocator`] uses this only when the index has applied no damage records,
//! so a copy found here is never one that `check` took out of the index or that a rebuild
//! left out. Inversed copies (LoopDelta §4.5), which the index does not name while the full
//! copy is indexed, are not taken. A chain that fails through a copy found here is located
//! again from the index's copies ([`crate::read::PipelinedLocator::fetch`]).

use crate::client::index::ChunkLocation;
use crate::format::container::{ContainerId, ContainerMeta, EntryKind};
use dedelta_core::ChunkId;
use std::sync::Arc;

/// Positions kept: the recipe's own run, and the runs of its delta bases at each depth of
/// their chains (up to 8 deep), which interleave (and, where the locator plans reads ahead,
/// the planner's runs beside the fetches'). With 8, a dump of the 20th SQLAlchemy version
/// still asked the index for 43 % of its chunks and bases; a miss compares 64 ids, far less
/// than the bucket read it may spare.
const POSITIONS: usize = 32;

/// One position located: an entry of a container, with the container's metadata.
struct Position {
    container: ContainerId,
    meta: Arc<ContainerMeta>,
    entry: u32,
}

/// The last positions located, most recent first (see the module docs).
#[derive(Default)]
pub(super) struct Neighbours {
    recent: Vec<Position>,
}

impl Neighbours {
    /// A copy of `id` at, or just after, a recent position; the position moves to it.
    pub(super) fn find(&mut self, id: &ChunkId) -> Option<ChunkLocation> {
        let (i, entry) = self.recent.iter().enumerate().find_map(|(i, p)| {
            [p.entry.checked_add(1)?, p.entry]
                .into_iter()
                .find(|&e| takes(&p.meta, e, id))
                .map(|e| (i, e))
        })?;
        let mut p = self.recent.remove(i);
        p.entry = entry;
        let loc = ChunkLocation {
            container: p.container,
            entry,
        };
        self.recent.insert(0, p);
        Some(loc)
    }

    /// Remembers that entry `entry` of `container` (whose metadata is `meta`) was located.
    /// The caller has checked that the container may be kept (see the module docs).
    pub(super) fn note(&mut self, container: ContainerId, meta: &Arc<ContainerMeta>, entry: u32) {
        if let Some(i) = self
            .recent
            .iter()
            .position(|p| p.container == container && p.entry == entry)
        {
            let p = self.recent.remove(i);
            self.recent.insert(0, p);
            return;
        }
        if self.recent.len() == POSITIONS {
            self.recent.pop();
        }
        self.recent.insert(
            0,
            Position {
                container,
                meta: meta.clone(),
                entry,
            },
        );
    }

    /// Whether the last position located is entry `entry` of `container`.
    pub(super) fn is_latest(&self, container: &ContainerId, entry: u32) -> bool {
        self.recent
            .first()
            .is_some_and(|p| p.container == *container && p.entry == entry)
    }

    /// Forgets every position (the index view changed).
    pub(super) fn clear(&mut self) {
        self.recent.clear();
    }
}

/// Whether entry `entry` of `meta` is a copy of `id` that may be read for it.
fn takes(meta: &ContainerMeta, entry: u32, id: &ChunkId) -> bool {
    meta.entries
        .get(entry as usize)
        .is_some_and(|e| e.id == *id && !matches!(e.kind, EntryKind::Delta { inversed: true, .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::container::EntryMeta;

    fn meta(ids: &[u8], inversed: &[u8]) -> Arc<ContainerMeta> {
        Arc::new(ContainerMeta {
            regions: Vec::new(),
            entries: ids
                .iter()
                .map(|&b| EntryMeta {
                    id: ChunkId([b; 32]),
                    kind: if inversed.contains(&b) {
                        EntryKind::Delta {
                            base: ChunkId([0; 32]),
                            inversed: true,
                        }
                    } else {
                        EntryKind::Full
                    },
                    region: 0,
                    offset: 0,
                    stored_len: 0,
                    original_len: 0,
                    super_features: Vec::new(),
                })
                .collect(),
        })
    }

    /// The next entry and the same entry are found, the position follows the run, another
    /// run kept beside it is found too, the oldest of more than [`POSITIONS`] runs is
    /// forgotten, and an inversed copy is never taken.
    #[test]
    fn finds_the_entry_after_a_recent_position() {
        let (a, b) = (ContainerId([1; 32]), ContainerId([2; 32]));
        let ma = meta(&[10, 11, 12, 13], &[13]);
        let mb = meta(&[20, 21, 22], &[]);
        let mut n = Neighbours::default();
        assert_eq!(n.find(&ChunkId([11; 32])), None, "nothing noted yet");
        n.note(a, &ma, 0);
        n.note(b, &mb, 0);
        let at = |container, entry| Some(ChunkLocation { container, entry });
        assert_eq!(n.find(&ChunkId([11; 32])), at(a, 1));
        assert_eq!(n.find(&ChunkId([21; 32])), at(b, 1));
        assert_eq!(n.find(&ChunkId([12; 32])), at(a, 2));
        assert_eq!(n.find(&ChunkId([12; 32])), at(a, 2), "a chunk repeated");
        assert!(n.is_latest(&a, 2));
        assert_eq!(n.find(&ChunkId([13; 32])), None, "an inversed copy");
        assert_eq!(n.find(&ChunkId([10; 32])), None, "only forwards");
        for i in 0..POSITIONS as u8 {
            n.note(ContainerId([100 + i; 32]), &mb, 0);
        }
        let newest = ContainerId([100 + POSITIONS as u8 - 1; 32]);
        assert_eq!(n.find(&ChunkId([21; 32])), at(newest, 1));
        assert_eq!(n.find(&ChunkId([13; 32])), None);
        n.note(a, &ma, 2);
        n.clear();
        assert_eq!(n.find(&ChunkId([22; 32])), None);
    }
}
