//! Reading chunks back, in two halves.
//!
//! - [`ChunkLocator`]: index lookup, container metadata, and the stored bytes of the chunk's
//!   region, read and decompressed through an LRU region cache (the expensive part).
//! - [`ChunkDecoder`]: rebuilds a delta against its base (bases are verified once and kept in
//!   an LRU cache) and checks every chunk's fingerprint.
//!
//! [`ChunkReader`] runs both in turn on one thread (check, backup's base reads, tree streams).
//! Restore and dump run them on two threads through [`PipelinedLocator`] and
//! [`PipelinedDecoder`]: one thread decompresses regions while the other decodes deltas,
//! hashes and writes.

use crate::backend::FileKind;
use crate::client::index::IndexReader;
use crate::error::{Error, Result};
use crate::format::container::{self, ContainerId, ContainerMeta, EntryKind};
use crate::repository::damage::DamageSet;
use crate::repository::IndexedRepository;
use dedelta_core::compress::RegionDecompressor;
use dedelta_core::delta::{new_codec, DeltaCodec, DeltaKind};
use dedelta_core::ChunkId;
use lru::LruCache;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::sync::Arc;

/// Container metadata sections kept in memory.
const META_CACHE_ENTRIES: usize = 256;
/// Verified delta bases kept in memory.
const BASE_CACHE_ENTRIES: usize = 4096;
/// Decompression buffers kept for reuse.
const SPARE_BUFFERS: usize = 16;

fn lru<K: std::hash::Hash + Eq, V>(entries: usize) -> LruCache<K, V> {
    LruCache::new(NonZeroUsize::new(entries.max(1)).expect("at least 1"))
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
    /// Region cache hits.
    pub region_cache_hits: u64,
    /// Delta chunks decoded.
    pub deltas_decoded: u64,
    /// Delta bases served from the verified-base cache.
    pub base_cache_hits: u64,
    /// Delta bases read (and verified) from their regions.
    pub base_cache_misses: u64,
}

impl ReadStats {
    /// The sum of two sets of counters (a locator's and a decoder's).
    pub fn merged(self, o: ReadStats) -> ReadStats {
        ReadStats {
            container_metas_read: self.container_metas_read + o.container_metas_read,
            regions_read: self.regions_read + o.regions_read,
            bytes_read: self.bytes_read + o.bytes_read,
            region_cache_hits: self.region_cache_hits + o.region_cache_hits,
            deltas_decoded: self.deltas_decoded + o.deltas_decoded,
            base_cache_hits: self.base_cache_hits + o.base_cache_hits,
            base_cache_misses: self.base_cache_misses + o.base_cache_misses,
        }
    }
}

fn corrupt(container: &ContainerId, chunk: &ChunkId, reason: String) -> Error {
    Error::CorruptChunk {
        container: container.to_hex(),
        chunk: chunk.to_hex(),
        reason,
    }
}

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

    fn corrupt(&self, reason: String) -> Error {
        corrupt(&self.container, &self.id, reason)
    }
}

/// Finds chunks and decompresses their regions.
pub struct ChunkLocator<'a> {
    repo: &'a IndexedRepository,
    index: IndexReader,
    metas: LruCache<ContainerId, Arc<ContainerMeta>>,
    regions: LruCache<(ContainerId, u32), Arc<Vec<u8>>>,
    decompressor: RegionDecompressor,
    /// Reused buffer for stored (compressed) region bytes.
    stored: Vec<u8>,
    /// Buffers of evicted regions, reused for the next ones.
    spare: Vec<Vec<u8>>,
    /// Evicted regions still shared with the decoding thread; reused once it lets go.
    retired: Vec<Arc<Vec<u8>>>,
    region_bytes: usize,
    cache_bytes: usize,
    stats: ReadStats,
    /// Damage records, read the first time a chunk is not in the index (to say why).
    damage: Option<DamageSet>,
}

