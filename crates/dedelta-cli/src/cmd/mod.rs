//! The repository subcommands, one file each: its clap arguments and a `run` that opens the
//! repository, calls dedelta-store and hands the result to [`crate::render`]. `run` returns
//! the exit code of a command that finished (0, or a code its module doc names); errors go
//! back to `main`, which maps them to exit codes.
//!
//! This file holds what several commands share: the option groups [`RepoArg`] and
//! [`IoModelArgs`] ([`DeltaArgs`] is in `delta_args.rs`), and opening (metered, for the `io`
//! report), locking and describing the caller ([`open_reader`], [`open_locked`],
//! [`lock_info`]).
//! `bench` and `eval` are not here: they use no repository.

pub mod backup;
pub mod cache;
pub mod cat;
pub mod check;
pub mod copy;
mod delta_args;
pub mod diff;
pub mod dump;
pub mod dump_tar;
pub mod find;
pub mod forget;
pub mod generate;
pub mod global;
pub mod init;
pub mod key;
pub mod ls;
pub mod mount;
pub mod prune;
pub mod repair;
pub mod restore;
pub mod rewrite;
pub mod select;
pub mod snapshots;
pub mod stats;
pub mod stdin_command;
pub mod tag;
pub mod unlock;

use crate::progress;
use crate::render::print_notices;
use anyhow::Result;
use clap::Args;
use dedelta_store::backend::cost::{DiskModel, IoModels, ObjectStoreModel};
use dedelta_store::io_report::IoReport;
use dedelta_store::repository::lock::{LockInfo, LockMode, RepoLock};
use dedelta_store::{Error, IndexedRepository, Repository};
use std::io::IsTerminal;
use std::path::PathBuf;

pub use delta_args::DeltaArgs;

/// The repository a command works on. `-r/--repo` and `--cache-dir` are global options
/// ([`global::GlobalArgs`], valid before or after the command); every repository command
/// flattens this to say it uses them, and to take the password options.
#[derive(Args, Clone)]
pub struct RepoArg {
    /// S3: requests in flight at most (default 8).
    #[arg(long, value_name = "N")]
    pub connections: Option<usize>,
    /// When the repository is locked, retry for up to DURATION (e.g. 30s, 5m, 1h) before
    /// giving up.
    #[arg(long, value_name = "DURATION")]
    pub retry_lock: Option<String>,
    /// Where the password of an encrypted repository comes from.
    #[command(flatten)]
    pub password: crate::password::PasswordArgs,
    /// The repository's location when it is not `-r`'s (`copy`'s source).
    #[arg(skip)]
    pub location: Option<PathBuf>,
}

/// The worker threads of `backup` and `copy`: `--threads`, else one per core.
pub fn workers(threads: Option<usize>) -> Result<dedelta_store::commands::backup::Workers> {
    let n = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    Ok(dedelta_store::commands::backup::Workers::new(n)?)
}

impl RepoArg {
    /// The repository path (`-r` or `DEDELTA_REPO`), or an error that says how to give one
    /// or that names another tool's repository.
    pub fn path(&self) -> Result<PathBuf> {
        match &self.location {
            Some(l) => Ok(l.clone()),
            None => global::repo_path(),
        }
    }

    /// The cache root: `--cache-dir`, else the default from the environment.
    pub fn cache_root(&self) -> PathBuf {
        global::get()
            .cache_dir
            .clone()
            .unwrap_or_else(dedelta_store::client::cache::root_or_temp)
    }

    /// Opens the repository (config only), its index to be kept under [`Self::cache_root`],
    /// metered from here on (see [`IoModelArgs::report`]).
    pub fn open_repository(&self) -> Result<Repository> {
        Ok(self.open_unmetered()?.metered())
    }

    /// Opens the repository (config only), asking for its password if it is encrypted.
    pub fn open_unmetered(&self) -> Result<Repository> {
        let path = self.path()?;
        let cache_root = self.cache_root();
        let mut password = || self.password.password();
        let r = match path.to_str() {
            Some(loc) => Repository::open_location_unlocking(
                loc,
                &cache_root,
                self.connections,
                &mut password,
            )?,
            None => Repository::open_local_unlocking(&path, &cache_root, &mut password)?,
        };
        Ok(r)
    }

    /// How long `--retry-lock` retries (zero without it).
    pub fn retry_lock(&self) -> Result<std::time::Duration> {
        let Some(d) = &self.retry_lock else {
            return Ok(std::time::Duration::ZERO);
        };
        dedelta_store::repository::lock::parse_wait(d)
            .ok_or_else(|| {
                Error::InvalidOption(format!(
                    "--retry-lock {d:?}: a duration such as 30s, 5m, 1h or 1h30m"
                ))
            })
            .map_err(Into::into)
    }

    /// Opens the repository (config only, metered) and takes a lock of `mode` on it for
    /// `command`, with `--retry-lock`: the lock's record is written beside the config's
    /// read, and the lock taken while an encrypted repository's key is derived (see
    /// `dedelta_store::repository::open`).
    pub fn open_repository_locked(
        &self,
        command: &str,
        mode: LockMode,
    ) -> Result<(Repository, RepoLock)> {
        let (r, lock) = self.open_repository_trying_lock(command, mode)?;
        Ok((r, lock?))
    }

