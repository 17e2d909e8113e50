//! Finding a chunk: index lookup, container metadata, and its region read and decompressed
//! through an LRU region cache bounded in bytes, or for restore through a
//! [`RestoreCache`] (the expensive half of a read).

use super::{
    corrupt, lru, ReadStats, RestoreCache, RestoreCacheStats, META_CACHE_ENTRIES,
    RESTORE_SPARE_BUFFERS, SPARE_BUFFERS,
};
use crate::backend::wrap::metered::Purpose;
use crate::backend::Backend;
use crate::client::index::{ChunkLocation, IndexReader, Trust};
use crate::error::{Error, Result};
use crate::format::container::{ContainerId, ContainerMeta, EntryKind};
use crate::repository::damage::DamageSet;
use crate::repository::IndexedRepository;
use dedelta_core::compress::RegionDecompressor;
use dedelta_core::ChunkId;
use lru::LruCache;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

mod expected;
mod memo;
mod missing;
mod neighbour;
mod read_ahead;
mod regions;
mod restore_ahead;

use missing::{gone, Located};

/// A chunk found in its container, with its region decompressed in memory.
#[derive(Clone, Debug)]
pub struct LocatedChunk {
    /// The chunk's fingerprint.
    pub id: ChunkId,
    /// The container holding it.
    pub container: ContainerId,
    /// Length of the chunk's original bytes.
    pub original_len: usize,
    /// For a delta, its base.
    pub delta_base: Option<ChunkId>,
    region: Arc<Vec<u8>>,
    range: Range<usize>,
}

impl LocatedChunk {
    /// The stored bytes: the chunk itself, or its delta instructions.
    pub fn stored(&self) -> &[u8] {
        &self.region[self.range.clone()]
    }

    /// Where the stored bytes lie: their region's allocation and their offset in it. A
    /// region is never written once made, and a [`Weak`](std::sync::Weak) keeps its
    /// allocation from being reused for another, so while this is held an equal place
    /// means the same bytes (see [`Self::is_stored_at`]).
    pub(crate) fn stored_at(&self) -> (std::sync::Weak<Vec<u8>>, usize) {
        (Arc::downgrade(&self.region), self.range.start)
    }

    /// Whether the stored bytes are those at `at` (from [`Self::stored_at`]).
    pub(crate) fn is_stored_at(&self, at: &(std::sync::Weak<Vec<u8>>, usize)) -> bool {
        at.1 == self.range.start && std::ptr::eq(at.0.as_ptr(), Arc::as_ptr(&self.region))
    }

    pub(crate) fn corrupt(&self, reason: String) -> Error {
        corrupt(&self.container, &self.id, reason)
    }

    /// A chunk whose stored bytes are all of `stored` (tests of the decoding side).
    #[cfg(test)]
    pub(crate) fn for_test(
        id: ChunkId,
        original_len: usize,
        delta_base: Option<ChunkId>,
        stored: Vec<u8>,
    ) -> Self {
        let range = 0..stored.len();
        LocatedChunk {
            id,
            container: ContainerId([9; 32]),
            original_len,
            delta_base,
            region: Arc::new(stored),
            range,
        }
    }
}

/// Finds chunks and decompresses their regions.
pub struct ChunkLocator<'a> {
    repo: &'a IndexedRepository,
    /// Where regions are read from: the backend, tagged with what they are read for.
    data: Arc<dyn Backend>,
    index: IndexReader,
    /// The last answers of `index` ([`memo`]).
    indexed: memo::LocationMemo,
    metas: LruCache<ContainerId, Arc<ContainerMeta>>,
    regions: LruCache<(ContainerId, u32), Arc<Vec<u8>>>,
    /// Restore's cache, which replaces `regions` when set.
    restore_cache: Option<Box<dyn RestoreCache>>,
    decompressor: RegionDecompressor,
    /// Reused buffer for stored (compressed) region bytes.
    stored: Vec<u8>,
    /// Buffers of evicted regions, reused for the next ones.
    spare: Vec<Vec<u8>>,
    /// Evicted regions still shared with the decoding thread; reused once it lets go.
    retired: Vec<Arc<Vec<u8>>>,
    /// How many buffers `spare` and `retired` keep each.
    spare_cap: usize,
    region_bytes: usize,
    cache_bytes: usize,
    stats: ReadStats,
    /// Damage records, read the first time a chunk is not in the index (to say why).
    damage: Option<DamageSet>,
    /// The containers of the snapshot being read, when it names them.
    own: Option<OwnCopies>,
    /// Restore's regions read ahead, on an object store.
    ahead: Option<restore_ahead::RegionsAhead>,
    /// With `ahead`: the index's answers for the chunks planned ahead, which the fetches
    /// ask again (see [`restore_ahead::AHEAD_ANSWERS`]).
    ahead_answers: Option<crate::read::IdLru<Option<ChunkLocation>>>,
    /// Restore's last positions, where the next chunk is looked for before the index is
    /// asked ([`neighbour`]).
    neighbours: Option<neighbour::Neighbours>,
    /// Metadata in one suffix read, as restore reads it ([`Self::reading_metas_whole`]).
    metas_whole: bool,
    /// The chunks the read expects to fetch ([`Self::expect_chunks`]).
    expected: expected::ExpectedChunks,
}

