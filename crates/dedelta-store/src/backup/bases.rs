//! Runs on: the dedup thread.
//!
//! Delta bases: the bytes of the full chunk a delta is encoded against. They come from memory
//! ([`super::base_cache`]: an LRU bounded in bytes, filled with this backup's new full chunks
//! and the bases it read), else from the local base cache of the last backups ([`crate::client::local_cache`]),
//! else they are read back (and verified) from the repository, which is the stage's main cost.
//!
//! Delta depth: with one-level deltas (Shilane §2.1, `max_depth` 1) a base is always a chunk
//! stored in full, and a candidate that is itself a delta is replaced by its own base, which
//! is similar too. With bounded chains (`max_depth` d) a candidate of depth below d is the
//! base itself, and a deeper one is replaced by the first chunk down its chain that is
//! shallow enough. A chunk's depth is found by walking the index down its chain (a full chunk
//! has depth 0), or kept beside its bytes in memory, or recorded in the local base cache by an
//! earlier backup while the index still names the same copies (see [`LayoutMark`]; the walk
//! was a sixth of the dedup thread's time on a Redis dump's backup). A candidate whose data cannot be read
//! (damage `check` has not recorded yet) is skipped, never used, and reported when the backup
//! ends.

use super::base_cache::BaseCache;
pub use super::cache_save::LocalCacheSave;
use super::prefetch::PrefetchedBases;
use crate::client::index::LayoutMark;
use crate::client::local_cache::{self, LocalBaseCache};
use crate::error::{Error, Result};
use crate::format::config::MAX_DELTA_DEPTH;
use crate::format::container::EntryKind;
use crate::read::ChunkReader;
use crate::repository::IndexedRepository;
use crate::request_threads::RequestThreads;
use bytes::Bytes;
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// Where bases came from, for the backup's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BaseCounts {
    /// Served from memory.
    pub memory: u64,
    /// Served from the local base cache file.
    pub local: u64,
    /// Read back from the repository (or not found).
    pub read_back: u64,
    /// Served from LoopDelta's potential base chunk cache ([`super::prefetch`]).
    pub prefetched: u64,
    /// Candidates dropped because, taking bases only from caches, none held them.
    pub not_cached: u64,
    /// Ranged requests for bases' regions made in the background, ahead of the stream
    /// ([`BaseFetcher::read_ahead`]; where reads are round trips).
    pub requests_ahead: u64,
    /// Duplicates the backup met that the local base cache held, and the bases of those
    /// that are deltas: kept there ahead of its other old entries (see
    /// [`BaseFetcher::note_duplicate`]).
    pub local_current: u64,
}

/// Delta links down a chain, nearest first: each chunk with the base it is a delta of.
type DeltaLinks = Vec<(ChunkId, ChunkId)>;

/// A delta base: the chunk, its bytes, and its own delta depth (0 if stored in full).
pub struct Base {
    /// The base chunk.
    pub id: ChunkId,
    /// Its bytes.
    pub bytes: Bytes,
    /// Its depth: a delta against it has depth `depth + 1`.
    pub depth: u8,
}

/// A reader for a backup's delta bases (and, before, its parent tree): metadata read whole,
/// regions cached as [`base_region_cache_bytes`] says.
pub(super) fn base_reader(repo: &IndexedRepository) -> Result<ChunkReader<'_>> {
    Ok(ChunkReader::new(repo, base_region_cache_bytes(repo))?.reading_metas_whole())
}

/// The region cache of the base reader: 32 MiB, or where reads are round trips 96 MiB, which
/// hold the regions a read takes ahead (up to 4 MiB stored, several times that decompressed,
/// see the locator's `AHEAD_SPAN`) until the next rounds use them.
fn base_region_cache_bytes(repo: &IndexedRepository) -> usize {
    if repo.reads_are_round_trips() {
        96 << 20
    } else {
        32 << 20
    }
}