    /// [`Self::open_repository_locked`] for a reader: the open's errors, else the repository
    /// and the lock's outcome (a reader goes on without a lock where it cannot write one).
    pub fn open_repository_trying_lock(
        &self,
        command: &str,
        mode: LockMode,
    ) -> Result<(Repository, Result<RepoLock>)> {
        let path = self.path()?;
        let Some(loc) = path.to_str() else {
            let r = self.open_repository()?;
            let lock = self.lock(&r, command, mode);
            return Ok((r, lock));
        };
        let me = lock_info(command);
        let request = dedelta_store::repository::open::LockRequest {
            me: &me,
            mode,
            retry_for: self.retry_lock()?,
            prompt_may_wait: self.password.may_prompt(),
        };
        let mut password = || self.password.password();
        let (r, lock) = Repository::open_location_trying_lock(
            loc,
            &self.cache_root(),
            self.connections,
            &mut password,
            &request,
        )?;
        Ok((r.metered(), lock.map_err(Into::into)))
    }

    /// Takes a lock of `mode` on `r` for `command`, with `--retry-lock`.
    pub fn lock(&self, r: &Repository, command: &str, mode: LockMode) -> Result<RepoLock> {
        Ok(r.lock_with(&lock_info(command), mode, self.retry_lock()?)?)
    }
}

/// The parameters of the modelled I/O times `backup` and `restore` report (see
/// `dedelta_store::backend::cost` for the defaults and why).
#[derive(Args, Clone, Debug)]
pub struct IoModelArgs {
    /// Disk model: milliseconds of one seek (per read or write request).
    #[arg(long, value_name = "MS", default_value_t = 8.0)]
    model_disk_seek_ms: f64,
    /// Disk model: sequential transfer rate, MB/s.
    #[arg(long, value_name = "MB_S", default_value_t = 150.0)]
    model_disk_mb_s: f64,
    /// Object-store model: milliseconds of latency per request.
    #[arg(long, value_name = "MS", default_value_t = 30.0)]
    model_object_store_request_ms: f64,
    /// Object-store model: transfer rate, MB/s.
    #[arg(long, value_name = "MB_S", default_value_t = 80.0)]
    model_object_store_mb_s: f64,
}

impl IoModelArgs {
    /// The models these parameters describe.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a negative time or a rate that is not positive.
    pub fn models(&self) -> Result<IoModels> {
        let ms = |v: f64, flag: &str| {
            if v >= 0.0 && v.is_finite() {
                Ok(v / 1e3)
            } else {
                Err(Error::InvalidOption(format!("{flag} must be 0 or more")))
            }
        };
        let rate = |v: f64, flag: &str| {
            if v > 0.0 && v.is_finite() {
                Ok(v * 1e6)
            } else {
                Err(Error::InvalidOption(format!("{flag} must be more than 0")))
            }
        };
        Ok(IoModels {
            disk: DiskModel {
                seek_seconds: ms(self.model_disk_seek_ms, "--model-disk-seek-ms")?,
                bytes_per_second: rate(self.model_disk_mb_s, "--model-disk-mb-s")?,
            },
            object_store: ObjectStoreModel {
                request_seconds: ms(
                    self.model_object_store_request_ms,
                    "--model-object-store-request-ms",
                )?,
                bytes_per_second: rate(self.model_object_store_mb_s, "--model-object-store-mb-s")?,
            },
        })
    }

    /// The I/O `r` counted since it was opened (by [`RepoArg::open_repository`]: the whole
    /// command, the index catch-up and the lock included), under these models.
    pub fn report(&self, r: &Repository) -> Result<IoReport> {
        Ok(IoReport::new(
            r.io_counts().unwrap_or_default(),
            &self.models()?,
        ))
    }
}

