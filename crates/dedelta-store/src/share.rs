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
//! take jobs from the same queue: at worst the batch runs as fast as on the dedup thread alone.

use std::sync::Mutex;

/// Runs `job` on every item of `items`, on this thread and on up to `helpers` threads of
/// `pool` that are free to help. Items are taken in order; each runs exactly once. What each
/// job computes must not depend on which thread runs it (it never does here: stored bytes
/// depend only on the input).
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
    let queue = Mutex::new(items.iter_mut());
    let work = || loop {
        // The guard is a temporary of this statement: released before the job runs.
        let Some(item) = queue.lock().unwrap_or_else(|e| e.into_inner()).next() else {
            break;
        };
        job(item);
    };
    pool.in_place_scope(|s| {
        for _ in 0..helpers {
            s.spawn(|_| work());
        }
        work();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
