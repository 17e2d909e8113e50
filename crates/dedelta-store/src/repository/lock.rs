//! Repository locks: objects in `locks/`, shared or exclusive, refreshed while held.
//!
//! Every command that reads chunks or changes the repository holds a lock for its whole run:
//! shared for backup, restore, check, ls and dump (any number at once, from any hosts),
//! exclusive for forget, prune and repair (alone). So a prune never deletes a container a
//! running backup may reference or a running restore is about to read.
//!
//! A lock is an object `locks/<32 hex>` (a random name) holding a [`LockRecord`] as JSON: who
//! (owner, host, pid, command), when it was taken and last refreshed, and the holder's refresh
//! interval and staleness timeout. Taking one ([`RepoLock::acquire`]) does not rely on a
//! conditional write (Garage ignores `If-None-Match`): it writes its own, then lists the
//! locks and, finding a conflicting live one, deletes its own and fails. Two processes racing
//! for conflicting locks may both back off (each saw the other's), never both succeed: each
//! one's listing comes after its own write, so the later writer of the two sees the earlier's
//! lock. (A listing before the write, to fail without writing, was dropped: it was a round
//! trip on every command's way, 40-60 ms on a Garage cluster, to spare a write and a delete
//! only when the repository is locked.) The two steps are apart in the API
//! ([`RepoLock::write`], [`WrittenLock::confirm`]) so that an open writes the record in the
//! same round trip as it reads the config ([`super::open`]).
//!
//! On an object store a *shared* locker lists the locks beside its record's write, in the
//! same round trip, and keeps that listing when its write was acknowledged within
//! [`SETTLE`] of the listing's sending (else it lists again, as above); an *exclusive*
//! locker on an object store waits [`SETTLE`] after its record's write is acknowledged
//! before it lists (on a local disk neither changes: no round trip to save, and a wait
//! would only slow every prune; a repository is reached through one kind of backend). That
//! keeps "never both": had neither seen the other, the shared listing was sent before the
//! exclusive record was acknowledged, and the exclusive listing, sent at least [`SETTLE`]
//! after that, before the shared record was acknowledged; the shared write then took more
//! than [`SETTLE`] from its listing's sending, and its listing was not kept. Each side
//! measures only its own durations, on a clock that counts a suspended machine's sleep
//! (`CLOCK_BOOTTIME`), so hosts' clocks need not agree. The commands that run often
//! (backup, restore, ls, dump, check) take shared locks: on a Garage cluster each saves a
//! round trip of 2-45 ms, against 0.25 s more for each exclusive one (forget, prune, ...).
//! An exclusive lock on an object store is also deleted only [`SETTLE`] after the last write
//! made under it ([`settle`]), so that a shared open may send its catch-up's listings in its
//! lock's round (`repository/catch_up_listings.rs`): 0.25 s more for an exclusive command that
//! wrote, another round trip less for every shared open.
//!
//! A lock is stale, and ignored and removed by the next process taking a lock, when it has
//! not been refreshed for its timeout (any host; hosts' clocks must agree to within a
//! fraction of it), when its holder is a process on this host that no longer runs, or when
//! it cannot be parsed (locks are written whole, so an unreadable one is garbage). The holder
//! refreshes it on a thread ([`refresh`]); when a refresh fails for long enough that others
//! may find the lock stale, or finds the lock deleted, the lock is *lost* and the
//! repository's write guard ([`super::lock_guard`]) refuses every further write, so the
//! operation stops before writing more.

use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub mod interrupt;
pub mod refresh;
pub mod settle;
mod user;

pub use refresh::{LockHealth, LockTiming};
pub use user::current_user;

/// Who takes a lock (the caller fills it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// When it was taken (RFC 3339).
    pub time: String,
    /// What the holder runs.
    pub command: String,
}

/// Shared or exclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Many holders at once: commands that only add to the repository or read it.
    Shared,
    /// One holder and no shared one: commands that delete or rewrite.
    Exclusive,
}