/// Fetches delta bases for one backup.
pub struct BaseFetcher<'a> {
    cache: BaseCache,
    /// The deepest a base may be: the backup's `max_depth - 1`.
    max_base_depth: u8,
    reader: ChunkReader<'a>,
    /// The local base cache read at the start, and where the next one is written.
    local: Option<LocalBaseCache>,
    local_path: Option<PathBuf>,
    budget: usize,
    /// Where the bases came from.
    pub counts: BaseCounts,
    /// Candidates that could not be read.
    unreadable: Vec<String>,
    /// Threads that read bases ahead, [`IndexedRepository::reads_in_flight`] requests at once
    /// with this thread's (see [`Self::prefetch`]).
    threads: RequestThreads,
    /// Where [`Self::prefetch`] found the candidates of the round it read ahead for, taken by
    /// [`Self::fetch`].
    planned: HashMap<ChunkId, Option<Plan>>,
    /// LoopDelta: bases only from this cache and from memory, never read back.
    prefetched: Option<Arc<PrefetchedBases>>,
    /// The parent's tree chunks, when the backup had them without reading them (the local
    /// tree cache): the new tree's chunks are deltas of them.
    held: HashMap<ChunkId, Bytes>,
    /// Duplicates the backup met that the local base cache holds: chunks of the new
    /// snapshot, which its save keeps before other old entries (at most its entries).
    current: HashSet<ChunkId, dedelta_core::fingerprint::BuildChunkIdHasher>,
    /// Whether reads are round trips (an object store).
    round_trips: bool,
    /// The repository, whose index says whether the local base cache's depths hold.
    repo: &'a IndexedRepository,
    /// The index's layout when the local base cache was opened, if its depths are used and
    /// this backup's are recorded (see [`Self::use_local_cache`]).
    start_mark: Option<LayoutMark>,
}

/// Whether the bytes of `id` are at hand without a read: in memory (`cache`, or the parent's
/// tree `held`) or in the local base cache.
fn at_hand(
    cache: &BaseCache,
    held: &HashMap<ChunkId, Bytes>,
    local: Option<&LocalBaseCache>,
    id: &ChunkId,
) -> bool {
    cache.peek(id).is_some() || held.contains_key(id) || local.is_some_and(|l| l.contains(id))
}

/// The base for a candidate, its depth and the delta links down to it (see
/// [`BaseFetcher::shallow_enough`]).
type Plan = (ChunkId, u8, DeltaLinks);

impl<'a> BaseFetcher<'a> {
    /// A fetcher with `budget` bytes of bases in memory, for deltas at most `max_depth` deep
    /// (1: bases stored in full).
    pub fn new(repo: &'a IndexedRepository, budget: usize, max_depth: u8) -> Result<Self> {
        Self::with_reader(repo, base_reader(repo)?, budget, max_depth)
    }

    /// [`Self::new`] reading through `reader`: the one that read the parent snapshot's tree
    /// (see [`base_reader`]), whose caches hold the metadata and regions of the tree's
    /// containers, down its delta chains; the new tree's chunks are deltas of the parent
    /// tree's, so their bases are found there rather than read again.
    pub fn with_reader(
        repo: &'a IndexedRepository,
        reader: ChunkReader<'a>,
        budget: usize,
        max_depth: u8,
    ) -> Result<Self> {
        let mut reader = reader.reading_for(crate::backend::wrap::metered::Purpose::BaseRead);
        // The repository's reads in flight are shared: half for the reads ahead of the
        // stream (Self::read_ahead), the rest for the rounds this thread waits on.
        let mut in_flight = repo.reads_in_flight();
        if repo.reads_are_round_trips() && in_flight >= 2 {
            let ahead = in_flight / 2;
            reader = reader.reading_regions_in_background(ahead);
            in_flight -= ahead;
        }
        Ok(BaseFetcher {
            cache: BaseCache::new(budget),
            max_base_depth: max_depth.saturating_sub(1),
            reader,
            local: None,
            local_path: None,
            budget,
            counts: BaseCounts::default(),
            unreadable: Vec::new(),
            threads: RequestThreads::new(in_flight.saturating_sub(1)),
            planned: HashMap::new(),
            prefetched: None,
            held: HashMap::new(),
            current: HashSet::default(),
            round_trips: repo.reads_are_round_trips(),
            repo,
            start_mark: None,
        })
    }

