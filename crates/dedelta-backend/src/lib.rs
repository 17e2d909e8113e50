//! dedelta-backend: where a repository's objects live.
//!
//! All repository I/O goes through [`Backend`], keyed by ([`FileKind`], name). The trait is
//! deliberately small (put, get, ranged get, list, delete, atomic create) so that an object
//! store (S3) can implement it without touching the pipelines. Implementations, one file each:
//! the local directory ([`local::LocalBackend`], the default), an S3 bucket
//! ([`s3::S3Backend`], see [`open_url`]) and memory ([`memory::MemoryBackend`], test
//! support). Wrappers ([`wrap`]) implement the same trait
//! around any backend: fault injection for tests, request metering for I/O accounting, whose
//! counts [`cost`] turns into modelled time on a disk and on an object store. This crate knows
//! nothing of what the objects contain.

pub mod cost;
pub mod local;
pub mod memory;
pub mod s3;
pub mod wrap;

/// What a backend reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The object does not exist (deleted by a concurrent prune, or lost).
    #[error("{kind} {name} is missing from the repository")]
    Missing {
        /// The object's kind (`container`, `snapshot`, ...).
        kind: &'static str,
        /// The object's name.
        name: String,
    },
    /// An I/O error, with what was being done. The cause is part of the message and not also
    /// exposed as `source()`, so that a printed error chain does not repeat it.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done, naming the object or path.
        context: String,
        /// The underlying error.
        cause: std::io::Error,
    },
    /// The request cannot be carried out as asked (by a wrapper: damaging an empty object).
    #[error("{0}")]
    Refused(String),
}

impl BackendError {
    /// Wraps an I/O error with context.
    pub fn io(context: impl Into<String>, cause: std::io::Error) -> Self {
        BackendError::Io {
            context: context.into(),
            cause,
        }
    }
}

/// Result alias for backends.
pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// Adds context to I/O results.
pub(crate) trait IoContext<T> {
    /// Maps an I/O error to [`BackendError::Io`] with the context string built by `f`.
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T>;
}

impl<T> IoContext<T> for std::result::Result<T, std::io::Error> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T> {
        self.map_err(|e| BackendError::io(f(), e))
    }
}

/// The kinds of objects in a repository, each in its own namespace (a folder locally).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// The repository `config` (one object, name ignored).
    Config,
    /// Containers: chunk data and metadata.
    Container,
    /// Snapshot files.
    Snapshot,
    /// Lock files.
    Lock,
    /// Damage records written by `check` (see [`crate::format::damage`]).
    Damage,
    /// Dense container lists, one beside each snapshot that has one (LoopDelta §4.2).
    Dense,
    /// Key files of an encrypted repository: the master key sealed under a password.
    Key,
    /// Index files: the metadata of the containers a backup wrote, in one object, for clients
    /// with an empty cache (see `dedelta_store::format::index_file`).
    Index,
}

impl FileKind {
    /// Every kind, in [`FileKind::slot`] order (for per-kind counters).
    pub const ALL: [FileKind; 8] = [
        FileKind::Config,
        FileKind::Container,
        FileKind::Snapshot,
        FileKind::Lock,
        FileKind::Damage,
        FileKind::Dense,
        FileKind::Key,
        FileKind::Index,
    ];

    /// This kind's position in [`FileKind::ALL`].
    pub fn slot(self) -> usize {
        match self {
            FileKind::Config => 0,
            FileKind::Container => 1,
            FileKind::Snapshot => 2,
            FileKind::Lock => 3,
            FileKind::Damage => 4,
            FileKind::Dense => 5,
            FileKind::Key => 6,
            FileKind::Index => 7,
        }
    }

    /// The folder (or key prefix) of this kind.
    pub fn dir(self) -> &'static str {
        match self {
            FileKind::Config => "",
            FileKind::Container => "containers",
            FileKind::Snapshot => "snapshots",
            FileKind::Lock => "locks",
            FileKind::Damage => "damage",
            FileKind::Dense => "dense",
            FileKind::Key => "keys",
            // Not `index`: versions before the chunk index moved to the client cache kept it
            // in `index/`, which their successors delete whole.
            FileKind::Index => "indexes",
        }
    }

    /// The singular noun for messages (`container`, `snapshot`, ...).
    pub fn noun(self) -> &'static str {
        match self {
            FileKind::Config => "config",
            FileKind::Container => "container",
            FileKind::Snapshot => "snapshot",
            FileKind::Lock => "lock",
            FileKind::Damage => "damage record",
            FileKind::Dense => "dense container list",
            FileKind::Key => "key file",
            FileKind::Index => "index file",
        }
    }

    /// The error for a missing object of this kind.
    pub fn missing(self, name: &str) -> BackendError {
        BackendError::Missing {
            kind: self.noun(),
            name: name.to_string(),
        }
    }
}

