//! Sharing a batch of independent jobs between the calling thread and a pool's free threads:
//! backup's dedup thread with the worker pool (delta encoding). (Restore's
//! locating thread reading regions ahead on rayon's global pool was tried and dropped: on
//! 2 cores the dumps of 20 SQLAlchemy sdists took 20% more CPU and ran 25% slower; see
//! docs/benchmarks.md.) The dedup
//! thread is the backup's critical path on versioned data (on 20 SQLAlchemy sdists it held
//! 44% of the backup's CPU time against the pool's 26%), and while it works the walker waits
//! on a full channel and the pool runs dry. Handing a batch to the pool outright
//! (`install` + `par_iter`) made the dedup thread wait behind whatever the pool had queued:
//! with 2 cores, delta encoding ran 2-3x slower that way than on the dedup thread alone. Here
//! the dedup thread keeps working through the batch itself, and pool threads that are free
//! take jobs from the same queue ([`Offer`]).
//!
//! Why not rayon's scope, as this module used before: a scope returns only once every job
//! spawned in it ran, so a dedup thread that had done the whole batch itself still waited for
//! a pool thread to come free (after the hashing or sketching job it was in) only to find
//! nothing left. On one incremental backup of SQLAlchemy on a loaded machine that was 86-204
//! ms of a 0.37 s backup. Here the caller waits only for jobs a helper has actually taken, and
//! a helper that starts late finds the batch withdrawn.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Items a thread takes at a time: fewer claims, and neighbouring items on one thread.
const CLAIM: usize = 4;

/// Runs `job` on every item of `items`, on this thread and on up to `helpers` threads of
/// `pool` that are free to help. Items are taken in order; each runs exactly once; returns
/// when all have run, without waiting for a helper that had not started. A panic of `job` on
/// any thread is raised again here, once no item runs. What each job computes must not
/// depend on which thread runs it (it never does here: stored bytes depend only on the input).
pub fn for_each_shared<T: Send>(
    pool: &rayon::ThreadPool,
    helpers: usize,
    items: &mut [T],
    job: impl Fn(&mut T) + Sync,
) {
    let helpers = helpers.min(items.len().saturating_sub(1));
    if helpers == 0 {
        items.iter_mut().for_each(job);
        return;
    }
    let base = ItemsPtr(items.as_mut_ptr());
    let len = items.len();
    let each = |i: usize| {
        // SAFETY: `i < len`, the offer hands out every index exactly once, and `items` stays
        // borrowed until `serve` returns, after every taken item ran: each `&mut` is unique.
        job(unsafe { &mut *base.at(i) })
    };
    let offer = Arc::new(Offer::default());
    offer.serve(len, &each, || {
        for _ in 0..helpers {
            let offer = offer.clone();
            pool.spawn(move || offer.help());
        }
    });
}

/// The items' start, shared with the helpers (see the SAFETY note in [`for_each_shared`]).
struct ItemsPtr<T>(*mut T);

impl<T> ItemsPtr<T> {
    /// Item `i`'s address. A method, so that closures capture the whole `ItemsPtr` (which is
    /// `Sync`), not its raw pointer field.
    fn at(&self, i: usize) -> *mut T {
        // SAFETY: callers pass `i` within the slice.
        unsafe { self.0.add(i) }
    }
}

// SAFETY: only used to hand each item, once, to one thread; `T: Send` lets it move there.
unsafe impl<T: Send> Sync for ItemsPtr<T> {}