    /// Notes duplicate `id` of the backup: a chunk of its snapshot, kept in the local base
    /// cache ahead of other old entries (see [`LocalBaseCache::save_preferring`]). For one
    /// the cache does not hold, its base is noted instead if it is a delta (on an object
    /// store, only when its container's metadata is at hand: no request on the dedup
    /// thread).
    ///
    /// Why the base: a chunk at the depth bound that the next version changes gets as its
    /// base the first chunk down its chain within the bound, its own base; that base is not
    /// a chunk of the snapshot and was last used versions ago, so it fell out of the cache
    /// behind newer entries and was read back, its chain rebuilt delta by delta. On a
    /// 30-version Redis series, the read-backs grew with the history (326 at the twentieth
    /// version, 716 at the thirtieth); keeping these bases cut them to 192 and 350.
    pub fn note_duplicate(&mut self, id: &ChunkId) {
        let Some(local) = self.local.as_ref() else {
            return;
        };
        if local.contains(id) {
            // It is its own next base (a chunk the cache holds is within the depth bound).
            if self.current.insert(*id) {
                self.counts.local_current += 1;
            }
            return;
        }
        let kind = if self.round_trips {
            // A metadata read would be a round trip on the dedup thread.
            self.reader.kind_at_hand(id)
        } else {
            self.reader.kind_of(id).ok().flatten()
        };
        if let Some(EntryKind::Delta { base, .. }) = kind {
            if local.contains(&base) && self.current.insert(base) {
                self.counts.local_current += 1;
            }
        }
    }

    /// Holds `chunks` (the parent's tree, had without a read) as bases for the whole backup:
    /// the new tree's chunks are written last and are deltas of these, which were otherwise
    /// read back then, on the backup's critical path.
    pub fn hold(&mut self, chunks: Vec<(ChunkId, Bytes)>) {
        self.held.extend(chunks);
    }

    /// Whether [`Self::hold`] was given a tree.
    pub fn holds_a_tree(&self) -> bool {
        !self.held.is_empty()
    }

    /// Requests in the background, where reads are round trips, the regions that fetching
    /// `ids` as bases would read back (those not at hand, down their delta chains): the
    /// candidates the stream is predicted to ask for some megabytes later
    /// ([`super::delta::DeltaStage::predict_entering`]), so that their fetch finds them
    /// read. A prediction that misses costs a read, never a different base.
    pub fn read_ahead(&mut self, ids: &[ChunkId]) {
        if self.prefetched.is_some() || ids.is_empty() {
            return;
        }
        let (cache, held, local) = (&self.cache, &self.held, &self.local);
        let at_hand = |id: &ChunkId| at_hand(cache, held, local.as_ref(), id);
        self.reader.request_base_regions(ids, &at_hand);
        self.counts.requests_ahead = self.reader.requests_in_background();
    }

    /// Reads ahead for the candidates `ids` that [`Self::fetch`] is about to be asked for, in
    /// that order: what it would read back one request after another (the metadata of the
    /// containers down each candidate's delta chain, a level at a time, then the regions of
    /// the bases not at hand) is read several requests at a time, off this thread (the
    /// dedup thread, the backup's critical path), neighbouring regions in one request, and
    /// the regions are decompressed where they arrive. On S3 each request is a round trip:
    /// one at a time, base reads were 2.7 s of a 2.9 s backup. What is fetched, and from
    /// where, does not change.
    pub fn prefetch(&mut self, ids: &[ChunkId]) -> Result<()> {
        // LoopDelta's bases come only from caches: nothing is read back.
        if self.prefetched.is_some() {
            return Ok(());
        }
        let mut level: Vec<ChunkId> = ids
            .iter()
            .filter(|id| !self.planned.contains_key(id))
            .copied()
            .collect();
        // The walk of `shallow_enough`: down each chain until memory knows the depth.
        for _ in 0..=MAX_DELTA_DEPTH {
            level.retain(|id| self.known_depth(id).is_none());
            if level.is_empty() {
                break;
            }
            self.reader.read_metas_ahead(&level, &mut self.threads);
            let mut next = Vec::new();
            for id in &level {
                // Errors are left to the walk below, which skips or reports them.
                if let Ok(Some(EntryKind::Delta { base, .. })) = self.reader.kind_of(id) {
                    if !next.contains(&base) {
                        next.push(base);
                    }
                }
            }
            level = next;
        }
        let mut chunks = Vec::new();
        for &id in ids {
            if self.planned.contains_key(&id) {
                continue;
            }
            let plan = self.shallow_enough(id)?;
            if let Some((base, _, links)) = &plan {
                self.regions_needed(base, links, &mut chunks)?;
            }
            self.planned.insert(id, plan);
        }
        self.reader.read_regions_ahead(&chunks, &mut self.threads);
        Ok(())
    }

    /// Whether the bytes of `id` are at hand: in memory or in the local base cache.
    fn held(&self, id: &ChunkId) -> bool {
        at_hand(&self.cache, &self.held, self.local.as_ref(), id)
    }

