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
    /// Dead chunks (indexed, and needed by no snapshot) that leave the index: those whose
    /// copy goes with its container (deleted or rewritten), and dead deltas whose base
    /// leaves it. A dead chunk whose copy stays in a container kept stays indexed, as an
    /// index rebuilt from the containers (another client's) names it: when this client's
    /// index dropped it, another client's next backup could deduplicate against it, and
    /// this client, catching up with only the containers added since, could not restore
    /// that snapshot (campaign seed 696826238; test
    /// `clients::an_index_takes_in_dead_chunks_another_client_made_live_again`).
    pub unindexed: HashSet<ChunkId>,
    /// Containers whose live entries are copied forward.
    pub rewrite: HashSet<ContainerId>,
    /// Containers kept whose indexed entries leave the index (dead deltas on bases that
    /// leave it), with their entry counts. The index forgets them with the removal and knows
    /// them again once the deletions are done: a prune killed in between leaves the bases'
    /// containers in place, and the next open takes these in again with them, so that the
    /// index names those deltas as an index built afresh does (strict campaign, seed
    /// 2637096359; test
    /// `faults::a_killed_prune_leaves_the_index_naming_a_dead_delta_whose_base_stayed`).
    pub relinked: Vec<(ContainerId, usize)>,
    /// Containers kept whose metadata lists a dead chunk in a copy the index does not name
    /// (left by an interrupted backup): the index marks them trimmed with the removal, as it
    /// does the containers of the copies it names (see `ChunkIndex::remove_chunks_trimming`).
    pub trimmed: Vec<ContainerId>,
    /// Copies in containers kept that become their chunk's indexed copy: inversed deltas
    /// (see [`promote_inversed`]), and other copies of dead chunks whose indexed copy goes
    /// (see [`leaving_the_index`]): chunk -> (container, entry).
    pub promoted: CopiesNamed,
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
    // Containers whose copies a remaining snapshot's backup referenced: restore reads those
    // copies even when a later backup stored the chunk again (Capping), so they stay.
    let mut own: HashSet<ContainerId> = HashSet::new();
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
        own.extend(snap.containers.iter().copied());
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
    let max_depth = repo.config().default_delta().max_depth;
    let promoted = promote_inversed(&mut metas, &live, &base_of, max_depth);
    plan.inversed_promoted = promoted.len() as u64;
    if !promoted.is_empty() {
        base_of = base_of_indexed(&metas);
    }
    let bases = bases_needed(&live, &base_of);
    plan.bases_kept = bases.len() as u64;
    live.extend(bases);
    // Copies the index does not name, kept for the remaining snapshots whose containers
    // hold them: full copies of live chunks whose indexed copy is full too (an indexed
    // delta, an inversed one, is there to let the full copy go). Delta own copies are not
    // kept: their bases would have to be kept too; restore reads the index's copy once a
    // delta own copy or its base is gone.
    // They keep no base alive, so what prune keeps stays the same from one prune to the
    // next; in a container rewritten they are dropped (the snapshots do not name the new
    // container) and those snapshots read the index's copy.
    let kept_own: HashSet<(ContainerId, usize)> = metas
        .iter()
        .filter(|(cid, _, _)| own.contains(cid))
        .flat_map(|(cid, _, entries)| {
            entries
                .iter()
                .enumerate()
                .filter(|(_, (e, indexed))| {
                    !indexed
                        && e.base.is_none()
                        && live.contains(&e.id)
                        && !base_of.contains_key(&e.id)
                })
                .map(|(i, _)| (*cid, i))
                .collect::<Vec<_>>()
        })
        .collect();
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
        for (i, (e, indexed)) in entries.iter().enumerate() {
            if (*indexed && live.contains(&e.id)) || kept_own.contains(&(*cid, i)) {
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
    let (unindexed, rescued) = leaving_the_index(
        &metas,
        &Leaving {
            dead: &dead,
            deleted: &deleted,
            rewrite: &rewrite,
            live: &live,
            damage: &damage,
        },
        &index,
    )?;
    let mut promoted = promoted;
    promoted.extend(rescued);
    // Containers kept whose indexed entries leave the index (dead deltas on a base that
    // leaves it): see `PruneWork::relinked`.
    let relinked = metas
        .iter()
        .filter(|(cid, _, _)| !rewrite.contains(cid) && !deleted.contains(cid))
        .filter(|(_, _, entries)| {
            entries
                .iter()
                .any(|(e, indexed)| *indexed && unindexed.contains(&e.id))
        })
        .map(|(cid, _, entries)| (*cid, entries.len()))
        .collect();
    let trimmed = metas
        .iter()
        .filter(|(cid, _, _)| !rewrite.contains(cid) && !deleted.contains(cid))
        .filter(|(_, _, entries)| {
            entries
                .iter()
                .any(|(e, indexed)| !*indexed && unindexed.contains(&e.id))
        })
        .map(|(cid, _, _)| *cid)
        .collect();
    Ok((
        plan,
        PruneWork {
            live,
            unindexed,
            rewrite,
            trimmed,
            relinked,
            promoted,
        },
    ))
}

/// Where the index names a chunk instead: chunk -> (container, entry).
type CopiesNamed = HashMap<ChunkId, (ContainerId, u32)>;

/// What [`leaving_the_index`] decides by.
struct Leaving<'a> {
    /// Indexed chunks no snapshot needs.
    dead: &'a HashSet<ChunkId>,
    /// Containers deleted and rewritten: their copies the index does not name go.
    deleted: &'a HashSet<&'a ContainerId>,
    rewrite: &'a HashSet<ContainerId>,
    /// Chunks that stay indexed (a delta on one of them stays readable).
    live: &'a HashSet<ChunkId>,
    /// Copies `check` recorded as damaged are never named.
    damage: &'a DamageSet,
}

