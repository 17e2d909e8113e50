//! Runs on: the dedup thread.
//!
//! Inversed delta compression (LoopDelta §4.5). With rewriting, the chunks of the containers a
//! segment gives up (infrequently reused containers) may not serve as delta bases, or restore
//! would read those containers anyway. A new chunk N whose only similar chunk S lies in such
//! a container is stored in full, and S is stored again, right behind N, as a delta against
//! N: an *inversed delta*. The old full copy of S is then garbage-to-be: prune reclaims it,
//! and S is read from its delta, next to its base.
//!
//! The format records an inversed delta as its own entry kind (repository version
//! [`crate::format::config::INVERSED_VERSION`]), because until prune runs the chunk has two
//! copies with different roles: the full copy (in the old container) and the newest one (the
//! inversed delta). The rules, which keep deltas one level deep whatever `max_depth` allows:
//! - **The index names the full copy while there is one.** An inversed delta entry is not
//!   indexed when its chunk is (backups, catch-ups and rebuilds alike: rebuilds prefer full
//!   copies anyway). So every delta that had S as its base keeps reading S's full copy, and
//!   no chain grows by the inversion.
//! - **Prune decides between the copies** ([`crate::commands::prune`]): when S is referenced
//!   by a snapshot, its inversed delta becomes the copy the index names and the full copy is
//!   dead, reclaimed with its container (N becomes live as the delta's base), unless that
//!   would make a chain deeper than the repository allows: the deltas that stay and name S as
//!   their base (down chains) get one link deeper, since S is now a delta. With one-level
//!   deltas (`max_depth` 1, the papers' and every version-1/2 repository's) that means: S
//!   keeps its full copy while any delta that stays names it as its base (LoopDelta: bases
//!   are full chunks), and the inversed delta stays unindexed garbage, reclaimed when its
//!   container is rewritten. With chains (`max_depth` D) S is promoted when the longest chain
//!   of deltas onto S is at most D - 1 links.
//! - An inversed delta is always one level: its base N is a new chunk stored in full by the
//!   same backup, and only a full chunk S is inverted.
//!
//! Choices made:
//! - Inversion needs rewriting (the paper: without it only direct delta compression runs):
//!   with inversed deltas on, a candidate base in a container the current segment gave up is
//!   never used as a direct base; the first such candidate of a chunk for which no other base
//!   gives a delta is inverted.
//! - A chunk is inverted at most once per backup.
//! - The inversed delta is kept by the same test as a direct one (it must save
//!   `min_saving` against the chunk compressed alone), and is never above the chunk's size.
//! - A candidate's container is the one the index names at the backup's start (its full copy);
//!   this backup's own new chunks are never infrequent.

use super::bases::{Base, BaseFetcher};
use super::delta::{NewChunk, Stored};
use crate::error::Result;
use crate::format::config::DeltaConfig;
use crate::format::container::ContainerId;
use dedelta_core::compress::Compression;
use dedelta_core::delta::DeltaCodec;
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};

/// An old chunk re-stored as a delta against a new one.
#[derive(Clone, Debug)]
pub struct InversedCopy {
    /// The old chunk.
    pub id: ChunkId,
    /// Its delta against the new chunk it is stored behind.
    pub delta: Vec<u8>,
    /// Its length.
    pub original_len: usize,
}

/// The inversion state of one backup.
#[derive(Debug, Default)]
pub struct Inverter {
    /// The current segment's infrequently reused containers.
    pub infrequent: HashSet<ContainerId>,
    /// Containers of candidates looked up so far (`None`: not indexed, a new chunk).
    containers: HashMap<ChunkId, Option<ContainerId>>,
    /// Chunks inverted by this backup.
    inverted: HashSet<ChunkId>,
}

impl Inverter {
    /// Whether `base` lies in an infrequently reused container.
    pub fn is_infrequent(&mut self, bases: &mut BaseFetcher<'_>, base: &Base) -> Result<bool> {
        if self.infrequent.is_empty() {
            return Ok(false);
        }
        let container = match self.containers.get(&base.id) {
            Some(c) => *c,
            None => {
                let c = bases.container_of(&base.id)?;
                self.containers.insert(base.id, c);
                c
            }
        };
        Ok(container.is_some_and(|c| self.infrequent.contains(&c)))
    }

    /// Inverts, for each chunk of `batch` left in full with an infrequent candidate, that
    /// candidate against it if the delta saves enough.
    pub fn invert(&mut self, codec: &dyn DeltaCodec, cfg: &DeltaConfig, batch: &mut [NewChunk]) {
        for c in batch.iter_mut() {
            let Some(old) = c.take_to_invert() else {
                continue;
            };
            if !matches!(c.stored, Stored::Full)
                || old.depth != 0
                || old.id == c.id
                || self.inverted.contains(&old.id)
            {
                continue;
            }
            let mut delta = Vec::new();
            codec.encode(&c.data, &old.bytes, &mut delta);
            if saves_enough(&delta, &old.bytes, cfg.min_saving) {
                self.inverted.insert(old.id);
                c.inversed = Some(InversedCopy {
                    id: old.id,
                    delta,
                    original_len: old.bytes.len(),
                });
            }
        }
    }
}

/// Whether `delta` saves `min_saving` of `chunk` compressed alone (zstd level 1), as a direct
/// delta must (one-level comparison: the raw delta).
fn saves_enough(delta: &[u8], chunk: &[u8], min_saving: f64) -> bool {
    if delta.len() >= chunk.len() {
        return false;
    }
    if delta.len() * 8 <= chunk.len() {
        return true;
    }
    let cost = Compression::zstd(1).compress(chunk).1.len();
    delta.len() as f64 <= cost as f64 * (1.0 - min_saving)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_must_save_against_the_chunk_compressed() {
        let chunk: Vec<u8> = (0..4096u64)
            .map(|i| (i * 2_654_435_761 % 251) as u8)
            .collect();
        assert!(saves_enough(&[0; 100], &chunk, 0.1));
        assert!(!saves_enough(&chunk, &chunk, 0.1));
        // Zeros compress to nearly nothing: a delta of a quarter of the size does not save.
        assert!(!saves_enough(&[1; 1000], &[0; 4096], 0.1));
    }
}