    /// Adds to `chunks` the chunks whose regions fetching `base` (reached by `links`) reads
    /// back, as [`Self::read_back`] goes: none if its bytes are at hand, else the links above
    /// the nearest base at hand, else `base` and its chain down to its full copy.
    fn regions_needed(
        &mut self,
        base: &ChunkId,
        links: &[(ChunkId, ChunkId)],
        chunks: &mut Vec<ChunkId>,
    ) -> Result<()> {
        if self.held(base) {
            return Ok(());
        }
        if let Some(k) = links.iter().position(|(_, b)| self.held(b)) {
            chunks.extend(links[..=k].iter().map(|(link, _)| *link));
            return Ok(());
        }
        let mut at = *base;
        for _ in 0..=MAX_DELTA_DEPTH {
            chunks.push(at);
            match self.kind_of(&at)? {
                Some(EntryKind::Delta { base, .. }) => at = base,
                _ => break,
            }
        }
        Ok(())
    }

    /// Takes bases only from `prefetched` and from memory (this backup's new chunks): a
    /// candidate neither holds is dropped, never read back (LoopDelta §4.3).
    pub fn only_cached(mut self, prefetched: Arc<PrefetchedBases>) -> Self {
        self.prefetched = Some(prefetched);
        self
    }

    /// [`Self::fetch`] when bases come only from caches.
    fn fetch_cached(&mut self, id: ChunkId, prefetched: &PrefetchedBases) -> Option<Base> {
        // Only chunks stored in full are cached there.
        if let Some(bytes) = prefetched.get(&id) {
            self.counts.prefetched += 1;
            return Some(Base {
                id,
                bytes,
                depth: 0,
            });
        }
        match self.cache.depth_of(&id) {
            Some(depth) if depth <= self.max_base_depth => {
                let bytes = self.cache.get(&id)?;
                self.counts.memory += 1;
                Some(Base { id, bytes, depth })
            }
            _ => {
                self.counts.not_cached += 1;
                None
            }
        }
    }

    /// Reads bases from the local base cache in directory `path` and updates it at the end
    /// (see [`Self::save_local_cache`]); returns why an existing cache could not be used, if
    /// so. Does nothing when the base cache is disabled (size 0).
    ///
    /// With `depths`, the delta depths the cache recorded are used while the index names the
    /// same copies as when they were recorded, and this backup's are recorded for the next
    /// one. Only for a backup that stores no chunk again (no Capping, cache-aware filter or
    /// inversed deltas): a newer copy of an indexed chunk, committed in the middle of the
    /// backup, can change the depths of the chains through it.
    pub fn use_local_cache(&mut self, path: PathBuf, depths: bool) -> Option<String> {
        if self.budget == 0 {
            return None;
        }
        let notice = match LocalBaseCache::open(&path) {
            Ok(cache) => {
                // Entries are checked by the XXH3 of their bytes, not their (possibly keyed)
                // ids: see local_cache.rs.
                self.local = cache;
                None
            }
            Err(e) => Some(format!("{e}; it is rebuilt")),
        };
        let index = self.repo.index();
        self.start_mark = depths.then(|| index.layout_mark());
        if let Some(local) = self.local.as_mut() {
            if !depths || !index.layout_kept_since(&local.mark()) {
                local.forget_depths();
            }
        }
        self.local_path = Some(path);
        notice
    }

    /// Updates the local base cache to the bases and new chunks this backup holds in memory,
    /// topped up with the previous cache's other entries, on a thread of its own: writing it
    /// was a fifth of the dedup thread's time on 20 SQLAlchemy sdists, at the very end of
    /// the backup where nothing else could run beside it; now it overlaps the last
    /// container's write, the index commit and the snapshot. [`LocalCacheSave::wait`] says
    /// why it could not be written, if so. With one-level deltas the bases it used come first
    /// (most recently used first): the next backup's candidates resolve to the same old full
    /// copies. With delta chains this backup's new chunks come first: they are the next
    /// version's bases (20 SQLAlchemy sdists, depth 8, 1 MiB regions: bases read back from the
    /// repository in versions 2-11 fell from 4,362 to 3,739).
    pub fn save_local_cache(&mut self) -> LocalCacheSave {
        let Some(path) = self.local_path.take() else {
            return LocalCacheSave::done(None);
        };
        let fresh_first = self.max_base_depth > 0;
        let budget = self.budget.min(local_cache::DEFAULT_BYTES);
        // Only what the cache can hold: the bytes stay alive until the thread is done. Each
        // with whether it is stored in full (depth 0), which old entries the next saves
        // keep first after the current chunks.
        let mut held = 0usize;
        let fresh: Vec<(ChunkId, Bytes, Option<u8>)> = self
            .cache
            .iter(fresh_first)
            .take_while(|(_, b, _)| {
                held += b.len();
                held <= budget
            })
            .map(|(id, b, depth)| (*id, b.clone(), Some(depth)))
            .collect();
        let old = self.local.take();
        let current = std::mem::take(&mut self.current);
        let mark = self.start_mark;
        LocalCacheSave::spawn(move |gate| {
            LocalBaseCache::save_preferring(
                &path,
                fresh,
                old,
                budget,
                |id| current.contains(id),
                // Depths only under the mark from before this backup changed the index, and
                // only once its snapshot is committed.
                || mark.filter(|_| gate.committed()),
            )
            .err()
            .map(|e| e.to_string())
        })
    }