/// A batch's job, its lifetime erased (see the SAFETY notes of [`Offer::serve`]).
#[derive(Clone, Copy)]
struct Job(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the pointee is `Sync` (shared between threads by design), and the pointer is only
// dereferenced while the batch is on offer or a job of it runs (see `Offer::serve`).
unsafe impl Send for Job {}

/// What the threads share under the lock: the batch and who works on it. Items themselves
/// are claimed without the lock ([`Offer::next`]).
#[derive(Default)]
struct State {
    /// The batch on offer, if any.
    job: Option<Job>,
    /// Its items.
    len: usize,
    /// Helpers working on the batch (each claims items until none is left).
    running: usize,
    /// The first panic of a helper's item, raised again by the caller.
    panic: Option<Box<dyn Any + Send>>,
}

/// A batch of items on offer: the caller runs them and helpers that come by take some.
#[derive(Default)]
pub(crate) struct Offer {
    state: Mutex<State>,
    /// The batch's next item to claim, `CLAIM` at a time with one atomic add: the threads
    /// used to take items under the lock, and on 2 cores passing it back and forth woke the
    /// waiting thread through a futex at most turns (6 % of a restore's decoding thread).
    /// Only a thread the lock has registered (the caller, or a helper counted in `running`)
    /// claims, so no claim crosses from one batch to the next.
    next: AtomicUsize,
    /// A helper finished its items.
    finished: Condvar,
    /// A batch was put on offer (for a dedicated helper thread, [`Offer::help_forever`]).
    offered: Condvar,
}

impl Offer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `job(i)` for every `i` in `0..len`, each exactly once: puts the batch on offer,
    /// calls `call_helpers` (who then call [`Offer::help`]), and takes items on this thread
    /// until none is left. Returns once no item a helper took still runs; a helper that comes
    /// later finds nothing. One batch per offer at a time.
    pub(crate) fn serve(
        &self,
        len: usize,
        job: &(dyn Fn(usize) + Sync),
        call_helpers: impl FnOnce(),
    ) {
        let short: *const (dyn Fn(usize) + Sync + '_) = job;
        // SAFETY: only the lifetime is erased. A helper dereferences the pointer only while
        // it is registered in `running`, which it can be only while the batch is on offer,
        // and this function withdraws the batch and waits until no helper is registered
        // before it returns or unwinds ([`Withdraw`]), so no use outlives `job`.
        let erased: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(short) };
        {
            let mut s = self.lock();
            s.job = Some(Job(erased));
            s.len = len;
            // No helper is registered (the last batch waited for them): nobody claims.
            self.next.store(0, Ordering::Relaxed);
            // A panic left by an earlier batch whose caller unwound on its own panic.
            s.panic = None;
        }
        // Withdraws the batch and waits for the helpers' running items when this function
        // leaves, also by a panic of `job` on this thread: without it an unwinding caller
        // would drop `job` under the helpers' feet.
        let withdraw = Withdraw(self);
        call_helpers();
        while let Some(taken) = self.claim(len) {
            taken.for_each(job);
        }
        drop(withdraw);
        if let Some(p) = self.lock().panic.take() {
            resume_unwind(p);
        }
    }

    /// The next items of a batch of `len`, if any is left (the caller or a registered
    /// helper only).
    fn claim(&self, len: usize) -> Option<std::ops::Range<usize>> {
        let from = self.next.fetch_add(CLAIM, Ordering::Relaxed);
        (from < len).then(|| from..(from + CLAIM).min(len))
    }

    /// Stops the claims of the batch on offer: every later claim finds nothing.
    fn close(&self, len: usize) {
        self.next.fetch_max(len, Ordering::Relaxed);
    }

    /// Takes and runs items of the batch on offer until none is left (at once if the batch
    /// was withdrawn). A panicking item is caught and handed to the caller.
    pub(crate) fn help(&self) {
        let (job, len) = {
            let mut s = self.lock();
            let Some(job) = s.job else {
                return;
            };
            if self.next.load(Ordering::Relaxed) >= s.len {
                return;
            }
            s.running += 1;
            (job, s.len)
        };
        // SAFETY: this thread is registered in `running` while the batch is on offer, and
        // its caller waits for `running` to drop to zero before `job` goes (see
        // `Offer::serve`).
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            while let Some(items) = self.claim(len) {
                items.for_each(|i| unsafe { (*job.0)(i) });
            }
        }));
        let mut s = self.lock();
        if let Err(p) = outcome {
            s.panic.get_or_insert(p);
            // The caller raises it: nothing more to do for this batch.
            self.close(len);
        }
        s.running -= 1;
        if s.running == 0 {
            self.finished.notify_all();
        }
    }
}

