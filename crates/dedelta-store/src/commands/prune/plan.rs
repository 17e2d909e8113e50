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
use std::collections::HashSet;

/// A container's name, size, and entries with whether the index points at each.
type ContainerEntries = (ContainerId, u64, Vec<(EntryInfo, bool)>);

struct EntryInfo {
    id: ChunkId,
    base: Option<ChunkId>,
    stored_len: u64,
}

/// What the sweep needs beyond the printable plan.
pub(super) struct PruneWork {
    /// Chunks that stay (referenced, or bases of live deltas).
    pub live: HashSet<ChunkId>,
    /// Indexed chunks no snapshot needs.
    pub dead: HashSet<ChunkId>,
    /// Containers whose live entries are copied forward.
    pub rewrite: HashSet<ContainerId>,
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
                EntryKind::Delta { base } => Some(base),
                EntryKind::Full => None,
            };
            entries.push((
                EntryInfo {
                    id: e.id,
                    base,
                    stored_len: u64::from(e.stored_len),
                },
                indexed_here,
            ));
        }
        metas.push((cid, *size, entries));
    }
    // Bases of live deltas are live (deltas are one level deep: one pass).
    let mut bases = HashSet::new();
    for (_, _, entries) in &metas {
        for (e, indexed) in entries {
            if *indexed && live.contains(&e.id) {
                if let Some(b) = e.base {
                    if !live.contains(&b) {
                        bases.insert(b);
                    }
                }
            }
        }
    }
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
    plan.dead_chunks = dead.len() as u64;
    Ok((
        plan,
        PruneWork {
            live,
            dead,
            rewrite,
        },
    ))
}
