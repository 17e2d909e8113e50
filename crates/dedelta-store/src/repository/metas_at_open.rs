//! Container metadata the open's catch-up or rebuild took in, kept for the command's own
//! reads. An index file holds its containers' metadata sections verbatim
//! ([`crate::format::index_file`]), and a client with an empty cache reads every index file
//! before its first chunk; its restore then read the same metadata again from the containers
//! (on the Garage benchmark: a suffix read and a range read per container, two round trips
//! of the tree's read-ahead and two more on the restore's own thread). A container's
//! metadata never changes (a container is written once and named by its contents), so what
//! the open decoded answers those reads. Bounded: past [`METAS_AT_OPEN_BYTES`] the rest are
//! read from their containers, as before.
//!
//! Here too the repository's side of the local metadata cache ([`crate::client::meta_cache`]),
//! which keeps such metadata between commands: [`IndexedRepository::known_meta`] answers
//! from either. Only the readers of a restore, a dump and a backup's bases ask it (see
//! `ChunkLocator::meta_at_hand`).

use super::{IndexedRepository, Repository};
use crate::client::meta_cache::MetaCache;
use crate::format::container::{ContainerId, ContainerMeta, EntryMeta, RegionMeta};
use crate::format::index_file::IndexedContainer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most metadata kept, by [`approx_bytes`]: a few hundred default containers' worth.
pub const METAS_AT_OPEN_BYTES: usize = 32 << 20;

/// Metadata kept from the open (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct MetasAtOpen {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    metas: HashMap<ContainerId, Arc<ContainerMeta>>,
    bytes: usize,
}

impl MetasAtOpen {
    /// Keeps a copy of `meta`, the metadata of container `id`, while within the budget.
    pub(crate) fn keep(&self, id: ContainerId, meta: &ContainerMeta) {
        let size = approx_bytes(meta);
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.metas.contains_key(&id) || kept.bytes + size > METAS_AT_OPEN_BYTES {
            return;
        }
        kept.bytes += size;
        kept.metas.insert(id, Arc::new(meta.clone()));
    }

    /// The metadata of container `id`, if kept.
    pub(crate) fn get(&self, id: &ContainerId) -> Option<Arc<ContainerMeta>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.metas.get(id).cloned()
    }
}

impl Repository {
    /// The local container metadata cache ([`crate::client::meta_cache`]): where reads are
    /// round trips, index files are written and the repository has a cache directory.
    pub fn meta_cache(&self) -> Option<MetaCache> {
        let dir = self.cache_dir.as_deref()?;
        (self.index_files && self.reads_are_round_trips()).then(|| MetaCache::new(dir))
    }
}

impl IndexedRepository {
    /// The metadata of container `id` if known without a request: the open's catch-up or
    /// rebuild took it in (from an index file, or read from the container), or the local
    /// metadata cache holds it ([`Repository::meta_cache`]).
    pub(crate) fn known_meta(&self, id: &ContainerId) -> Option<Arc<ContainerMeta>> {
        self.metas_at_open
            .get(id)
            .or_else(|| Some(Arc::new(self.meta_cache()?.get(id)?)))
    }

    /// Keeps `record`, a container's footer and metadata section just read and checked, in
    /// the local metadata cache if there is one.
    pub(crate) fn remember_meta(&self, record: &IndexedContainer) {
        if let Some(cache) = self.meta_cache() {
            cache.put_read(record);
        }
    }
}

/// The memory `meta` takes, roughly: its tables and the entries' super-features.
pub(crate) fn approx_bytes(meta: &ContainerMeta) -> usize {
    let features: usize = meta.entries.iter().map(|e| e.super_features.len()).sum();
    meta.regions.len() * std::mem::size_of::<RegionMeta>()
        + meta.entries.len() * std::mem::size_of::<EntryMeta>()
        + features * std::mem::size_of::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::container::EntryKind;
    use dedelta_core::ChunkId;

    fn meta(entries: usize) -> ContainerMeta {
        ContainerMeta {
            regions: Vec::new(),
            entries: (0..entries)
                .map(|i| EntryMeta {
                    id: ChunkId([i as u8; 32]),
                    kind: EntryKind::Full,
                    region: 0,
                    offset: 0,
                    stored_len: 1,
                    original_len: 1,
                    super_features: vec![1, 2, 3],
                })
                .collect(),
        }
    }

    #[test]
    fn kept_metadata_is_answered_within_the_budget_only() {
        let kept = MetasAtOpen::default();
        let small = meta(3);
        kept.keep(ContainerId([1; 32]), &small);
        assert_eq!(kept.get(&ContainerId([1; 32])).as_deref(), Some(&small));
        assert!(kept.get(&ContainerId([2; 32])).is_none());
        // One that would pass the budget is not kept; the ones before stay.
        let per_entry = approx_bytes(&meta(1));
        let huge = meta(METAS_AT_OPEN_BYTES / per_entry + 1);
        kept.keep(ContainerId([3; 32]), &huge);
        assert!(kept.get(&ContainerId([3; 32])).is_none());
        assert!(kept.get(&ContainerId([1; 32])).is_some());
    }
}
