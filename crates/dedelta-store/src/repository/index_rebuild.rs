//! Rebuilding the chunk index from container metadata (`repair index`, and any client whose
//! index is missing, incomplete or damaged).
//!
//! A chunk may be stored more than once: copies left by interrupted backups and prunes, a
//! chunk stored again after `check` recorded damage, a delta copy whose base a prune has since
//! deleted (prune keeps only the bases of the copies the index named). The rebuilt index must
//! name a copy that can be read, so for every chunk it picks a full copy; else a delta copy
//! whose base has a full copy; else none (the chunk is then absent, and the next backup that
//! meets it stores it again). Copies `check` recorded as damaged are never picked.

use super::{read_container_meta, IndexedRepository};
use crate::backend::FileKind;
use crate::error::Result;
use crate::format::container::{ContainerId, ContainerMeta, EntryKind, EntryMeta};
use crate::repository::damage::DamageSet;
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};

/// What a rebuild did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RepairStats {
    /// Containers indexed.
    pub containers: u64,
    /// Chunks indexed.
    pub chunks: u64,
    /// Stored copies left out because `check` recorded them as damaged.
    pub damaged_skipped: u64,
    /// Containers skipped because their metadata is unreadable (named in `problems`).
    pub problems: Vec<String>,
}

/// Replaces the index with every entry of every readable container, except copies recorded
/// as damaged (see [`crate::format::damage`]), in one transaction. Calls `warn` for each container it
/// has to skip.
pub fn rebuild_index(repo: &IndexedRepository, warn: &mut dyn FnMut(&str)) -> Result<RepairStats> {
    let mut stats = RepairStats::default();
    let (damage, notices) = DamageSet::load(repo.backend().as_ref())?;
    for n in notices {
        warn(&n);
        stats.problems.push(n);
    }
    let mut metas: Vec<(ContainerId, ContainerMeta)> = Vec::new();
    // Containers recorded as damaged whole: left out, but known to the index.
    let mut whole: Vec<ContainerId> = Vec::new();
    for (name, _) in repo.backend().list(FileKind::Container)? {
        let Some(id) = ContainerId::from_hex(&name) else {
            let msg = format!("ignoring {name}: not a container name");
            warn(&msg);
            stats.problems.push(msg);
            continue;
        };
        if damage.container_damaged(&id) {
            stats.damaged_skipped += 1;
            whole.push(id);
            continue;
        }
        let meta = read_meta_retrying(repo, &name, &mut |msg| {
            warn(&msg);
            stats.problems.push(msg);
        });
        match meta {
            Ok(meta) => metas.push((id, meta)),
            Err(e) => {
                let msg = format!("skipping container {name}: {e}");
                warn(&msg);
                stats.problems.push(msg);
            }
        }
    }
    // Chunks with a full copy that is not recorded as damaged: the only possible bases.
    let full = full_copies(&metas, &damage);
    let chosen = choose_copies(&metas, &damage, |base| full.contains(base), &mut stats);
    stats.containers = metas.len() as u64;
    stats.chunks = chosen.len() as u64;
    let position: HashMap<ContainerId, usize> = metas
        .iter()
        .enumerate()
        .map(|(c, (id, _))| (*id, c))
        .collect();
    let keep = |id: &ContainerId, i: u32, e: &EntryMeta| {
        chosen
            .get(&e.id)
            .is_some_and(|&(c, entry, _)| entry == i && position.get(id) == Some(&c))
    };
    let known = metas
        .iter()
        .map(|(id, meta)| (*id, meta.entries.len()))
        .chain(whole.iter().map(|id| (*id, 0)));
    repo.index().rebuild(
        metas.iter().map(|(id, meta)| (*id, meta)),
        keep,
        known,
        damage.digest(),
    )?;
    Ok(stats)
}

/// Reads a container's metadata; a failed read is tried once more (a container left out of
/// the index by one bad read would look lost until the next rebuild), and `note` hears of a
/// read that failed once.
pub(super) fn read_meta_retrying(
    repo: &IndexedRepository,
    name: &str,
    note: &mut dyn FnMut(String),
) -> Result<ContainerMeta> {
    read_container_meta(repo.backend().as_ref(), name).or_else(|first| {
        read_container_meta(repo.backend().as_ref(), name).inspect(|_| {
            note(format!(
                "container {name}: a metadata read failed ({first}) and a second read was \
                 intact: the storage may be unreliable"
            ))
        })
    })
}

/// The chunks with a full copy in `metas` that is not recorded as damaged.
pub(super) fn full_copies(
    metas: &[(ContainerId, ContainerMeta)],
    damage: &DamageSet,
) -> HashSet<ChunkId> {
    let mut full = HashSet::new();
    for (id, meta) in metas {
        for e in &meta.entries {
            if e.kind == EntryKind::Full && damage.reason(id, &e.id).is_none() {
                full.insert(e.id);
            }
        }
    }
    full
}

/// One readable copy per chunk of `metas` (container number, entry number, full): a full
/// copy, else any delta copy whose base `base_ok` accepts; never a copy recorded as damaged
/// (counted in `stats.damaged_skipped`).
pub(super) fn choose_copies(
    metas: &[(ContainerId, ContainerMeta)],
    damage: &DamageSet,
    base_ok: impl Fn(&ChunkId) -> bool,
    stats: &mut RepairStats,
) -> HashMap<ChunkId, (usize, u32, bool)> {
    let mut chosen: HashMap<ChunkId, (usize, u32, bool)> = HashMap::new();
    for (c, (id, meta)) in metas.iter().enumerate() {
        for (i, e) in meta.entries.iter().enumerate() {
            if damage.reason(id, &e.id).is_some() {
                stats.damaged_skipped += 1;
                continue;
            }
            let is_full = match e.kind {
                EntryKind::Full => true,
                EntryKind::Delta { base } if base_ok(&base) => false,
                EntryKind::Delta { .. } => continue, // unreadable: its base is gone
            };
            let better = match chosen.get(&e.id) {
                None => true,
                Some(&(_, _, chosen_full)) => is_full && !chosen_full,
            };
            if better {
                chosen.insert(e.id, (c, i as u32, is_full));
            }
        }
    }
    chosen
}