/// The copies of its chunks a snapshot's own backup referenced ([`ChunkLocator::reading_own_copies`]).
///
/// The index names one copy of a chunk, the newest; after a later backup stored the chunk
/// again (Capping rewrites duplicates), the older snapshot would read that new copy, in a
/// container holding the later backup's data, and lose the locality its own backup had.
/// The snapshot names its containers, not where in them each chunk lies, so the copy is
/// found by searching their metadata, only when the index's copy is not in one of them: the
/// containers already in the metadata cache first (the restore has just read them: a
/// rewritten chunk's old neighbours), each searched once, its chunks remembered. Memory:
/// the entries of the searched containers, at most those of the snapshot's containers.
struct OwnCopies {
    containers: HashSet<ContainerId>,
    /// Own containers whose metadata has not been searched yet.
    unsearched: BTreeSet<ContainerId>,
    /// Chunks of the searched containers.
    found: HashMap<ChunkId, ChunkLocation, dedelta_core::BuildChunkIdHasher>,
}

/// Which copies of a chunk a lookup may read, with [`ChunkLocator::reading_own_copies`]
/// (without it, the index's copy always).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyRule {
    /// The index's copy only: the retry of a chain that failed through own copies, since
    /// index copies alone are what `check` verifies and never loop.
    Index,
    /// The chunk asked for: its own copy stored in full, or a delta whose base is read in
    /// full (see [`ChunkLocator::decodable`]).
    Own,
    /// A delta's base: only an own copy stored in full, else the index's copy.
    OwnFull,
}