    /// Keeps a new chunk of this backup (a delta of `depth`, or 0 if stored in full) as a
    /// possible base for later chunks; one too deep to be a base is not kept.
    pub fn remember(&mut self, id: ChunkId, data: Bytes, depth: u8) {
        if depth <= self.max_base_depth {
            self.cache.put_fresh(id, data, depth);
        }
    }

    /// Why candidates were skipped, for the backup's notices.
    pub fn take_notices(&mut self) -> Vec<String> {
        let n = std::mem::take(&mut self.unreadable);
        match n.first() {
            None => Vec::new(),
            Some(first) => vec![format!(
                "{} candidate delta bases could not be read and were not used (first: {first}); \
                 run `dedelta check --read-data`",
                n.len()
            )],
        }
    }

    /// The base to try for candidate `id` (`id` itself if shallow enough, else the first
    /// chunk down its delta chain that is) with its bytes and depth. `None` if it is not
    /// indexed or cannot be read.
    pub fn fetch(&mut self, id: ChunkId) -> Result<Option<Base>> {
        if let Some(p) = self.prefetched.clone() {
            return Ok(self.fetch_cached(id, &p));
        }
        let plan = match self.planned.remove(&id) {
            Some(plan) => plan,
            None => self.shallow_enough(id)?,
        };
        let Some((base, depth, links)) = plan else {
            self.counts.read_back += 1;
            return Ok(None);
        };
        if let Some(bytes) = self
            .cache
            .get(&base)
            .or_else(|| self.held.get(&base).cloned())
        {
            self.counts.memory += 1;
            return Ok(Some(Base {
                id: base,
                bytes,
                depth,
            }));
        }
        // The local cache holds bytes only (checked against the fingerprint when read): the
        // depth comes from the index walk above, so a chunk the repository now stores
        // otherwise never becomes a base too deep.
        if let Some(bytes) = self.local.as_mut().and_then(|l| l.get(&base)) {
            self.counts.local += 1;
            self.cache.put(base, bytes.clone(), depth);
            return Ok(Some(Base {
                id: base,
                bytes,
                depth,
            }));
        }
        self.counts.read_back += 1;
        let read = self.read_back(&base, &links);
        Ok(self.skip_damaged(read)?.map(|bytes| {
            let bytes = Bytes::from(bytes);
            self.cache.put(base, bytes.clone(), depth);
            Base {
                id: base,
                bytes,
                depth,
            }
        }))
    }

    /// The base for candidate `id` if memory holds it (a base already used, a new chunk of
    /// this backup, or with LoopDelta's prefetching a chunk of the potential base chunk
    /// cache, [`Self::only_cached`]), never read: for the cache-aware filter's rewrites
    /// ([`super::caf`]). LoopDelta §4.5's workflow takes the base of a base-fragmented chunk
    /// from the potential base chunk cache like any other's; without it those chunks found
    /// only this backup's own chunks as bases and were mostly stored in full.
    pub fn fetch_in_memory(&mut self, id: ChunkId) -> Option<Base> {
        if let Some(p) = self.prefetched.clone() {
            return self.fetch_cached(id, &p);
        }
        let depth = self.cache.depth_of(&id)?;
        if depth > self.max_base_depth {
            return None;
        }
        let bytes = self.cache.get(&id)?;
        self.counts.memory += 1;
        Some(Base { id, bytes, depth })
    }

