//! Prune's mark and plan: what every remaining snapshot needs (and the bases of its deltas),
//! and per container whether it is deleted, rewritten or kept. Reads snapshots' trees and
//! container metadata, never chunk data; changes nothing.

use super::{PruneOptions, PrunePlan};
use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::container::{ContainerId, EntryKind};
use crate::progress::Progress;
use crate::read::walk_tree;
use crate::repository::damage::DamageSet;
use crate::repository::snapshots::list;
use crate::repository::{read_container_meta, IndexedRepository};
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};

/// A container's name, size, and entries with whether the index points at each.
type ContainerEntries = (ContainerId, u64, Vec<(EntryInfo, bool)>);

struct EntryInfo {
    id: ChunkId,
    base: Option<ChunkId>,
    stored_len: u64,
    /// An inversed delta (see [`crate::backup::inverse`]).
    inversed: bool,
}

/// What the sweep needs beyond the printable plan.
pub(super) struct PruneWork {
    /// Chunks that stay (referenced, or bases of live deltas).
    pub live: HashSet<ChunkId>,
    /// Indexed chunks no snapshot needs.
    pub dead: HashSet<ChunkId>,
    /// Containers whose live entries are copied forward.
    pub rewrite: HashSet<ContainerId>,
    /// Containers kept whose metadata lists a dead chunk in a copy the index does not name
    /// (left by an interrupted backup): the index marks them trimmed with the removal, as it
    /// does the containers of the copies it names (see `ChunkIndex::remove_chunks_trimming`).
    pub trimmed: Vec<ContainerId>,
    /// Inversed deltas that become their chunk's indexed copy (see [`promote_inversed`]):
    /// chunk -> (container, entry).
    pub promoted: HashMap<ChunkId, (ContainerId, u32)>,
}

/// Marks and plans.
pub(super) fn plan(
    repo: &IndexedRepository,
    opts: &PruneOptions,
    progress: &dyn Progress,
) -> Result<(PrunePlan, PruneWork)> {
    let backend = repo.backend().clone();
    // Mark: references of every snapshot.
    progress.message("reading snapshots");
    let mut live: HashSet<ChunkId> = HashSet::new();
    let snapshots = list(backend.as_ref())?;
    // A snapshot that cannot be read cannot mark its chunks: pruning now would delete them.
    if let Some(bad) = snapshots.damaged().next() {
        return Err(Error::InvalidOption(format!(
            "snapshot {} is unreadable ({}); prune refuses to run, since it would delete the \
             data that snapshot needs. Remove it first with `dedelta forget {}` or \
             `dedelta repair snapshots --forget`",
            bad.name, bad.reason, bad.name
        )));
    }
    for (_, snap) in snapshots.snapshots {
        live.extend(snap.tree.chunks.iter().copied());
        walk_tree(repo, &snap, |_, chunks| {
            live.extend(chunks.iter().map(|c| c.id));
            Ok(())
        })?;
    }
    let mut plan = PrunePlan {
        referenced_chunks: live.len() as u64,
        ..Default::default()
    };
    // Metadata of every container; the indexed copy of each chunk is the one that counts.
    progress.message("reading container metadata");
    let index = repo.index().reader()?;
    let (damage, _) = DamageSet::load(backend.as_ref())?;
    let containers = backend.list(FileKind::Container)?;
    let mut metas: Vec<ContainerEntries> = Vec::with_capacity(containers.len());
    for (name, size) in &containers {
        plan.bytes_before += size;
        let Some(cid) = ContainerId::from_hex(name) else {
            continue;
        };
        if damage.container_damaged(&cid) {
            // Recorded by check and out of the index: `repair packs` salvages and removes it.
            plan.keep += 1;
            continue;
        }
        let meta = read_container_meta(backend.as_ref(), name).map_err(|e| {
            Error::corrupt(
                format!("container {name}"),
                format!("{e}; run `dedelta check` before pruning"),
            )
        })?;
        let mut entries = Vec::with_capacity(meta.entries.len());
        for (i, e) in meta.entries.iter().enumerate() {
            let indexed_here = index
                .get(&e.id)?
                .is_some_and(|l| l.container == cid && l.entry == i as u32);
            let base = match e.kind {
                EntryKind::Delta { base, .. } => Some(base),
                EntryKind::Full => None,
            };
            entries.push((
                EntryInfo {
                    id: e.id,
                    base,
                    stored_len: u64::from(e.stored_len),
                    inversed: e.kind.is_inversed(),
                },
                indexed_here,
            ));
        }
        metas.push((cid, *size, entries));
    }
    // Bases of live deltas are live, down every delta chain.
    let base_of_indexed = |metas: &[ContainerEntries]| -> HashMap<ChunkId, ChunkId> {
        metas
            .iter()
            .flat_map(|(_, _, entries)| entries)
            .filter_map(|(e, indexed)| e.base.filter(|_| *indexed).map(|b| (e.id, b)))
            .collect()
    };
    let mut base_of = base_of_indexed(&metas);
    let promoted = promote_inversed(&mut metas, &live, &base_of);
    if !promoted.is_empty() {
        base_of = base_of_indexed(&metas);
    }
    let bases = bases_needed(&live, &base_of);
    plan.bases_kept = bases.len() as u64;
    live.extend(bases);
    // Every live chunk must be indexed: else the index is stale and sweeping could lose data.
    for id in &live {
        if index.get(id)?.is_none() {
            return Err(Error::InvalidOption(format!(
                "chunk {id} is needed by a snapshot (or as a delta base) but is not in the \
                 index: it is lost or recorded as damaged{}. Prune refuses to run; back up its \
                 files again, or run `dedelta repair snapshots --forget`",
                damage
                    .chunk_reason(id)
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )));
        }
    }
    // Plan per container.
    let mut dead: HashSet<ChunkId> = HashSet::new();
    let mut rewrite: HashSet<ContainerId> = HashSet::new();
    for (cid, size, entries) in &metas {
        let total: u64 = entries.iter().map(|(e, _)| e.stored_len).sum();
        let mut live_bytes = 0;
        for (e, indexed) in entries {
            if *indexed && live.contains(&e.id) {
                live_bytes += e.stored_len;
            } else if *indexed {
                dead.insert(e.id);
            }
        }
        if live_bytes == 0 {
            plan.delete.push(*cid);
            plan.bytes_removed += size;
        } else if (live_bytes as f64) < (1.0 - opts.max_unused) * total as f64 {
            plan.rewrite.push(*cid);
            rewrite.insert(*cid);
            plan.bytes_removed += size;
            plan.bytes_to_copy += live_bytes;
        } else {
            plan.keep += 1;
        }
    }
    plan.dead_chunks = dead.len() as u64;
    let deleted: HashSet<&ContainerId> = plan.delete.iter().collect();
    let trimmed = metas
        .iter()
        .filter(|(cid, _, _)| !rewrite.contains(cid) && !deleted.contains(cid))
        .filter(|(_, _, entries)| {
            entries
                .iter()
                .any(|(e, indexed)| !*indexed && dead.contains(&e.id))
        })
        .map(|(cid, _, _)| *cid)
        .collect();
    Ok((
        plan,
        PruneWork {
            live,
            dead,
            rewrite,
            trimmed,
            promoted,
        },
    ))
}

