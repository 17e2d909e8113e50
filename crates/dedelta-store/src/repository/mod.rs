//! The repository: a backend, its config, and (once indexed) the chunk index.
//!
//! Typestate in two steps: [`Repository`] is open (config read), [`IndexedRepository`] also has
//! the chunk index, and only it can read or write chunks. Writing also needs a [`RepoLock`].
//!
//! A repository can meter its I/O ([`Repository::metered`]): every request is then counted by
//! purpose (see [`crate::backend::wrap::metered`]), and readers that read for one purpose take
//! a handle tagged with it from [`Repository::backend_for`].

pub mod damage;
pub mod index_files;
pub mod index_rebuild;
pub mod index_sync;
pub mod keys;
pub mod lock;
pub mod lock_guard;
pub mod snapshot_filter;
pub mod snapshots;

use crate::backend::local::LocalBackend;
use crate::backend::wrap::metered::{IoCounts, MeteredBackend, Purpose};
use crate::backend::{Backend, FileKind};
use crate::client::index::{ChunkIndex, PrivateIndex};
use crate::error::{Error, Result};
use crate::format::config::RepoConfig;
use crate::format::container::{self, ContainerBuilder, ContainerId, ContainerMeta, FOOTER_LEN};
use crate::repository::lock::{LockInfo, LockMode, LockTiming, RepoLock};
use crate::repository::lock_guard::WriteGuard;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// An open repository: backend and config.
#[derive(Debug)]
pub struct Repository {
    backend: Arc<dyn Backend>,
    /// Under `backend` (and its meter): refuses writes once the lock is lost.
    guard: Arc<WriteGuard>,
    /// With [`Self::metered`]: the meter `backend` is, for tagged handles and counts.
    metered: Option<Arc<MeteredBackend>>,
    config: RepoConfig,
    index_path: PathBuf,
    /// The directory of a local repository (for removing a legacy in-repository index).
    local_root: Option<PathBuf>,
    /// In an encrypted repository: the seal `backend` is (or is under the meter of), for
    /// sealing the meter's tagged handles too, and the key that opened it.
    unlocked: Option<keys::Unlocked>,
    /// The repository's directory under a cache root, when opened so (see
    /// [`crate::client::cache::mark_used`]).
    cache_dir: Option<PathBuf>,
    /// Reads one reader may have in flight at once (see [`Self::reads_in_flight`]).
    reads_in_flight: usize,
    /// Whether every read is a round trip (see [`Self::reads_are_round_trips`]).
    round_trips: bool,
    /// Whether backups publish index files (see [`Self::writes_index_files`]).
    index_files: bool,
}

/// Reads in flight at once for a repository on a local disk: its page cache or queue serves
/// one at a time as well, so these mostly let regions be decompressed beside each other.
pub const LOCAL_READS_IN_FLIGHT: usize = 2;

/// Asks for the password of an encrypted repository (only when it is encrypted).
pub type PasswordPrompt<'a> = &'a mut dyn FnMut() -> Result<zeroize::Zeroizing<String>>;

/// For repositories opened without a password: an encrypted one is refused.
fn no_password() -> Result<zeroize::Zeroizing<String>> {
    Err(Error::PasswordNeeded)
}

impl Repository {
    /// Creates a repository in a local directory (which must be absent or empty), its index
    /// in the default cache root (see [`Self::open_local`]).
    pub fn init_local(path: &Path, config: RepoConfig) -> Result<Self> {
        Self::init_local_with_cache(path, config, &crate::client::cache::root_or_temp())
    }

    /// Creates a repository in a local directory (which must be absent or empty), its index
    /// under the cache root `cache_root`.
    pub fn init_local_with_cache(
        path: &Path,
        config: RepoConfig,
        cache_root: &Path,
    ) -> Result<Self> {
        config.validate()?;
        Self::check_new_local(path)?;
        if config.is_encrypted() {
            return Err(Error::InvalidOption(
                "an encrypted repository is made by Repository::init_local_encrypted".into(),
            ));
        }
        let backend = LocalBackend::new(path);
        backend.create_layout()?;
        backend.put(FileKind::Config, "config", &config.to_bytes())?;
        Self::open_local_with_cache(path, cache_root)
    }

