//! Catching a client's chunk index up with the repository.
//!
//! The index is a cache in the client's cache directory (see [`crate::client::cache`]), not
//! in the repository, so other clients change the repository behind it: their backups add
//! containers, their prunes delete some, their checks record damage. Every open (and every
//! refresh of a reader that met a vanished container) compares the containers the index has
//! taken in with the repository's listing, and the damage records it has applied with the
//! repository's, and catches up in one transaction:
//! - entries of added containers are taken in by the rules of a rebuild (see
//!   [`super::index_rebuild`]): never a copy recorded as damaged, never a delta whose base has
//!   no readable copy (a dead delta a prune left behind), and never over a copy the index
//!   already names;
//! - when containers were deleted (another client's prune) or the damage records changed
//!   (another client's check or repair), the index is rebuilt instead: a prune keeps only the
//!   copies its own client's index named, and records may drop copies or give them back.
//!
//! So a backup never deduplicates against a chunk another client deleted or found damaged.

use super::index_rebuild::{
    read_metas_parallel, Batch, RepairStats, BATCH_ENTRIES, META_READ_GROUP,
};
use super::IndexedRepository;
use crate::backend::wrap::metered::Purpose;
use crate::backend::FileKind;
use crate::error::Result;
use crate::format::container::ContainerId;
use crate::repository::damage::DamageSet;
use std::collections::HashSet;

/// What a catch-up did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Containers taken in.
    pub added: u64,
    /// Containers found deleted (the index was then rebuilt).
    pub gone: u64,
    /// What the user should know (unreadable metadata, skipped damage records).
    pub notices: Vec<String>,
    /// Whether the index was rebuilt instead (containers deleted, or the damage records
    /// changed).
    pub rebuilt: bool,
}

/// Catches the index up with the repository's containers and damage records (see the module
/// documentation). Cheap when nothing changed: one listing of containers and of damage records.
pub fn sync_index(repo: &IndexedRepository) -> Result<SyncStats> {
    let mut out = SyncStats::default();
    let backend = repo.backend_for(Purpose::Index);
    let (damage, skipped) = DamageSet::load(backend.as_ref())?;
    out.notices.extend(skipped);
    let listed: HashSet<ContainerId> = backend
        .list_names(FileKind::Container)?
        .iter()
        .filter_map(|name| ContainerId::from_hex(name))
        .collect();
    let index = repo.index();
    let known = index.known_containers()?;
    let gone: HashSet<ContainerId> = known.difference(&listed).copied().collect();
    let mut added: Vec<ContainerId> = listed.difference(&known).copied().collect();
    added.sort();
    let why = if damage.digest() != index.damage_digest()? {
        // Records appeared (copies to drop) or went (copies dropped earlier that are good
        // again: a container restored, or written again whole by a backup).
        Some("the damage records changed")
    } else if !gone.is_empty() {
        // Another client's prune deleted containers. It kept only the copies *its* index
        // named, and this index may name others (when two containers held a chunk, this
        // client kept the copy it knew): the copies left are found only by reading every
        // container's metadata again.
        Some("containers were deleted by another client")
    } else {
        None
    };
    if let Some(why) = why {
        let st = super::index_rebuild::rebuild_index(repo, &mut |_| {})?;
        out.notices.push(format!(
            "{why} since this index was last used; it was rebuilt"
        ));
        out.notices.extend(st.problems);
        out.gone = gone.len() as u64;
        out.rebuilt = true;
        return Ok(out);
    }
    if added.is_empty() {
        return Ok(out);
    }
    // In batches, as a rebuild reads them (bounded memory however many containers another
    // client added): full copies first, then delta copies whose base has a readable copy (a
    // full one among the added containers, or one the index names).
    let before = index.reader()?;
    let indexed = |c: &dedelta_core::ChunkId| Ok(before.get(c)?.is_some());
    let mut ignored = RepairStats::default();
    index.take_in_steps(|r| {
        let mut batch = Batch::default();
        for group in added.chunks(META_READ_GROUP) {
            let names: Vec<String> = group
                .iter()
                .filter(|id| !damage.container_damaged(id))
                .map(ContainerId::to_hex)
                .collect();
            let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut read = read_metas_parallel(repo, &wanted)
                .into_iter()
                .zip(names.iter());
            for id in group {
                if damage.container_damaged(id) {
                    batch.whole.push(*id);
                    out.added += 1;
                    continue;
                }
                let Some(((meta, notes), name)) = read.next() else {
                    break;
                };
                out.notices.extend(notes);
                match meta {
                    Ok(meta) => {
                        batch.entries += meta.entries.len();
                        batch.metas.push((*id, meta));
                        out.added += 1;
                    }
                    // Not marked as taken in: the next open tries again (check reports it).
                    Err(e) => out
                        .notices
                        .push(format!("container {name} left out of the index: {e}")),
                }
                if batch.entries >= BATCH_ENTRIES {
                    std::mem::take(&mut batch).add_to(r, &damage, &mut ignored, &indexed)?;
                }
            }
        }
        batch.add_to(r, &damage, &mut ignored, &indexed)?;
        r.take_in_set_aside(|copy, full| Ok(!full(&copy.id)? && full(&copy.base)?))
    })?;
    Ok(out)
}
