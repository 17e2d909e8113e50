//! The writes made under a lock, as its release must know them: on an object store an
//! exclusive lock is deleted only once no write is in flight and [`super::SETTLE`] has passed
//! since the last one was acknowledged ([`Writes::settle`]).
//!
//! Why: a shared locker on an object store sends its open's catch-up listings (containers,
//! damage records, snapshots) in the same round as its lock's write and listing, and keeps
//! them when the listing that confirmed its lock was answered within [`super::SETTLE`] of
//! their sending (`repository/catch_up_listings.rs`). A prune that had finished just
//! then is not in that lock listing, but its deletions were acknowledged at least
//! [`super::SETTLE`] before its lock's deletion, so before the catch-up listings were sent:
//! they see all of them, never half a prune (the proof is in docs/format.md, "Locks").

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The writes in flight under one lock and when the last one ended (see the module doc).
#[derive(Debug, Default)]
pub struct Writes {
    state: Mutex<State>,
    idle: Condvar,
}

#[derive(Debug, Default)]
struct State {
    in_flight: usize,
    /// When the last write ended (acknowledged or failed), on [`super::boot_clock`].
    last_end: Option<Duration>,
}

/// One write in flight; its end is noted when dropped.
#[must_use]
pub struct Writing<'a>(&'a Writes);

impl Writes {
    /// A write starts (the write guard, before it passes one on).
    pub fn start(&self) -> Writing<'_> {
        self.lock().in_flight += 1;
        Writing(self)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no write is in flight and `settle` has passed since the last one ended;
    /// at once when nothing was written.
    pub fn settle(&self, settle: Duration) {
        let mut s = self.lock();
        loop {
            if s.in_flight > 0 {
                s = self.idle.wait(s).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let Some(end) = s.last_end else {
                return;
            };
            let left = settle.saturating_sub(super::boot_clock().saturating_sub(end));
            if left.is_zero() {
                return;
            }
            // A write that starts meanwhile wakes this up; its end is waited for in turn.
            s = self
                .idle
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.in_flight -= 1;
        s.last_end = Some(super::boot_clock());
        drop(s);
        self.0.idle.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn settling_without_writes_returns_at_once() {
        let t = Instant::now();
        Writes::default().settle(Duration::from_secs(60));
        assert!(t.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn settling_waits_for_the_writes_in_flight_and_then_the_settle_time() {
        let writes = Writes::default();
        let ended = Mutex::new(None);
        let settle = Duration::from_millis(100);
        let done = std::thread::scope(|s| {
            let writing = writes.start();
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                *ended.lock().unwrap() = Some(Instant::now());
                drop(writing);
            });
            writes.settle(settle);
            Instant::now()
        });
        let end = ended.lock().unwrap().expect("the write ended");
        assert!(
            done >= end + settle,
            "settled {:?} after the write's end",
            done - end
        );
    }
}
