//! Runs on: restore's and dump's decoding thread, with one helper thread for the process.
//!
//! A helper thread that takes a share of a batch of jobs from the calling thread, for the
//! fingerprints restore and dump check ([`super::PipelinedDecoder::decode_batch`]).
//!
//! Why not rayon's scope (as backup's [`crate::share::for_each_shared`]): a scope returns only
//! once every job spawned in it ran, so a caller that had done the whole batch itself still
//! waited for the helper thread to be scheduled, only to find nothing left; on a loaded
//! machine that is a time slice per batch. Here the caller waits only for jobs the helper has
//! actually taken, and a helper that wakes late finds the batch withdrawn.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError};

/// Items a thread takes at a time: fewer turns of the lock, which the two threads would
/// otherwise pass back and forth item by item.
const CLAIM: usize = 4;

/// A job of the batch on offer, its lifetime erased (see the SAFETY notes).
#[derive(Clone, Copy)]
struct Job(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the pointee is `Sync` (shared between the two threads by design), and the pointer is
// only dereferenced while the batch is on offer or a job of it runs (see `Helper::for_each`).
unsafe impl Send for Job {}

/// What the two threads share, under one lock.
#[derive(Default)]
struct State {
    /// The batch on offer, if any.
    job: Option<Job>,
    /// Its next item to take.
    next: usize,
    /// Its items.
    len: usize,
    /// Groups of items the helper has taken and not finished.
    running: usize,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// A batch is on offer.
    offered: Condvar,
    /// The helper finished an item.
    finished: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The helper thread.
pub(crate) struct Helper {
    shared: Arc<Shared>,
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
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("dedelta-verify".into())
            .spawn(move || help(&theirs))
            .ok()?;
        Some(Helper {
            shared,
            turn: Mutex::new(()),
        })
    }

    /// Runs `job(i)` for every `i` in `0..len`, each exactly once, on this thread and on the
    /// helper thread if it is free to take some; returns when all have run. While another
    /// caller's batch is on offer, this one runs alone.
    pub(crate) fn for_each(&self, len: usize, job: &(dyn Fn(usize) + Sync)) {
        let _turn = match self.turn.try_lock() {
            Ok(turn) => turn,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return (0..len).for_each(job),
        };
        let short: *const (dyn Fn(usize) + Sync + '_) = job;
        // SAFETY: only the lifetime is erased. The helper dereferences the pointer only after
        // taking an item under the lock while the batch is on offer, and this function
        // withdraws the batch and waits until no taken item is running before it returns or unwinds ([`Withdraw`]), so
        // no use outlives `job`.
        let erased: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(short) };
        {
            let mut s = self.shared.lock();
            *s = State {
                job: Some(Job(erased)),
                next: 0,
                len,
                running: s.running,
            };
        }
        self.shared.offered.notify_one();
        // Withdraws the batch and waits for the helper's running items when this function
        // leaves, also by a panic of `job` on this thread: without it an unwinding caller
        // would drop `job` under the helper's feet.
        let _withdraw = Withdraw(&self.shared);
        loop {
            let taken = {
                let mut s = self.shared.lock();
                if s.next >= s.len {
                    break;
                }
                let from = s.next;
                s.next = (from + CLAIM).min(s.len);
                from..s.next
            };
            taken.for_each(job);
        }
    }
}

/// Withdraws the batch on offer when dropped, and waits until no item the helper took runs.
struct Withdraw<'a>(&'a Shared);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.job = None;
        while s.running > 0 {
            s = self.0.finished.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The helper thread's loop: takes items of the batch on offer until none is left, then
/// waits for the next batch.
fn help(shared: &Shared) {
    let mut s = shared.lock();
    loop {
        let taken = match s.job {
            Some(job) if s.next < s.len => Some((job, s.next..(s.next + CLAIM).min(s.len))),
            _ => None,
        };
        let Some((job, items)) = taken else {
            s = shared.offered.wait(s).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        s.next = items.end;
        s.running += 1;
        drop(s);
        // SAFETY: the items were taken while the batch was on offer, and its caller waits for
        // `running` to drop to zero before `job` goes (see `Helper::for_each`). A panicking job
        // is caught, so that `running` still drops and the caller does not wait forever.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            items.for_each(|i| unsafe { (*job.0)(i) })
        }));
        s = shared.lock();
        s.running -= 1;
        if s.running == 0 {
            shared.finished.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
