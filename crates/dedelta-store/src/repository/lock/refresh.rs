//! Keeping a lock alive: the refresher thread, and the lock's health as the write guard
//! sees it.
//!
//! The holder rewrites its lock object every [`LockTiming::refresh`] with the time of the
//! refresh. Others take the lock as stale after [`LockTiming::stale_after`] without one. The
//! holder counts its lock lost, and stops writing, one refresh interval *before* that
//! (clocks of hosts differ a little, and a write in flight takes time), or as soon as it
//! finds its lock object deleted (`unlock --remove-all`, or a process that judged it stale).
//! Times are wall-clock ([`SystemTime`]): a machine that was suspended wakes up past its
//! deadline and stops, where a monotonic clock would not have counted the sleep.

use super::{epoch_secs, LockRecord};
use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// How often a lock is refreshed and when it goes stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockTiming {
    /// Between refreshes.
    pub refresh: Duration,
    /// Without a refresh for this long, a lock is stale.
    pub stale_after: Duration,
}

impl Default for LockTiming {
    /// restic's: refresh every 5 minutes, stale after 30.
    fn default() -> Self {
        LockTiming {
            refresh: Duration::from_secs(300),
            stale_after: Duration::from_secs(1800),
        }
    }
}

impl LockTiming {
    /// The default, or `$DEDELTA_LOCK_REFRESH_SECS` and `$DEDELTA_LOCK_STALE_SECS` (for
    /// tests, and for repositories whose clients must notice a crashed one sooner).
    pub fn from_env() -> Self {
        let secs = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&s| s > 0)
                .map(Duration::from_secs)
        };
        let d = LockTiming::default();
        LockTiming {
            refresh: secs("DEDELTA_LOCK_REFRESH_SECS").unwrap_or(d.refresh),
            stale_after: secs("DEDELTA_LOCK_STALE_SECS").unwrap_or(d.stale_after),
        }
    }

    /// How long after its last good refresh the holder counts its lock lost.
    pub fn lost_after(&self) -> Duration {
        self.stale_after
            .saturating_sub(self.refresh)
            .max(self.refresh / 2)
    }
}

/// Whether a held lock still protects its holder's writes.
#[derive(Debug)]
pub struct LockHealth {
    timing: LockTiming,
    last_ok: Mutex<SystemTime>,
    lost: Mutex<Option<String>>,
    released: AtomicBool,
    /// The writes made under the lock (the write guard notes them).
    writes: super::settle::Writes,
}

impl LockHealth {
    /// A lock just written.
    pub fn new(timing: LockTiming) -> Self {
        LockHealth {
            timing,
            last_ok: Mutex::new(SystemTime::now()),
            lost: Mutex::new(None),
            released: AtomicBool::new(false),
            writes: super::settle::Writes::default(),
        }
    }

    /// The writes made under this lock, as the write guard notes them.
    pub fn writes(&self) -> &super::settle::Writes {
        &self.writes
    }

    fn refreshed(&self, at: SystemTime) {
        *self.last_ok.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    fn mark_lost(&self, why: String) {
        let mut l = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        l.get_or_insert(why);
    }

    /// The process was interrupted: no write under this lock may start any more.
    pub fn interrupt(&self) {
        self.mark_lost("the command was interrupted".into());
    }

    pub(super) fn release(&self) {
        self.released.store(true, Ordering::Relaxed);
    }

    /// Fails with [`Error::LockLost`] if the lock was lost or not refreshed for
    /// [`LockTiming::lost_after`] while held (a released lock no longer guards anything).
    pub fn check(&self) -> Result<()> {
        if self.released.load(Ordering::Relaxed) {
            // Released whole: what follows is no longer this lock's business (a later
            // write takes a lock of its own, or needs none).
            return Ok(());
        }
        if let Some(why) = self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(Error::LockLost(why));
        }
        let last = *self.last_ok.lock().unwrap_or_else(|e| e.into_inner());
        let since = SystemTime::now().duration_since(last).unwrap_or_default();
        if since > self.timing.lost_after() {
            let why = format!(
                "the lock could not be refreshed for {} s; other clients may take it as stale",
                since.as_secs()
            );
            self.mark_lost(why.clone());
            return Err(Error::LockLost(why));
        }
        Ok(())
    }
}

/// Writes a lock record.
pub(super) fn write_record(backend: &dyn Backend, name: &str, record: &LockRecord) -> Result<()> {
    // Serializing a struct of strings and numbers cannot fail.
    let body = serde_json::to_vec(record).expect("lock record serializes");
    Ok(backend.put(FileKind::Lock, name, &body)?)
}

/// The thread refreshing one lock.
#[derive(Debug)]
pub(super) struct Refresher {
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Refresher {
    /// Starts refreshing `name` (holding `record`) every `health`'s refresh interval.
    pub(super) fn start(
        backend: Arc<dyn Backend>,
        name: String,
        mut record: LockRecord,
        health: Arc<LockHealth>,
    ) -> Self {
        let (stop, stopped) = bounded::<()>(1);
        let every = health.timing.refresh;
        let thread = std::thread::Builder::new()
            .name("dedelta-lock-refresh".into())
            .spawn(move || {
                let mut wait = every;
                loop {
                    match stopped.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    wait = every;
                    match backend.exists(FileKind::Lock, &name) {
                        Ok(false) => {
                            health.mark_lost(format!(
                                "the lock {name} was removed by another process"
                            ));
                            return;
                        }
                        Ok(true) => {}
                        // Retried sooner, until the lock counts as lost.
                        Err(_) => {
                            wait = every / 4;
                            let _ = health.check();
                            continue;
                        }
                    }
                    // Lost (or interrupted): the record must not come back.
                    if health.check().is_err() {
                        return;
                    }
                    let now = SystemTime::now();
                    record.refreshed = epoch_secs(now);
                    match write_record(backend.as_ref(), &name, &record) {
                        Ok(()) => health.refreshed(now),
                        Err(_) => {
                            wait = every / 4;
                            let _ = health.check();
                        }
                    }
                }
            })
            .ok();
        Refresher { stop, thread }
    }

    /// Stops the thread and waits for it.
    pub(super) fn stop(mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