    /// Checks that `path` can hold a new repository (absent or empty).
    fn check_new_local(path: &Path) -> Result<()> {
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
        Ok(())
    }

    /// Opens a repository in a local directory, with its chunk index in the default cache
    /// root (see [`crate::client::cache::root_or_temp`]).
    pub fn open_local(path: &Path) -> Result<Self> {
        Self::open_local_with_cache(path, &crate::client::cache::root_or_temp())
    }

    /// Opens a repository in a local directory, with its chunk index under the cache root
    /// `cache_root` (in `<cache_root>/<repository id>/`).
    pub fn open_local_with_cache(path: &Path, cache_root: &Path) -> Result<Self> {
        Self::open_local_unlocking(path, cache_root, &mut no_password)
    }

    /// [`Self::open_local_with_cache`], calling `password` for the password if the
    /// repository is encrypted.
    ///
    /// # Errors
    /// [`Error::WrongPassword`] if no key file opens with it; what `password` returns.
    pub fn open_local_unlocking(
        path: &Path,
        cache_root: &Path,
        password: PasswordPrompt<'_>,
    ) -> Result<Self> {
        let cfg = path.join("config");
        match std::fs::metadata(&cfg) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::RepoNotFound(path.to_path_buf()))
            }
            Err(e) => return Err(Error::io(format!("reading {}", cfg.display()), e)),
        }
        let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new(path));
        let mut repo = Self::open_in_cache_unlocking(backend, cache_root, password)?;
        repo.local_root = Some(path.to_path_buf());
        Ok(repo)
    }

    /// Opens a repository on any backend, with the chunk index under the cache root
    /// `cache_root` (in `<cache_root>/<repository id>/`).
    pub fn open_in_cache(backend: Arc<dyn Backend>, cache_root: &Path) -> Result<Self> {
        Self::open_in_cache_unlocking(backend, cache_root, &mut no_password)
    }

    /// [`Self::open_in_cache`], calling `password` if the repository is encrypted.
    pub fn open_in_cache_unlocking(
        backend: Arc<dyn Backend>,
        cache_root: &Path,
        password: PasswordPrompt<'_>,
    ) -> Result<Self> {
        let (config, unlocked) = keys::read_config(backend.clone(), password)?;
        let dir = crate::client::cache::repo_dir(cache_root, &config.id)?;
        let mut repo = Self::assemble(
            backend,
            config,
            unlocked,
            dir.join(crate::client::cache::INDEX_FILE),
        );
        repo.cache_dir = Some(dir);
        Ok(repo)
    }

    /// Opens a repository on any backend, with the chunk index at `index_path`.
    pub fn open(backend: Arc<dyn Backend>, index_path: PathBuf) -> Result<Self> {
        Self::open_unlocking(backend, index_path, &mut no_password)
    }

    /// [`Self::open`], calling `password` if the repository is encrypted.
    pub fn open_unlocking(
        backend: Arc<dyn Backend>,
        index_path: PathBuf,
        password: PasswordPrompt<'_>,
    ) -> Result<Self> {
        let (config, unlocked) = keys::read_config(backend.clone(), password)?;
        Ok(Self::assemble(backend, config, unlocked, index_path))
    }

    /// A repository on `raw`: behind a [`WriteGuard`], and sealed above the guard if
    /// `unlocked` (so that sealed writes pass the guard too).
    fn assemble(
        raw: Arc<dyn Backend>,
        config: RepoConfig,
        unlocked: Option<keys::Unlocked>,
        index_path: PathBuf,
    ) -> Self {
        let guard = Arc::new(WriteGuard::new(raw));
        let backend: Arc<dyn Backend> = match &unlocked {
            Some(u) => Arc::new(u.seal.rewrap(guard.clone())),
            None => guard.clone(),
        };
        Repository {
            backend,
            guard,
            metered: None,
            config,
            index_path,
            local_root: None,
            unlocked,
            cache_dir: None,
            reads_in_flight: LOCAL_READS_IN_FLIGHT,
            round_trips: false,
            index_files: false,
        }
    }

    /// How many reads a reader that reads many objects at once (backup's delta bases) keeps
    /// in flight: `--connections` on an object store, where each read is a round trip,
    /// [`LOCAL_READS_IN_FLIGHT`] on a disk.
    pub fn reads_in_flight(&self) -> usize {
        self.reads_in_flight
    }

    /// Sets [`Self::reads_in_flight`] (at least 1).
    pub fn with_reads_in_flight(mut self, n: usize) -> Self {
        self.reads_in_flight = n.max(1);
        self
    }

    /// Whether each read costs a round trip (an object store), so that a reader should read
    /// a little more than it needs now rather than come back for it (backup's delta bases:
    /// the next regions of a container it reads).
    pub fn reads_are_round_trips(&self) -> bool {
        self.round_trips
    }

    /// Sets [`Self::reads_are_round_trips`].
    pub fn with_round_trips(mut self, round_trips: bool) -> Self {
        self.round_trips = round_trips;
        self
    }

    /// Whether backups publish index files ([`index_files`]): on an object store, where they
    /// spare a client with an empty cache one request per container (13 requests instead of
    /// 1,133 for 374 containers); not on a local disk, where reading the containers' metadata
    /// is cheap and the files would be 13 % of a SQLAlchemy repository (2.0 of 17.1 MB, their
    /// ids and super-features do not compress). Prune and repair keep existing files
    /// consistent either way, and readers use whatever files there are.
    pub fn writes_index_files(&self) -> bool {
        self.index_files
    }

    /// Sets [`Self::writes_index_files`].
    pub fn with_index_files(mut self, write: bool) -> Self {
        self.index_files = write;
        self
    }

    /// Seals `b` if the repository is encrypted.
    fn sealed(&self, b: Arc<dyn Backend>) -> Arc<dyn Backend> {
        match &self.unlocked {
            Some(u) => Arc::new(u.seal.rewrap(b)),
            None => b,
        }
    }

    /// Opens the repository at `location`: an S3 URL (`s3:http://HOST:PORT/BUCKET/PREFIX`,
    /// see [`crate::backend::open_url`], with at most `connections` requests in flight) or a
    /// local directory; the chunk index under `cache_root`.
    pub fn open_location(
        location: &str,
        cache_root: &Path,
        connections: Option<usize>,
    ) -> Result<Self> {
        Self::open_location_unlocking(location, cache_root, connections, &mut no_password)
    }

    /// [`Self::open_location`], calling `password` if the repository is encrypted.
    pub fn open_location_unlocking(
        location: &str,
        cache_root: &Path,
        connections: Option<usize>,
        password: PasswordPrompt<'_>,
    ) -> Result<Self> {
        let Some(backend) = crate::backend::open_url(location, connections) else {
            return Self::open_local_unlocking(Path::new(location), cache_root, password);
        };
        let backend = backend?;
        let in_flight = connections.unwrap_or(crate::backend::s3::config::DEFAULT_CONNECTIONS);
        match Self::open_in_cache_unlocking(backend, cache_root, password) {
            Err(Error::ObjectMissing { .. }) => Err(Error::RepoNotFound(location.into())),
            other => other.map(|r| {
                r.with_reads_in_flight(in_flight)
                    .with_round_trips(true)
                    .with_index_files(true)
            }),
        }
    }

    /// Creates a repository at `location` (an S3 URL, or a local directory that must be
    /// absent or empty), its index under `cache_root`.
    pub fn init_location(
        location: &str,
        config: RepoConfig,
        cache_root: &Path,
        connections: Option<usize>,
    ) -> Result<Self> {
        let Some(backend) = crate::backend::open_url(location, connections) else {
            return Self::init_local_with_cache(Path::new(location), config, cache_root);
        };
        let backend = backend?;
        config.validate()?;
        if backend.exists(FileKind::Config, "config")? {
            return Err(Error::RepoExists(location.into()));
        }
        backend.put(FileKind::Config, "config", &config.to_bytes())?;
        Self::open_in_cache(backend, cache_root)
    }

    /// The same open repository (backend, key, config) with its chunk index at `index_path`.
    pub fn with_index_path(mut self, index_path: PathBuf) -> Self {
        self.index_path = index_path;
        self
    }

    /// Where the chunk index is kept (a client cache, not part of the repository).
    pub fn index_path(&self) -> &Path {
        &self.index_path
    }

    /// Removes `index/`, where versions before the index moved to the client cache kept it
    /// inside a local repository; it is only a cache, and nothing reads it any more. The
    /// caller holds the lock (so that no older client is writing it). Returns a notice if
    /// something was removed.
    pub fn remove_legacy_index(&self, _lock: &RepoLock) -> Result<Option<String>> {
        let Some(root) = &self.local_root else {
            return Ok(None);
        };
        let dir = root.join("index");
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(Some(format!(
                "removed {}: the chunk index now lives in the client cache ({})",
                dir.display(),
                self.index_path.display()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("removing {}", dir.display()), e)),
        }
    }

    /// The config.
    pub fn config(&self) -> &RepoConfig {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Meters every request made from now on (the config, already read, is not counted), by
    /// purpose: see [`Self::backend_for`] and [`Self::io_counts`]. Counting costs two relaxed
    /// atomic additions per request. Metering twice keeps the first meter.
    pub fn metered(mut self) -> Self {
        if self.metered.is_none() {
            // The meter is under the seal: it counts the bytes stored and read.
            let under: Arc<dyn Backend> = self.guard.clone();
            let m = Arc::new(MeteredBackend::new(under));
            self.backend = self.sealed(m.clone());
            self.metered = Some(m);
        }
        self
    }

    /// The backend for requests made for `purpose`: with [`Self::metered`] a handle that files
    /// every request under it, else [`Self::backend`]. Requests through [`Self::backend`] are
    /// filed by their kind ([`Purpose::of_kind`]: containers as chunk data).
    pub fn backend_for(&self, purpose: Purpose) -> Arc<dyn Backend> {
        match &self.metered {
            Some(m) => self.sealed(Arc::new(m.tagged(purpose))),
            None => self.backend.clone(),
        }
    }

    /// The backend under the meter: for reads that only serve a measurement and would
    /// distort the counts. [`Self::backend`] when not metered.
    pub fn unmetered_backend(&self) -> Arc<dyn Backend> {
        match &self.metered {
            Some(m) => self.sealed(m.inner().clone()),
            None => self.backend.clone(),
        }
    }

    /// The requests and bytes counted since [`Self::metered`], by purpose and direction;
    /// `None` when not metered.
    pub fn io_counts(&self) -> Option<IoCounts> {
        self.metered.as_ref().map(|m| m.meter().counts())
    }

    /// Every snapshot, readable or not, through the client's snapshot cache when the
    /// repository was opened with a cache directory (see [`snapshots::list_cached`]).
    pub fn snapshots(&self) -> Result<snapshots::SnapshotList> {
        snapshots::list_cached(self.backend.as_ref(), self.cache_dir.as_deref())
    }

    /// Writes a snapshot durably and adds it to the client's snapshot cache; returns its id
    /// (see [`snapshots::save_cached`]).
    pub fn save_snapshot(
        &self,
        snapshot: &crate::format::snapshot::Snapshot,
    ) -> Result<crate::format::snapshot::SnapshotId> {
        snapshots::save_cached(self.backend.as_ref(), self.cache_dir.as_deref(), snapshot)
    }

    /// The snapshot named by a unique id prefix, or `latest`.
    pub fn find_snapshot(
        &self,
        spec: &str,
    ) -> Result<(
        crate::format::snapshot::SnapshotId,
        crate::format::snapshot::Snapshot,
    )> {
        self.find_snapshot_filtered(spec, &snapshot_filter::SnapshotFilter::default())
    }

    /// The snapshot named by a unique id prefix, or `latest` among those `filter` selects.
    pub fn find_snapshot_filtered(
        &self,
        spec: &str,
        filter: &snapshot_filter::SnapshotFilter,
    ) -> Result<(
        crate::format::snapshot::SnapshotId,
        crate::format::snapshot::Snapshot,
    )> {
        snapshots::find_filtered(
            self.backend.as_ref(),
            self.cache_dir.as_deref(),
            spec,
            filter,
        )
    }

    /// Takes an exclusive lock (timing from the environment, see [`LockTiming::from_env`]).
    pub fn lock(&self, me: &LockInfo) -> Result<RepoLock> {
        self.lock_with(me, LockMode::Exclusive, Duration::ZERO)
    }

    /// Takes a lock in `mode`, retrying for up to `retry_for` while the repository is
    /// locked, and guards every later write of this repository with it: once the lock is
    /// lost, writes fail (see [`lock`]).
    pub fn lock_with(
        &self,
        me: &LockInfo,
        mode: LockMode,
        retry_for: Duration,
    ) -> Result<RepoLock> {
        let lock = RepoLock::acquire_retrying(
            self.guard.inner().clone(),
            me,
            mode,
            LockTiming::from_env(),
            retry_for,
        )?;
        self.guard.watch(lock.health().clone());
        Ok(lock)
    }

    /// Opens the chunk index. The index is a cache of the containers' metadata: an index that
    /// is missing, incomplete (a rebuild never finished) or damaged is discarded and rebuilt,
    /// and [`IndexedRepository::notices`] says so. An index open in another process is
    /// copied, and this process works on its private copy ([`PrivateIndex`]).
    pub fn open_index(self) -> Result<IndexedRepository> {
        let mut notices = Vec::new();
        let opened = match ChunkIndex::open(&self.index_path) {
            Ok(i) => Ok(i),
            Err(Error::IndexDamaged(why)) => {
                // `ChunkIndex::open` has already removed the damaged file.
                notices.push(format!(
                    "the chunk index {} was damaged ({why}); it was discarded and rebuilt",
                    self.index_path.display()
                ));
                ChunkIndex::open(&self.index_path)
            }
            Err(e) => Err(e),
        };
        match opened {
            Ok(index) => self.with_opened_index(index, None, notices),
            Err(Error::IndexInUse(_)) => {
                notices.push(format!(
                    "the chunk index {} is in use by another dedelta process: this command \
                     works on a private copy of it (the shared index catches up on its next use)",
                    self.index_path.display()
                ));
                self.open_private_index_noting(notices)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens a private copy of the chunk index ([`PrivateIndex`]), whether or not another
    /// process has it open: for a command that runs for hours (`mount`) and should not keep
    /// every other command on the index waiting.
    pub fn open_private_index(self) -> Result<IndexedRepository> {
        self.open_private_index_noting(Vec::new())
    }

    fn open_private_index_noting(mut self, notices: Vec<String>) -> Result<IndexedRepository> {
        let (private, index) = PrivateIndex::open(&self.index_path)?;
        self.index_path = private.manifest().to_path_buf();
        self.with_opened_index(index, Some(private), notices)
    }

    /// Catches `index` up with the repository (or rebuilds it if it is incomplete).
    fn with_opened_index(
        self,
        index: ChunkIndex,
        private: Option<PrivateIndex>,
        notices: Vec<String>,
    ) -> Result<IndexedRepository> {
        if let Some(dir) = &self.cache_dir {
            crate::client::cache::mark_used(dir, self.local_root.as_deref());
        }
        // Rebuilds, catch-ups and backups record super-features as the config says (a
        // backup that overrides it sets its own for its run).
        index.set_sketch_keep(self.config().delta.sketch_keep);
        let repo = IndexedRepository {
            repo: self,
            index,
            _private: private,
            notices: std::sync::Mutex::new(notices),
        };
        if !repo.index.is_complete()? {
            let st = index_rebuild::rebuild_index(&repo, &mut |_| {})?;
            for p in &st.problems {
                repo.notice(format!("index rebuild: {p}"));
            }
        } else {
            repo.sync_index()?;
        }
        Ok(repo)
    }
}

/// A repository with its chunk index: can read and write chunks.
#[derive(Debug)]
pub struct IndexedRepository {
    repo: Repository,
    index: ChunkIndex,
    /// The private copy `index` is opened from, if any: removed after `index` is closed
    /// (fields drop in order).
    _private: Option<PrivateIndex>,
    /// Things the user should know that did not stop the command (an index rebuilt).
    notices: std::sync::Mutex<Vec<String>>,
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

    /// The repository without its index (the index file's lock released), still unlocked if
    /// encrypted: `mount` reopens it on a private copy of the index.
    pub fn into_repository(self) -> Repository {
        self.repo
    }

    /// Replaces a damaged index (whose file [`ChunkIndex`] has already removed) with a fresh
    /// one rebuilt from the containers.
    pub fn reset_index(&self) -> Result<()> {
        self.index.reset()?;
        index_rebuild::rebuild_index(self, &mut |_| {})?;
        Ok(())
    }

    /// Catches the index up with containers and damage records other clients wrote or
    /// deleted (see [`index_sync`]); what the user should know becomes a notice.
    pub fn sync_index(&self) -> Result<index_sync::SyncStats> {
        let st = index_sync::sync_index(self)?;
        for n in &st.notices {
            self.notice(format!("index: {n}"));
        }
        Ok(st)
    }

    /// Records in the index that it reflects the damage records as they are now: for a
    /// command that wrote records and adjusted the index itself (else the next open, seeing
    /// records it has not applied, would rebuild the index).
    pub fn index_applies_damage_records(&self) -> Result<()> {
        let (set, _) = damage::DamageSet::load(self.backend().as_ref())?;
        self.index.set_damage_digest(set.digest())
    }

    /// Takes the notices gathered so far (an index that was rebuilt, records skipped).
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.lock_notices())
    }

    /// Adds a notice for the user.
    pub fn notice(&self, msg: String) {
        self.lock_notices().push(msg);
    }

    fn lock_notices(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // A poisoned list only means a thread panicked while pushing a string; it is intact.
        self.notices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads and checks the metadata section of a container (a size query and two ranged
    /// reads, metered as [`Purpose::ContainerMeta`]).
    pub fn read_container_meta(&self, id: &ContainerId) -> Result<ContainerMeta> {
        read_container_meta(
            self.backend_for(Purpose::ContainerMeta).as_ref(),
            &id.to_hex(),
        )
    }

    /// [`Self::read_container_meta`] in one suffix read (two when the section is larger than
    /// it: [`read_container_meta_tail`]), for restore and dump.
    pub fn read_container_meta_tail(&self, id: &ContainerId) -> Result<ContainerMeta> {
        read_container_meta_tail(
            self.backend_for(Purpose::ContainerMeta).as_ref(),
            &id.to_hex(),
        )
    }
}

/// Appends compressed regions to containers and stores each full container durably, then
/// indexes it (data before index: the crash-safety order). Shared by backup and prune.
pub struct ContainerWriter<'a> {
    repo: &'a IndexedRepository,
    builder: ContainerBuilder,
    /// The region being filled by [`Self::push_entry`] (backup fills regions itself, on its
    /// worker pool, and hands them over through [`Self::add_region`]).
    region: crate::format::container::RegionBuilder,
    container_size: usize,
    /// Containers written so far.
    pub written: Vec<ContainerId>,
    /// Bytes of those containers.
    pub bytes_written: u64,
    /// With [`Self::clearing_healed_records`]: the containers damage records name.
    recorded: Option<std::collections::HashSet<ContainerId>>,
    /// Containers written under the name of a container recorded as damaged, whose records
    /// were cleared.
    pub healed: Vec<ContainerId>,
    /// With [`Self::indexing_in_batches`]: containers written, durable, not indexed yet.
    pending: Option<Vec<(ContainerId, ContainerMeta)>>,
    /// With [`Self::returning_buffers`]: where the buffers of regions added go back.
    buffers: Option<crate::buffers::BufferPool>,
    /// The records of the containers written, for the index files (see [`index_files`]).
    index_files: index_files::IndexFilePublisher,
}

/// Containers a backup indexes in one commit (one run file of the index). A commit costs a
/// sorted write of the batch's entries and two fsyncs, whatever the index's size; 8 of 4 MiB
/// are 32 MiB of data, which the memory base cache's share for new chunks (32 MiB by
/// default) still holds while their chunks are not indexed: a chunk similar to one of them
/// finds its base in memory or, once indexed, in the repository.
const INDEX_BATCH: usize = 8;

impl<'a> ContainerWriter<'a> {
    /// A writer sealing containers at about the repository's container size.
    pub fn new(repo: &'a IndexedRepository) -> Self {
        ContainerWriter {
            repo,
            builder: ContainerBuilder::with_version(repo.config().container_version()),
            region: crate::format::container::RegionBuilder::default(),
            container_size: repo.config().container_size,
            written: Vec::new(),
            bytes_written: 0,
            recorded: None,
            healed: Vec::new(),
            pending: None,
            buffers: None,
            index_files: index_files::IndexFilePublisher::default(),
        }
    }

    /// Makes the writer give the stored-bytes buffer of every region added with
    /// [`Self::add_region`] back to `pool` (backup's regions are compressed into buffers of
    /// that pool; see [`crate::buffers`]).
    pub fn returning_buffers(mut self, pool: crate::buffers::BufferPool) -> Self {
        self.buffers = Some(pool);
        self
    }

    /// Makes the writer index containers [`INDEX_BATCH`] at a time (each container is still
    /// durable before its entries are indexed); the caller calls [`Self::index_pending`]
    /// before anything that needs them indexed (a snapshot). One durable index commit per
    /// container made the index most of a backup of new data.
    pub fn indexing_in_batches(mut self) -> Self {
        self.pending = Some(Vec::new());
        self
    }

    /// Indexes every container written and not indexed yet.
    pub fn index_pending(&mut self) -> Result<()> {
        if let Some(pending) = self.pending.as_mut() {
            if !pending.is_empty() {
                self.repo
                    .index()
                    .insert_containers(pending.iter().map(|(id, meta)| (*id, meta)))?;
                pending.clear();
            }
        }
        Ok(())
    }

    /// Writes the records of the containers written since the last index file as one index
    /// file (see [`index_files`]): a backup calls it once its containers are durable, before
    /// its snapshot. Returns the names of every index file this writer wrote.
    pub fn publish_index_files(&mut self) -> Result<&[String]> {
        self.index_files.publish(self.repo)?;
        Ok(&self.index_files.published)
    }

    /// Makes the writer clear the damage records of a container it writes again. Names are
    /// content hashes, so a container written under the name of one recorded as damaged (a
    /// backup that stores the damaged chunks again, in the same order, writes the very
    /// original) has replaced the damaged file with good bytes: its records are void, and
    /// left in place they would keep its (good, indexed) chunks from being used.
    pub fn clearing_healed_records(mut self) -> Result<Self> {
        let (set, _) = damage::DamageSet::load(self.repo.backend().as_ref())?;
        self.recorded = Some(set.containers());
        Ok(self)
    }

    /// Adds a region, first storing the open container if the region would overflow it.
    pub fn add_region(&mut self, region: crate::format::container::CompressedRegion) -> Result<()> {
        if !self.builder.is_empty()
            && self.builder.len() + region.stored.len() > self.container_size
        {
            self.seal()?;
        }
        let stored = self.builder.add_region_returning(region);
        if let Some(pool) = &self.buffers {
            pool.give(stored);
        }
        Ok(())
    }

    /// Adds one entry (compressing its region on this thread when the region is full): for
    /// prune and repair, which copy entries one at a time.
    pub fn push_entry(
        &mut self,
        id: dedelta_core::ChunkId,
        kind: crate::format::container::EntryKind,
        bytes: &[u8],
        original_len: usize,
        super_features: Vec<u64>,
    ) -> Result<()> {
        self.region
            .push(id, kind, bytes, original_len, super_features);
        if self.region.raw.len() >= self.repo.config().region_size {
            self.flush_region()?;
        }
        Ok(())
    }

    fn flush_region(&mut self) -> Result<()> {
        if self.region.is_empty() {
            return Ok(());
        }
        let compression = self.repo.config().compression;
        let region = std::mem::take(&mut self.region).compress(compression);
        self.add_region(region)
    }

    /// Stores the open container (with the region being filled), if it holds anything, and
    /// indexes it (with [`Self::indexing_in_batches`], once its batch is full).
    pub fn seal(&mut self) -> Result<()> {
        self.flush_region()?;
        if self.builder.is_empty() {
            return Ok(());
        }
        let version = self.builder.version();
        let sealed = std::mem::replace(
            &mut self.builder,
            ContainerBuilder::reusing(version, Vec::new()),
        );
        let (id, bytes, meta) = sealed.seal();
        self.repo
            .backend()
            .put(FileKind::Container, &id.to_hex(), &bytes)?;
        let len_bytes = bytes.len() as u64;
        if self.repo.writes_index_files() {
            self.index_files.add(self.repo, id, &bytes)?;
        }
        // The next container is written into this one's buffer (see crate::buffers).
        self.builder = ContainerBuilder::reusing(version, bytes);
        match self.pending.as_mut() {
            Some(pending) => pending.push((id, meta)),
            None => self.repo.index().insert_container(id, &meta)?,
        }
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.len() >= INDEX_BATCH)
        {
            self.index_pending()?;
        }
        self.written.push(id);
        self.bytes_written += len_bytes;
        if self.recorded.as_mut().is_some_and(|r| r.remove(&id)) {
            // The container is durable and indexed before its records go.
            self.index_pending()?;
            let backend = self.repo.backend().as_ref();
            let (mut set, _) = damage::DamageSet::load(backend)?;
            let old = set.record_names.clone();
            set.forget_container(&id);
            let time = set.latest_time.clone();
            damage::rewrite(backend, &set, &old, time)?;
            self.repo.index_applies_damage_records()?;
            self.healed.push(id);
        }
        Ok(())
    }
}

/// Bytes [`read_container_meta_tail`] reads from a container's end, hoping for its footer and whole
/// metadata section in one request: at first 64 KiB (a 4 MiB container of 11 KiB chunks
/// compressed 2x has about 700 entries, 46 KB at 66 bytes each), then the largest section met
/// so far, up to [`MAX_META_TAIL`].
static META_TAIL_BYTES: AtomicUsize = AtomicUsize::new(64 << 10);
/// The most [`META_TAIL_BYTES`] grows to.
const MAX_META_TAIL: usize = 4 << 20;

/// Reads and checks the metadata of the container named `name`, with its footer, in one
/// request (a suffix read of the container's last [`META_TAIL_BYTES`]) when they fit, else
/// two, where [`read_container_meta`] takes three (the length, the footer, the section). For
/// the reads on the way of a backup or restore (the locality index's prefetches, restore's
/// locator, the stream sketch index). The suffix holds region bytes it does not use, so
/// `check`, prune and the repairs, which must report every damaged byte they read, read
/// exactly the footer and the section with [`read_container_meta`].
pub fn read_container_meta_tail(backend: &dyn Backend, name: &str) -> Result<ContainerMeta> {
    let what = format!("container {name}");
    let guess = META_TAIL_BYTES.load(Ordering::Relaxed);
    let tail = backend.get_tail(FileKind::Container, name, guess)?;
    if tail.len() < container::HEADER_LEN + FOOTER_LEN {
        return Err(Error::corrupt(what, "file too short"));
    }
    let footer_bytes = &tail[tail.len() - FOOTER_LEN..];
    // A container shorter than the read is all here; a longer one is as long as its footer
    // says, which must be at least the bytes just read.
    let len = if tail.len() < guess {
        tail.len() as u64
    } else {
        container::footer_implied_len(footer_bytes)
            .filter(|&l| l >= guess as u64)
            .ok_or_else(|| Error::corrupt(&what, "footer points outside the container"))?
    };
    let footer = container::decode_footer(footer_bytes, len, &what)?;
    let meta_len = footer.meta_len as usize;
    let end = tail.len() - FOOTER_LEN;
    if let Some(start) = end.checked_sub(meta_len) {
        return container::decode_meta(&tail[start..end], &footer, &what);
    }
    let want = (meta_len + FOOTER_LEN)
        .next_multiple_of(4096)
        .min(MAX_META_TAIL);
    META_TAIL_BYTES.fetch_max(want, Ordering::Relaxed);
    let meta = backend.get_range(
        FileKind::Container,
        name,
        footer.meta_offset as i64,
        meta_len,
    )?;
    container::decode_meta(&meta, &footer, &what)
}

/// Reads and checks the metadata of the container named `name`: its length, its footer and
/// its metadata section, three requests that read no byte they do not check.
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
