//! Reading chunks back, in two halves; runs on the caller's thread, or on two threads for
//! restore and dump.
//!
//! - [`ChunkLocator`]: index lookup, container metadata, and the stored bytes of the chunk's
//!   region, read and decompressed through an LRU region cache bounded in bytes, or for
//!   restore and dump through a [`RestoreCache`] (the expensive part).
//! - [`ChunkDecoder`]: rebuilds a delta against its base (bases rebuilt from deltas are kept
//!   in an LRU cache; one-thread readers keep bases stored in full there too) and checks
//!   every chunk's fingerprint.
//!
//! [`ChunkReader`] runs both in turn on one thread (check, backup's base reads, tree streams).
//! Restore and dump run them on two threads through [`PipelinedLocator`] and
//! [`PipelinedDecoder`]: one thread decompresses regions while the other decodes deltas,
//! hashes and writes; the decoding thread takes chunks in batches and shares their hashing
//! with a helper thread. On an object store the locating thread also reads regions ahead
//! of its fetches, several requests in flight ([`PipelinedLocator::announce`],
//! `restore_plan`).
//!
//! A [`RestoreCache`] holds restore's regions and counts its container reads, the papers'
//! restore speed factor: [`ContainerLru`] (an LRU bounded in containers) or
//! [`ForwardAssembly`] (Lillibridge's forward assembly over an area of the recipe).

mod decoder;
mod helper;
mod locator;
mod pipelined;
mod reader;
mod restore_cache;
mod restore_plan;
mod stream;
mod subtree;
mod tree;
mod verified;

pub use decoder::ChunkDecoder;
pub use locator::{ChunkLocator, LocatedChunk};
pub(crate) use pipelined::SendBatch;
pub use pipelined::{
    full_bases_in_place, receive_batch, FetchedChunk, PipelinedDecoder, PipelinedLocator,
    READ_AHEAD_BYTES,
};
pub use reader::{verify_chunk, ChunkReader};
pub use restore_cache::{
    speed_factor, ContainerLru, ForwardAssembly, RestoreCache, RestoreCacheChoice,
    RestoreCacheStats, DEFAULT_ASSEMBLY_BYTES, PAPER_CACHE_CONTAINERS,
};
pub use stream::ChunkStreamReader;
pub use subtree::Subtree;
pub use tree::{
    walk_tree, walk_tree_chunks, walk_tree_measured, walk_tree_reading, walk_tree_restoring,
};

use crate::error::Error;
use crate::format::container::ContainerId;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::num::NonZeroUsize;

/// Container metadata sections kept in memory.
pub(crate) const META_CACHE_ENTRIES: usize = 256;
/// Delta bases kept in memory by one-thread readers (check, backup's base reads), which meet
/// the same bases again across containers.
pub(crate) const BASE_CACHE_ENTRIES: usize = 4096;
/// Delta bases kept in memory by restore and dump. A restore meets most bases once (the last
/// of 20 SQLAlchemy versions, chains up to 4 deep: 268 hits for 7,571 bases rebuilt at 512
/// entries, 311 at 4,096), so a large cache mostly costs first-touch page faults: at 4,096
/// entries (about 40 MB) that dump took 26,900 page faults and 181 ms of CPU, at 512 14,300
/// and 144 ms.
/// With a large restore cache only bases rebuilt from a delta are kept: a base stored in full
/// is used where it lies in its region, located again by the locating half each time a delta
/// needs it (see [`full_bases_in_place`]).
pub(crate) const RESTORE_BASE_CACHE_ENTRIES: usize = 512;
/// Decompression buffers kept for reuse.
pub(crate) const SPARE_BUFFERS: usize = 16;
/// Decompression buffers kept for reuse behind a restore cache, which lets go of many regions
/// at once: a whole container's (the LRU's bound in containers; a 4 MiB container of text
/// held 40 to 60 compressed regions of 256 KiB), or an assembly area's.
pub(crate) const RESTORE_SPARE_BUFFERS: usize = 64;

pub(crate) fn lru<K: std::hash::Hash + Eq, V>(entries: usize) -> LruCache<K, V> {
    LruCache::new(NonZeroUsize::new(entries.max(1)).expect("at least 1"))
}

/// An LRU keyed by chunk id, hashed by the id's first bytes ([`dedelta_core::ChunkIdHasher`]).
pub(crate) type IdLru<V> = LruCache<ChunkId, V, dedelta_core::BuildChunkIdHasher>;

pub(crate) fn id_lru<V>(entries: usize) -> IdLru<V> {
    LruCache::with_hasher(
        NonZeroUsize::new(entries.max(1)).expect("at least 1"),
        Default::default(),
    )
}

/// Counters of a read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadStats {
    /// Container metadata sections read.
    pub container_metas_read: u64,
    /// Regions read from the backend.
    pub regions_read: u64,
    /// Stored bytes read from the backend.
    pub bytes_read: u64,
    /// Bytes the regions read were decompressed to (all of each, or as far as a restore
    /// needs: `regions_decoded_again`).
    pub bytes_decompressed: u64,
    /// Region cache hits.
    pub region_cache_hits: u64,
    /// Delta chunks decoded.
    pub deltas_decoded: u64,
    /// Delta bases served from the decoder's base cache.
    pub base_cache_hits: u64,
    /// Delta bases read from their regions and put into the base cache. Restore and dump
    /// cache only bases rebuilt from a delta; their bases stored in full are
    /// `bases_in_place`.
    pub base_cache_misses: u64,
    /// Delta bases stored in full used where they lie in their region, not cached (restore
    /// and dump): one count each time a delta's chain brings one.
    pub bases_in_place: u64,
    /// Chunks looked up in the index.
    pub index_lookups: u64,
    /// Chunks found beside one located just before, without asking the index (restore and
    /// dump; see `locator/neighbour.rs`).
    pub index_lookups_spared: u64,
    /// Regions decompressed only partway (dump: as far as the chunks it expects) and
    /// decompressed again, whole, for a chunk past that point.
    pub regions_decoded_again: u64,
    /// Chunks met again in the same region in memory, whose fingerprint had matched there
    /// already, so they were not hashed again (restore and dump): chunks stored in full, and
    /// deltas rebuilt from a base known to hold its true content (`read/verified.rs`).
    pub chunks_verified_before: u64,
}

impl ReadStats {
    /// The sum of two sets of counters (a locator's and a decoder's).
    pub fn merged(self, o: ReadStats) -> ReadStats {
        ReadStats {
            container_metas_read: self.container_metas_read + o.container_metas_read,
            regions_read: self.regions_read + o.regions_read,
            bytes_read: self.bytes_read + o.bytes_read,
            bytes_decompressed: self.bytes_decompressed + o.bytes_decompressed,
            region_cache_hits: self.region_cache_hits + o.region_cache_hits,
            deltas_decoded: self.deltas_decoded + o.deltas_decoded,
            base_cache_hits: self.base_cache_hits + o.base_cache_hits,
            base_cache_misses: self.base_cache_misses + o.base_cache_misses,
            bases_in_place: self.bases_in_place + o.bases_in_place,
            index_lookups: self.index_lookups + o.index_lookups,
            index_lookups_spared: self.index_lookups_spared + o.index_lookups_spared,
            regions_decoded_again: self.regions_decoded_again + o.regions_decoded_again,
            chunks_verified_before: self.chunks_verified_before + o.chunks_verified_before,
        }
    }
}

pub(crate) fn corrupt(container: &ContainerId, chunk: &ChunkId, reason: String) -> Error {
    Error::CorruptChunk {
        container: container.to_hex(),
        chunk: chunk.to_hex(),
        reason,
    }
}