/// What a lock object holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    /// The holder.
    #[serde(flatten)]
    pub info: LockInfo,
    /// The user running the holder (`$USER`, or empty).
    #[serde(default)]
    pub owner: String,
    /// Exclusive (an object without the field, as older versions wrote, counts as one).
    #[serde(default = "yes")]
    pub exclusive: bool,
    /// Seconds since the Unix epoch of the last refresh (or of the taking).
    #[serde(default)]
    pub refreshed: u64,
    /// How often the holder refreshes, in seconds.
    #[serde(default)]
    pub refresh_secs: u64,
    /// After how many seconds without a refresh the lock is stale.
    #[serde(default)]
    pub stale_secs: u64,
}

fn yes() -> bool {
    true
}

/// Seconds since the Unix epoch now.
pub fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl LockRecord {
    /// Why this lock is stale at `now` as seen from host `my_host`, or `None` if live.
    pub fn stale_reason(&self, now: SystemTime, my_host: &str) -> Option<String> {
        if self.info.host == my_host && !process_alive(self.info.pid) {
            return Some(format!(
                "its process {} no longer runs on this host",
                self.info.pid
            ));
        }
        let age = epoch_secs(now).saturating_sub(self.refreshed);
        // A lock from before locks were refreshed has no timeout: only its host can tell.
        (self.stale_secs > 0 && age > self.stale_secs).then(|| {
            format!(
                "not refreshed for {age} s (its timeout is {} s)",
                self.stale_secs
            )
        })
    }

    fn locked_error(&self, name: &str, backend: &dyn Backend) -> Error {
        Error::Locked {
            pid: self.info.pid,
            host: self.info.host.clone(),
            time: self.info.time.clone(),
            command: format!(
                "{}, {} lock",
                self.info.command,
                if self.exclusive {
                    "exclusive"
                } else {
                    "shared"
                }
            ),
            path: format!("{}/locks/{name}", backend.location()),
        }
    }
}

/// A lock object as found by [`list_locks`].
#[derive(Clone, Debug)]
pub struct FoundLock {
    /// Its object name.
    pub name: String,
    /// Its contents, `None` if unreadable (garbage: stale).
    pub record: Option<LockRecord>,
}

/// Every lock object in the repository (one listing and one read each; a lock deleted
/// between the two is left out).
pub fn list_locks(backend: &dyn Backend) -> Result<Vec<FoundLock>> {
    list_locks_but(backend, None)
}

