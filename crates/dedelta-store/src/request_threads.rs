//! Threads that make one caller's backend requests several at a time: backup's delta bases
//! ([`crate::backup::bases`]), read a round at a time, and restore's regions read ahead
//! (the locator's `restore_ahead`), submitted one by one. On an object store every read is a
//! round trip (about 10 ms to moto on loopback under load, 30 ms to a real one), so reading
//! a round's 30 regions one after another costs 30 round trips where 8 in flight cost 4.
//!
//! A batch's jobs go into a queue that the threads take from; the caller takes from it too
//! until it is empty, then waits for the rest. So a batch never waits for threads that are
//! slow to start, and finishes even if every thread is gone. A job that panics yields no
//! result (its caller reads that item the slow way, which reports why), never a hang.
//! Threads start with the first batch of two or more jobs (a backup that reads no base
//! starts none) and block on the queue between batches (no spinning on the shared cores).
//!
//! A batch's jobs go before jobs submitted one by one: the caller waits on the batch (restore
//! reads the metadata of the containers it plans next), while a submitted job is read ahead
//! of need. In one queue, a restore's metadata waited behind every region it had submitted.

use crossbeam_channel::{unbounded, Receiver, Sender};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `other` and `this` and returns both results: at once, `other` on a scoped thread, when
/// `round_trips` (each waits on a network, see [`crate::backend::Backend::requests_are_round_trips`]);
/// else `other` then `this` on the calling thread. Why: the open's independent requests (the
/// config beside the key files' listing, the damage records beside the containers') save a
/// round trip each on an object store, but on a local disk each takes microseconds, less than
/// starting a thread and its allocator arena (issue 14: every command's fixed cost). A panic
/// in `other` is passed on.
pub(crate) fn beside<A, B: Send>(
    round_trips: bool,
    other: impl FnOnce() -> B + Send,
    this: impl FnOnce() -> A,
) -> (A, B) {
    if !round_trips {
        let b = other();
        return (this(), b);
    }
    std::thread::scope(|s| {
        let other = s.spawn(other);
        let a = this();
        let b = other
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (a, b)
    })
}

/// A job of a batch, run on whichever thread takes it.
pub type Job<T> = Box<dyn FnOnce() -> T + Send>;

type Task = Box<dyn FnOnce() + Send>;

/// Up to `threads` threads running jobs for one caller (see the module doc).
pub struct RequestThreads {
    threads: usize,
    /// Batches' jobs ([`Self::run`]), taken first.
    queue: Sender<Task>,
    taken: Receiver<Task>,
    /// Jobs submitted one by one ([`Self::submit`]).
    ahead: Sender<Task>,
    taken_ahead: Receiver<Task>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl RequestThreads {
    /// Threads for up to `threads` jobs in flight beside the caller's own; none are started
    /// yet.
    pub fn new(threads: usize) -> Self {
        let (queue, taken) = unbounded();
        let (ahead, taken_ahead) = unbounded();
        RequestThreads {
            threads,
            queue,
            taken,
            ahead,
            taken_ahead,
            handles: Vec::new(),
        }
    }

    /// How many jobs run at once at most: the threads and the caller.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.threads + 1
    }

    /// Starts the threads not started yet; a thread that cannot be started is done without.
    fn start(&mut self) {
        while self.handles.len() < self.threads {
            let (taken, ahead) = (self.taken.clone(), self.taken_ahead.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("dedelta-read-{}", self.handles.len()))
                .spawn(move || run_tasks(&taken, &ahead));
            match spawned {
                Ok(h) => self.handles.push(h),
                Err(_) => break,
            }
        }
    }

    /// Queues `job` to run on one of the threads and returns at once (restore's regions read
    /// ahead: the job sends its result where the caller takes it). Without threads (none
    /// asked for, or none could start) it runs here. A job still queued when these threads are dropped runs before they end.
    pub fn submit(&mut self, job: Job<()>) {
        if self.threads > 0 {
            self.start();
        }
        if self.handles.is_empty() {
            // No thread would take it.
            let _ = catch_unwind(AssertUnwindSafe(job));
            return;
        }
        let task: Task = Box::new(move || {
            let _ = catch_unwind(AssertUnwindSafe(job));
        });
        if let Err(e) = self.ahead.send(task) {
            (e.into_inner())();
        }
    }

