//! The resemblance-detection and delta-encoding stage of backup.
//!
//! New (non-duplicate) chunks are collected per block, in stream order, and processed as a
//! batch: super-features come computed from the worker pool (with the fingerprints);
//! candidates are found sequentially (DupAdj first, then the sketch index, FirstFit); base
//! chunks are fetched through an LRU [`BaseCache`] (or read back from the repository);
//! deltas are encoded in parallel on a pool of their own (inline with 2 threads: measured faster);
//! and a delta is kept only when it saves space (see [`DeltaConfig::min_saving`]).
//!
//! One-level deltas (Shilane §2.1): a base is always a chunk stored in full. A candidate that
//! is itself stored as a delta is replaced by its own base, which is similar too.
//!
//! DupAdj (DARE §3.2): the previous snapshot's chunk sequence is loaded; when a duplicate is
//! found at position `p` of that sequence, the new chunks after it are paired with positions
//! `p+1, p+2, ...` and the new chunks before it with `p-1, p-2, ...`. Each pair is then checked
//! by the delta saving test; a pair that fails falls back to the super-feature candidate.
//! (DARE stops walking at the first dissimilar pair; here pairs are judged individually, which
//! costs an extra encode per failed pair and never detects less.) Candidates of chunks within
//! one batch come from earlier batches only, so that a base is always decided before it is used.

use crate::backup::sketch_index::{FullSketchIndex, SketchIndex, StreamSketchIndex};
use crate::client::local_cache::{self, LocalBaseCache};
use crate::error::Result;
use crate::format::config::{DeltaConfig, SketchIndexKind};
use crate::format::container::ContainerId;
use crate::format::snapshot::BackupSummary;
use crate::repository::{ChunkReader, IndexedRepository};
use bytes::Bytes;
use dedelta_core::compress::Compression;
use dedelta_core::delta::{new_codec, DeltaCodec};
use dedelta_core::sketch::{new_sketcher, Sketcher, SuperFeatures};
use dedelta_core::ChunkId;
use lru::LruCache;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Nanoseconds spent per pipeline stage, summed over threads.
#[derive(Debug, Default)]
pub struct StageTimes {
    /// Cutting chunks.
    pub chunk: AtomicU64,
    /// BLAKE3 fingerprints.
    pub hash: AtomicU64,
    /// Chunk-index lookups.
    pub index: AtomicU64,
    /// Super-features.
    pub sketch: AtomicU64,
    /// Fetching base chunks.
    pub base_read: AtomicU64,
    /// Delta encoding (and the saving test).
    pub delta: AtomicU64,
    /// Region compression.
    pub compress: AtomicU64,
    /// Writing containers and index entries.
    pub write: AtomicU64,
}