/// The current time in RFC 3339 (UTC, microseconds), as snapshots and locks record it.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The host name snapshots record: `$DEDELTA_HOST` if set (restic's `RESTIC_HOST`), else
/// this machine's host name, or `unknown`.
pub fn host() -> String {
    if let Some(h) = std::env::var_os("DEDELTA_HOST").filter(|h| !h.is_empty()) {
        return h.to_string_lossy().into_owned();
    }
    hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// Who is taking the lock: this process, this host, now, running `command`.
pub fn lock_info(command: &str) -> LockInfo {
    LockInfo {
        pid: std::process::id(),
        host: host(),
        time: now_rfc3339(),
        command: command.into(),
    }
}

/// Opens the repository, takes a shared lock for `command` (so that no prune deletes what
/// the command reads), then opens the index, printing on stderr what the user should know
/// (an index that had to be rebuilt). For readers: a repository this process cannot write
/// (read-only media, another user's) is read without a lock, with a notice. The lock is
/// released when dropped.
pub fn open_reader(repo: &RepoArg, command: &str) -> Result<(IndexedRepository, Option<RepoLock>)> {
    open_reader_then(repo, command, |r| r)
}

/// [`open_reader`], `prepare` choosing how the index is opened (restore, dump and ls list
/// the snapshots beside its catch-up: [`Repository::listing_snapshots_at_open`]). The lock's
/// record is written beside the config's read, as a writer's is ([`open_then`]).
pub fn open_reader_then(
    repo: &RepoArg,
    command: &str,
    prepare: impl FnOnce(Repository) -> Repository,
) -> Result<(IndexedRepository, Option<RepoLock>)> {
    let (r, lock) = repo.open_repository_trying_lock(command, LockMode::Shared)?;
    let lock = without_lock_if_read_only(lock, command)?;
    Ok((with_index(prepare(r))?, lock))
}

/// A reader's lock, or none (with a notice) where the repository cannot be written.
fn without_lock_if_read_only(lock: Result<RepoLock>, command: &str) -> Result<Option<RepoLock>> {
    match lock {
        Err(e) if is_read_only(&e) => {
            print_notices(&[format!(
                "no shared lock could be written ({e:#}): reading without one; a prune running now could remove data this {command} reads"
            )]);
            Ok(None)
        }
        other => Ok(Some(other?)),
    }
}

/// A reader's shared lock on `r`, or none (with a notice) where the repository cannot be
/// written.
pub fn reader_lock(repo: &RepoArg, r: &Repository, command: &str) -> Result<Option<RepoLock>> {
    without_lock_if_read_only(repo.lock(r, command, LockMode::Shared), command)
}

/// Whether taking a lock failed because the repository cannot be written here.
fn is_read_only(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Error>()
        .and_then(Error::io_cause)
        .is_some_and(|c| {
            matches!(
                c.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            )
        })
}

/// Opens the index of an open repository (after the lock, for commands that take it),
/// printing its notices on stderr.
pub fn with_index(r: Repository) -> Result<IndexedRepository> {
    let r = r.open_index()?;
    print_notices(&r.take_notices());
    Ok(r)
}

/// Opens the repository, takes an exclusive lock for `command`, then opens the index (in
/// that order, so that no other process changes the containers while the index is read).
pub fn open_locked(repo: &RepoArg, command: &str) -> Result<(IndexedRepository, RepoLock)> {
    open_with(repo, command, LockMode::Exclusive)
}

/// [`open_locked`] with a lock of `mode`.
fn open_with(
    repo: &RepoArg,
    command: &str,
    mode: LockMode,
) -> Result<(IndexedRepository, RepoLock)> {
    open_then(repo, command, mode, |r| r)
}

/// [`open_with`], `prepare` choosing how the index is opened (see `backup`'s
/// [`Repository::listing_snapshots_at_open`]).
pub fn open_then(
    repo: &RepoArg,
    command: &str,
    mode: LockMode,
    prepare: impl FnOnce(Repository) -> Repository,
) -> Result<(IndexedRepository, RepoLock)> {
    let (r, lock) = repo.open_repository_locked(command, mode)?;
    if let Some(n) = r.remove_legacy_index(&lock)? {
        print_notices(&[n]);
    }
    let r = with_index(prepare(r))?;
    Ok((r, lock))
}

/// Ends a command that wrote to the index: merges a small index into one run (a failure to
/// do so is only a notice), then releases the lock.
pub fn finish(r: &IndexedRepository, lock: RepoLock) -> Result<()> {
    compact_index(r);
    lock.release()?;
    Ok(())
}

/// Compacts the client's chunk index if that is worthwhile (a notice if it fails): its own
/// files, which need no lock on the repository.
pub fn compact_index(r: &IndexedRepository) {
    if let Err(e) = r.index().compact_if_worthwhile() {
        print_notices(&[format!("the chunk index could not be compacted: {e}")]);
    }
}

/// A progress bar on stderr, drawn only when stderr is a terminal, the result is not JSON
/// (whose reader is a program) and `-q` was not given.
pub fn progress_bar(json: bool) -> progress::Bar {
    progress::Bar::new(std::io::stderr().is_terminal() && !json && !global::quiet())
}

/// The progress of `backup`, `restore` and `check`: with `--json`, restic-style `status`
/// lines (and `verbose_status`, `error`) for the phase `during`; else [`progress_bar`].
pub fn progress_stream(json: bool, during: &'static str) -> progress::Bar {
    if json {
        progress::Bar::json(during)
    } else {
        progress_bar(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        models: IoModelArgs,
    }

    /// The flags' defaults are the library's (which docs/benchmarks.md justifies), and a
    /// rate of 0 is refused by name.
    #[test]
    fn model_flag_defaults_are_the_library_defaults() {
        let cli = Cli::parse_from(["t"]);
        assert_eq!(cli.models.models().unwrap(), IoModels::default());
        let cli = Cli::parse_from(["t", "--model-object-store-mb-s", "0"]);
        let err = cli.models.models().unwrap_err().to_string();
        assert!(err.contains("--model-object-store-mb-s"), "{err}");
    }
}
