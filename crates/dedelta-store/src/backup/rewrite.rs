//! Runs on: the dedup thread.
//!
//! Rewriting: storing some duplicate chunks again so that a backup's data is less scattered
//! over old containers (chunk fragmentation), trading stored size for restore speed. The
//! strategy is the [`Rewriting`] trait; the one implemented is [`Capping`] (Lillibridge et al.,
//! FAST'13, the rewriting LoopDelta §2.1 evaluates as Dedup-Cap): the file data stream is cut
//! into segments of about `segment_bytes` (20 MB in the papers), and within a segment at most
//! `level` old containers (stored before this backup) may be referenced. The `level`
//! containers holding the most of the segment's duplicates are kept; the other duplicates are
//! rewritten.
//!
//! Choices made:
//! - A segment is cut at chunk granularity: it ends with the first chunk that brings it to
//!   `segment_bytes` or more, so it is reproducible from the snapshot's recipe (the capping
//!   test checks the stored result that way). Tree chunks are not capped (a tree is about
//!   0.4% of the data it describes and changes nearly everywhere).
//! - The dedup thread holds the segment's chunks, bytes included, until it is decided:
//!   memory is bounded by `segment_bytes` plus a block (the chunks are slices of the
//!   walker's 1 MiB blocks, each kept whole while a chunk of it waits). A look-ahead holding only the ids
//!   was rejected: the bytes of a rewritten duplicate are needed when it is stored, and the
//!   pipeline does not keep them anywhere else.
//! - A rewritten chunk is stored in full, never as a delta, as in LoopDelta's Dedup-Cap: a
//!   delta's base would most likely sit in one of the old containers the segment just gave
//!   up (DupAdj's candidates are the parent's chunks), and reading it back would cost the
//!   container read that capping saved.
//! - Containers are ranked by the number of the segment's duplicate chunks they hold (as in
//!   Capping), ties broken by first reference in the segment, so the choice is
//!   deterministic.
//!
//! The trait lives here, not in `dedelta-core` with the other strategies: it decides over
//! containers, which are the store's.
//!
//! The rewritten copy is the one later backups and reads use: a backup's containers are
//! indexed after those before it, and the index names the newest entry of a chunk (see
//! [`crate::client::index`]). Snapshots older than the rewrite keep reading their own copy:
//! each snapshot names the containers its backup referenced
//! ([`crate::format::snapshot::Snapshot::containers`]), restore prefers a copy in them
//! ([`crate::read::ChunkLocator::reading_own_copies`]), and prune keeps such copies while a
//! snapshot naming their container remains, reclaiming them after (see
//! [`crate::commands::prune`]). Delta bases are named by chunk id, so a delta whose base was
//! rewritten reads the base's new copy.

use crate::format::container::ContainerId;
use std::collections::{HashMap, HashSet};

/// The default segment of [`Capping`]: 20 MiB, the papers' "20 MB".
pub const DEFAULT_SEGMENT_BYTES: u64 = 20 << 20;

/// Which duplicates a backup stores again.
///
/// Contract: the dedup stage hands [`Self::keep`] the old containers of one segment's
/// duplicates, in stream order; every duplicate whose container is not in the returned set
/// is rewritten (stored again by this backup). Duplicates of chunks this backup itself
/// stored are never handed over: they are not fragmentation.
pub trait Rewriting: std::fmt::Debug + Send + Sync {
    /// Bytes of file data per segment (at least 1).
    fn segment_bytes(&self) -> u64;

    /// The old containers the segment may reference; `refs` holds, for each duplicate of
    /// the segment that an old container holds, that container, in stream order.
    fn keep(&self, refs: &[ContainerId]) -> HashSet<ContainerId>;
}

/// Rewrites nothing: every duplicate is deduplicated (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRewriting;

impl Rewriting for NoRewriting {
    fn segment_bytes(&self) -> u64 {
        u64::MAX
    }

    fn keep(&self, refs: &[ContainerId]) -> HashSet<ContainerId> {
        refs.iter().copied().collect()
    }
}

/// Capping (Lillibridge et al., FAST'13): at most `level` old containers per segment of
/// `segment_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capping {
    /// Bytes of file data per segment (at least 1).
    pub segment_bytes: u64,
    /// Most old containers a segment references (the capping level T, at least 1).
    pub level: usize,
}

impl Capping {
    /// Capping at `level` with the default 20 MiB segments.
    pub fn new(level: usize) -> Self {
        Capping {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            level,
        }
    }
}

impl Rewriting for Capping {
    fn segment_bytes(&self) -> u64 {
        self.segment_bytes.max(1)
    }

    fn keep(&self, refs: &[ContainerId]) -> HashSet<ContainerId> {
        // Per container: (duplicates held, first reference).
        let mut count: HashMap<ContainerId, (usize, usize)> = HashMap::new();
        for (i, c) in refs.iter().enumerate() {
            count.entry(*c).or_insert((0, i)).0 += 1;
        }
        let mut ranked: Vec<(ContainerId, (usize, usize))> = count.into_iter().collect();
        ranked.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
        ranked
            .into_iter()
            .take(self.level)
            .map(|(c, _)| c)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: u8) -> ContainerId {
        ContainerId([n; 32])
    }

    #[test]
    fn capping_keeps_the_most_referenced_containers() {
        let refs = [c(1), c(2), c(2), c(3), c(3), c(3), c(4), c(2), c(5)];
        let keep = Capping {
            segment_bytes: 1,
            level: 2,
        }
        .keep(&refs);
        assert_eq!(keep, [c(3), c(2)].into_iter().collect());
    }

    #[test]
    fn capping_breaks_ties_by_first_reference() {
        let refs = [c(9), c(7), c(8), c(7), c(8), c(9)];
        let cap = |level| {
            Capping {
                segment_bytes: 1,
                level,
            }
            .keep(&refs)
        };
        assert_eq!(cap(1), [c(9)].into_iter().collect());
        assert_eq!(cap(2), [c(9), c(7)].into_iter().collect());
        assert_eq!(cap(5).len(), 3);
    }

    #[test]
    fn no_rewriting_keeps_everything() {
        let refs = [c(1), c(2), c(3)];
        assert_eq!(NoRewriting.keep(&refs).len(), 3);
    }
}