/// A store of named objects. Objects are written whole and never modified in place.
///
/// Reading an object that does not exist fails with [`BackendError::Missing`] (not a generic
/// I/O error), so that callers can tell "gone" from "damaged".
pub trait Backend: Send + Sync {
    /// Reads a whole object.
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>>;
    /// Reads `len` bytes at `offset`; a negative `offset` counts from the end.
    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>>;
    /// Reads the last `max_len` bytes of an object, or the whole object if it is shorter: an
    /// HTTP suffix range (`Range: bytes=-N`), one request where asking the size first and
    /// then reading a range takes two (a container's footer and metadata section, read
    /// together). This default asks the size; backends that can do it in one override it.
    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        let size = self.size(kind, name)?;
        let len = usize::try_from(size).map_or(max_len, |s| s.min(max_len));
        self.get_range(kind, name, -(len as i64), len)
    }
    /// Like [`Backend::get_range`], into `buf` (replacing its contents), so that a caller
    /// reading many ranges can reuse one buffer.
    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        *buf = self.get_range(kind, name, offset, len)?;
        Ok(())
    }
    /// Writes an object durably and atomically: after return it survives a crash, and a crash
    /// during the call leaves either no object or the whole one. Overwrites an existing object.
    /// Locks ([`FileKind::Lock`]) need only be atomic and visible to others: a backend may
    /// skip making them durable (the local one does; a lock outlives no crash of its holder).
    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()>;
    /// Creates an object only if none of that name exists; `Ok(false)` if one did.
    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool>;
    /// Lists object names of a kind, with their sizes in bytes.
    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>>;
    /// Lists object names of a kind, sorted, without their sizes: what a caller that needs
    /// only the names asks for (the snapshot listing, the index's catch-up, locks). A local
    /// directory then reads the folder without a `stat` per file; this default, for backends
    /// that get sizes for free (an object store's listing), drops them.
    fn list_names(&self, kind: FileKind) -> Result<Vec<String>> {
        Ok(self.list(kind)?.into_iter().map(|(n, _)| n).collect())
    }
    /// Deletes an object; deleting a missing object is not an error.
    fn delete(&self, kind: FileKind, name: &str) -> Result<()>;
    /// Size of an object in bytes.
    fn size(&self, kind: FileKind, name: &str) -> Result<u64>;
    /// Whether an object exists.
    fn exists(&self, kind: FileKind, name: &str) -> Result<bool>;
    /// A human-readable location for messages.
    fn location(&self) -> String;
    /// Whether each request is a round trip that waits on a network (an object store), so
    /// that independent requests are worth sending at once from several threads; on a local
    /// disk (this default) a request takes microseconds, less than starting a thread.
    fn requests_are_round_trips(&self) -> bool {
        false
    }
}

impl std::fmt::Debug for dyn Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({})", self.location())
    }
}

/// Opens a remote repository URL: `s3:http://HOST:PORT/BUCKET/PREFIX` (or `s3:https://...`)
/// as an [`s3::S3Backend`] with at most `connections` requests in flight (default
/// [`s3::config::DEFAULT_CONNECTIONS`]), credentials from the environment
/// ([`s3::Credentials::from_environment`]), behind a [`wrap::retry::RetryBackend`]. `None`
/// when `url` is not a remote URL (a local path).
pub fn open_url(
    url: &str,
    connections: Option<usize>,
) -> Option<Result<std::sync::Arc<dyn Backend>>> {
    let config = s3::S3Config::parse(url)?;
    Some(config.and_then(|mut c| {
        if let Some(n) = connections {
            c.connections = n.max(1);
        }
        let s3 = s3::S3Backend::new(c, &s3::Credentials::from_environment())?;
        let retry = wrap::retry::RetryBackend::new(
            std::sync::Arc::new(s3),
            wrap::retry::RetryPolicy::default(),
        );
        Ok(std::sync::Arc::new(retry) as std::sync::Arc<dyn Backend>)
    }))
}
