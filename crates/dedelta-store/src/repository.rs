//! The repository: a backend, its config, and (once indexed) the chunk index.
//!
//! Typestate in two steps: [`Repository`] is open (config read), [`IndexedRepository`] also has
//! the chunk index, and only it can read or write chunks. Writing also needs a [`RepoLock`].

use crate::backend::local::LocalBackend;
use crate::backend::{Backend, FileKind};
use crate::config::RepoConfig;
use crate::container::{self, ContainerId, ContainerMeta, EntryKind, FOOTER_LEN};
use crate::error::{Error, Result};
use crate::index::{ChunkIndex, IndexReader};
use crate::lock::{LockInfo, RepoLock};
use dedelta_core::delta::{new_codec, DeltaKind};
use dedelta_core::ChunkId;
use lru::LruCache;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An open repository: backend and config.
#[derive(Debug)]
pub struct Repository {
    backend: Arc<dyn Backend>,
    config: RepoConfig,
    index_path: PathBuf,
}

impl Repository {
    /// Creates a repository in a local directory (which must be absent or empty).
    pub fn init_local(path: &Path, config: RepoConfig) -> Result<Self> {
        config.validate()?;
        if path.join("config").exists() {
            return Err(Error::RepoExists(path.to_path_buf()));
        }
        if let Ok(mut rd) = std::fs::read_dir(path) {
            if rd.next().is_some() {
                return Err(Error::InvalidOption(format!(
                    "{} exists and is not empty",
                    path.display()
                )));
            }
        }
        let backend = LocalBackend::new(path);
        backend.create_layout()?;
        backend.put(FileKind::Config, "config", &config.to_bytes())?;
        Self::open_local(path)
    }

    /// Opens a repository in a local directory.
    pub fn open_local(path: &Path) -> Result<Self> {
        let cfg = path.join("config");
        match std::fs::metadata(&cfg) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::RepoNotFound(path.to_path_buf()))
            }
            Err(e) => return Err(Error::io(format!("reading {}", cfg.display()), e)),
        }
        let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new(path));
        Self::open(backend, path.join("index").join("chunks.redb"))
    }

    /// Opens a repository on any backend, with the chunk index cached at `index_path`.
    pub fn open(backend: Arc<dyn Backend>, index_path: PathBuf) -> Result<Self> {
        let config = RepoConfig::load(backend.as_ref())?;
        Ok(Repository {
            backend,
            config,
            index_path,
        })
    }

    /// The config.
    pub fn config(&self) -> &RepoConfig {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Takes the exclusive lock.
    pub fn lock(&self, me: &LockInfo) -> Result<RepoLock> {
        RepoLock::acquire(self.backend.clone(), me)
    }

    /// Opens the chunk index. A missing index is rebuilt from the containers.
    pub fn open_index(self) -> Result<IndexedRepository> {
        let fresh = !self.index_path.exists();
        let index = ChunkIndex::open(&self.index_path)?;
        let repo = IndexedRepository { repo: self, index };
        if fresh && !repo.backend().list(FileKind::Container)?.is_empty() {
            crate::commands::repair::rebuild_index(&repo, &mut |_| {})?;
        }
        Ok(repo)
    }
}

/// A repository with its chunk index: can read and write chunks.
#[derive(Debug)]
pub struct IndexedRepository {
    repo: Repository,
    index: ChunkIndex,
}

impl std::ops::Deref for IndexedRepository {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        &self.repo
    }
}

impl IndexedRepository {
    /// The chunk index.
    pub fn index(&self) -> &ChunkIndex {
        &self.index
    }

    /// Reads and checks the metadata section of a container (two ranged reads).
    pub fn read_container_meta(&self, id: &ContainerId) -> Result<ContainerMeta> {
        read_container_meta(self.backend.as_ref(), &id.to_hex())
    }

    /// A chunk reader with caches of `cache_bytes` for decompressed regions.
    pub fn chunk_reader(&self, cache_bytes: usize) -> Result<ChunkReader<'_>> {
        ChunkReader::new(self, cache_bytes)
    }
}