impl Offer {
    /// Wakes a dedicated helper thread waiting in [`Offer::help_forever`].
    pub(crate) fn wake_helper(&self) {
        self.offered.notify_one();
    }

    /// A dedicated helper thread's loop: waits for a batch on offer with items left, helps
    /// with it, and waits again.
    pub(crate) fn help_forever(&self) -> ! {
        loop {
            let mut s = self.lock();
            while s.job.is_none() || self.next.load(Ordering::Relaxed) >= s.len {
                s = self.offered.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            drop(s);
            self.help();
        }
    }
}

/// Withdraws the batch on offer when dropped, and waits until no item a helper took runs.
struct Withdraw<'a>(&'a Offer);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.job = None;
        // Helpers still claiming (the caller unwinds on its own panic) stop.
        self.0.close(s.len);
        while s.running > 0 {
            s = self.0.finished.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Every item is done exactly once, whatever the number of helpers.
    #[test]
    fn every_item_once() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for helpers in [0, 1, 2, 8] {
            for n in [0, 1, 2, 7, 100] {
                let mut items: Vec<(usize, u32)> = (0..n).map(|i| (i, 0)).collect();
                for_each_shared(&pool, helpers, &mut items, |(i, runs)| {
                    *runs += 1;
                    *i *= 2;
                });
                assert!(items.iter().all(|&(_, runs)| runs == 1));
                assert!(items.iter().enumerate().all(|(k, &(i, _))| i == 2 * k));
            }
        }
    }

    /// The bug this module fixed: with the pool's only thread busy, the caller does the
    /// batch alone and returns without waiting for the busy thread to come free.
    #[test]
    fn a_busy_pool_does_not_hold_the_caller() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let (started, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(())));
        let hold = release.lock().unwrap();
        {
            let (started, release) = (started.clone(), release.clone());
            pool.spawn(move || {
                started.store(1, Ordering::SeqCst);
                drop(release.lock().unwrap());
            });
        }
        while started.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        // Done on its own thread: the old scope would wait for the held thread forever.
        let (done, finished) = std::sync::mpsc::channel();
        let pool = Arc::new(pool);
        let theirs = pool.clone();
        std::thread::spawn(move || {
            let mut items = vec![0u32; 16];
            for_each_shared(&theirs, 1, &mut items, |x| *x += 1);
            let _ = done.send(items);
        });
        let items = finished.recv_timeout(Duration::from_secs(30));
        drop(hold);
        let items = items.expect("the caller returned while the pool was busy");
        assert!(items.iter().all(|&x| x == 1));
    }

    /// A job that panics on a helper is raised on the caller, after every taken item ran.
    #[test]
    fn a_helpers_panic_reaches_the_caller() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let caller = std::thread::current().id();
        let mut saw_panic = false;
        for _ in 0..200 {
            let mut items = vec![0u32; 64];
            let r = catch_unwind(AssertUnwindSafe(|| {
                for_each_shared(&pool, 2, &mut items, |_| {
                    std::thread::sleep(Duration::from_micros(200));
                    if std::thread::current().id() != caller {
                        panic!("job panics on a helper");
                    }
                })
            }));
            if r.is_err() {
                saw_panic = true;
                break;
            }
        }
        assert!(saw_panic, "no helper ever took an item");
    }

    /// Helpers that are free take a share: with slow items, a pool thread runs some.
    #[test]
    fn free_helpers_take_a_share() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let caller = std::thread::current().id();
        let by_helpers = AtomicUsize::new(0);
        for _ in 0..200 {
            let mut items = vec![0u32; 16];
            for_each_shared(&pool, 2, &mut items, |_| {
                if std::thread::current().id() != caller {
                    by_helpers.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(1));
            });
            if by_helpers.load(Ordering::Relaxed) > 0 {
                return;
            }
        }
        panic!("no helper ever took an item");
    }
}