/// Inversed deltas (LoopDelta §4.5, GC as §4.6) that become the copy of their chunk: for a
/// chunk the index names in full, referenced by a snapshot (in `live`), and the base of no
/// delta that stays (`base_of` maps each indexed delta to its base; the deltas of dead chunks
/// do not count), the first unindexed inversed delta of it (in `metas`' order) whose base is
/// indexed is marked as the indexed copy in `metas`, and the full copy as not: it is
/// reclaimed like any unindexed copy. A chunk that a remaining delta names as its base keeps
/// its full copy (deltas stay one level deep: see [`crate::backup::inverse`]). Returns the
/// promoted copies.
fn promote_inversed(
    metas: &mut [ContainerEntries],
    live: &HashSet<ChunkId>,
    base_of: &HashMap<ChunkId, ChunkId>,
) -> HashMap<ChunkId, (ContainerId, u32)> {
    // Bases of the deltas that stay: those of live chunks and, down the chains, theirs.
    let mut stays = live.clone();
    stays.extend(bases_needed(live, base_of));
    let named_as_base: HashSet<ChunkId> =
        stays.iter().filter_map(|id| base_of.get(id)).copied().collect();
    let indexed = |full_only: bool| -> HashSet<ChunkId> {
        metas
            .iter()
            .flat_map(|(_, _, entries)| entries)
            .filter(|(e, indexed)| *indexed && (!full_only || e.base.is_none()))
            .map(|(e, _)| e.id)
            .collect()
    };
    let (indexed_full, indexed_any) = (indexed(true), indexed(false));
    let mut promoted = HashMap::new();
    for (cid, _, entries) in metas.iter() {
        for (i, (e, indexed)) in entries.iter().enumerate() {
            let Some(base) = e.base.filter(|_| e.inversed && !*indexed) else {
                continue;
            };
            if live.contains(&e.id)
                && indexed_full.contains(&e.id)
                && !named_as_base.contains(&e.id)
                && indexed_any.contains(&base)
                && !promoted.contains_key(&e.id)
            {
                promoted.insert(e.id, (*cid, i as u32));
            }
        }
    }
    for (cid, _, entries) in metas.iter_mut() {
        for (i, (e, indexed)) in entries.iter_mut().enumerate() {
            if let Some(&(pc, pi)) = promoted.get(&e.id) {
                *indexed = pc == *cid && pi == i as u32;
            }
        }
    }
    promoted
}

/// The chunks that are not in `live` but that its deltas need: their bases, the bases of
/// those that are deltas, and so on down every chain (`base_of` maps each indexed delta to
/// its base). Each chunk is visited once, so a loop in damaged metadata ends too.
fn bases_needed(live: &HashSet<ChunkId>, base_of: &HashMap<ChunkId, ChunkId>) -> HashSet<ChunkId> {
    let mut needed = HashSet::new();
    let mut todo: Vec<ChunkId> = live
        .iter()
        .filter_map(|id| base_of.get(id))
        .copied()
        .collect();
    while let Some(b) = todo.pop() {
        if live.contains(&b) || !needed.insert(b) {
            continue;
        }
        if let Some(&next) = base_of.get(&b) {
            todo.push(next);
        }
    }
    needed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ChunkId {
        ChunkId::of(&[n])
    }

    /// A live delta keeps its whole chain; chunks already live stop the walk; a loop ends.
    #[test]
    fn bases_of_live_deltas_are_kept_down_the_chain() {
        // 4 -> 3 -> 2 -> 1 (full); 6 -> 5 (full), 6 is dead; 7 -> 8 -> 7 (a loop).
        let base_of: HashMap<ChunkId, ChunkId> = [(4, 3), (3, 2), (2, 1), (6, 5), (7, 8), (8, 7)]
            .into_iter()
            .map(|(a, b)| (id(a), id(b)))
            .collect();
        let live: HashSet<ChunkId> = [id(4), id(2), id(7)].into_iter().collect();
        let needed = bases_needed(&live, &base_of);
        let expected: HashSet<ChunkId> = [id(3), id(1), id(8)].into_iter().collect();
        assert_eq!(needed, expected);
    }
}
