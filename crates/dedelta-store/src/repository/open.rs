//! Opening a repository and taking its lock in one step ([`Repository::open_location_locked`]).
//!
//! On an object store every request is a round trip (40-60 ms for a small object on a 3-node
//! Garage cluster, its write quorum), so what an open costs is the number of requests that
//! must wait for another. Taking the lock needs neither the key nor the config (lock objects
//! are plain, see [`super::lock`]): the write of its record, then a listing of the locks. An
//! encrypted repository's open is dominated by the key's derivation (Argon2id, 64 MiB and 3
//! passes by default: about 0.1 s of CPU), which needs the password and the key file. So:
//!
//! | round | plain config | sealed config |
//! |---|---|---|
//! | 1 | config GET ‖ `keys/` listing ‖ lock record PUT (‖ lock listing ‖ catch-up listings, shared) | the same |
//! | 2 | lock listing (exclusive, after [`super::lock::SETTLE`]) | key files' GETs, then Argon2id ‖ lock listing (exclusive) |
//!
//! then the index's catch-up (in [`super`]). A shared lock on an object store lists the
//! locks beside its record's write and keeps that listing when the write was quick (see
//! [`super::lock`]), and sends the catch-up's listings in that round too, kept when the lock
//! was confirmed quickly enough (`repository/catch_up_listings.rs`); so a plain repository's
//! shared open (backup, restore, ls, ...) with a client index up to date is one round in
//! all (two before 2026-11-29, second session; three before 2026-11-29). Before 2026-11-28 an open took the config
//! alone, then the `keys/` listing (a plain repository checks that it has none) beside the
//! lock's record, then its listing: one round more for a sealed config and two for a plain
//! one; a reader's open (`restore`) took its lock after the open, four rounds in a row.
//!
//! The lock's record is written before anyone knows what the location holds: when the
//! config cannot be read (no repository there) or is refused, the record is deleted again
//! and the open's error reported, so a mistyped location sees a lock object written and
//! deleted. When the repository is encrypted and the password prompt may wait for a user
//! ([`LockRequest::prompt_may_wait`]), the record is deleted before the prompt and the lock
//! taken whole once the password is given: no lock is held while a prompt waits. A password
//! that opens no key releases the lock again; a repository that is locked fails as it did
//! when the lock came after the open. Every listing of the repository's contents (the
//! catch-up's) follows the listing that confirmed the lock, or was sent at most
//! [`super::lock::SETTLE`] before its answer (shared locks on an object store).

use super::catch_up_listings::CatchUpListings;
use super::lock::{LockInfo, LockMode, LockTiming, RepoLock, WrittenLock};
use super::{keys, PasswordPrompt, Repository};
use crate::backend::local::LocalBackend;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::format::config::RepoConfig;
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
    /// Whether asking for the password may wait for a user (a prompt on a terminal). The
    /// lock's record is written beside the config's read, before anyone knows whether the
    /// repository is encrypted; when it is and the prompt may wait, the record is deleted
    /// again before the prompt and written anew once the password is given, so that no lock
    /// is held while a prompt waits. False when the password comes from a file, a command
    /// or the environment (or nothing could ask for one).
    pub prompt_may_wait: bool,
}

impl LockRequest<'_> {
    /// Takes the lock on `raw`, the backend under the repository's seal and write guard (as
    /// [`Repository::lock_with`] does).
    pub(super) fn take(&self, raw: Arc<dyn Backend>) -> Result<RepoLock> {
        self.confirm(None, raw)
    }

    /// Writes the lock's record on `raw` (the first step of taking it, see
    /// [`RepoLock::write`]).
    fn write(&self, raw: Arc<dyn Backend>) -> Result<WrittenLock> {
        RepoLock::write(raw, self.me, self.mode, LockTiming::from_env())
    }

    /// Takes the lock on `raw` whose record `written` wrote (`None`: writes one first),
    /// retrying for [`Self::retry_for`] while the repository is locked.
    fn confirm(&self, written: Option<WrittenLock>, raw: Arc<dyn Backend>) -> Result<RepoLock> {
        RepoLock::confirm_retrying(
            written,
            raw,
            self.me,
            self.mode,
            LockTiming::from_env(),
            self.retry_for,
        )
    }
}