impl<'a> ChunkLocator<'a> {
    /// A locator with `cache_bytes` of decompressed regions.
    pub fn new(repo: &'a IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(ChunkLocator {
            repo,
            index: repo.index().reader()?,
            metas: lru(META_CACHE_ENTRIES),
            regions: LruCache::unbounded(),
            decompressor: RegionDecompressor::default(),
            stored: Vec::new(),
            spare: Vec::new(),
            retired: Vec::new(),
            region_bytes: 0,
            cache_bytes,
            stats: ReadStats::default(),
            damage: None,
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    /// Re-reads the index, to see chunks committed since this locator was made.
    pub fn refresh_index(&mut self) -> Result<()> {
        self.index = self.repo.index().reader()?;
        Ok(())
    }

    fn meta(&mut self, id: ContainerId) -> Result<Arc<ContainerMeta>> {
        if let Some(m) = self.metas.get(&id) {
            return Ok(m.clone());
        }
        let m = Arc::new(self.repo.read_container_meta(&id)?);
        self.stats.container_metas_read += 1;
        self.metas.put(id, m.clone());
        Ok(m)
    }

    fn region(
        &mut self,
        cid: ContainerId,
        meta: &ContainerMeta,
        index: u32,
    ) -> Result<Arc<Vec<u8>>> {
        if let Some(r) = self.regions.get(&(cid, index)) {
            self.stats.region_cache_hits += 1;
            return Ok(r.clone());
        }
        let what = format!("container {cid}");
        let r = meta
            .regions
            .get(index as usize)
            .ok_or_else(|| Error::corrupt(&what, format!("no region {index}")))?;
        self.repo.backend().get_range_into(
            FileKind::Container,
            &cid.to_hex(),
            i64::from(r.offset),
            r.stored_len as usize,
            &mut self.stored,
        )?;
        self.stats.regions_read += 1;
        self.stats.bytes_read += self.stored.len() as u64;
        let mut raw = self.spare_buffer();
        container::open_region_into(&mut self.decompressor, &self.stored, r, &what, &mut raw)?;
        let raw = Arc::new(raw);
        self.region_bytes += raw.len();
        self.regions.put((cid, index), raw.clone());
        while self.region_bytes > self.cache_bytes && self.regions.len() > 1 {
            let Some((_, old)) = self.regions.pop_lru() else {
                break;
            };
            self.region_bytes -= old.len();
            match Arc::try_unwrap(old) {
                Ok(buf) if self.spare.len() < SPARE_BUFFERS => self.spare.push(buf),
                Ok(_) => {}
                Err(shared) if self.retired.len() < SPARE_BUFFERS => self.retired.push(shared),
                Err(_) => {}
            }
        }
        Ok(raw)
    }

    /// A buffer for the next region: an evicted one if any is free again, else a new one.
    fn spare_buffer(&mut self) -> Vec<u8> {
        if let Some(b) = self.spare.pop() {
            return b;
        }
        match self.retired.iter().position(|r| Arc::strong_count(r) == 1) {
            Some(i) => Arc::try_unwrap(self.retired.swap_remove(i)).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// How `id` is stored, from its container's metadata, without reading its region;
    /// `None` if it is not indexed.
    pub fn kind_of(&mut self, id: &ChunkId) -> Result<Option<EntryKind>> {
        let Some(loc) = self.index.get(id)? else {
            return Ok(None);
        };
        let meta = self.meta(loc.container)?;
        Ok(meta.entries.get(loc.entry as usize).map(|e| e.kind))
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
        match self.locate_once(id) {
            Err(Located::Gone(first)) => {
                self.refresh_index()?;
                match self.locate_once(id) {
                    Ok(c) => Ok(c),
                    Err(Located::Gone(_)) => Err(gone(&first, id)),
                    // No longer indexed: the chunk itself was pruned since our first view.
                    Err(Located::Failed(Error::ChunkMissing(_))) => Err(gone(&first, id)),
                    Err(Located::Failed(e)) => Err(e),
                }
            }
            Err(Located::Failed(Error::ChunkMissing(hex))) => Err(self.missing(id, hex)),
            Err(Located::Failed(e)) => Err(e),
            Ok(c) => Ok(c),
        }
    }

    /// The error for a chunk the index does not hold: corruption if `check` recorded its copy
    /// as damaged (it took the copy out of the index), else [`Error::ChunkMissing`].
    fn missing(&mut self, id: &ChunkId, hex: String) -> Error {
        if self.damage.is_none() {
            // Without readable records the plain "missing" is still true.
            self.damage = Some(
                DamageSet::load(self.repo.backend().as_ref())
                    .map(|(set, _)| set)
                    .unwrap_or_default(),
            );
        }
        match self.damage.as_ref().and_then(|d| d.chunk_damage(id)) {
            Some((container, reason)) => corrupt(
                &container,
                id,
                format!(
                    "recorded as damaged by check ({reason}); back up the file again, or run \
                     `dedelta repair snapshots`"
                ),
            ),
            None => Error::ChunkMissing(hex),
        }
    }

    fn locate_once(&mut self, id: &ChunkId) -> std::result::Result<LocatedChunk, Located> {
        let loc = self
            .index
            .get(id)?
            .ok_or_else(|| Error::ChunkMissing(id.to_hex()))?;
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
        let region = self
            .region(loc.container, &meta, entry.region)
            .map_err(bad)?;
        let range = entry.offset as usize..(entry.offset as usize + entry.stored_len as usize);
        if range.end > region.len() {
            return Err(corrupt(&loc.container, id, "entry lies outside its region".into()).into());
        }
        Ok(LocatedChunk {
            id: *id,
            container: loc.container,
            original_len: entry.original_len as usize,
            delta_base: match entry.kind {
                EntryKind::Full => None,
                EntryKind::Delta { base } => Some(base),
            },
            region,
            range,
        })
    }
}

/// Why one attempt to locate a chunk failed.
enum Located {
    /// The container the index names does not exist (any more).
    Gone(ContainerId),
    /// Anything else: final.
    Failed(Error),
}

impl From<Error> for Located {
    fn from(e: Error) -> Self {
        Located::Failed(e)
    }
}

fn gone(container: &ContainerId, chunk: &ChunkId) -> Error {
    Error::ContainerGone {
        container: container.to_hex(),
        chunk: chunk.to_hex(),
    }
}

/// Rebuilds and verifies located chunks.
pub struct ChunkDecoder {
    bases: LruCache<ChunkId, Arc<Vec<u8>>>,
    codec: Box<dyn DeltaCodec>,
    stats: ReadStats,
}

impl Default for ChunkDecoder {
    fn default() -> Self {
        ChunkDecoder {
            bases: lru(BASE_CACHE_ENTRIES),
            // Every codec writes the same instruction format, which any codec decodes.
            codec: new_codec(DeltaKind::Ddelta),
            stats: ReadStats::default(),
        }
    }
}

impl ChunkDecoder {
    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    fn cached_base(&mut self, id: &ChunkId) -> Option<Arc<Vec<u8>>> {
        let b = self.bases.get(id).cloned();
        if b.is_some() {
            self.stats.base_cache_hits += 1;
        }
        b
    }

    /// Checks a located chunk as a delta base (stored in full, bytes matching its
    /// fingerprint) and caches its bytes.
    fn accept_base(&mut self, base: &LocatedChunk) -> Result<Arc<Vec<u8>>> {
        self.stats.base_cache_misses += 1;
        if base.delta_base.is_some() {
            return Err(base.corrupt("a delta is used as a delta base".into()));
        }
        let bytes = base.stored();
        if bytes.len() != base.original_len || ChunkId::of(bytes) != base.id {
            return Err(base.corrupt("content does not match its fingerprint".into()));
        }
        let bytes = Arc::new(bytes.to_vec());
        self.bases.put(base.id, bytes.clone());
        Ok(bytes)
    }

    /// The chunk's bytes: a slice of its region for a full chunk, rebuilt into `out` from
    /// `base` for a delta; checked against the fingerprint when `verify`.
    fn decode<'b>(
        &mut self,
        c: &'b LocatedChunk,
        base: Option<&[u8]>,
        out: &'b mut Vec<u8>,
        verify: bool,
    ) -> Result<&'b [u8]> {
        let data: &[u8] = match (c.delta_base, base) {
            (None, _) => c.stored(),
            (Some(_), Some(base)) => {
                out.clear();
                out.reserve(c.original_len);
                self.codec
                    .decode(base, c.stored(), out)
                    .map_err(|e| c.corrupt(e.to_string()))?;
                self.stats.deltas_decoded += 1;
                out
            }
            (Some(b), None) => {
                return Err(c.corrupt(format!("its delta base {b} is not available")))
            }
        };
        if data.len() != c.original_len || (verify && ChunkId::of(data) != c.id) {
            return Err(c.corrupt("content does not match its fingerprint".into()));
        }
        Ok(data)
    }
}

fn base_unreadable(c: &LocatedChunk, base: &ChunkId, e: &Error) -> Error {
    c.corrupt(format!("its delta base {base} is unreadable: {e}"))
}

/// Reads chunks on one thread, verifying every chunk returned.
pub struct ChunkReader<'a> {
    locator: ChunkLocator<'a>,
    decoder: ChunkDecoder,
    scratch: Vec<u8>,
}

