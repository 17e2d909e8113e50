//! Prune's sweep, in an order that a crash at any point cannot turn into data loss: copies
//! first (durable and indexed), then dead chunks leave the index, then containers go.

use super::plan::PruneWork;
use super::{PrunePlan, PruneStats};
use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::container::{ContainerId, EntryKind};
use crate::progress::Progress;
use crate::repository::{ContainerWriter, IndexedRepository};
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};

/// Sweeps according to `plan`.
pub(super) fn execute(
    repo: &IndexedRepository,
    plan: PrunePlan,
    work: &PruneWork,
    progress: &dyn Progress,
) -> Result<PruneStats> {
    let backend = repo.backend().clone();
    let index = repo.index().reader()?;
    let mut stats = PruneStats::default();
    // 1. Copy live entries of rewritten containers forward.
    progress.set_total(plan.bytes_to_copy);
    let mut writer = ContainerWriter::new(repo);
    let mut rewrite: Vec<&ContainerId> = work.rewrite.iter().collect();
    rewrite.sort();
    for &cid in rewrite {
        let name = cid.to_hex();
        progress.message(&format!("rewriting container {}", &name[..12]));
        let what = format!("container {name}");
        let file = backend.get(FileKind::Container, &name)?;
        if ChunkId::of(&file).0 != cid.0 {
            return Err(Error::corrupt(
                &what,
                "content does not match its name; run `dedelta check --read-data`",
            ));
        }
        let meta = crate::format::container::decode_container_meta(&file, &what)?;
        let mut raw_regions: HashMap<u32, Vec<u8>> = HashMap::new();
        for (i, e) in meta.entries.iter().enumerate() {
            let indexed = match work.promoted.get(&e.id) {
                Some(&at) => at == (cid, i as u32),
                None => index
                    .get(&e.id)?
                    .is_some_and(|l| l.container == cid && l.entry == i as u32),
            };
            if !indexed || !work.live.contains(&e.id) {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(v) = raw_regions.entry(e.region) {
                let r = &meta.regions[e.region as usize];
                let stored = &file[r.offset as usize..(r.offset + r.stored_len) as usize];
                v.insert(crate::format::container::open_region(stored, r, &what)?);
            }
            let raw = &raw_regions[&e.region];
            let bytes = &raw[e.offset as usize..(e.offset + e.stored_len) as usize];
            if e.kind == EntryKind::Full && repo.chunk_hasher().id(bytes) != e.id {
                return Err(Error::CorruptChunk {
                    container: name.clone(),
                    chunk: e.id.to_hex(),
                    reason: "content does not match its fingerprint; not copying it".into(),
                });
            }
            // A promoted inversed delta is copied as a plain delta: the copy the index names.
            let kind = match e.kind {
                EntryKind::Delta { base, .. } => EntryKind::delta(base),
                k => k,
            };
            writer.push_entry(
                e.id,
                kind,
                bytes,
                e.original_len as usize,
                e.super_features.clone(),
            )?;
            progress.inc(bytes.len() as u64);
        }
    }
    writer.seal()?;
    writer.publish_index_files()?;
    stats.containers_written = writer.written.len() as u64;
    stats.bytes_written = writer.bytes_written;
    // Container names are content hashes: a copy can have the very name of a container this
    // prune is about to delete (an unindexed copy left by a killed prune). Never delete those.
    let written: HashSet<ContainerId> = writer.written.iter().copied().collect();
    // 1b. Promoted inversed deltas in containers kept become the copies the index names
    // (those in rewritten containers were indexed as copied), before the containers of the
    // full copies they replace can go.
    promote_in_index(repo, work, &index)?;
    // 2. Forget dead chunks whose copies go (and deltas on them) before any container
    // disappears; dead chunks in containers kept stay indexed (see `PruneWork::unindexed`).
    // The containers about to go are forgotten in the same commit: if this process dies
    // before deleting one, the next open takes it in again, as an index built afresh would.
    // So are the containers kept whose dead deltas leave with their bases, until the
    // deletions are done (see `PruneWork::relinked`).
    let going: Vec<ContainerId> = plan
        .delete
        .iter()
        .chain(plan.rewrite.iter())
        .filter(|c| !written.contains(c))
        .copied()
        .collect();
    let forgotten: Vec<ContainerId> = going
        .iter()
        .copied()
        .chain(work.relinked.iter().map(|(c, _)| *c))
        .collect();
    repo.index()
        .remove_chunks_trimming(&work.unindexed, &work.trimmed, &forgotten)?;
    // 3. Delete old containers, then know the containers kept again.
    for cid in &going {
        backend.delete(FileKind::Container, &cid.to_hex())?;
    }
    if !work.relinked.is_empty() {
        repo.index().take_in(
            std::iter::empty(),
            |_, _, _| false,
            work.relinked.iter().copied(),
        )?;
    }
    // 4. Dense container lists (LoopDelta §4.6): removed containers leave them. Rewritten
    // containers too: their live chunks moved to new containers no list names yet, which
    // the next backup lists again if it references them densely.
    let removed: HashSet<ContainerId> = going.into_iter().collect();
    let live = repo
        .snapshots()?
        .snapshots
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    (stats.dense_lists_updated, stats.dense_lists_deleted) =
        crate::backup::dense::after_prune(backend.as_ref(), &removed, &live)?;
    // 5. Index files: one set for the containers left, then the old files go (see
    // `crate::repository::index_files::consolidate` for the order).
    stats.index_files = crate::repository::index_files::consolidate(repo)?;
    stats.bytes_freed = plan.bytes_removed as i64 - stats.bytes_written as i64;
    stats.plan = plan;
    Ok(stats)
}

/// Points the index at the promoted inversed deltas of containers that are not rewritten, in
/// one commit: their containers are taken in again with the entries the index names there and
/// the promoted ones.
fn promote_in_index(
    repo: &IndexedRepository,
    work: &PruneWork,
    index: &crate::client::index::IndexReader,
) -> Result<()> {
    let mut by_container: HashMap<ContainerId, HashSet<u32>> = HashMap::new();
    for &(cid, entry) in work.promoted.values() {
        if !work.rewrite.contains(&cid) {
            by_container.entry(cid).or_default().insert(entry);
        }
    }
    if by_container.is_empty() {
        return Ok(());
    }
    let backend = repo.backend().clone();
    let mut metas = Vec::new();
    for (cid, promoted) in by_container {
        let meta = crate::repository::read_container_meta(backend.as_ref(), &cid.to_hex())?;
        let mut keep = promoted;
        for (i, e) in meta.entries.iter().enumerate() {
            if index
                .get(&e.id)?
                .is_some_and(|l| l.container == cid && l.entry == i as u32)
            {
                keep.insert(i as u32);
            }
        }
        metas.push((cid, meta, keep));
    }
    repo.index().take_in(
        metas.iter().map(|(cid, meta, _)| (*cid, meta)),
        |cid, i, _| {
            metas
                .iter()
                .any(|(c, _, keep)| c == cid && keep.contains(&i))
        },
        [],
    )
}