impl StageTimes {
    /// Adds the time since `start` to `stage`.
    pub fn add(stage: &AtomicU64, start: Instant) {
        stage.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Seconds per stage, by name.
    pub fn seconds(&self) -> BTreeMap<String, f64> {
        let s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e9;
        [
            ("chunk", s(&self.chunk)),
            ("hash", s(&self.hash)),
            ("index", s(&self.index)),
            ("sketch", s(&self.sketch)),
            ("base_read", s(&self.base_read)),
            ("delta", s(&self.delta)),
            ("compress", s(&self.compress)),
            ("write", s(&self.write)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// An LRU cache of base chunks bounded by bytes.
pub struct BaseCache {
    map: LruCache<ChunkId, Bytes>,
    bytes: usize,
    budget: usize,
    /// Bases served from memory.
    pub hits: u64,
    /// Bases served from the local base cache.
    pub local_hits: u64,
    /// Bases read back from the repository (or not found).
    pub misses: u64,
}

impl BaseCache {
    /// A cache of at most `budget` bytes.
    pub fn new(budget: usize) -> Self {
        BaseCache {
            map: LruCache::unbounded(),
            bytes: 0,
            budget,
            hits: 0,
            local_hits: 0,
            misses: 0,
        }
    }

    /// A cached base (counted as a hit when present).
    pub fn get(&mut self, id: &ChunkId) -> Option<Bytes> {
        let r = self.map.get(id).cloned();
        if r.is_some() {
            self.hits += 1;
        }
        r
    }

    /// Adds a base, evicting the least recently used ones beyond the budget.
    pub fn put(&mut self, id: ChunkId, data: Bytes) {
        if self.budget == 0 {
            return;
        }
        self.bytes += data.len();
        if let Some(old) = self.map.put(id, data) {
            self.bytes -= old.len();
        }
        while self.bytes > self.budget {
            match self.map.pop_lru() {
                Some((_, old)) => self.bytes -= old.len(),
                None => break,
            }
        }
    }
}

/// The chunk sequence of the previous snapshot, for DupAdj.
#[derive(Debug, Default)]
pub struct PrevRecipe {
    ids: Vec<ChunkId>,
    pos: HashMap<ChunkId, u32>,
}

impl PrevRecipe {
    /// Builds the lookup from a chunk sequence (first occurrence wins).
    pub fn new(ids: Vec<ChunkId>) -> Self {
        let mut pos = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            pos.entry(*id).or_insert(i as u32);
        }
        PrevRecipe { ids, pos }
    }
}

/// How a delta's base was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    DupAdj,
    Sketch,
}

/// What the stage decided for a chunk.
pub enum Stored {
    /// Store in full.
    Full,
    /// Store as a delta against `base`.
    Delta {
        /// The base chunk (stored in full).
        base: ChunkId,
        /// The delta instructions.
        delta: Vec<u8>,
    },
}

/// A new chunk on its way through the stage.
pub struct NewChunk {
    /// Fingerprint.
    pub id: ChunkId,
    /// Bytes.
    pub data: Bytes,
    /// Super-features (empty without a sketch method).
    pub sfs: SuperFeatures,
    /// The decision.
    pub stored: Stored,
    presketched: bool,
    adj: Option<ChunkId>,
    /// Candidate chunks in the order they are tried (before resolving deltas to bases).
    wanted: Vec<(ChunkId, Via)>,
    /// Bases already tried.
    tried: Vec<ChunkId>,
    /// The base to try next, with its bytes.
    candidate: Option<(ChunkId, Bytes, Via)>,
    /// Stored size of the chunk alone, once computed.
    full_cost: Option<usize>,
    via: Option<Via>,
}

/// The per-backup resemblance detection and delta encoding state.
pub struct DeltaStage<'a> {
    cfg: DeltaConfig,
    sketcher: Option<Box<dyn Sketcher>>,
    codec: Box<dyn DeltaCodec>,
    index: Box<dyn SketchIndex + 'a>,
    cache: BaseCache,
    reader: ChunkReader<'a>,
    prev: Option<PrevRecipe>,
    cursor: Option<usize>,
    run: Vec<usize>,
    batch: Vec<NewChunk>,
    times: Arc<StageTimes>,
    /// The local base cache read at the start (see [`crate::client::local_cache`]), and where the
    /// next one is written.
    local: Option<LocalBaseCache>,
    local_path: Option<PathBuf>,
    /// Delta encoding has a pool of its own when there are cores for it (4 or more threads):
    /// on the shared pool it would queue behind every fingerprinting and compression job in
    /// flight. With 2 cores, encoding on this thread measured 2-3x faster than either pool
    /// (0.04-0.06 s against 0.11-0.15 s per 60 MB version), the pool's cores being busy anyway.
    encode_pool: Option<rayon::ThreadPool>,
    /// Candidate bases that could not be read (damage `check` has not recorded yet): they are
    /// skipped, never used, and reported once the backup ends.
    unreadable_bases: Vec<String>,
}

impl<'a> DeltaStage<'a> {
    /// Sets the stage up for one backup; `prev` is the parent snapshot's chunk sequence.
    pub fn new(
        repo: &'a IndexedRepository,
        cfg: DeltaConfig,
        prev: Option<PrevRecipe>,
        times: Arc<StageTimes>,
        threads: usize,
    ) -> Result<Self> {
        cfg.validate()?;
        let sketcher = match cfg.sketch {
            Some(kind) => Some(
                new_sketcher(kind, cfg.sketch_params)
                    .map_err(|e| crate::Error::InvalidOption(e.to_string()))?,
            ),
            None => None,
        };
        let index: Box<dyn SketchIndex> = match cfg.sketch_index {
            SketchIndexKind::Full => Box::new(FullSketchIndex::new(repo.index().reader()?)),
            SketchIndexKind::Stream => Box::new(StreamSketchIndex::new(
                repo.backend().clone(),
                cfg.stream_cache_containers,
            )),
        };
        Ok(DeltaStage {
            codec: new_codec(cfg.codec),
            cache: BaseCache::new(cfg.base_cache_bytes),
            reader: repo.chunk_reader(32 << 20)?,
            prev: if cfg.dupadj { prev } else { None },
            cfg,
            sketcher,
            index,
            cursor: None,
            run: Vec::new(),
            batch: Vec::new(),
            times,
            local: None,
            local_path: None,
            encode_pool: if threads >= 4 {
                Some(
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(threads / 2)
                        .thread_name(|i| format!("dedelta-delta-{i}"))
                        .build()
                        .map_err(|e| crate::Error::InvalidOption(format!("thread pool: {e}")))?,
                )
            } else {
                None
            },
            unreadable_bases: Vec::new(),
        })
    }

    /// Why candidate bases were skipped, for the backup's notices.
    pub fn take_notices(&mut self) -> Vec<String> {
        let n = std::mem::take(&mut self.unreadable_bases);
        match n.len() {
            0 => Vec::new(),
            k => vec![format!(
                "{k} candidate delta bases could not be read and were not used (first: {}); \
                 run `dedelta check --read-data`",
                n[0]
            )],
        }
    }

    /// Turns damage met while reading a candidate base into "no candidate": a damaged chunk
    /// must never become a base, and must not stop the backup either.
    fn skip_damaged<T>(&mut self, r: Result<Option<T>>) -> Result<Option<T>> {
        match r {
            Err(
                e @ (crate::Error::CorruptChunk { .. }
                | crate::Error::Corrupt { .. }
                | crate::Error::ObjectMissing { .. }
                | crate::Error::ContainerGone { .. }),
            ) => {
                self.unreadable_bases.push(e.to_string());
                Ok(None)
            }
            other => other,
        }
    }

    /// Reads bases from the local base cache in directory `path` and updates it at the end
    /// (see [`Self::save_local_cache`]); returns why an existing cache could not be used, if
    /// so. Does nothing when the base cache is disabled (size 0).
    pub fn use_local_cache(&mut self, path: PathBuf) -> Option<String> {
        if self.cfg.base_cache_bytes == 0 {
            return None;
        }
        let notice = match LocalBaseCache::open(&path) {
            Ok(cache) => {
                self.local = cache;
                None
            }
            Err(e) => Some(format!("{e}; it is rebuilt")),
        };
        self.local_path = Some(path);
        notice
    }

    /// Updates the local base cache to the bases and full chunks this backup holds in memory
    /// (most recently used first), topped up with the previous cache's other entries; returns
    /// why it could not be written, if so.
    pub fn save_local_cache(&mut self) -> Option<String> {
        let path = self.local_path.take()?;
        let fresh = self.cache.map.iter().map(|(id, b)| (*id, b.clone()));
        let budget = self.cfg.base_cache_bytes.min(local_cache::DEFAULT_BYTES);
        LocalBaseCache::save(&path, fresh, self.local.as_ref(), budget)
            .err()
            .map(|e| e.to_string())
    }

    /// A duplicate chunk went by, stored in `container` if already durable.
    pub fn on_duplicate(&mut self, id: &ChunkId, container: Option<ContainerId>) -> Result<()> {
        if let Some(c) = container {
            self.index.consulted(c)?;
        }
        let Some(prev) = &self.prev else {
            return Ok(());
        };
        match prev.pos.get(id) {
            Some(&p) => {
                let p = p as usize;
                // Backward walk: the new chunks just before this duplicate.
                for (k, &bi) in self.run.iter().rev().enumerate() {
                    let Some(q) = p.checked_sub(k + 1) else { break };
                    let chunk = &mut self.batch[bi];
                    if chunk.adj.is_none() {
                        chunk.adj = Some(prev.ids[q]);
                    }
                }
                self.cursor = Some(p + 1);
            }
            None => self.cursor = None,
        }
        self.run.clear();
        Ok(())
    }

    /// A new chunk, to be decided at the next [`Self::process`].
    /// `sfs` are the chunk's super-features if already computed.
    pub fn push_new(&mut self, id: ChunkId, data: Bytes, sfs: Option<SuperFeatures>) {
        let mut adj = None;
        if let (Some(prev), Some(c)) = (&self.prev, self.cursor) {
            if let Some(candidate) = prev.ids.get(c) {
                adj = Some(*candidate);
                self.cursor = Some(c + 1);
            } else {
                self.cursor = None;
            }
        }
        self.run.push(self.batch.len());
        self.batch.push(NewChunk {
            id,
            data,
            presketched: sfs.is_some(),
            sfs: sfs.unwrap_or_default(),
            stored: Stored::Full,
            adj,
            wanted: Vec::new(),
            tried: Vec::new(),
            candidate: None,
            full_cost: None,
            via: None,
        });
    }

    /// Whether chunks are waiting.
    pub fn has_pending(&self) -> bool {
        !self.batch.is_empty()
    }

    /// The base to try for candidate `id` (`id` itself, or its base if it is a delta) with
    /// its bytes: from memory, else from the local base cache, else read back from the
    /// repository. `None` if it is not indexed.
    fn fetch_base(&mut self, id: ChunkId) -> Result<Option<(ChunkId, Bytes)>> {
        if let Some(b) = self.cache.get(&id) {
            return Ok(Some((id, b)));
        }
        let found = self.reader.base_of(&id);
        let mut base = self.skip_damaged(found)?;
        if base.is_none() {
            // Possibly written by this backup after the reader's view was taken.
            self.reader.refresh_index()?;
            let found = self.reader.base_of(&id);
            base = self.skip_damaged(found)?;
        }
        let Some(base) = base else {
            self.cache.misses += 1;
            return Ok(None);
        };
        if base != id {
            if let Some(b) = self.cache.get(&base) {
                return Ok(Some((base, b)));
            }
        }
        if let Some(bytes) = self.local_base(&base, base == id)? {
            self.cache.local_hits += 1;
            self.cache.put(base, bytes.clone());
            return Ok(Some((base, bytes)));
        }
        self.cache.misses += 1;
        let read = self.reader.read_base(&base);
        Ok(self.skip_damaged(read)?.map(|bytes| {
            let bytes = Bytes::from(bytes);
            self.cache.put(base, bytes.clone());
            (base, bytes)
        }))
    }

    /// `base`'s bytes from the local base cache, if it has them and the index holds
    /// `base` as a full chunk (`known_full` when that is already established): a cached
    /// chunk that the repository no longer holds in full must never become a delta's base.
    fn local_base(&mut self, base: &ChunkId, known_full: bool) -> Result<Option<Bytes>> {
        let Some(local) = self.local.as_mut() else {
            return Ok(None);
        };
        let Some(bytes) = local.get(base) else {
            return Ok(None);
        };
        let full = known_full || self.reader.base_of(base)? == Some(*base);
        Ok(full.then_some(bytes))
    }

    /// Encodes every chunk that has a candidate against it, in parallel when the stage has
    /// a pool, and keeps the delta if it saves enough.
    fn encode_candidates(&self, batch: &mut [NewChunk]) {
        let codec = self.codec.as_ref();
        let keep = 1.0 - self.cfg.min_saving;
        let encode = |c: &mut NewChunk| {
            let Some((base, bytes, via)) = c.candidate.take() else {
                return;
            };
            let mut delta = Vec::new();
            codec.encode(&bytes, &c.data, &mut delta);
            // What the chunk would cost stored in full: zstd level 1 of the chunk alone,
            // computed only when the delta is not obviously smaller (8x below raw size,
            // which a single chunk rarely compresses to).
            let keep_it = delta.len() * 8 <= c.data.len() || {
                let cost = *c.full_cost.get_or_insert_with(|| {
                    Compression::Zstd { level: 1 }.compress(&c.data).1.len()
                });
                delta.len() as f64 <= cost as f64 * keep
            };
            if keep_it {
                c.stored = Stored::Delta { base, delta };
                c.via = Some(via);
            }
        };
        match &self.encode_pool {
            Some(p) => p.install(|| batch.par_iter_mut().for_each(encode)),
            None => batch.iter_mut().for_each(encode),
        }
    }

    /// Decides every waiting chunk; returns them in stream order.
    pub fn process(
        &mut self,
        pool: &rayon::ThreadPool,
        summary: &mut BackupSummary,
    ) -> Result<Vec<NewChunk>> {
        self.run.clear();
        let mut batch = std::mem::take(&mut self.batch);
        if batch.is_empty() {
            return Ok(batch);
        }
        // 1. Super-features, in parallel.
        if let Some(sketcher) = &self.sketcher {
            if batch.iter().any(|c| !c.presketched) {
                let t = Instant::now();
                pool.install(|| {
                    batch
                        .par_iter_mut()
                        .filter(|c| !c.presketched)
                        .for_each(|c| c.sfs = sketcher.sketch(&c.data));
                });
                StageTimes::add(&self.times.sketch, t);
            }
        }
        // 2. Candidates, in order: DupAdj's first, then the sketch index's.
        let t = Instant::now();
        for c in batch.iter_mut() {
            if let Some(a) = c.adj {
                c.wanted.push((a, Via::DupAdj));
            }
            if self.sketcher.is_some() {
                if let Some(s) = self.index.lookup(&c.sfs)? {
                    if !c.wanted.iter().any(|(w, _)| *w == s) {
                        c.wanted.push((s, Via::Sketch));
                    }
                }
            }
        }
        StageTimes::add(&self.times.base_read, t);
        // 3. Bases and delta encoding, one round per candidate rank: a chunk's second
        // candidate is fetched only if its first one did not give a delta worth keeping
        // (most bases are read back from the repository, which is the stage's main cost).
        let rounds = batch.iter().map(|c| c.wanted.len()).max().unwrap_or(0);
        for round in 0..rounds {
            let t = Instant::now();
            let mut any = false;
            for c in batch.iter_mut() {
                if matches!(c.stored, Stored::Delta { .. }) {
                    continue;
                }
                let Some(&(w, via)) = c.wanted.get(round) else {
                    continue;
                };
                if let Some((base, bytes)) = self.fetch_base(w)? {
                    if base != c.id && !c.tried.contains(&base) {
                        c.tried.push(base);
                        c.candidate = Some((base, bytes, via));
                        any = true;
                    }
                }
            }
            StageTimes::add(&self.times.base_read, t);
            if any {
                let t = Instant::now();
                self.encode_candidates(&mut batch);
                StageTimes::add(&self.times.delta, t);
            }
        }
        // 4. Bookkeeping in order: full chunks become bases for later chunks.
        for c in &batch {
            match &c.stored {
                Stored::Full => {
                    summary.bytes_after_delta += c.data.len() as u64;
                    if !c.sfs.0.is_empty() {
                        self.index.insert(c.id, &c.sfs);
                    }
                    // A copy: a slice would keep the reader's whole block alive.
                    self.cache.put(c.id, Bytes::copy_from_slice(&c.data));
                }
                Stored::Delta { delta, .. } => {
                    summary.bytes_after_delta += delta.len() as u64;
                    summary.delta_chunks += 1;
                    summary.delta_source_bytes += c.data.len() as u64;
                    summary.delta_bytes += delta.len() as u64;
                    match c.via {
                        Some(Via::DupAdj) => summary.dupadj_deltas += 1,
                        _ => summary.sketch_deltas += 1,
                    }
                }
            }
        }
        summary.base_cache_hits = self.cache.hits;
        summary.base_cache_local_hits = self.cache.local_hits;
        summary.base_cache_misses = self.cache.misses;
        Ok(batch)
    }
}