/// What [`read_config_locking`] gives: the config (and what unlocked it), and the lock when
/// one was asked for and the config could be read and the password given.
type ConfigAndLock = (
    Result<(RepoConfig, Option<keys::Unlocked>)>,
    Option<Result<RepoLock>>,
    Option<CatchUpListings>,
);

/// Reads and opens the config of the repository on `raw` and takes `lock` beside it, each
/// request as early as what it needs allows (see the module doc):
/// 1. the config's read, the key files' listing and the lock's record, at once;
/// 2. a plain config: the lock's listing (its second step);
///    a sealed one: the password, then the key files' reads and the key's derivation
///    beside the lock's listing (or, when the prompt may wait for a user, beside the whole
///    lock: its early record was deleted before the prompt).
///
/// The lock is `None` when the config cannot be read, is refused, or the password prompt
/// fails (its record is deleted again); a lock taken beside an unlock that fails is the
/// caller's to release ([`settle`]).
fn read_config_locking(
    raw: Arc<dyn Backend>,
    password: PasswordPrompt<'_>,
    lock: Option<&LockRequest<'_>>,
) -> ConfigAndLock {
    let (bytes, key_names, (written, listings)) =
        keys::read_config_and_key_names(raw.as_ref(), || {
            let Some(l) = lock else {
                return (None, None);
            };
            // A shared lock on an object store: the catch-up's listings in this round too.
            if l.mode == LockMode::Shared && raw.requests_are_round_trips() {
                let (written, listed) = crate::request_threads::beside(
                    true,
                    || CatchUpListings::list(raw.as_ref()),
                    || l.write(raw.clone()),
                );
                (Some(written), Some(listed))
            } else {
                (Some(l.write(raw.clone())), None)
            }
        });
    // A written record not wanted after all is deleted when dropped (WrittenLock's Drop).
    let bytes = match bytes {
        Ok(b) => b,
        Err(e) => return (Err(e), None, None),
    };
    if !keys::is_sealed(&bytes) {
        let cfg = match keys::plain_config(&bytes, key_names) {
            Ok(c) => c,
            Err(e) => return (Err(e), None, None),
        };
        let taken = lock
            .zip(written)
            .map(|(l, w)| w.and_then(|w| l.confirm(Some(w), raw.clone())));
        return (Ok((cfg, None)), taken, listings);
    }
    let written = match (lock, written) {
        // Deleted now (its Drop): no lock is held while the prompt waits.
        (Some(l), Some(_)) if l.prompt_may_wait => None,
        (_, w) => w,
    };
    let pw = match password() {
        Ok(pw) => pw,
        Err(e) => return (Err(e), None, None),
    };
    let taking_raw = raw.clone();
    let (unlocked, taken) = crate::request_threads::beside(
        raw.requests_are_round_trips(),
        move || {
            lock.map(|l| match written {
                Some(w) => w.and_then(|w| l.confirm(Some(w), taking_raw)),
                None => l.take(taking_raw),
            })
        },
        || keys::unlock_config(raw.clone(), key_names, pw.as_bytes(), bytes),
    );
    (unlocked.map(|(c, u)| (c, Some(u))), taken, listings)
}

/// The lock taken beside a config's read, once the read's outcome is known: released if the
/// read failed (`read_failed`, whose error the caller returns), else the lock or the error
/// taking it.
pub(super) fn settle(
    read_failed: Option<&Error>,
    lock: Option<Result<RepoLock>>,
) -> Option<Result<RepoLock>> {
    match (read_failed, lock) {
        (Some(_), Some(Ok(l))) => {
            // The open's own error is the one to report; a lock left behind goes stale.
            let _ = l.release();
            None
        }
        (Some(_), _) => None,
        (None, l) => l,
    }
}