/// Appends compressed regions to containers and stores each full container durably, then
/// indexes it (data before index: the crash-safety order). Shared by backup and prune.
pub struct ContainerWriter<'a> {
    repo: &'a IndexedRepository,
    builder: crate::container::ContainerBuilder,
    container_size: usize,
    /// Containers written so far.
    pub written: Vec<ContainerId>,
    /// Bytes of those containers.
    pub bytes_written: u64,
}

impl<'a> ContainerWriter<'a> {
    /// A writer sealing containers at about the repository's container size.
    pub fn new(repo: &'a IndexedRepository) -> Self {
        ContainerWriter {
            repo,
            builder: crate::container::ContainerBuilder::new(),
            container_size: repo.config().container_size,
            written: Vec::new(),
            bytes_written: 0,
        }
    }

    /// Adds a region, first storing the open container if the region would overflow it.
    pub fn add_region(&mut self, region: crate::container::CompressedRegion) -> Result<()> {
        if !self.builder.is_empty()
            && self.builder.len() + region.stored.len() > self.container_size
        {
            self.seal()?;
        }
        self.builder.add_region(region);
        Ok(())
    }

    /// Stores and indexes the open container, if it holds anything.
    pub fn seal(&mut self) -> Result<()> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let (id, bytes, meta) = std::mem::take(&mut self.builder).seal();
        self.repo
            .backend()
            .put(FileKind::Container, &id.to_hex(), &bytes)?;
        self.repo.index().insert_container(id, &meta)?;
        self.written.push(id);
        self.bytes_written += bytes.len() as u64;
        Ok(())
    }
}

/// Reads and checks the metadata of the container named `name`.
pub fn read_container_meta(backend: &dyn Backend, name: &str) -> Result<ContainerMeta> {
    let what = format!("container {name}");
    let size = backend.size(FileKind::Container, name)?;
    if size < (container::HEADER_LEN + FOOTER_LEN) as u64 {
        return Err(Error::corrupt(what, "file too short"));
    }
    let footer_bytes =
        backend.get_range(FileKind::Container, name, -(FOOTER_LEN as i64), FOOTER_LEN)?;
    let footer = container::decode_footer(&footer_bytes, size, &what)?;
    let meta = backend.get_range(
        FileKind::Container,
        name,
        footer.meta_offset as i64,
        footer.meta_len as usize,
    )?;
    container::decode_meta(&meta, &footer, &what)
}

/// Counters of a [`ChunkReader`].
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

/// Reads chunks back: index lookup, container metadata and region caches, delta decoding,
/// and fingerprint verification of every chunk returned.
pub struct ChunkReader<'a> {
    repo: &'a IndexedRepository,
    index: IndexReader,
    metas: LruCache<ContainerId, Arc<ContainerMeta>>,
    regions: LruCache<(ContainerId, u32), Arc<Vec<u8>>>,
    /// Verified base chunks: a base used by many deltas is read and hashed once.
    bases: LruCache<ChunkId, Arc<Vec<u8>>>,
    decompressor: dedelta_core::compress::RegionDecompressor,
    region_bytes: usize,
    cache_bytes: usize,
    stats: ReadStats,
}