impl<'a> ChunkLocator<'a> {
    /// A locator with `cache_bytes` of decompressed regions.
    pub fn new(repo: &'a IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(ChunkLocator {
            repo,
            data: repo.backend_for(Purpose::ChunkData),
            index: repo.index().reader()?,
            indexed: memo::LocationMemo::default(),
            metas: lru(META_CACHE_ENTRIES),
            regions: LruCache::unbounded(),
            restore_cache: None,
            decompressor: RegionDecompressor::default(),
            stored: Vec::new(),
            spare: Vec::new(),
            retired: Vec::new(),
            spare_cap: SPARE_BUFFERS,
            region_bytes: 0,
            cache_bytes,
            stats: ReadStats::default(),
            damage: None,
            own: None,
            ahead: None,
            ahead_answers: None,
            neighbours: None,
            metas_whole: false,
            expected: expected::ExpectedChunks::default(),
        })
    }

    /// A locator whose regions go through `cache` (restore, dump).
    pub fn with_restore_cache(
        repo: &'a IndexedRepository,
        cache: Box<dyn RestoreCache>,
    ) -> Result<Self> {
        let mut l = ChunkLocator::new(repo, 0)?;
        l.restore_cache = Some(cache);
        l.spare_cap = RESTORE_SPARE_BUFFERS;
        Ok(l)
    }

    /// Meters the regions this locator reads as read for `purpose` (by default
    /// [`Purpose::ChunkData`]; metadata is always [`Purpose::ContainerMeta`]).
    pub fn reading_for(mut self, purpose: Purpose) -> Self {
        self.data = self.repo.backend_for(purpose);
        self
    }

    /// Reads each container's metadata in one suffix read (two when it is larger), as restore
    /// does, rather than a size query and two ranged reads: for readers that use the whole
    /// section (backup's parent tree and delta bases), not `check`, which reports every
    /// damaged byte it reads.
    pub fn reading_metas_whole(mut self) -> Self {
        self.metas_whole = true;
        self
    }

    /// Reads each chunk from the copy that the backup of the snapshot being read referenced,
    /// `containers` being the snapshot's own containers
    /// ([`crate::format::snapshot::Snapshot::containers`]); empty: the index's copy, always.
    /// A copy that is gone (pruned) or unreadable is replaced by the index's.
    ///
    /// A restore or dump (a locator with a restore cache) then also finds chunks beside the
    /// ones it located just before, without asking the index ([`neighbour`]), unless the
    /// index has applied damage records.
    pub fn reading_own_copies(mut self, containers: &[ContainerId]) -> Self {
        self.own = (!containers.is_empty()).then(|| OwnCopies {
            containers: containers.iter().copied().collect(),
            unsearched: containers.iter().copied().collect(),
            found: HashMap::default(),
        });
        let undamaged = self.repo.index().damage_digest().is_ok_and(|d| d == 0);
        self.neighbours = (self.own.is_some() && self.restore_cache.is_some() && undamaged)
            .then(neighbour::Neighbours::default);
        self
    }

    /// Remembers where a chunk was located, for [`neighbour`]: kept if it lies in one of the
    /// snapshot's containers whose entries the index wholly holds.
    fn note_position(&mut self, container: ContainerId, meta: &Arc<ContainerMeta>, entry: u32) {
        let Some(n) = self.neighbours.as_mut() else {
            return;
        };
        if n.is_latest(&container, entry) {
            return;
        }
        let own = self
            .own
            .as_ref()
            .is_some_and(|o| o.containers.contains(&container));
        if own && self.index.trust(&container) == Trust::Whole {
            n.note(container, meta, entry);
        }
    }

    /// Where to read `id` by `rule`: the index's copy, or with [`Self::reading_own_copies`]
    /// the snapshot's own copy that `rule` allows when the index's lies outside its
    /// containers.
    fn location(&mut self, id: &ChunkId, rule: CopyRule) -> Result<Option<ChunkLocation>> {
        if rule != CopyRule::Index {
            if let Some(loc) = self.neighbours.as_mut().and_then(|n| n.find(id)) {
                self.stats.index_lookups_spared += 1;
                return Ok(Some(loc));
            }
        }
        let Some(loc) = self.index_copy(id)? else {
            return Ok(None);
        };
        if rule == CopyRule::Index {
            return Ok(Some(loc));
        }
        let Some(mut copies) = self.own.take() else {
            return Ok(Some(loc));
        };
        let chosen = self.choose(&mut copies, id, loc, rule);
        self.own = Some(copies);
        Ok(Some(chosen))
    }

    /// [`Self::location`] with the own copies taken out of `self`: `index_copy` when it lies
    /// in the snapshot's containers, else the own copy `rule` allows, else `index_copy`.
    fn choose(
        &mut self,
        copies: &mut OwnCopies,
        id: &ChunkId,
        index_copy: ChunkLocation,
        rule: CopyRule,
    ) -> ChunkLocation {
        if copies.containers.contains(&index_copy.container) {
            return index_copy;
        }
        let own = self.search_own(copies, id);
        own.filter(|o| match rule {
            CopyRule::Index => false,
            CopyRule::OwnFull => self.is_full(o),
            CopyRule::Own => self.decodable(copies, o),
        })
        .unwrap_or(index_copy)
    }

    /// Whether the own copy at `at` may be read as the chunk asked for: a copy stored in
    /// full, or a delta whose base is read from a copy stored in full, the base being
    /// located by [`CopyRule::OwnFull`] exactly as the read will locate it
    /// ([`crate::read::PipelinedLocator::fetch`]).
    ///
    /// Why not any delta: two copies written at different times may name each other as
    /// bases. For instance chunk A's own copy is a delta on B; B's container is damaged,
    /// `check` takes B out of the index, and the backup that heals it stores B again as a
    /// delta on A's (full) index copy. Resolving B's base A like a chunk asked for takes A's
    /// own copy again: a loop (the campaign's healed restores failed with "its delta chain
    /// is longer than 16 (or loops)" while bases were resolved that way, seeds 1000, 7002). Bases resolved by
    /// [`CopyRule::OwnFull`] never take an own delta, so a chain holds at most one own copy
    /// that is a delta, at its top; below it are index copies (which never loop) and own
    /// full copies (which end it). Capping's rewrites are stored in full; the cache-aware
    /// filter's (LoopDelta §4.4) are delta-compressed again against a base whose container
    /// the backup had just read, and without reading those the filter could not raise the
    /// restore's speed factor (it lowered it, 4.12 -> 3.60 on the Redis series).
    fn decodable(&mut self, copies: &mut OwnCopies, at: &ChunkLocation) -> bool {
        match self.kind_at(at) {
            Some(EntryKind::Full) => true,
            Some(EntryKind::Delta { base, .. }) => {
                let Ok(Some(index_copy)) = self.index_copy(&base) else {
                    return false;
                };
                let read = self.choose(copies, &base, index_copy, CopyRule::OwnFull);
                self.is_full(&read)
            }
            None => false,
        }
    }

    /// Whether the copy at `at` is stored in full.
    fn is_full(&mut self, at: &ChunkLocation) -> bool {
        matches!(self.kind_at(at), Some(EntryKind::Full))
    }

    /// How the copy at `at` is stored; `None` if its metadata cannot be read or lacks it.
    fn kind_at(&mut self, at: &ChunkLocation) -> Option<EntryKind> {
        let meta = self.meta(at.container).ok()?;
        meta.entries.get(at.entry as usize).map(|e| e.kind)
    }

    /// `id`'s copy in one of the snapshot's own containers, searching their metadata (cached
    /// first) until one lists it.
    fn search_own(&mut self, copies: &mut OwnCopies, id: &ChunkId) -> Option<ChunkLocation> {
        loop {
            if let Some(l) = copies.found.get(id) {
                return Some(*l);
            }
            let cached = self
                .metas
                .iter()
                .map(|(c, _)| *c)
                .find(|c| copies.unsearched.contains(c));
            let cid = cached.or_else(|| copies.unsearched.iter().next().copied())?;
            copies.unsearched.remove(&cid);
            // A container gone or unreadable has no copy to offer: the index's is read.
            let Ok(meta) = self.meta(cid) else {
                continue;
            };
            for (i, e) in meta.entries.iter().enumerate() {
                copies.found.entry(e.id).or_insert(ChunkLocation {
                    container: cid,
                    entry: i as u32,
                });
            }
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    /// The restore cache's counters, if it has one.
    pub fn restore_cache_stats(&self) -> Option<RestoreCacheStats> {
        self.restore_cache.as_ref().map(|c| c.stats())
    }

    /// The restore cache's assembly area, if it looks ahead.
    pub fn area_bytes(&self) -> Option<u64> {
        self.restore_cache.as_ref().and_then(|c| c.area_bytes())
    }

    /// Re-reads the index, to see chunks committed since this locator was made.
    pub fn refresh_index(&mut self) -> Result<()> {
        self.index = self.repo.index().reader()?;
        self.indexed.clear();
        if let Some(a) = self.ahead_answers.as_mut() {
            a.clear();
        }
        if let Some(n) = self.neighbours.as_mut() {
            n.clear();
        }
        Ok(())
    }

    /// Where the index puts `id` (remembered: see [`memo`]). Restore and dump look each
    /// chunk up once, far from its neighbours' lookups: they ask the index directly (the
    /// table only cost them a cache miss per chunk).
    fn index_copy(&mut self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        if let Some(answers) = self.ahead_answers.as_mut() {
            if let Some(known) = answers.get(id) {
                return Ok(*known);
            }
            self.stats.index_lookups += 1;
            let loc = self.index.get(id)?;
            answers.put(*id, loc);
            return Ok(loc);
        }
        if self.restore_cache.is_some() {
            self.stats.index_lookups += 1;
            return self.index.get(id);
        }
        if let Some(known) = self.indexed.get(id) {
            return Ok(known);
        }
        self.stats.index_lookups += 1;
        let loc = self.index.get(id)?;
        self.indexed.put(*id, loc);
        Ok(loc)
    }

    fn meta(&mut self, id: ContainerId) -> Result<Arc<ContainerMeta>> {
        if self.meta_at_hand(&id) {
            if let Some(m) = self.metas.get(&id) {
                return Ok(m.clone());
            }
        }
        // Restore, dump and backup's base reader read the metadata in one request; the
        // others (check among them, which reports every damaged byte it reads) read only the
        // bytes they check.
        let m = Arc::new(if self.reads_for_speed() {
            self.repo.read_container_meta_tail(&id)?
        } else {
            self.repo.read_container_meta(&id)?
        });
        self.stats.container_metas_read += 1;
        self.expected.add_bases_of(&m);
        self.metas.put(id, m.clone());
        Ok(m)
    }

    /// Whether the metadata of `id` is in the metadata cache, taking it in first when it is
    /// known without a request ([`IndexedRepository::known_meta`]) and this locator reads for
    /// a restore, a dump or a backup's bases. Check and the repairs read every byte they
    /// judge: metadata known from the open or the local cache would hide damage done to the
    /// container since (found by the campaign, seed 25482355075: a delta verified against a
    /// base whose container's metadata was damaged, so its record differed from a check
    /// that read it).
    pub(super) fn meta_at_hand(&mut self, id: &ContainerId) -> bool {
        if self.metas.contains(id) {
            return true;
        }
        if !self.reads_for_speed() {
            return false;
        }
        let Some(m) = self.repo.known_meta(id) else {
            return false;
        };
        self.expected.add_bases_of(&m);
        self.metas.put(*id, m);
        true
    }

    /// Whether this locator reads for a restore, a dump or a backup's bases (a restore cache,
    /// or [`Self::reading_metas_whole`]): it reads a container's metadata in one suffix read,
    /// and takes metadata known without a request.
    fn reads_for_speed(&self) -> bool {
        self.restore_cache.is_some() || self.metas_whole
    }

    /// Chunks `ids` will be fetched through the restore cache: each region is then
    /// decompressed only up to the last of them in it (or the chunk asked for), not whole
    /// (see [`expected`]). Not with regions read ahead (an object store), which are opened
    /// whole where they arrive.
    pub(crate) fn expect_chunks(&mut self, ids: impl IntoIterator<Item = ChunkId>) {
        if self.restore_cache.is_some() {
            self.expected.expect(ids);
        }
    }

    /// Where chunk `id` lies (its copy by `rule`) and its delta base, from the index and
    /// its container's metadata, without reading its region; `None` if either cannot say.
    pub(crate) fn place(
        &mut self,
        id: &ChunkId,
        rule: CopyRule,
    ) -> Option<(ContainerId, u32, Option<ChunkId>)> {
        let loc = self.location(id, rule).ok()??;
        self.place_at(id, &loc)
    }

    /// [`Self::place`] for the copy of `id` at `loc`, already looked up.
    pub(super) fn place_at(
        &mut self,
        id: &ChunkId,
        loc: &ChunkLocation,
    ) -> Option<(ContainerId, u32, Option<ChunkId>)> {
        let meta = self.meta(loc.container).ok()?;
        let e = meta.entries.get(loc.entry as usize)?;
        let base = match e.kind {
            EntryKind::Full => None,
            EntryKind::Delta { base, .. } => Some(base),
        };
        let region = e.region;
        if e.id != *id {
            return None;
        }
        self.note_position(loc.container, &meta, loc.entry);
        Some((loc.container, region, base))
    }

    /// The container of the copy of `id` the index names, `None` if it is not indexed.
    pub fn container_of(&mut self, id: &ChunkId) -> Result<Option<ContainerId>> {
        Ok(self.index_copy(id)?.map(|l| l.container))
    }

    /// How `id` is stored, from its container's metadata, without reading its region;
    /// `None` if it is not indexed.
    pub fn kind_of(&mut self, id: &ChunkId) -> Result<Option<EntryKind>> {
        let Some(loc) = self.location(id, CopyRule::Own)? else {
            return Ok(None);
        };
        let meta = self.meta(loc.container)?;
        Ok(meta.entries.get(loc.entry as usize).map(|e| e.kind))
    }

    /// [`Self::kind_of`] if it is known without a request (the chunk's container metadata
    /// already in memory, see [`Self::meta_at_hand`]); `None` otherwise, or if not indexed.
    pub fn kind_at_hand(&mut self, id: &ChunkId) -> Option<EntryKind> {
        let loc = self.location(id, CopyRule::Own).ok().flatten()?;
        if !self.meta_at_hand(&loc.container) {
            return None;
        }
        let meta = self.metas.get(&loc.container)?;
        meta.entries.get(loc.entry as usize).map(|e| e.kind)
    }

    /// [`Self::locate`] in the copy the index names, even when reading own copies.
    pub fn locate_index_copy(&mut self, id: &ChunkId) -> Result<LocatedChunk> {
        self.locate_by(id, CopyRule::Index)
    }

    /// Whether this locator reads snapshots' own copies ([`Self::reading_own_copies`]).
    pub fn reads_own_copies(&self) -> bool {
        self.own.is_some()
    }

    /// Finds chunk `id` and decompresses its region.
    ///
    /// Readers take no lock, so a prune may move the chunk to a new container and delete the
    /// old one between this locator's index view and the read. Prune indexes the copies before
    /// it deletes anything, so when the container is gone the locator refreshes its index
    /// view and tries once more before giving up.
    ///
    /// # Errors
    /// [`Error::ChunkMissing`] if it is not indexed; [`Error::ContainerGone`] if its container
    /// no longer exists even in a fresh index view (removed by a concurrent prune, or lost);
    /// [`Error::CorruptChunk`] naming the container and chunk if its metadata or region is
    /// damaged.
    pub fn locate(&mut self, id: &ChunkId) -> Result<LocatedChunk> {
        self.locate_by(id, CopyRule::Own)
    }

    /// [`Self::locate`] in the copy `rule` allows (see [`CopyRule`]).
    pub(crate) fn locate_by(&mut self, id: &ChunkId, rule: CopyRule) -> Result<LocatedChunk> {
        if self.own.is_some() && rule != CopyRule::Index {
            // If the snapshot's own copy fails, the index's may still be sound.
            if let Ok(c) = self.locate_once(id, rule) {
                return Ok(c);
            }
        }
        match self.locate_once(id, CopyRule::Index) {
            Err(Located::Gone(first)) => {
                // Caught up with the repository first: another client's prune may have moved
                // the chunk, and only this client's own commands update its index.
                self.repo.sync_index()?;
                self.refresh_index()?;
                match self.locate_once(id, CopyRule::Index) {
                    Ok(c) => Ok(c),
                    Err(Located::Gone(_)) => Err(gone(&first, id)),
                    // No longer indexed: the chunk itself was pruned since our first view.
                    Err(Located::Failed(Error::ChunkMissing { .. })) => Err(gone(&first, id)),
                    Err(Located::Failed(e)) => Err(e),
                }
            }
            Err(Located::Failed(Error::ChunkMissing { chunk, .. })) => Err(self.missing(id, chunk)),
            Err(Located::Failed(e)) => Err(e),
            Ok(c) => Ok(c),
        }
    }

    /// One attempt to locate `id`, in the copy `rule` allows.
    fn locate_once(
        &mut self,
        id: &ChunkId,
        rule: CopyRule,
    ) -> std::result::Result<LocatedChunk, Located> {
        let loc = self
            .location(id, rule)?
            .ok_or_else(|| Error::chunk_missing(id.to_hex()))?;
        let bad = |e: Error| match e {
            Error::ObjectMissing { .. } => Located::Gone(loc.container),
            e => Located::Failed(corrupt(&loc.container, id, e.to_string())),
        };
        let meta = self.meta(loc.container).map_err(bad)?;
        let entry = meta.entries.get(loc.entry as usize).ok_or_else(|| {
            corrupt(
                &loc.container,
                id,
                format!("index names entry {} which does not exist", loc.entry),
            )
        })?;
        if entry.id != *id {
            return Err(corrupt(
                &loc.container,
                id,
                "index points at another chunk's entry".into(),
            )
            .into());
        }
        let range = entry.offset as usize..(entry.offset as usize + entry.stored_len as usize);
        let region = self
            .region(loc.container, &meta, entry.region, range.end)
            .map_err(bad)?;
        if range.end > region.len() {
            return Err(corrupt(&loc.container, id, "entry lies outside its region".into()).into());
        }
        let (original_len, kind) = (entry.original_len as usize, entry.kind);
        self.note_position(loc.container, &meta, loc.entry);
        Ok(LocatedChunk {
            id: *id,
            container: loc.container,
            original_len,
            delta_base: match kind {
                EntryKind::Full => None,
                EntryKind::Delta { base, .. } => Some(base),
            },
            region,
            range,
        })
    }
}