    /// Runs every job of `jobs` once, on the threads and on this one, and returns their
    /// results in the order of `jobs`; `None` for a job that panicked.
    pub fn run<T: Send + 'static>(&mut self, jobs: Vec<Job<T>>) -> Vec<Option<T>> {
        let n = jobs.len();
        if n <= 1 || self.threads == 0 {
            return jobs
                .into_iter()
                .map(|job| catch_unwind(AssertUnwindSafe(job)).ok())
                .collect();
        }
        self.start();
        let (done, results) = unbounded::<(usize, Option<T>)>();
        for (i, job) in jobs.into_iter().enumerate() {
            let done = done.clone();
            let task: Task = Box::new(move || {
                let out = catch_unwind(AssertUnwindSafe(job)).ok();
                let _ = done.send((i, out));
            });
            if let Err(e) = self.queue.send(task) {
                // Unreachable while `self` holds the receiving end; run it here regardless.
                (e.into_inner())();
            }
        }
        drop(done);
        while let Ok(task) = self.taken.try_recv() {
            task();
        }
        let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
        // Every task sends once and then drops its sender: this ends when all have run.
        for (i, r) in results {
            out[i] = r;
        }
        out
    }
}

impl Drop for RequestThreads {
    fn drop(&mut self) {
        // Closing the queues ends each thread's loop once they are empty.
        (self.queue, _) = unbounded();
        (self.ahead, _) = unbounded();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A thread's loop: a batch's tasks first, then those submitted, until both queues are
/// closed and empty.
fn run_tasks(batches: &Receiver<Task>, ahead: &Receiver<Task>) {
    loop {
        if let Ok(task) = batches.try_recv() {
            task();
            continue;
        }
        crossbeam_channel::select_biased! {
            recv(batches) -> task => match task {
                Ok(task) => task(),
                Err(_) => break ahead.iter().for_each(|t| t()),
            },
            recv(ahead) -> task => match task {
                Ok(task) => task(),
                Err(_) => break batches.iter().for_each(|t| t()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// On a local disk both halves run on the calling thread, `other` first; with round
    /// trips `other` runs on a thread of its own, at the same time, and its panic is passed on.
    #[test]
    fn beside_runs_on_this_thread_unless_requests_are_round_trips() {
        let me = std::thread::current().id();
        let order = std::sync::Mutex::new(Vec::new());
        let (a, b) = beside(
            false,
            || {
                order.lock().unwrap().push("other");
                std::thread::current().id()
            },
            || {
                order.lock().unwrap().push("this");
                std::thread::current().id()
            },
        );
        assert_eq!((a, b), (me, me));
        assert_eq!(*order.lock().unwrap(), ["other", "this"]);
        // Each half waits for the other: only threads running at once get past the barrier.
        let both = std::sync::Barrier::new(2);
        let (a, b) = beside(
            true,
            || {
                both.wait();
                std::thread::current().id()
            },
            || {
                both.wait();
                std::thread::current().id()
            },
        );
        assert_eq!(a, me);
        assert_ne!(b, me);
        let panicked = std::panic::catch_unwind(|| beside(true, || panic!("other"), || 1));
        assert!(panicked.is_err());
    }

    /// An object store's requests are round trips, through every wrapper the store stacks on
    /// it (sealing, the write guard, metering, retries, faults); a local directory's are not.
    #[test]
    fn object_stores_and_their_wrappers_say_requests_are_round_trips() {
        use crate::backend::wrap::{fault::FaultBackend, metered::MeteredBackend};
        use crate::backend::{local::LocalBackend, Backend};
        let s3 = crate::backend::open_url("s3:http://127.0.0.1:9/bucket/prefix", None)
            .expect("an S3 URL")
            .expect("no request made yet");
        let key = crate::crypto::MasterKey::random().unwrap();
        let wrap = |b: Arc<dyn Backend>| -> Arc<dyn Backend> {
            let b: Arc<dyn Backend> = Arc::new(MeteredBackend::new(b));
            let b: Arc<dyn Backend> = Arc::new(FaultBackend::new(b));
            let b: Arc<dyn Backend> = Arc::new(crate::crypto::backend::SealedBackend::new(b, &key));
            Arc::new(crate::repository::lock_guard::WriteGuard::new(b))
        };
        assert!(s3.requests_are_round_trips());
        assert!(wrap(s3).requests_are_round_trips());
        let tmp = tempfile::tempdir().unwrap();
        let local: Arc<dyn Backend> = Arc::new(LocalBackend::new(tmp.path()));
        assert!(!wrap(local).requests_are_round_trips());
    }

    /// Jobs run at most `threads + 1` at a time, each once, results in order; a job that
    /// panics gives `None` and the others still come back.
    #[test]
    fn bounded_in_order_and_panics_give_none() {
        let mut threads = RequestThreads::new(3);
        for round in 0..3 {
            let now = Arc::new(AtomicUsize::new(0));
            let most = Arc::new(AtomicUsize::new(0));
            let jobs: Vec<Job<usize>> = (0..20usize)
                .map(|i| {
                    let (now, most) = (now.clone(), most.clone());
                    Box::new(move || {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(2));
                        now.fetch_sub(1, Ordering::SeqCst);
                        if i == 7 && round == 1 {
                            panic!("job 7 fails");
                        }
                        i * 10
                    }) as Job<usize>
                })
                .collect();
            let out = threads.run(jobs);
            for (i, r) in out.iter().enumerate() {
                if i == 7 && round == 1 {
                    assert_eq!(*r, None);
                } else {
                    assert_eq!(*r, Some(i * 10));
                }
            }
            let most = most.load(Ordering::SeqCst);
            assert!(most <= threads.in_flight(), "{most} in flight");
            assert!(most >= 2, "jobs ran one at a time");
        }
    }

    /// Submitted jobs run on the threads, several at once, at most `threads`; each once.
    #[test]
    fn submitted_jobs_run_on_the_threads() {
        let mut threads = RequestThreads::new(3);
        let (tx, rx) = unbounded();
        let now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let me = std::thread::current().id();
        for i in 0..12usize {
            let (tx, now, most) = (tx.clone(), now.clone(), most.clone());
            threads.submit(Box::new(move || {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                now.fetch_sub(1, Ordering::SeqCst);
                let _ = tx.send((i, std::thread::current().id() != me));
            }));
        }
        drop(tx);
        let mut got: Vec<(usize, bool)> = rx.iter().collect();
        got.sort_unstable();
        assert_eq!(got, (0..12).map(|i| (i, true)).collect::<Vec<_>>());
        let most = most.load(Ordering::SeqCst);
        assert!((2..=3).contains(&most), "{most} in flight");
    }

    /// A batch's jobs run before jobs submitted earlier and still queued: the caller waiting
    /// on the batch does not wait for the reads ahead.
    #[test]
    fn batches_go_before_submitted_jobs() {
        let mut threads = RequestThreads::new(1);
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (started, gate) = (Arc::new(AtomicUsize::new(0)), unbounded::<()>());
        // The one thread is held by the first job until the batch is queued.
        let (s, g) = (started.clone(), gate.1.clone());
        threads.submit(Box::new(move || {
            s.fetch_add(1, Ordering::SeqCst);
            let _ = g.recv();
        }));
        while started.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        for i in 0..5 {
            let order = order.clone();
            threads.submit(Box::new(move || {
                order.lock().unwrap().push(format!("ahead {i}"))
            }));
        }
        // Each batch job waits for the other: one runs on the caller, which releases the
        // thread, and the thread must take the other before the jobs submitted.
        let both = Arc::new(std::sync::Barrier::new(2));
        let jobs: Vec<Job<()>> = (0..2)
            .map(|i| {
                let (order, gate, both) = (order.clone(), gate.0.clone(), both.clone());
                Box::new(move || {
                    order.lock().unwrap().push(format!("batch {i}"));
                    let _ = gate.send(());
                    both.wait();
                }) as Job<()>
            })
            .collect();
        threads.run(jobs);
        let got = order.lock().unwrap().clone();
        assert!(
            got.iter().take(2).all(|s| s.starts_with("batch")),
            "the batch waited behind the reads ahead: {got:?}"
        );
        drop(threads);
        assert_eq!(order.lock().unwrap().len(), 7, "every submitted job ran");
    }

    /// Without threads, or with one job, everything runs on the caller.
    #[test]
    fn runs_inline_without_threads() {
        let mut none = RequestThreads::new(0);
        let me = std::thread::current().id();
        let jobs: Vec<Job<bool>> = (0..3)
            .map(|_| Box::new(move || std::thread::current().id() == me) as Job<bool>)
            .collect();
        assert_eq!(none.run(jobs), vec![Some(true); 3]);
        assert!(none.handles.is_empty());
    }
}