/// The dead chunks that leave the index (see [`PruneWork::unindexed`]): those whose indexed
/// copy is in a container deleted or rewritten, then, down delta chains, those whose indexed
/// copy is a delta on a chunk that leaves it or that the index does not name. And the copies
/// the index names instead (chunk -> container, entry): a dead chunk whose indexed copy goes
/// but which has another copy in a container kept (one the index does not name, left by an
/// interrupted backup or stored again after the index lost it), full or a delta on a chunk
/// that stays, stays indexed at that copy, as an index rebuilt from the containers (another
/// client's) names it (strict campaign, seed 199436801; test
/// `faults::a_dead_chunk_with_a_copy_in_a_container_kept_stays_indexed`).
fn leaving_the_index(
    metas: &[ContainerEntries],
    by: &Leaving<'_>,
    index: &crate::client::index::IndexReader,
) -> Result<(HashSet<ChunkId>, CopiesNamed)> {
    let goes = |cid: &ContainerId| by.deleted.contains(cid) || by.rewrite.contains(cid);
    // The copies that stay, of dead chunks, that an index rebuilt might name: each with its
    // base if it is a delta.
    let mut staying: HashMap<ChunkId, Vec<(ContainerId, u32, Option<ChunkId>)>> = HashMap::new();
    for (cid, _, entries) in metas.iter().filter(|(cid, _, _)| !goes(cid)) {
        for (i, (e, indexed)) in entries.iter().enumerate() {
            if *indexed || !by.dead.contains(&e.id) || by.damage.reason(cid, &e.id).is_some() {
                continue;
            }
            staying
                .entry(e.id)
                .or_default()
                .push((*cid, i as u32, e.base));
        }
    }
    // The dead chunks the index names: whether their copy goes, and their base.
    let mut named: Vec<(ChunkId, bool, Option<ChunkId>)> = Vec::new();
    for (cid, _, entries) in metas {
        for (e, indexed) in entries {
            if *indexed && by.dead.contains(&e.id) {
                named.push((e.id, goes(cid), e.base));
            }
        }
    }
    // The dead chunks that stay indexed, as an index rebuilt from the containers left names
    // them: full copies first, then, a level per round, deltas on a chunk that stays (live,
    // or dead and staying). A dead chunk whose copy goes stays at another copy that stays:
    // a full one, else a delta on a chunk that stays. Deltas on a dead chunk that stays were
    // left out before (strict campaign, seeds 1876358308 and 76153341; test
    // `faults::a_dead_chunk_whose_kept_copy_is_a_delta_on_a_dead_indexed_base_stays_indexed`).
    let mut stays: HashSet<ChunkId> = HashSet::new();
    let mut rescued: CopiesNamed = HashMap::new();
    // The other bases of dead copies, each once: indexed (and not a dead chunk named above,
    // whose fate the loop decides), they stay.
    let dead_named: HashSet<ChunkId> = named.iter().map(|(id, _, _)| *id).collect();
    let mut others_indexed: HashSet<ChunkId> = HashSet::new();
    let bases = named
        .iter()
        .filter_map(|(_, _, b)| *b)
        .chain(staying.values().flatten().filter_map(|(_, _, b)| *b));
    for b in bases {
        let other = !dead_named.contains(&b) && !by.live.contains(&b);
        if other && !others_indexed.contains(&b) && index.get(&b)?.is_some() {
            others_indexed.insert(b);
        }
    }
    loop {
        let before = stays.len();
        for (id, going, base) in &named {
            if stays.contains(id) {
                continue;
            }
            let base_stays = |b: &ChunkId| {
                by.live.contains(b) || stays.contains(b) || others_indexed.contains(b)
            };
            let stay = if !*going {
                base.as_ref().is_none_or(base_stays)
            } else {
                let copies = staying.get(id).map(Vec::as_slice).unwrap_or_default();
                let copy = copies.iter().find(|(_, _, b)| b.is_none()).or_else(|| {
                    copies
                        .iter()
                        .find(|(_, _, b)| b.as_ref().is_some_and(base_stays))
                });
                if let Some(&(c, i, _)) = copy {
                    rescued.insert(*id, (c, i));
                }
                copy.is_some()
            };
            if stay {
                stays.insert(*id);
            }
        }
        if stays.len() == before {
            break;
        }
    }
    // A dead delta whose base the index does not name is not in `stays`: it leaves.
    let leaving = named
        .iter()
        .map(|(id, _, _)| *id)
        .filter(|id| !stays.contains(id))
        .collect();
    Ok((leaving, rescued))
}

