//! Opening a repository and taking its lock in one step ([`Repository::open_location_locked`]).
//!
//! An encrypted repository's open is dominated by the key's derivation (Argon2id, 64 MiB and
//! 3 passes by default: about 0.1 s of CPU, 27 % of an incremental SQLAlchemy backup's),
//! which needs the password and the key file and nothing else. Taking the lock needs
//! neither the key nor the config (lock objects are plain, see [`super::lock`]): a listing,
//! a durable write and a second listing, each a round trip on an object store and a write
//! and `fsync` on a disk. So the lock is taken on a thread of its own while the key is
//! derived, once the config has been read and the password given (never while a prompt
//! waits for the user). A password that opens no key releases the lock again; a repository
//! that is locked fails as it did when the lock came after the open.

use super::lock::{LockInfo, LockMode, LockTiming, RepoLock};
use super::{keys, PasswordPrompt, Repository};
use crate::backend::local::LocalBackend;
use crate::backend::Backend;
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The lock an open takes ([`Repository::open_location_locked`]).
#[derive(Clone, Debug)]
pub struct LockRequest<'a> {
    /// Who takes it.
    pub me: &'a LockInfo,
    /// Shared or exclusive.
    pub mode: LockMode,
    /// How long to retry while the repository is locked (zero: fail at once).
    pub retry_for: Duration,
}

impl LockRequest<'_> {
    /// Takes the lock on `raw`, the backend under the repository's seal and write guard (as
    /// [`Repository::lock_with`] does).
    pub(super) fn take(&self, raw: Arc<dyn Backend>) -> Result<RepoLock> {
        RepoLock::acquire_retrying(
            raw,
            self.me,
            self.mode,
            LockTiming::from_env(),
            self.retry_for,
        )
    }
}

/// The lock taken beside a config's read, once the read's outcome is known: released if the
/// read failed (`read_failed`, whose error the caller returns), else the lock or the error
/// taking it.
pub(super) fn settle(
    read_failed: Option<&Error>,
    lock: Option<Result<RepoLock>>,
) -> Result<Option<RepoLock>> {
    match (read_failed, lock) {
        (Some(_), Some(Ok(l))) => {
            // The open's own error is the one to report; a lock left behind goes stale.
            let _ = l.release();
            Ok(None)
        }
        (Some(_), _) | (None, None) => Ok(None),
        (None, Some(l)) => l.map(Some),
    }
}

/// `e`, after releasing `lock` (an open that fails after taking it).
pub(super) fn released(e: Error, lock: Option<RepoLock>) -> Error {
    if let Some(l) = lock {
        let _ = l.release();
    }
    e
}

impl Repository {
    /// [`Self::open_local_unlocking`], taking `lock` too (see [`LockRequest`]).
    pub(super) fn open_local_with(
        path: &Path,
        cache_root: &Path,
        password: PasswordPrompt<'_>,
        lock: Option<&LockRequest<'_>>,
    ) -> Result<(Self, Option<RepoLock>)> {
        let cfg = path.join("config");
        match std::fs::metadata(&cfg) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::RepoNotFound(path.to_path_buf()))
            }
            Err(e) => return Err(Error::io(format!("reading {}", cfg.display()), e)),
        }
        let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new(path));
        let (mut repo, lock) = Self::open_in_cache_with(backend, cache_root, password, lock)?;
        repo.local_root = Some(path.to_path_buf());
        Ok((repo, lock))
    }

    /// [`Self::open_in_cache_unlocking`], taking `lock` too, beside the key's derivation
    /// (see [`LockRequest`]).
    pub(super) fn open_in_cache_with(
        backend: Arc<dyn Backend>,
        cache_root: &Path,
        password: PasswordPrompt<'_>,
        lock: Option<&LockRequest<'_>>,
    ) -> Result<(Self, Option<RepoLock>)> {
        let (read, lock) = keys::read_config_beside(
            backend.clone(),
            password,
            lock.map(|l| || l.take(backend.clone())),
        );
        let lock = settle(read.as_ref().err(), lock)?;
        let (config, unlocked) = read?;
        let dir = crate::client::cache::repo_dir(cache_root, &config.id);
        let dir = match dir {
            Ok(d) => d,
            Err(e) => return Err(released(e, lock)),
        };
        let mut repo = Self::assemble(
            backend,
            config,
            unlocked,
            dir.join(crate::client::cache::INDEX_FILE),
        );
        repo.cache_dir = Some(dir);
        if let Some(l) = &lock {
            repo.guard.watch(l.health().clone());
        }
        Ok((repo, lock))
    }

    /// [`Self::open_location_unlocking`], taking `lock` too (see [`LockRequest`]).
    pub(super) fn open_location_with(
        location: &str,
        cache_root: &Path,
        connections: Option<usize>,
        password: PasswordPrompt<'_>,
        lock: Option<&LockRequest<'_>>,
    ) -> Result<(Self, Option<RepoLock>)> {
        let Some(backend) = crate::backend::open_url(location, connections) else {
            return Self::open_local_with(Path::new(location), cache_root, password, lock);
        };
        let backend = backend?;
        let in_flight = connections.unwrap_or(crate::backend::s3::config::DEFAULT_CONNECTIONS);
        match Self::open_in_cache_with(backend, cache_root, password, lock) {
            Err(Error::ObjectMissing { .. }) => Err(Error::RepoNotFound(location.into())),
            other => other.map(|(r, lock)| {
                let r = r
                    .with_reads_in_flight(in_flight)
                    .with_round_trips(true)
                    .with_index_files(true);
                (r, lock)
            }),
        }
    }

    /// [`Self::open_location_unlocking`] then [`Self::lock_with`], in one step: the lock is
    /// taken while the key is derived (see the module doc), and guards the repository's
    /// writes as [`Self::lock_with`]'s does.
    ///
    /// # Errors
    /// Those of the open (first: a wrong password is reported as such even when the
    /// repository is locked too), then those of the lock.
    pub fn open_location_locked(
        location: &str,
        cache_root: &Path,
        connections: Option<usize>,
        password: PasswordPrompt<'_>,
        lock: &LockRequest<'_>,
    ) -> Result<(Self, RepoLock)> {
        let (repo, taken) =
            Self::open_location_with(location, cache_root, connections, password, Some(lock))?;
        match taken {
            Some(l) => Ok((repo, l)),
            // The lock closure runs whenever the config was read and the password given.
            None => Err(Error::InvalidOption(
                "the repository was opened without its lock".into(),
            )),
        }
    }
}