/// [`list_locks`] without reading lock `mine` (this process's own, just written: a request
/// that on Garage cost up to 45 ms, for a record never looked at).
fn list_locks_but(backend: &dyn Backend, mine: Option<&str>) -> Result<Vec<FoundLock>> {
    let mut out = Vec::new();
    for name in backend.list_names(FileKind::Lock)? {
        if Some(name.as_str()) == mine {
            continue;
        }
        match backend.get(FileKind::Lock, &name) {
            Ok(bytes) => out.push(FoundLock {
                record: serde_json::from_slice(&bytes).ok(),
                name,
            }),
            Err(crate::backend::BackendError::Missing { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Removes stale locks (or, with `all`, every lock); returns the names removed.
pub fn remove_locks(backend: &dyn Backend, all: bool, my_host: &str) -> Result<Vec<String>> {
    let now = SystemTime::now();
    let mut removed = Vec::new();
    for l in list_locks(backend)? {
        let stale = l
            .record
            .as_ref()
            .is_none_or(|r| r.stale_reason(now, my_host).is_some());
        if all || stale {
            backend.delete(FileKind::Lock, &l.name)?;
            removed.push(l.name);
        }
    }
    Ok(removed)
}

/// How long an exclusive locker waits between its record's acknowledged write and its
/// listing of the others, and how soon after its listing's sending a shared locker's write
/// must be acknowledged for a listing sent beside the write to count (see the module doc).
/// Changing it changes the protocol between clients: every client must use the same.
pub const SETTLE: Duration = Duration::from_millis(250);

/// Time on a clock that goes on while the machine is suspended (`CLOCK_BOOTTIME`; the
/// standard library's monotonic clock stops then, and a write acknowledged after a suspend
/// must not look quick).
pub(crate) fn boot_clock() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; CLOCK_BOOTTIME exists on Linux >= 2.6.39.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if r != 0 {
        // Never on Linux; a clock that reads zero makes every early listing too late to keep.
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A listing of the locks sent beside the own record's write (a shared lock on an object
/// store), and when each was sent or acknowledged.
#[derive(Debug)]
struct EarlyListing {
    found: Vec<FoundLock>,
    /// The listing's sending, on [`boot_clock`].
    sent: Duration,
    /// Its answer, on [`boot_clock`].
    answered: Duration,
}

/// A held lock, released on drop (or by [`RepoLock::release`], which reports errors).
#[derive(Debug)]
pub struct RepoLock {
    backend: Arc<dyn Backend>,
    name: String,
    mode: LockMode,
    health: Arc<LockHealth>,
    refresher: Option<refresh::Refresher>,
    released: bool,
    /// When the listing that confirmed the lock was answered, on [`boot_clock`].
    confirmed_at: Duration,
}

/// A random lock name: 16 bytes of the standard library's random hash keys, in hex.
fn random_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let word = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u128(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    format!("{:016x}{:016x}", word(std::process::id() as u64), word(1))
}

impl RepoLock {
    /// Takes an exclusive lock for `me` with the default timing (see [`Self::acquire_with`]).
    pub fn acquire(backend: Arc<dyn Backend>, me: &LockInfo) -> Result<Self> {
        Self::acquire_with(backend, me, LockMode::Exclusive, LockTiming::default())
    }

    /// Takes a lock in `mode` for `me`, or fails with [`Error::Locked`] naming a conflicting
    /// live lock (see the module documentation for the protocol: the write of its record,
    /// then one listing). Stale locks met on the way are removed. The lock is refreshed by a
    /// thread until released.
    pub fn acquire_with(
        backend: Arc<dyn Backend>,
        me: &LockInfo,
        mode: LockMode,
        timing: LockTiming,
    ) -> Result<Self> {
        Self::write(backend, me, mode, timing)?.confirm()
    }

    /// The first step of [`Self::acquire_with`]: writes the lock's record (no listing before
    /// the write: the listing after it decides alone, see the module doc, and on an object
    /// store each listing is a round trip on every command's way). The lock is not held
    /// until [`WrittenLock::confirm`] has listed the others; a [`WrittenLock`] dropped
    /// unconfirmed deletes its record. The write needs nothing but the backend, so an open
    /// issues it beside the config's read ([`super::open`]). A shared lock on an object
    /// store lists the others beside the write, for [`WrittenLock::confirm`] to keep if the
    /// write was quick enough ([`SETTLE`]).
    pub fn write(
        backend: Arc<dyn Backend>,
        me: &LockInfo,
        mode: LockMode,
        timing: LockTiming,
    ) -> Result<WrittenLock> {
        let name = random_name();
        let record = LockRecord {
            info: me.clone(),
            owner: current_user().unwrap_or_default(),
            exclusive: mode == LockMode::Exclusive,
            refreshed: epoch_secs(SystemTime::now()),
            refresh_secs: timing.refresh.as_secs(),
            stale_secs: timing.stale_after.as_secs(),
        };
        let list_beside = mode == LockMode::Shared && backend.requests_are_round_trips();
        let write = || {
            refresh::write_record(backend.as_ref(), &name, &record)?;
            Ok::<_, Error>(boot_clock())
        };
        let (written_at, early) = if list_beside {
            let (written, listed) = crate::request_threads::beside(
                true,
                || {
                    let sent = boot_clock();
                    list_locks_but(backend.as_ref(), Some(&name)).map(|found| EarlyListing {
                        found,
                        sent,
                        answered: boot_clock(),
                    })
                },
                write,
            );
            let written_at = written?;
            // A listing that failed, or was sent too long before the write's acknowledgement,
            // is not kept: the confirmation lists again.
            let early = listed
                .ok()
                .filter(|l| written_at.saturating_sub(l.sent) <= SETTLE);
            (written_at, early)
        } else {
            (write()?, None)
        };
        interrupt::note_held(&name, &backend, None, Duration::ZERO);
        Ok(WrittenLock {
            backend,
            name,
            record,
            mode,
            timing,
            written_at,
            early,
            done: false,
        })
    }

    /// Like [`Self::acquire_with`], retrying while the repository is locked, for up to
    /// `retry_for` (restic's `--retry-lock`), with waits growing from 1 s to 10 s.
    pub fn acquire_retrying(
        backend: Arc<dyn Backend>,
        me: &LockInfo,
        mode: LockMode,
        timing: LockTiming,
        retry_for: Duration,
    ) -> Result<Self> {
        Self::confirm_retrying(None, backend, me, mode, timing, retry_for)
    }

    /// [`Self::acquire_retrying`] whose first attempt is `first`, a record written already
    /// ([`Self::write`]) with the same `me`, `mode` and `timing`; `None` to write one.
    pub fn confirm_retrying(
        mut first: Option<WrittenLock>,
        backend: Arc<dyn Backend>,
        me: &LockInfo,
        mode: LockMode,
        timing: LockTiming,
        retry_for: Duration,
    ) -> Result<Self> {
        let deadline = std::time::Instant::now() + retry_for;
        let mut wait = Duration::from_secs(1);
        loop {
            let attempt = match first.take() {
                Some(written) => written.confirm(),
                None => Self::acquire_with(backend.clone(), me, mode, timing),
            };
            match attempt {
                Err(Error::Locked { .. }) if std::time::Instant::now() + wait <= deadline => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_secs(10));
                }
                other => return other,
            }
        }
    }

    /// Shared or exclusive.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// The lock object's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the lock is still held; what the write guard checks before every write.
    pub fn health(&self) -> &Arc<LockHealth> {
        &self.health
    }

    /// Fails if the lock was lost (see the module documentation).
    pub fn check(&self) -> Result<()> {
        self.health.check()
    }

    /// When the listing that confirmed the lock (saw no conflicting one) was answered, on
    /// the lock protocol's clock: listings of the repository sent at most [`SETTLE`] before
    /// it see no exclusive operation half done (see [`settle`]).
    pub(crate) fn confirmed_at(&self) -> Duration {
        self.confirmed_at
    }

    /// Releases the lock now, reporting errors (drop ignores them).
    pub fn release(mut self) -> Result<()> {
        self.stop();
        interrupt::note_released(&self.name);
        Ok(self.backend.delete(FileKind::Lock, &self.name)?)
    }

    /// Stops refreshing; an exclusive lock on an object store then waits until [`SETTLE`]
    /// has passed since the last write made under it ([`settle`]), before its deletion.
    fn stop(&mut self) {
        self.released = true;
        if let Some(r) = self.refresher.take() {
            r.stop();
        }
        self.health.release();
        if self.mode == LockMode::Exclusive && self.backend.requests_are_round_trips() {
            self.health.writes().settle(SETTLE);
        }
    }
}

impl Drop for RepoLock {
    fn drop(&mut self) {
        if !self.released {
            self.stop();
            interrupt::note_released(&self.name);
            let _ = self.backend.delete(FileKind::Lock, &self.name);
        }
    }
}

/// A lock whose record is written ([`RepoLock::write`]) but not yet checked against the
/// others: not held. [`Self::confirm`] makes it a [`RepoLock`] or fails; dropped, it deletes
/// its record.
#[derive(Debug)]
pub struct WrittenLock {
    backend: Arc<dyn Backend>,
    name: String,
    record: LockRecord,
    mode: LockMode,
    timing: LockTiming,
    /// When the record's write was acknowledged, on [`boot_clock`].
    written_at: Duration,
    /// The others, listed beside the write (see [`RepoLock::write`]), when that listing
    /// counts.
    early: Option<EarlyListing>,
    /// Confirmed: nothing left to delete on drop.
    done: bool,
}

impl WrittenLock {
    /// The second step of taking a lock: lists the locks (or takes the listing made beside
    /// the write; an exclusive lock on an object store first waits until [`SETTLE`] has
    /// passed since its write)
    /// and, finding a conflicting live one (written meanwhile by another process: the later
    /// writer backs off), deletes this one and fails with [`Error::Locked`]; stale locks met
    /// are removed. Else the lock is held and refreshed by a thread from now on.
    ///
    /// # Errors
    /// [`Error::Locked`]; the listing's or a deletion's errors.
    pub fn confirm(mut self) -> Result<RepoLock> {
        self.done = true;
        let backend = self.backend.clone();
        let name = std::mem::take(&mut self.name);
        let health = Arc::new(LockHealth::new(self.timing));
        let mut lock = RepoLock {
            backend: backend.clone(),
            name: name.clone(),
            mode: self.mode,
            health: health.clone(),
            refresher: None,
            released: false,
            confirmed_at: Duration::ZERO,
        };
        let (found, answered) = match self.early.take() {
            Some(early) => (early.found, early.answered),
            None => {
                if self.mode == LockMode::Exclusive && backend.requests_are_round_trips() {
                    let since = boot_clock().saturating_sub(self.written_at);
                    std::thread::sleep(SETTLE.saturating_sub(since));
                }
                let found = list_locks_but(backend.as_ref(), Some(&name))?;
                (found, boot_clock())
            }
        };
        lock.confirmed_at = answered;
        let now = SystemTime::now();
        for l in &found {
            let live = match &l.record {
                Some(r) => r
                    .stale_reason(now, &self.record.info.host)
                    .is_none()
                    .then_some(r),
                None => None,
            };
            match live {
                Some(r) if r.exclusive || self.mode == LockMode::Exclusive => {
                    let e = r.locked_error(&l.name, backend.as_ref());
                    lock.release()?;
                    return Err(e);
                }
                Some(_) => {}
                // Stale or garbage: its holder stopped writing; clear it away.
                None => backend.delete(FileKind::Lock, &l.name)?,
            }
        }
        let record = self.record.clone();
        let settle = if self.mode == LockMode::Exclusive && backend.requests_are_round_trips() {
            SETTLE
        } else {
            Duration::ZERO
        };
        interrupt::note_held(&name, &backend, Some(&health), settle);
        lock.refresher = Some(refresh::Refresher::start(backend, name, record, health));
        Ok(lock)
    }
}

impl Drop for WrittenLock {
    fn drop(&mut self) {
        if !self.done {
            interrupt::note_released(&self.name);
            let _ = self.backend.delete(FileKind::Lock, &self.name);
        }
    }
}

/// Parses a wait such as `30s`, `5m`, `1h30m` (units h, m, s, as restic's `--retry-lock`;
/// a bare number is seconds); `None` if malformed.
pub fn parse_wait(s: &str) -> Option<Duration> {
    if let Ok(n) = s.parse::<u64>() {
        return Some(Duration::from_secs(n));
    }
    let mut total = 0u64;
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = std::mem::take(&mut num).parse().ok()?;
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    (num.is_empty() && !s.is_empty()).then_some(Duration::from_secs(total))
}

/// Whether a process with `pid` runs on this machine. A zombie (exited, not yet reaped by
/// its parent) does not run: `kill(pid, 0)` succeeds for it, so its state is read from /proc.
pub(crate) fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for the process's existence and our permission.
    let r = unsafe { libc::kill(pid, 0) };
    let exists = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !is_zombie(pid)
}

/// Whether /proc says `pid` is a zombie (`Z`) or dead (`X`); false where /proc is unavailable.
fn is_zombie(pid: libc::pid_t) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain spaces.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
}

#[cfg(test)]
mod tests;