/// `e`, after releasing `lock` (an open that fails after taking it).
pub(super) fn released(e: Error, lock: Option<Result<RepoLock>>) -> Error {
    if let Some(Ok(l)) = lock {
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
    ) -> Result<(Self, Option<Result<RepoLock>>)> {
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

    /// [`Self::open_in_cache_unlocking`], taking `lock` too, beside the config's read and the
    /// key's derivation (see [`LockRequest`]): the open's errors first, then the lock's
    /// outcome (`None` when none was asked for).
    pub(super) fn open_in_cache_with(
        backend: Arc<dyn Backend>,
        cache_root: &Path,
        password: PasswordPrompt<'_>,
        lock: Option<&LockRequest<'_>>,
    ) -> Result<(Self, Option<Result<RepoLock>>)> {
        let (read, lock, listings) = read_config_locking(backend.clone(), password, lock);
        let lock = settle(read.as_ref().err(), lock);
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
        if let Some(Ok(l)) = &lock {
            repo.guard.watch(l.health().clone());
            if let Some(listed) = listings {
                repo.guard.serve_listings(listed.valid_for(l));
            }
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
    ) -> Result<(Self, Option<Result<RepoLock>>)> {
        let Some(backend) = crate::backend::open_url(location, connections) else {
            return Self::open_local_with(Path::new(location), cache_root, password, lock);
        };
        let backend = backend?;
        let in_flight = connections.unwrap_or(crate::backend::s3::config::DEFAULT_CONNECTIONS);
        match Self::open_in_cache_with(backend, cache_root, password, lock) {
            Err(Error::ObjectMissing { .. }) => Err(Error::RepoNotFound(location.into())),
            other => other.map(|(r, lock)| {
                let r = r.with_reads_in_flight(in_flight).with_index_files(true);
                (r, lock)
            }),
        }
    }

    /// [`Self::open_location_unlocking`] then [`Self::lock_with`], in one step: the lock is
    /// taken beside the config's read and the key's derivation (see the module doc), and
    /// guards the repository's writes as [`Self::lock_with`]'s does.
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
            Self::open_location_trying_lock(location, cache_root, connections, password, lock)?;
        Ok((repo, taken?))
    }

    /// [`Self::open_location_locked`] for a reader that may go on without its lock (a
    /// repository it cannot write): the open's errors, else the repository and the lock's
    /// outcome, whose error is the caller's to judge. A repository opened without its lock
    /// has no write guard watching one.
    ///
    /// # Errors
    /// Those of the open.
    pub fn open_location_trying_lock(
        location: &str,
        cache_root: &Path,
        connections: Option<usize>,
        password: PasswordPrompt<'_>,
        lock: &LockRequest<'_>,
    ) -> Result<(Self, Result<RepoLock>)> {
        let (repo, taken) =
            Self::open_location_with(location, cache_root, connections, password, Some(lock))?;
        // The lock is asked for whenever the config was read and the password given.
        let taken = taken.unwrap_or_else(|| {
            Err(Error::InvalidOption(
                "the repository was opened without its lock".into(),
            ))
        });
        Ok((repo, taken))
    }

    /// [`Self::open_in_cache_unlocking`] and [`Self::lock_with`] in one step, as
    /// [`Self::open_location_locked`] (for a backend made by the caller: tests count and
    /// delay its requests).
    ///
    /// # Errors
    /// Those of the open, then those of the lock.
    pub fn open_in_cache_locked(
        backend: Arc<dyn Backend>,
        cache_root: &Path,
        password: PasswordPrompt<'_>,
        lock: &LockRequest<'_>,
    ) -> Result<(Self, RepoLock)> {
        let (repo, taken) = Self::open_in_cache_with(backend, cache_root, password, Some(lock))?;
        let taken = taken.unwrap_or_else(|| {
            Err(Error::InvalidOption(
                "the repository was opened without its lock".into(),
            ))
        });
        Ok((repo, taken?))
    }
}
