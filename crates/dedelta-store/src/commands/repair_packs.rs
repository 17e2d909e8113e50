//! `repair packs`: salvage the readable entries of damaged containers, then remove them.
//!
//! The containers are those `check` recorded as damaged (see [`crate::format::damage`]) or those the
//! user names. For each one, every entry that still verifies (full chunks by fingerprint,
//! deltas decoded against their base and verified) and that the index holds nowhere else is
//! copied, *as a full chunk*, into new containers: a salvaged chunk then needs no base, so
//! nothing it depended on can take it down again. Then, in an order a crash cannot turn into
//! loss:
//!
//! 1. the copies are durable and indexed (the index now points at them);
//! 2. index entries that still name a damaged container are removed (those chunks are lost;
//!    the next backup of their files stores them again);
//! 3. deltas anywhere whose base was lost are lost too: they leave the index and are recorded;
//! 4. the damage records are rewritten without the repaired containers (new before old);
//! 5. only then are the damaged containers deleted (except one whose metadata cannot be read:
//!    nothing in it can be located, so it is kept and stays recorded).
//!
//! Snapshots that need lost chunks still fail `check`: back the files up again (which heals
//! them), or run `repair snapshots`.

use crate::backend::FileKind;
use crate::commands::check::verify_entries;
use crate::error::{Error, Result};
use crate::format::container::{self, ContainerId, EntryKind};
use crate::format::damage::DamagedCopy;
use crate::progress::Progress;
use crate::repository::damage::{self, DamageSet};
use crate::repository::lock::RepoLock;
use crate::repository::{read_container_meta, ContainerWriter, IndexedRepository};
use dedelta_core::ChunkId;
use std::collections::HashSet;

/// What `repair packs` did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RepairPacksStats {
    /// The damaged containers handled (and deleted, unless a dry run).
    pub containers: Vec<ContainerId>,
    /// Entries copied out of them.
    pub chunks_salvaged: u64,
    /// Chunks that could not be salvaged (their snapshots need a new backup or
    /// `repair snapshots`).
    pub chunks_lost: Vec<ChunkId>,
    /// Deltas elsewhere that were lost with their base.
    pub deltas_lost: u64,
    /// New containers written.
    pub containers_written: u64,
    /// Damaged containers whose metadata could not be read: nothing could be salvaged, and
    /// they are kept (and stay recorded) rather than deleted.
    pub left_in_place: Vec<ContainerId>,
    /// The index files rewritten for the containers left.
    pub index_files: crate::repository::index_files::Consolidated,
}

