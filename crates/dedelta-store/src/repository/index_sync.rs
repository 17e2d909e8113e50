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

use super::index_files::{for_each_meta, Consult, MetaSources};
use super::index_rebuild::{Batch, RepairStats, BATCH_ENTRIES};
use super::IndexedRepository;
use crate::backend::wrap::metered::Purpose;
use crate::backend::{Backend, FileKind};
use crate::error::Result;
use crate::format::container::ContainerId;
use crate::repository::damage::DamageSet;
use std::collections::HashSet;

/// Loads the damage records and runs `listing` (the containers') at once: each is a round
/// trip on an object store (up to 45 ms on Garage), and neither depends on the other.
pub(super) fn damage_beside<T: Send>(
    backend: &dyn Backend,
    listing: impl FnOnce() -> T + Send,
) -> (Result<(DamageSet, Vec<String>)>, T) {
    let (listed, damage) = crate::request_threads::beside(
        backend.requests_are_round_trips(),
        || DamageSet::load(backend),
        listing,
    );
    (damage, listed)
}

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
    /// Where the added containers' metadata came from (index files, or the containers).
    pub sources: MetaSources,
}

/// Catches the index up with the repository's containers and damage records (see the module
/// documentation). Cheap when nothing changed: one listing of containers and of damage records.
pub fn sync_index(repo: &IndexedRepository) -> Result<SyncStats> {
    let mut out = SyncStats::default();
    let backend = repo.backend_for(Purpose::Index);
    let (damage, names) =
        damage_beside(backend.as_ref(), || backend.list_names(FileKind::Container));
    let (damage, skipped) = damage?;
    out.notices.extend(skipped);
    // The command's later users share this set (see IndexedRepository::damage_records).
    let damage = repo.remember_damage(damage);
    let listed: HashSet<ContainerId> = names?
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
        out.sources = st.sources;
        return Ok(out);
    }
    if added.is_empty() {
        return Ok(out);
    }
    // In batches, as a rebuild reads them (bounded memory however many containers another
    // client added): full copies first, then delta copies whose base has a readable copy (a
    // full one among the added containers, or one the index names). Metadata from the index
    // files this client has not read yet where they cover a container, else from it.
    let before = index.reader()?;
    let indexed = |c: &dedelta_core::ChunkId| Ok(before.get(c)?.is_some());
    let mut ignored = RepairStats::default();
    let mut batch = Batch::default();
    let wanted: Vec<ContainerId> = added
        .iter()
        .filter(|id| {
            let whole = damage.container_damaged(id);
            if whole {
                batch.whole.push(**id);
            }
            !whole
        })
        .copied()
        .collect();
    out.added += batch.whole.len() as u64;
    index.take_in_steps(|r| {
        let mut added = 0;
        let mut notes = Vec::new();
        let mut read_notes = Vec::new();
        let sources = for_each_meta(
            repo,
            &wanted,
            Consult::Unseen,
            None,
            &mut notes,
            &mut |id, meta, n| {
                read_notes.extend(n);
                match meta {
                    Ok(meta) => {
                        batch.entries += meta.entries.len();
                        batch.metas.push((id, meta));
                        added += 1;
                    }
                    // Not marked as taken in: the next open tries again (check reports it).
                    Err(e) => read_notes.push(format!("container {id} left out of the index: {e}")),
                }
                if batch.entries >= BATCH_ENTRIES {
                    std::mem::take(&mut batch).add_to(r, &damage, &mut ignored, &indexed)?;
                }
                Ok(())
            },
        )?;
        out.added += added;
        out.sources = sources;
        out.notices.extend(notes);
        out.notices.extend(read_notes);
        std::mem::take(&mut batch).add_to(r, &damage, &mut ignored, &indexed)?;
        r.take_in_set_aside(|copy, full| Ok(!full(&copy.id)? && full(&copy.base)?))
    })?;
    Ok(out)
}