/// Inversed deltas (LoopDelta §4.5, GC as §4.6) that become the copy of their chunk S, so
/// that S's full copy is reclaimed: for S referenced by a snapshot (in `live`) and indexed in
/// full, the first unindexed inversed delta of it (in `metas`' order) whose base N is indexed
/// in full and not itself promoted now, when no chain grows deeper than `max_depth`: the
/// deltas that stay and name S as their base, down to S, are at most `max_depth - 1` links
/// (then S is a delta on the full N, one level, and they are one link deeper). With one-level
/// deltas (`max_depth` 1) that is: no delta that stays names S as its base; the full copy of
/// a base stays, as in LoopDelta (bases are full chunks). `base_of` maps each indexed delta
/// to its base. The promoted copy is marked indexed in `metas` and the full copy not: it is
/// reclaimed like any unindexed copy. Returns the promoted copies.
fn promote_inversed(
    metas: &mut [ContainerEntries],
    live: &HashSet<ChunkId>,
    base_of: &HashMap<ChunkId, ChunkId>,
    max_depth: u8,
) -> HashMap<ChunkId, (ContainerId, u32)> {
    let indexed_full: HashSet<ChunkId> = metas
        .iter()
        .flat_map(|(_, _, entries)| entries)
        .filter(|(e, indexed)| *indexed && e.base.is_none())
        .map(|(e, _)| e.id)
        .collect();
    let mut candidates: HashMap<ChunkId, (ContainerId, u32, ChunkId)> = HashMap::new();
    for (cid, _, entries) in metas.iter() {
        for (i, (e, indexed)) in entries.iter().enumerate() {
            let Some(base) = e.base.filter(|_| e.inversed && !*indexed) else {
                continue;
            };
            if live.contains(&e.id) && indexed_full.contains(&e.id) && indexed_full.contains(&base)
            {
                candidates.entry(e.id).or_insert((*cid, i as u32, base));
            }
        }
    }
    if candidates.is_empty() {
        return HashMap::new();
    }
    // Links above each chunk: the longest chain of deltas that stay down to it.
    let mut stays = live.clone();
    stays.extend(bases_needed(live, base_of));
    let mut named_by: HashMap<ChunkId, Vec<ChunkId>> = HashMap::new();
    for d in &stays {
        if let Some(b) = base_of.get(d) {
            named_by.entry(*b).or_default().push(*d);
        }
    }
    let promoted: HashMap<ChunkId, (ContainerId, u32)> = candidates
        .iter()
        .filter(|(_, (_, _, base))| !candidates.contains_key(base))
        .filter(|(id, _)| links_above(id, &named_by, max_depth) < usize::from(max_depth))
        .map(|(id, (cid, i, _))| (*id, (*cid, *i)))
        .collect();
    for (cid, _, entries) in metas.iter_mut() {
        for (i, (e, indexed)) in entries.iter_mut().enumerate() {
            if let Some(&(pc, pi)) = promoted.get(&e.id) {
                *indexed = pc == *cid && pi == i as u32;
            }
        }
    }
    promoted
}

/// The longest chain of deltas in `named_by` (base -> the deltas naming it) down to `id`, in
/// links, counted up to `limit` (a longer chain, or a loop in damaged metadata, gives `limit`).
fn links_above(id: &ChunkId, named_by: &HashMap<ChunkId, Vec<ChunkId>>, limit: u8) -> usize {
    let limit = usize::from(limit);
    let mut level: Vec<ChunkId> = vec![*id];
    let mut links = 0;
    while links < limit {
        let next: Vec<ChunkId> = level
            .iter()
            .flat_map(|c| named_by.get(c).into_iter().flatten())
            .copied()
            .collect();
        if next.is_empty() {
            return links;
        }
        links += 1;
        level = next;
    }
    limit
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

    /// Links above a chunk: the longest chain of deltas down to it, capped (loops too).
    #[test]
    fn links_above_counts_the_longest_chain_and_stops_at_the_limit() {
        // 3 -> 2 -> 1, 4 -> 1, 6 -> 5 -> 6 (a loop).
        let mut named_by: HashMap<ChunkId, Vec<ChunkId>> = HashMap::new();
        for (d, b) in [(3, 2), (2, 1), (4, 1), (6, 5), (5, 6)] {
            named_by.entry(id(b)).or_default().push(id(d));
        }
        assert_eq!(links_above(&id(1), &named_by, 8), 2);
        assert_eq!(links_above(&id(3), &named_by, 8), 0);
        assert_eq!(links_above(&id(1), &named_by, 1), 1);
        assert_eq!(links_above(&id(5), &named_by, 8), 8);
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
