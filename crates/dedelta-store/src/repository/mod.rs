//! The repository: a backend, its config, and (once indexed) the chunk index.
//!
//! Typestate in two steps: [`Repository`] is open (config read), [`IndexedRepository`] also has
//! the chunk index, and only it can read or write chunks. Writing also needs a [`RepoLock`].
//!
//! A repository can meter its I/O ([`Repository::metered`]): every request is then counted by
//! purpose (see [`crate::backend::wrap::metered`]), and readers that read for one purpose take
//! a handle tagged with it from [`Repository::backend_for`].
//!
//! The open, in order, and what runs beside what (a backup's fixed cost, issue 20; on an
//! object store each step is a round trip, issue 19):
//! 1. the config is read, the key files listed and, for a locking open, the lock's record
//!    written, at once ([`open`]: lock objects are plain, so the lock needs neither key nor
//!    config); for an encrypted config the password is asked for, then the key files are
//!    read and the key derived (Argon2id) while the lock's listing confirms it, and the
//!    config bytes already read are opened with the key (not read again);
//! 2. the client's chunk index is opened from the cache directory the config names;
//! 3. the index catches up with the repository ([`index_sync`]: the container and damage
//!    listings at once, and a rebuild's listing of index files with them; on an object
//!    store a shared locker sent these in step 1, see `catch_up_listings`), beside the
//!    snapshot listing when the command asked for it
//!    ([`Repository::listing_snapshots_at_open`]: backup for its parent, restore, dump and ls
//!    for the snapshot they name, found in that listing without a request:
//!    [`IndexedRepository::find_snapshot_filtered`]);
//! 4. the damage records the catch-up read serve the whole command
//!    ([`IndexedRepository::damage_records`]): a backup listed them three times before.

mod catch_up_listings;
mod containers;
pub mod damage;
pub mod index_files;
pub mod index_rebuild;
pub mod index_sync;
mod indexed;
pub mod keys;
pub mod lock;
pub mod lock_guard;
mod metas_at_open;
pub mod open;
pub mod snapshot_filter;
pub mod snapshots;

use crate::backend::local::LocalBackend;
use crate::backend::wrap::metered::{IoCounts, MeteredBackend, Purpose};
use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use crate::format::config::RepoConfig;
use crate::format::container::{self, ContainerBuilder, ContainerId, ContainerMeta, FOOTER_LEN};
use crate::repository::lock::{LockInfo, LockMode, RepoLock};
use crate::repository::lock_guard::WriteGuard;
pub use containers::{
    read_container_meta, read_container_meta_tail, read_container_record_tail, ContainerWriter,
    UnindexedContainers,
};
pub use indexed::IndexedRepository;
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
    /// Reads taken as round trips whatever the backend says (tests, see
    /// [`Self::with_round_trips`]).
    round_trips: bool,
    /// Whether backups publish index files (see [`Self::writes_index_files`]).
    index_files: bool,
    /// Whether the index's open lists the snapshots beside its catch-up (see
    /// [`Self::listing_snapshots_at_open`]).
    snapshots_at_open: bool,
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
        Ok(Self::open_local_with(path, cache_root, password, None)?.0)
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
        Ok(Self::open_in_cache_with(backend, cache_root, password, None)?.0)
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
            snapshots_at_open: false,
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
    /// the next regions of a container it reads), and independent requests go out at once:
    /// the backend's answer ([`Backend::requests_are_round_trips`]), or what
    /// [`Self::with_round_trips`] set.
    pub fn reads_are_round_trips(&self) -> bool {
        self.round_trips || self.backend.requests_are_round_trips()
    }

    /// Takes reads as round trips (`true`) even on a backend that does not say so: tests
    /// of the object-store paths on a local directory.
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

    /// Makes [`Self::open_index`] list the snapshots beside the index's catch-up, for a
    /// command that lists them next (backup: its parent): the two wait on different
    /// requests (snapshot files and the snapshot cache; the container and damage listings),
    /// and neither depends on the other. The listing is then taken with
    /// [`IndexedRepository::snapshots_listed_at_open`].
    pub fn listing_snapshots_at_open(mut self) -> Self {
        self.snapshots_at_open = true;
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
        Ok(Self::open_location_with(location, cache_root, connections, password, None)?.0)
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
        // Whether a config exists and whether key files do, asked at once (on an object
        // store each is a round trip): key files without a config are an encrypted
        // repository that lost its config, no place for a plain one (whose every open would
        // be refused, see keys::plain_config).
        let (exists, keys) = std::thread::scope(|s| {
            let keys = s.spawn(|| backend.list_names(FileKind::Key));
            let exists = backend.exists(FileKind::Config, "config");
            (
                exists,
                keys.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            )
        });
        if exists? {
            return Err(Error::RepoExists(location.into()));
        }
        if !keys?.is_empty() {
            return Err(Error::InvalidOption(format!(
                "{location} holds key files but no config: not a place for a new repository"
            )));
        }
        backend.put(FileKind::Config, "config", &config.to_bytes())?;
        // Opened from the config just written, not read back (two round trips fewer).
        let dir = crate::client::cache::repo_dir(cache_root, &config.id)?;
        let mut repo = Self::assemble(
            backend,
            config,
            None,
            dir.join(crate::client::cache::INDEX_FILE),
        );
        repo.cache_dir = Some(dir);
        Ok(repo)
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

    /// Takes an exclusive lock (timing from the environment, see [`lock::LockTiming::from_env`]).
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
        let request = open::LockRequest {
            me,
            mode,
            retry_for,
            prompt_may_wait: false,
        };
        let lock = request.take(self.guard.inner().clone())?;
        self.guard.watch(lock.health().clone());
        Ok(lock)
    }
}