/// Repairs the containers named by `ids` (full hex names or unique prefixes), or, when empty,
/// every container with recorded damage. The caller holds the exclusive lock.
pub fn repair_packs(
    repo: &IndexedRepository,
    _lock: &RepoLock,
    ids: &[String],
    time: &str,
    progress: &dyn Progress,
) -> Result<RepairPacksStats> {
    let backend = repo.backend().clone();
    let (mut damage, _) = DamageSet::load(backend.as_ref())?;
    let listed: Vec<String> = backend
        .list(FileKind::Container)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut targets: Vec<ContainerId> = if ids.is_empty() {
        damage.containers().into_iter().collect()
    } else {
        ids.iter()
            .map(|spec| resolve_container(&listed, spec))
            .collect::<Result<_>>()?
    };
    targets.sort();
    let target_set: HashSet<ContainerId> = targets.iter().copied().collect();
    let mut stats = RepairPacksStats::default();
    // The live copies the targets held: what the index names there, and what check recorded.
    let mut held: HashSet<ChunkId> = HashSet::new();
    for cid in &targets {
        held.extend(damage.chunks_in(cid));
    }
    repo.index().for_each(|id, loc| {
        if target_set.contains(&loc.container) {
            held.insert(id);
        }
    })?;
    // 1. Salvage.
    let index = repo.index().reader()?;
    let mut reader = crate::read::ChunkReader::new(repo, 64 << 20)?;
    let mut writer = ContainerWriter::new(repo);
    let mut salvaged: HashSet<ChunkId> = HashSet::new();
    for cid in &targets {
        let name = cid.to_hex();
        stats.containers.push(*cid);
        progress.message(&format!("salvaging container {}", &name[..12]));
        let what = format!("container {name}");
        let read = || backend.get(FileKind::Container, &name).map_err(Error::from);
        let mut file = match read() {
            Ok(f) => f,
            Err(Error::ObjectMissing { .. }) => continue,
            Err(e) => return Err(e),
        };
        if ChunkId::of(&file).0 != cid.0 {
            // Damage at rest, or a bad read: a second read that is whole wins.
            if let Ok(again) = read() {
                if ChunkId::of(&again).0 == cid.0 {
                    file = again;
                }
            }
        }
        let Ok(meta) = container::decode_container_body(&file, &what) else {
            // Nothing can be located without the metadata; the container is left in place
            // rather than deleted on what may be a read error.
            stats.left_in_place.push(*cid);
            continue;
        };
        let hasher = repo.chunk_hasher();
        let mut base = |b: &ChunkId| reader.read_chunk(b);
        verify_entries(&file, &meta, &what, &hasher, &mut base, |_, e, verdict| {
            let Ok(bytes) = verdict else { return Ok(()) };
            let elsewhere = index
                .get(&e.id)?
                .is_some_and(|l| !target_set.contains(&l.container));
            if !elsewhere && salvaged.insert(e.id) {
                let sfs = match e.kind {
                    EntryKind::Full => e.super_features.clone(),
                    EntryKind::Delta { .. } => Vec::new(),
                };
                writer.push_entry(e.id, EntryKind::Full, bytes, bytes.len(), sfs)?;
            }
            Ok(())
        })?;
    }
    writer.seal()?;
    writer.publish_index_files()?;
    stats.chunks_salvaged = salvaged.len() as u64;
    stats.containers_written = writer.written.len() as u64;
    drop(index);
    // A salvage copy of a container whose damage was outside every entry (say its header
    // alone) holds the same regions, so it is the original byte for byte and has its name:
    // it replaced the damaged file and is whole, not damaged.
    let written: HashSet<ContainerId> = writer.written.iter().copied().collect();
    // 2. What still points at a damaged container is lost.
    let mut out_of_index: HashSet<ChunkId> = HashSet::new();
    repo.index().for_each(|id, loc| {
        if target_set.contains(&loc.container) && !written.contains(&loc.container) {
            out_of_index.insert(id);
        }
    })?;
    repo.index().remove_chunks(&out_of_index)?;
    let mut lost: HashSet<ChunkId> = HashSet::new();
    {
        let index = repo.index().reader()?;
        for id in &held {
            if !salvaged.contains(id) && index.get(id)?.is_none() {
                lost.insert(*id);
            }
        }
    }
    // 3. Deltas whose base is gone are lost too, and so on down every delta chain.
    let index = repo.index().reader()?;
    let mut indexed_deltas: Vec<(ContainerId, ChunkId, ChunkId)> = Vec::new();
    for name in &listed {
        let Some(cid) = ContainerId::from_hex(name) else {
            continue;
        };
        if target_set.contains(&cid) || damage.container_damaged(&cid) {
            continue;
        }
        let Ok(meta) = read_container_meta(backend.as_ref(), name) else {
            continue; // check records it
        };
        for (i, e) in meta.entries.iter().enumerate() {
            let EntryKind::Delta { base, .. } = e.kind else {
                continue;
            };
            let indexed_here = index
                .get(&e.id)?
                .is_some_and(|l| l.container == cid && l.entry as usize == i);
            if indexed_here {
                indexed_deltas.push((cid, e.id, base));
            }
        }
    }
    let mut dependents: Vec<DamagedCopy> = Vec::new();
    let mut dependent_ids: HashSet<ChunkId> = HashSet::new();
    loop {
        let before = dependent_ids.len();
        for (cid, id, base) in &indexed_deltas {
            if dependent_ids.contains(id) {
                continue;
            }
            if dependent_ids.contains(base) || index.get(base)?.is_none() {
                dependent_ids.insert(*id);
                dependents.push(DamagedCopy {
                    container: *cid,
                    chunk: Some(*id),
                    reason: format!("its delta base {base} was lost"),
                });
            }
        }
        if dependent_ids.len() == before {
            break;
        }
    }
    drop(index);
    repo.index().remove_chunks(&dependent_ids)?;
    stats.deltas_lost = dependents.len() as u64;
    let mut lost_ids: Vec<ChunkId> = lost.into_iter().collect();
    lost_ids.sort();
    stats.chunks_lost = lost_ids;
    // 4. Records without the repaired containers, with the newly lost deltas.
    let old_names = damage.record_names.clone();
    let left: HashSet<ContainerId> = stats.left_in_place.iter().copied().collect();
    for cid in targets.iter().filter(|c| !left.contains(c)) {
        damage.forget_container(cid);
    }
    damage.extend(&dependents);
    damage::rewrite(backend.as_ref(), &damage, &old_names, time.to_string())?;
    // 5. Delete, but not a salvage copy that took its damaged container's name (above).
    let mut deleted = Vec::new();
    for cid in &targets {
        if !written.contains(cid) && !left.contains(cid) {
            backend.delete(FileKind::Container, &cid.to_hex())?;
            deleted.push(*cid);
        }
    }
    repo.index().forget_containers(&deleted)?;
    repo.index_applies_damage_records()?;
    if !deleted.is_empty() {
        stats.index_files = crate::repository::index_files::consolidate(repo)?;
    }
    Ok(stats)
}

/// The container named by `spec`: a full name or a unique prefix of one.
fn resolve_container(listed: &[String], spec: &str) -> Result<ContainerId> {
    let spec = spec.to_ascii_lowercase();
    let matches: Vec<&String> = listed.iter().filter(|n| n.starts_with(&spec)).collect();
    match (matches.as_slice(), spec.is_empty()) {
        ([one], false) => ContainerId::from_hex(one)
            .ok_or_else(|| Error::InvalidOption(format!("{one} is not a container name"))),
        ([], _) | (_, true) => Err(Error::InvalidOption(format!(
            "no container matches {spec:?}"
        ))),
        (many, _) => Err(Error::InvalidOption(format!(
            "container prefix {spec:?} is ambiguous: matches {}",
            many.len()
        ))),
    }
}