impl<'a> ChunkReader<'a> {
    /// A reader with `cache_bytes` of decompressed regions.
    pub fn new(repo: &'a IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(ChunkReader {
            locator: ChunkLocator::new(repo, cache_bytes)?,
            decoder: ChunkDecoder::default(),
            scratch: Vec::new(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.locator.stats().merged(self.decoder.stats())
    }

    /// Re-reads the index, to see chunks committed since this reader was made.
    pub fn refresh_index(&mut self) -> Result<()> {
        self.locator.refresh_index()
    }

    /// The full chunk to use as a delta base for `id`: `id` itself if it is stored in full,
    /// else the base of its delta (deltas are one level deep). `None` if it is not indexed.
    pub fn base_of(&mut self, id: &ChunkId) -> Result<Option<ChunkId>> {
        Ok(match self.locator.kind_of(id)? {
            Some(EntryKind::Full) => Some(*id),
            Some(EntryKind::Delta { base }) => Some(base),
            None => None,
        })
    }

    /// The verified bytes of `base`, which must be stored in full; `None` if not indexed.
    pub fn read_base(&mut self, base: &ChunkId) -> Result<Option<Vec<u8>>> {
        match self.read(base, false) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Error::ChunkMissing(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads chunk `id`, decoding a delta against its base, and verifies its fingerprint.
    ///
    /// # Errors
    /// [`Error::ChunkMissing`] if it is not indexed; [`Error::CorruptChunk`] naming the
    /// container and chunk if any check fails (also when a delta's base is damaged).
    pub fn read_chunk(&mut self, id: &ChunkId) -> Result<Vec<u8>> {
        self.read(id, true)
    }

    fn read(&mut self, id: &ChunkId, allow_delta: bool) -> Result<Vec<u8>> {
        let c = self.locator.locate(id)?;
        let base = match c.delta_base {
            None => None,
            Some(_) if !allow_delta => {
                return Err(c.corrupt("a delta is used as a delta base".into()))
            }
            Some(b) => Some(match self.decoder.cached_base(&b) {
                Some(bytes) => bytes,
                None => {
                    let located = self
                        .locator
                        .locate(&b)
                        .map_err(|e| base_unreadable(&c, &b, &e))?;
                    self.decoder
                        .accept_base(&located)
                        .map_err(|e| base_unreadable(&c, &b, &e))?
                }
            }),
        };
        self.decoder
            .decode(
                &c,
                base.as_deref().map(|b| b.as_slice()),
                &mut self.scratch,
                true,
            )
            .map(|d| d.to_vec())
    }
}

/// What the locating thread hands over for one chunk: the chunk, and for a delta whose base
/// the decoding thread does not hold yet, the located base (or why it could not be found).
pub struct FetchedChunk {
    chunk: LocatedChunk,
    base: Option<Result<LocatedChunk>>,
}

impl FetchedChunk {
    /// The chunk's fingerprint.
    pub fn id(&self) -> &ChunkId {
        &self.chunk.id
    }

    /// The length of its original bytes.
    pub fn len(&self) -> usize {
        self.chunk.original_len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.chunk.original_len == 0
    }
}

/// The locating half of a two-thread read. It mirrors the decoding half's base cache (same
/// capacity, same sequence of uses, so the same LRU state) to send each base only when the
/// decoder does not hold it.
pub struct PipelinedLocator<'a> {
    locator: ChunkLocator<'a>,
    held: LruCache<ChunkId, ()>,
}

impl<'a> PipelinedLocator<'a> {
    /// A locator with `cache_bytes` of decompressed regions.
    pub fn new(repo: &'a IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(PipelinedLocator {
            locator: ChunkLocator::new(repo, cache_bytes)?,
            held: lru(BASE_CACHE_ENTRIES),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.locator.stats()
    }

    /// Locates chunk `id` (and its base, if the decoder will need it).
    pub fn fetch(&mut self, id: &ChunkId) -> Result<FetchedChunk> {
        let chunk = self.locator.locate(id)?;
        let base = match chunk.delta_base {
            Some(b) if self.held.get(&b).is_none() => {
                self.held.put(b, ());
                Some(self.locator.locate(&b))
            }
            _ => None,
        };
        Ok(FetchedChunk { chunk, base })
    }
}

/// The decoding half of a two-thread read: fed [`FetchedChunk`]s in the order the
/// [`PipelinedLocator`] made them.
#[derive(Default)]
pub struct PipelinedDecoder {
    decoder: ChunkDecoder,
    scratch: Vec<u8>,
}

impl PipelinedDecoder {
    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.decoder.stats()
    }

    /// The chunk's verified bytes.
    pub fn decode<'b>(&'b mut self, f: &'b FetchedChunk) -> Result<&'b [u8]> {
        let c = &f.chunk;
        let base = match (c.delta_base, &f.base) {
            (None, _) => None,
            (Some(b), Some(Ok(located))) => Some(
                self.decoder
                    .accept_base(located)
                    .map_err(|e| base_unreadable(c, &b, &e))?,
            ),
            (Some(b), Some(Err(e))) => return Err(base_unreadable(c, &b, e)),
            (Some(b), None) => self.decoder.cached_base(&b),
        };
        self.decoder.decode(
            c,
            base.as_deref().map(|b| b.as_slice()),
            &mut self.scratch,
            true,
        )
    }
}

/// Checks bytes against their fingerprint.
pub fn verify_chunk(id: &ChunkId, container: &ContainerId, data: &[u8]) -> Result<()> {
    if ChunkId::of(data) == *id {
        Ok(())
    } else {
        Err(corrupt(
            container,
            id,
            "content does not match its fingerprint".into(),
        ))
    }
}

/// A [`std::io::Read`] over a sequence of chunks (a stored byte stream such as a tree).
pub struct ChunkStreamReader<'r, 'a> {
    reader: &'r mut ChunkReader<'a>,
    ids: std::vec::IntoIter<ChunkId>,
    current: Vec<u8>,
    pos: usize,
}

impl<'r, 'a> ChunkStreamReader<'r, 'a> {
    /// Reads the concatenation of `ids`.
    pub fn new(reader: &'r mut ChunkReader<'a>, ids: Vec<ChunkId>) -> Self {
        ChunkStreamReader {
            reader,
            ids: ids.into_iter(),
            current: Vec::new(),
            pos: 0,
        }
    }
}

impl std::io::Read for ChunkStreamReader<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.current.len() {
            let Some(id) = self.ids.next() else {
                return Ok(0);
            };
            self.current = self
                .reader
                .read_chunk(&id)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            self.pos = 0;
        }
        let n = buf.len().min(self.current.len() - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
