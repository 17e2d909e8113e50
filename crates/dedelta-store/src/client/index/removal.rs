//! Taking chunks and containers out of the index: prune's removals (the runs holding a dead
//! chunk rewritten without it, in one commit) and the containers a client deleted.

use super::change::new_seq;
use super::files::run_path;
use super::{run, ChunkIndex};
use crate::error::Result;
use crate::format::container::ContainerId;
use dedelta_core::ChunkId;
use std::collections::HashSet;
use std::sync::Arc;

impl ChunkIndex {
    /// Removes the entries of `dead` chunks, and every super-feature that names one of them,
    /// in one commit (every run holding one is rewritten without). Prune calls this before
    /// deleting any container, so that no later backup deduplicates against a chunk about to
    /// disappear.
    pub fn remove_chunks(&self, dead: &HashSet<ChunkId>) -> Result<()> {
        self.remove_chunks_trimming(dead, &[], &[])
    }

    /// [`Self::remove_chunks`], marking as trimmed (see [`super::Trust::Nothing`]) in the same
    /// commit the containers of the copies the index names and `also`: containers the caller
    /// knows to hold other copies of `dead` chunks (prune's garbage copies), whose metadata
    /// will list chunks the index no longer holds; and forgetting the containers `going`,
    /// which the caller deletes next.
    ///
    /// Why `going` is forgotten here rather than once deleted: a process that dies between
    /// this commit and the deletions leaves those containers in the repository with chunks
    /// this index no longer names, while an index built afresh (another client's) names them
    /// and may deduplicate against them; this one would then miss chunks of that client's
    /// snapshots (found by the campaign, seed 3997919634). Forgotten, a container still
    /// listed at the next open is taken in again, as it is.
    pub fn remove_chunks_trimming(
        &self,
        dead: &HashSet<ChunkId>,
        also: &[ContainerId],
        going: &[ContainerId],
    ) -> Result<()> {
        if dead.is_empty() && going.is_empty() {
            return Ok(());
        }
        // The containers holding the indexed copies: their metadata will list chunks the
        // index no longer holds.
        let view = self.current();
        let mut trimmed: HashSet<ContainerId> = also.iter().copied().collect();
        for id in dead {
            if let Some(loc) = self.shared.guard(view.get(id, self.path()))? {
                trimmed.insert(loc.container);
            }
        }
        drop(view);
        let going: HashSet<&ContainerId> = going.iter().collect();
        self.change(|c| {
            // Chunks leave the index: the depths recorded under the old layout no longer hold.
            c.manifest.new_epoch();
            for s in &mut c.manifest.slots {
                if going.contains(&s.id) {
                    s.known = false;
                }
            }
            if dead.is_empty() {
                return Ok(());
            }
            c.drops_filter = true;
            c.filter = None;
            for s in &mut c.manifest.slots {
                if trimmed.contains(&s.id) {
                    s.trimmed = true;
                }
            }
            let mut i = 0;
            while i < c.runs.len() {
                let run = c.runs[i].clone();
                let mut holds = false;
                for id in dead {
                    if run.get(id)?.is_some() {
                        holds = true;
                        break;
                    }
                }
                if !holds {
                    i += 1;
                    continue;
                }
                let seq = new_seq(self.path(), &mut c.manifest);
                let out = run::merge(
                    &[&run],
                    Some(dead),
                    &run_path(self.path(), seq),
                    seq,
                    c.keep,
                )?;
                c.obsolete.push(run.path().to_path_buf());
                match out {
                    Some(r) => {
                        c.runs[i] = Arc::new(r);
                        i += 1;
                    }
                    None => {
                        c.runs.remove(i);
                    }
                }
            }
            Ok(())
        })
    }

    /// Forgets containers this client deleted (their entries already left the index), so
    /// that the next sync need not look for entries in them.
    pub fn forget_containers(&self, deleted: &[ContainerId]) -> Result<()> {
        if deleted.is_empty() {
            return Ok(());
        }
        let deleted: HashSet<&ContainerId> = deleted.iter().collect();
        self.change(|c| {
            c.manifest.new_epoch();
            for s in &mut c.manifest.slots {
                if deleted.contains(&s.id) {
                    s.known = false;
                }
            }
            Ok(())
        })
    }
}
