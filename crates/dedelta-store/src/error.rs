//! The store's error type.
//!
//! One enum for the public API, with variants that carry what a user needs to act: the path,
//! the container and chunk, the reason. The CLI maps a few variants to exit codes (repository
//! missing: 10, locked: 11).

use std::path::PathBuf;

/// Result alias for the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the repository and its pipelines.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No repository at the path (no `config` file).
    #[error("repository {0} does not exist (run `dedelta init` first)")]
    RepoNotFound(PathBuf),
    /// `init` on a path that already holds a repository.
    #[error("repository {0} already exists")]
    RepoExists(PathBuf),
    /// Another process holds the exclusive lock.
    #[error("repository is locked by pid {pid} on host {host} since {time} ({command}); if that process is gone, run `dedelta unlock` (the lock is {path})")]
    Locked {
        /// Holder's process id.
        pid: u32,
        /// Holder's host name.
        host: String,
        /// When the lock was taken (RFC 3339).
        time: String,
        /// What the holder is doing.
        command: String,
        /// The lock file.
        path: String,
    },
    /// This process's repository lock was lost (not refreshed in time, or removed): it stops
    /// before writing more.
    #[error("the repository lock was lost ({0}); stopping before writing more")]
    LockLost(String),
    /// A file written by a newer (or unknown) format version.
    #[error(
        "{what} has unsupported format version {found} (this dedelta reads version {supported})"
    )]
    UnsupportedVersion {
        /// Which file.
        what: String,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A repository file failed its magic, checksum or structure checks.
    #[error("corrupt {what}: {reason}")]
    Corrupt {
        /// Which file or object.
        what: String,
        /// What check failed.
        reason: String,
    },
    /// A stored chunk could not be read back intact.
    #[error("corrupt chunk {chunk} in container {container}: {reason}")]
    CorruptChunk {
        /// Container id (hex).
        container: String,
        /// Chunk id (hex).
        chunk: String,
        /// What check failed.
        reason: String,
    },
    /// A chunk that a snapshot needs is not in the index.
    #[error("chunk {chunk} is missing from the repository ({advice})")]
    ChunkMissing {
        /// Chunk id (hex).
        chunk: String,
        /// What to do about it ([`Error::chunk_missing`] gives the usual advice).
        advice: String,
    },
    /// No snapshot matches.
    #[error("no snapshot matches {0:?}")]
    SnapshotNotFound(String),
    /// A snapshot id prefix matches several snapshots.
    #[error("snapshot id prefix {0:?} is ambiguous: matches {1} snapshots")]
    AmbiguousSnapshot(String, usize),
    /// A path inside a snapshot does not exist.
    #[error("path {path:?} not found in snapshot {snapshot}")]
    PathNotInSnapshot {
        /// The requested path.
        path: String,
        /// Snapshot id.
        snapshot: String,
    },
    /// A backup source does not exist.
    #[error("source path {0} does not exist")]
    SourceNotFound(PathBuf),
    /// A user-supplied option is invalid.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// An I/O error, with what was being done. The cause is part of the message and not
    /// also exposed as `source()`, so that a printed error chain does not repeat it.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done, naming the path.
        context: String,
        /// The underlying error.
        cause: std::io::Error,
    },
    /// An object the repository should hold is not there (deleted by a concurrent prune, or
    /// lost). Kept apart from [`Error::Io`] so that readers can retry or say so.
    #[error("{kind} {name} is missing from the repository")]
    ObjectMissing {
        /// The object's kind (`container`, `snapshot`, ...).
        kind: &'static str,
        /// The object's name.
        name: String,
    },
    /// A chunk's container is gone even after re-reading the index: readers take no lock,
    /// so a prune running at the same time may have deleted it (after copying the chunk, if
    /// it was still needed). Kept apart from [`Error::CorruptChunk`]: nothing is damaged, and
    /// running the command again usually succeeds.
    #[error("chunk {chunk}: its container {container} is missing, possibly removed by a concurrent prune (run the command again; if this persists, run `dedelta check`)")]
    ContainerGone {
        /// Container id (hex).
        container: String,
        /// Chunk id (hex).
        chunk: String,
    },
    /// A pipeline stage stopped because its neighbour did (whose own error is the cause).
    #[error("the backup pipeline stopped")]
    PipelineStopped,
    /// A pipeline received something out of order (a bug).
    #[error("backup pipeline: {0}")]
    Pipeline(String),
    /// A thread of a pipeline panicked (a bug).
    #[error("the {0} thread panicked")]
    ThreadPanicked(String),
    /// The chunk index failed (an I/O error).
    #[error("chunk index error: {0}")]
    Index(String),
    /// The chunk index is open in another process (see `client::index::PrivateIndex`).
    #[error("the chunk index {0} is in use by another process")]
    IndexInUse(String),
    /// The chunk index file is damaged. It is a cache: the repository discards it, and the next
    /// command rebuilds it from the containers.
    #[error("the chunk index is damaged ({0}); it has been discarded and is rebuilt from the containers by the next command: run the command again")]
    IndexDamaged(String),
    /// No key file of an encrypted repository opens with the password given (exit code 12).
    #[error("wrong password: no key file of this repository opens with it")]
    WrongPassword,
    /// An encrypted repository was opened without a way to get its password.
    #[error("the repository is encrypted: give its password with --password-file, --password-command, DEDELTA_PASSWORD or DEDELTA_PASSWORD_FILE, or on a terminal")]
    PasswordNeeded,
}

impl From<dedelta_backend::BackendError> for Error {
    fn from(e: dedelta_backend::BackendError) -> Self {
        use dedelta_backend::BackendError as B;
        match e {
            B::Missing { kind, name } => Error::ObjectMissing { kind, name },
            // A sealed object that fails to open (crate::crypto::backend) is damage.
            B::Io { context, cause }
                if cause
                    .get_ref()
                    .is_some_and(|e| e.is::<crate::format::sealed::SealError>()) =>
            {
                Error::Corrupt {
                    what: context,
                    reason: cause.to_string(),
                }
            }
            B::Io { context, cause } => Error::Io { context, cause },
            B::Refused(m) => Error::InvalidOption(m),
            other => Error::InvalidOption(other.to_string()),
        }
    }
}

impl Error {
    /// The I/O error behind this one, if it is an I/O error (for example to tell an injected
    /// fault from a real one in tests).
    pub fn io_cause(&self) -> Option<&std::io::Error> {
        match self {
            Error::Io { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// A chunk missing from the index, with the usual advice: the index may lag behind the
    /// containers.
    pub fn chunk_missing(chunk: impl Into<String>) -> Self {
        Error::ChunkMissing {
            chunk: chunk.into(),
            advice: "try `dedelta repair index`, then `dedelta check`".into(),
        }
    }

    /// Wraps an I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            cause: source,
        }
    }

    /// A corruption error.
    pub fn corrupt(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

/// Adds context to I/O results.
pub(crate) trait IoContext<T> {
    /// Maps an I/O error to [`Error::Io`] with the context string built by `f`.
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T>;
}

impl<T> IoContext<T> for std::result::Result<T, std::io::Error> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T> {
        self.map_err(|e| Error::io(f(), e))
    }
}