    /// The container of the copy of `id` the index names, if indexed (for inversed delta
    /// compression, [`super::inverse`]).
    pub fn container_of(
        &mut self,
        id: &ChunkId,
    ) -> Result<Option<crate::format::container::ContainerId>> {
        self.reader.container_of(id)
    }

    /// Reads `id` back from the repository; `links` are the delta links down its chain as
    /// [`Self::shallow_enough`] walked them (each chunk with its base, `id` first). A delta
    /// is rebuilt from the nearest link whose base's bytes are in memory or in the local base
    /// cache, so that only the deltas above it are read (with delta chains, DupAdj's
    /// candidates are often deltas of earlier versions whose bases the local cache holds);
    /// otherwise the whole chain is read.
    fn read_back(&mut self, id: &ChunkId, links: &[(ChunkId, ChunkId)]) -> Result<Option<Vec<u8>>> {
        for (k, (_, base)) in links.iter().enumerate() {
            let held = match self.cache.peek(base) {
                Some((b, _)) => Some(b.clone()),
                None => self
                    .held
                    .get(base)
                    .cloned()
                    .or_else(|| self.local.as_mut().and_then(|l| l.get(base))),
            };
            if let Some(mut bytes) = held {
                for (link, base) in links[..=k].iter().rev() {
                    bytes = Bytes::from(self.reader.read_on_base(link, base, &bytes)?);
                }
                return Ok(Some(bytes.to_vec()));
            }
        }
        self.reader.read_base(id)
    }

    /// The chunk to use as a base for candidate `id`, its depth, and the delta links down its
    /// chain that the walk met (each with its base, the chosen chunk first): walks down
    /// `id`'s delta chain (memory knows the depth of the chunks it holds; the index the rest)
    /// until the depth is known, then takes the first chunk from `id` down that is at most
    /// `max_base_depth` deep. `None` if a chunk on the way is not indexed or unreadable, or
    /// the chain is longer than readers follow.
    fn shallow_enough(&mut self, id: ChunkId) -> Result<Option<(ChunkId, u8, DeltaLinks)>> {
        let mut links: DeltaLinks = Vec::new();
        let mut at = id;
        let known = loop {
            if let Some(d) = self.known_depth(&at) {
                break d;
            }
            match self.kind_of(&at)? {
                None => return Ok(None),
                Some(EntryKind::Full) => break 0,
                Some(EntryKind::Delta { base, .. }) => {
                    links.push((at, base));
                    if links.len() > usize::from(MAX_DELTA_DEPTH) {
                        return Ok(None);
                    }
                    at = base;
                }
            }
        };
        // links[i].0 has depth known + (links.len() - i); `at` has depth `known`.
        let n = links.len();
        let chosen = (0..n).find(|&i| known.saturating_add((n - i) as u8) <= self.max_base_depth);
        Ok(Some(match chosen {
            Some(i) => (
                links[i].0,
                known.saturating_add((n - i) as u8),
                links.split_off(i),
            ),
            None => (at, known, Vec::new()),
        }))
    }

    /// The depth of `id` if memory or the local base cache knows it and it is shallow enough
    /// to be a base (a deeper one is walked: its chain holds the base).
    fn known_depth(&self, id: &ChunkId) -> Option<u8> {
        self.cache
            .depth_of(id)
            .or_else(|| self.local.as_ref()?.depth_of(id))
            .filter(|&d| d <= self.max_base_depth)
    }

    /// How `id` is stored, from the index (refreshed once when it does not hold `id`: the
    /// chunk may have been written by this backup after the reader's view was taken); `None`
    /// if it is not indexed or its metadata cannot be read.
    fn kind_of(&mut self, id: &ChunkId) -> Result<Option<EntryKind>> {
        let found = self.reader.kind_of(id);
        if let Some(kind) = self.skip_damaged(found)? {
            return Ok(Some(kind));
        }
        self.reader.refresh_index()?;
        let found = self.reader.kind_of(id);
        self.skip_damaged(found)
    }

    /// Turns damage met while reading a candidate into "no candidate": a damaged chunk must
    /// never become a base, and must not stop the backup either.
    fn skip_damaged<T>(&mut self, r: Result<Option<T>>) -> Result<Option<T>> {
        match r {
            Err(
                e @ (Error::CorruptChunk { .. }
                | Error::Corrupt { .. }
                | Error::ObjectMissing { .. }
                | Error::ContainerGone { .. }),
            ) => {
                self.unreadable.push(e.to_string());
                Ok(None)
            }
            other => other,
        }
    }
}
