//! Runs on: dump's locating thread, inside its [`super::ChunkLocator`].
//!
//! Regions decompressed only as far as the chunks a read expects: a dump announces its
//! file's recipe ([`crate::read::PipelinedLocator::announce`]), and a region is then
//! decompressed up to the end of the last expected chunk in it (or of a delta base that the
//! metadata read so far names for one), not whole. A chunk met later past that point has its
//! region decompressed again, whole ([`super::ChunkLocator`]'s `region`).
//!
//! Why: a dump of the last of 10 prettier versions (8.4 MB) read 41 regions of 512 KiB, 21 MB
//! decompressed into fresh pages, on the thread that bounds the dump's time.

use super::lru;
use crate::format::container::{ContainerId, ContainerMeta, EntryKind};
use crate::read::META_CACHE_ENTRIES;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::collections::HashSet;

/// The most chunks [`ExpectedChunks`] keeps (about 12 MiB): a file of up to a few GB. A larger
/// one has its regions decompressed whole, as without an announcement.
const EXPECTED_MAX: usize = 256 << 10;

/// A set of chunk ids hashed by their first bytes ([`dedelta_core::ChunkIdHasher`]).
type IdSet = HashSet<ChunkId, dedelta_core::BuildChunkIdHasher>;

/// What a read expects to fetch.
enum Expected {
    /// Nothing announced: regions are decompressed whole.
    Nothing,
    /// The chunks announced, with the delta bases their containers' metadata names.
    Chunks(IdSet),
    /// More than [`EXPECTED_MAX`] announced: regions are decompressed whole.
    TooMany,
}

/// The chunks a read expects, and where they end in each region of the containers read.
pub(super) struct ExpectedChunks {
    expected: Expected,
    /// Per container, where the expected chunks of each region end (one pass over its
    /// entries, on its first region read).
    ends: LruCache<ContainerId, Vec<usize>>,
}

impl Default for ExpectedChunks {
    fn default() -> Self {
        ExpectedChunks {
            expected: Expected::Nothing,
            ends: lru(META_CACHE_ENTRIES),
        }
    }
}

impl ExpectedChunks {
    /// Chunks `ids` will be fetched (see the module doc).
    pub(super) fn expect(&mut self, ids: impl IntoIterator<Item = ChunkId>) {
        if let Expected::Nothing = self.expected {
            self.expected = Expected::Chunks(IdSet::default());
        }
        let Expected::Chunks(set) = &mut self.expected else {
            return;
        };
        for id in ids {
            if set.len() >= EXPECTED_MAX {
                self.expected = Expected::TooMany;
                return;
            }
            set.insert(id);
        }
    }

    /// Adds the delta bases of the expected chunks in `meta` (they are fetched with them).
    pub(super) fn add_bases_of(&mut self, meta: &ContainerMeta) {
        let Expected::Chunks(set) = &mut self.expected else {
            return;
        };
        for e in &meta.entries {
            if let EntryKind::Delta { base, .. } = e.kind {
                if set.len() < EXPECTED_MAX && set.contains(&e.id) {
                    set.insert(base);
                }
            }
        }
    }

    /// How far to decompress region `index` of container `cid` (metadata `meta`) for a chunk
    /// whose stored bytes end at `need`: to the end of the last expected chunk in it, or
    /// `usize::MAX` (whole) when nothing is expected or the region is mostly needed anyway.
    pub(super) fn upto(
        &mut self,
        cid: ContainerId,
        meta: &ContainerMeta,
        index: u32,
        need: usize,
    ) -> usize {
        let Expected::Chunks(set) = &self.expected else {
            return usize::MAX;
        };
        let ends = self.ends.get_or_insert(cid, || {
            let mut ends = vec![0usize; meta.regions.len()];
            for e in &meta.entries {
                if let Some(end) = ends.get_mut(e.region as usize) {
                    if set.contains(&e.id) {
                        *end = (*end).max(e.offset as usize + e.stored_len as usize);
                    }
                }
            }
            ends
        });
        let end = ends.get(index as usize).copied().unwrap_or(0).max(need);
        let raw = meta
            .regions
            .get(index as usize)
            .map_or(0, |r| r.raw_len as usize);
        // The last eighth decoded too rather than risk decoding the region twice.
        if end >= raw - raw / 8 {
            usize::MAX
        } else {
            end
        }
    }
}
