//! Runs on: restore's and dump's decoding thread, with one helper thread for the process.
//!
//! A helper thread that takes a share of a batch of jobs from the calling thread, for the
//! fingerprints restore and dump check ([`super::PipelinedDecoder::decode_batch`]).
//!
//! Why not rayon's scope (as backup's [`crate::share::for_each_shared`]): a scope returns only
//! once every job spawned in it ran, so a caller that had done the whole batch itself still
//! waited for the helper thread to be scheduled, only to find nothing left; on a loaded
//! machine that is a time slice per batch. Here the caller waits only for jobs the helper has
//! actually taken, and a helper that wakes late finds the batch withdrawn ([`Offer`], which
//! backup's sharing uses too).

use crate::share::Offer;
use std::sync::{Arc, Mutex, OnceLock, TryLockError};

/// The helper thread.
pub(crate) struct Helper {
    offer: Arc<Offer>,
    /// Held by the caller whose batch is on offer: one batch at a time (restores running at
    /// once in one process, as tests do, take turns or work alone).
    turn: Mutex<()>,
}

impl Helper {
    /// The process's helper thread, started on first use; `None` if it could not be started
    /// (then callers work alone).
    pub(crate) fn get() -> Option<&'static Helper> {
        static HELPER: OnceLock<Option<Helper>> = OnceLock::new();
        HELPER.get_or_init(Helper::start).as_ref()
    }

    fn start() -> Option<Helper> {
        let offer = Arc::new(Offer::default());
        let theirs = offer.clone();
        std::thread::Builder::new()
            .name("dedelta-verify".into())
            .spawn(move || theirs.help_forever())
            .ok()?;
        Some(Helper {
            offer,
            turn: Mutex::new(()),
        })
    }

    /// Runs `job(i)` for every `i` in `0..len`, each exactly once, on this thread and on the
    /// helper thread if it is free to take some; returns when all have run. While another
    /// caller's batch is on offer, this one runs alone. A panic of `job` on the helper thread
    /// is raised again here.
    pub(crate) fn for_each(&self, len: usize, job: &(dyn Fn(usize) + Sync)) {
        let _turn = match self.turn.try_lock() {
            Ok(turn) => turn,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return (0..len).for_each(job),
        };
        self.offer.serve(len, job, || self.offer.wake_helper());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::AssertUnwindSafe;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every item runs exactly once, batch after batch, whatever the batch's size; borrowed
    /// results are complete when `for_each` returns.
    #[test]
    fn every_item_once_and_done_on_return() {
        let helper = Helper::get().expect("the helper thread starts");
        for len in [0, 1, 2, 3, 17, 1000] {
            for _ in 0..20 {
                let runs: Vec<AtomicUsize> = (0..len).map(|_| AtomicUsize::new(0)).collect();
                helper.for_each(len, &|i| {
                    runs[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1), "{len}");
            }
        }
    }

    /// A job that panics on the calling thread unwinds only after the helper's items are
    /// done (the batch borrowed from the caller's frame must outlive them), and the helper
    /// goes on serving later batches.
    #[test]
    fn a_panicking_caller_waits_for_the_helper() {
        let helper = Helper::get().expect("the helper thread starts");
        let caller = std::thread::current().id();
        for _ in 0..20 {
            let done = AtomicUsize::new(0);
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                helper.for_each(64, &|_| {
                    if std::thread::current().id() == caller {
                        panic!("job panics on the caller");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    done.fetch_add(1, Ordering::Relaxed);
                });
            }));
            assert!(r.is_err());
            // Nothing the helper took is still running: `done` is final.
            let seen = done.load(Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert_eq!(done.load(Ordering::Relaxed), seen);
        }
        let runs = AtomicUsize::new(0);
        helper.for_each(10, &|_| {
            runs.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 10);
    }

    /// The helper takes items when it is free: with slow items, both threads run some.
    #[test]
    fn the_helper_takes_a_share() {
        let helper = Helper::get().expect("the helper thread starts");
        let caller = std::thread::current().id();
        let by_helper = AtomicUsize::new(0);
        for _ in 0..200 {
            helper.for_each(8, &|_| {
                if std::thread::current().id() != caller {
                    by_helper.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            });
            if by_helper.load(Ordering::Relaxed) > 0 {
                return;
            }
        }
        panic!("the helper never took an item");
    }
}
