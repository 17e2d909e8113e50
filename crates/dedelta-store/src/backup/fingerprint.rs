//! Runs on: the worker pool, one job per block of a file or per run of small files
//! ([`super::small_files`]).
//!
//! A job fingerprints the block's chunks (BLAKE3), looks each one up in the index as it was
//! when the backup started, and sketches the ones it did not find. Doing all three on the pool
//! keeps them off the dedup thread's path; looking up first spares sketching the (usually
//! many) duplicates. With `delta.sketch_dupadj_misses` (DARE §3.1) it does not sketch: which
//! new chunks DupAdj resolves is known only on the dedup thread, whose delta stage then
//! sketches the others. The dedup thread receives the results in stream order (see [`submit`]).

use super::dedup::DedupIndex;
use super::metrics::StageTimes;
use crate::format::container::ContainerId;
use bytes::Bytes;
use crossbeam_channel::{bounded, Receiver};
use dedelta_core::sketch::{Sketcher, SuperFeatures};
use dedelta_core::ChunkId;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

/// Runs `f` on the pool; the returned receiver yields its result. Consumers keep submission
/// order by waiting on the receivers in the order they were made, while the pool works on
/// several jobs at once.
pub(super) fn submit<T: Send + 'static>(
    pool: &rayon::ThreadPool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Receiver<T> {
    let (tx, rx) = bounded(1);
    pool.spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// What the pool's index lookup found for a chunk.
#[derive(Clone, Copy, Debug)]
pub(super) enum IndexLookup {
    /// Stored before this backup, in this container.
    Stored(ContainerId),
    /// Not stored before this backup (it may still be a new chunk of this backup).
    Absent,
    /// Not looked up, or the lookup failed: the dedup thread looks again and reports errors.
    NotLookedUp,
}

/// A chunk as the pool hands it to the dedup thread.
pub(super) struct Fingerprinted {
    /// Its fingerprint.
    pub id: ChunkId,
    /// Its bytes: a slice of the block for a chunk the index held, else a copy of its own
    /// (see [`FingerprintJob::run`]).
    pub data: Bytes,
    /// Its super-features, when the backup sketches and the chunk was not found.
    pub sfs: Option<SuperFeatures>,
    /// What the index said.
    pub lookup: IndexLookup,
}

/// What every fingerprinting job shares.
#[derive(Clone)]
pub(super) struct FingerprintJob {
    /// The index view taken before anything of this backup was indexed.
    pub index: Arc<DedupIndex>,
    /// The backup's sketch method, if it detects resemblance by sketches and sketches every
    /// new chunk here (not with `delta.sketch_dupadj_misses`, where the delta stage sketches
    /// DupAdj's misses).
    pub sketcher: Option<Arc<dyn Sketcher>>,
    /// Stage timings.
    pub times: Arc<StageTimes>,
    /// How chunk ids are computed (keyed in an encrypted repository).
    pub hasher: dedelta_core::ChunkHasher,
}

impl FingerprintJob {
    /// Fingerprints, looks up and sketches the chunks `cuts` of `block`.
    pub fn run(&self, block: Bytes, cuts: Vec<Range<usize>>) -> Vec<Fingerprinted> {
        let t = Instant::now();
        let mut out: Vec<Fingerprinted> = cuts
            .into_iter()
            .map(|r| {
                let data = block.slice(r);
                Fingerprinted {
                    id: self.hasher.id(&data),
                    data,
                    sfs: None,
                    lookup: IndexLookup::NotLookedUp,
                }
            })
            .collect();
        StageTimes::add(&self.times.hash, t);
        let t = Instant::now();
        for c in out.iter_mut() {
            c.lookup = match self.index.container_of(&c.id) {
                Ok(Some(container)) => IndexLookup::Stored(container),
                Ok(None) => IndexLookup::Absent,
                Err(_) => IndexLookup::NotLookedUp,
            };
        }
        StageTimes::add(&self.times.index, t);
        // A chunk that may be new gets bytes of its own here, on the pool: the delta stage
        // keeps new chunks as bases, and a slice would keep the whole block alive. The copy
        // was the dedup thread's (the backup's critical path): with the page faults of its
        // fresh memory, a tenth of that thread's time on a Redis dump.
        for c in out.iter_mut() {
            if !matches!(c.lookup, IndexLookup::Stored(_)) {
                c.data = Bytes::copy_from_slice(&c.data);
            }
        }
        if let Some(sk) = &self.sketcher {
            let t = Instant::now();
            let mut n = 0;
            for c in out.iter_mut() {
                if !matches!(c.lookup, IndexLookup::Stored(_)) {
                    c.sfs = Some(sk.sketch(&c.data));
                    n += 1;
                }
            }
            StageTimes::add(&self.times.sketch, t);
            self.times
                .sketched_chunks
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::fingerprint_index::{FingerprintIndex, LookupCounters};
    use dedelta_core::ChunkHasher;

    /// An index holding one chunk.
    struct HoldsOne(ChunkId);

    impl FingerprintIndex for HoldsOne {
        fn container_of(&self, id: &ChunkId) -> crate::error::Result<Option<ContainerId>> {
            Ok((*id == self.0).then_some(ContainerId([7; 32])))
        }
        fn counters(&self) -> LookupCounters {
            LookupCounters::default()
        }
    }

    /// A chunk that may be new leaves the pool with bytes of its own, so that the delta
    /// stage can keep it as a base without keeping the block alive (and without copying it
    /// on the dedup thread); a stored chunk stays a slice of the block.
    #[test]
    fn chunks_not_in_the_index_get_bytes_of_their_own() {
        let block = Bytes::from(
            (0..3000u32)
                .map(|i| (i * 7 % 251) as u8)
                .collect::<Vec<_>>(),
        );
        let hasher = ChunkHasher::Plain;
        let stored = hasher.id(&block[1000..2000]);
        let job = FingerprintJob {
            index: Arc::new(DedupIndex {
                lookup: Arc::new(HoldsOne(stored)),
            }),
            sketcher: None,
            times: Arc::new(StageTimes::default()),
            hasher,
        };
        let out = job.run(block.clone(), vec![0..1000, 1000..2000, 2000..3000]);
        let within = |b: &Bytes| {
            let start = block.as_ptr() as usize;
            (start..start + block.len()).contains(&(b.as_ptr() as usize))
        };
        assert_eq!(out.len(), 3);
        for (c, range) in out.iter().zip([0..1000, 1000..2000, 2000..3000]) {
            assert_eq!(c.data, block.slice(range));
            assert_eq!(c.id, hasher.id(&c.data));
        }
        assert!(matches!(out[1].lookup, IndexLookup::Stored(_)));
        assert!(within(&out[1].data));
        for c in [&out[0], &out[2]] {
            assert!(matches!(c.lookup, IndexLookup::Absent));
            assert!(
                !within(&c.data),
                "a new chunk's bytes are a slice of the block"
            );
        }
    }
}