impl<'a> ChunkReader<'a> {
    fn new(repo: &'a IndexedRepository, cache_bytes: usize) -> Result<Self> {
        Ok(ChunkReader {
            repo,
            index: repo.index.reader()?,
            metas: LruCache::new(std::num::NonZeroUsize::new(256).expect("256 is non-zero")),
            regions: LruCache::unbounded(),
            bases: LruCache::new(std::num::NonZeroUsize::new(4096).expect("4096 is non-zero")),
            decompressor: Default::default(),
            region_bytes: 0,
            cache_bytes,
            stats: ReadStats::default(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
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
        let stored = self.repo.backend.get_range(
            FileKind::Container,
            &cid.to_hex(),
            i64::from(r.offset),
            r.stored_len as usize,
        )?;
        self.stats.regions_read += 1;
        self.stats.bytes_read += stored.len() as u64;
        let raw = Arc::new(container::open_region_with(
            &mut self.decompressor,
            &stored,
            r,
            &what,
        )?);
        self.region_bytes += raw.len();
        self.regions.put((cid, index), raw.clone());
        while self.region_bytes > self.cache_bytes && self.regions.len() > 1 {
            if let Some((_, old)) = self.regions.pop_lru() {
                self.region_bytes -= old.len();
            }
        }
        Ok(raw)
    }

    /// Re-reads the index, to see chunks committed since this reader was made.
    pub fn refresh_index(&mut self) -> Result<()> {
        self.index = self.repo.index.reader()?;
        Ok(())
    }

    /// The full chunk to use as a delta base for `id`: `id` itself if it is stored in full,
    /// else the base of its delta (deltas are one level deep). `None` if it is not indexed.
    pub fn resolve_base(&mut self, id: &ChunkId) -> Result<Option<(ChunkId, Vec<u8>)>> {
        let Some(loc) = self.index.get(id)? else {
            return Ok(None);
        };
        let meta = self.meta(loc.container)?;
        let base = match meta.entries.get(loc.entry as usize).map(|e| e.kind) {
            Some(EntryKind::Full) => *id,
            Some(EntryKind::Delta { base }) => base,
            None => return Ok(None),
        };
        match self.read(&base, false) {
            Ok(bytes) => Ok(Some((base, bytes))),
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

    /// Like [`Self::read_chunk`], but leaves the final fingerprint check to the caller, who
    /// must call [`verify_chunk`] before using the bytes (restore does it on its writer
    /// thread, to spread the hashing over both cores). Delta bases are still verified here.
    pub fn read_chunk_unverified(&mut self, id: &ChunkId) -> Result<(Vec<u8>, ContainerId)> {
        self.read_inner(id, true, false)
    }

    fn read(&mut self, id: &ChunkId, allow_delta: bool) -> Result<Vec<u8>> {
        self.read_inner(id, allow_delta, true).map(|(d, _)| d)
    }

    fn read_inner(
        &mut self,
        id: &ChunkId,
        allow_delta: bool,
        verify: bool,
    ) -> Result<(Vec<u8>, ContainerId)> {
        let loc = self
            .index
            .get(id)?
            .ok_or_else(|| Error::ChunkMissing(id.to_hex()))?;
        let corrupt = |reason: String| Error::CorruptChunk {
            container: loc.container.to_hex(),
            chunk: id.to_hex(),
            reason,
        };
        let meta = self
            .meta(loc.container)
            .map_err(|e| corrupt(e.to_string()))?;
        let entry = meta.entries.get(loc.entry as usize).ok_or_else(|| {
            corrupt(format!(
                "index names entry {} which does not exist",
                loc.entry
            ))
        })?;
        if entry.id != *id {
            return Err(corrupt("index points at another chunk's entry".into()));
        }
        let region = self
            .region(loc.container, &meta, entry.region)
            .map_err(|e| corrupt(e.to_string()))?;
        let bytes = &region[entry.offset as usize..(entry.offset + entry.stored_len) as usize];
        let data = match entry.kind {
            EntryKind::Full => bytes.to_vec(),
            EntryKind::Delta { base } => {
                if !allow_delta {
                    return Err(corrupt("a delta is used as a delta base".into()));
                }
                let base_bytes = match self.bases.get(&base) {
                    Some(b) => {
                        self.stats.base_cache_hits += 1;
                        b.clone()
                    }
                    None => {
                        self.stats.base_cache_misses += 1;
                        let b = Arc::new(self.read(&base, false).map_err(|e| {
                            corrupt(format!("its delta base {base} is unreadable: {e}"))
                        })?);
                        self.bases.put(base, b.clone());
                        b
                    }
                };
                let mut out = Vec::with_capacity(entry.original_len as usize);
                new_codec(DeltaKind::Ddelta)
                    .decode(&base_bytes, bytes, &mut out)
                    .map_err(|e| corrupt(e.to_string()))?;
                self.stats.deltas_decoded += 1;
                out
            }
        };
        if data.len() != entry.original_len as usize || (verify && ChunkId::of(&data) != *id) {
            return Err(corrupt("content does not match its fingerprint".into()));
        }
        Ok((data, loc.container))
    }
}

/// Checks bytes returned by [`ChunkReader::read_chunk_unverified`] against their fingerprint.
pub fn verify_chunk(id: &ChunkId, container: &ContainerId, data: &[u8]) -> Result<()> {
    if ChunkId::of(data) == *id {
        Ok(())
    } else {
        Err(Error::CorruptChunk {
            container: container.to_hex(),
            chunk: id.to_hex(),
            reason: "content does not match its fingerprint".into(),
        })
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
