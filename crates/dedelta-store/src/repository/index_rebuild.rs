//! Rebuilding the chunk index from container metadata (`repair index`, and any client whose
//! index is missing, incomplete or damaged).
//!
//! A chunk may be stored more than once: copies left by interrupted backups and prunes, a
//! chunk stored again after `check` recorded damage, a delta copy whose base a prune has since
//! deleted (prune keeps only the bases of the copies the index named). The rebuilt index must
//! name a copy that can be read, so for every chunk it picks a full copy; else a delta copy
//! whose base has a copy by the same rule (a full one, or down a delta chain of at most
//! [`crate::format::config::MAX_DELTA_DEPTH`] links); else none (the chunk is then absent, and
//! the next backup that meets it stores it again). Copies `check` recorded as damaged are
//! never picked.
//!
//! Its first round lists the containers, the damage records and the index files at once (on
//! an object store a client with an empty cache waited for the index files' listing after
//! the other two: a round trip more on its first command).

use super::index_files::{for_each_meta, Consult, MetaSources};
use super::{read_container_meta, IndexedRepository};
use crate::backend::wrap::metered::Purpose;
use crate::backend::FileKind;
use crate::client::index::{ChunkLocation, DeltaCopy, Rebuild};
use crate::error::Result;
use crate::format::container::{ContainerId, ContainerMeta, EntryKind, EntryMeta};
use crate::repository::damage::DamageSet;
use dedelta_core::ChunkId;
use std::collections::HashSet;

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
    /// Where the containers' metadata came from (index files, or the containers).
    pub sources: MetaSources,
}

/// Container metadata a rebuild holds in memory at once, in entries (about 10 MB of them; a
/// 4 MiB container of 8 KiB chunks has about 500).
pub(super) const BATCH_ENTRIES: usize = 1 << 16;

/// Replaces the index with every entry of every readable container, except copies recorded
/// as damaged (see [`crate::format::damage`]), in one commit. Calls `warn` for each container
/// it has to skip.
///
/// In bounded memory, whatever the repository's size: containers are read in batches of
/// about [`BATCH_ENTRIES`] entries, and each batch's full copies become a run of the index at
/// once (merged as the index merges runs), while its delta copies are set aside in a file
/// beside the index. Once every full copy is known, the delta copies are read back and a
/// chunk without a full copy gets a delta copy whose base is indexed, in rounds (one link of
/// a delta chain per round). (It read every container's
/// metadata into memory first.)
pub fn rebuild_index(repo: &IndexedRepository, warn: &mut dyn FnMut(&str)) -> Result<RepairStats> {
    rebuild_in_batches(repo, warn, BATCH_ENTRIES)
}

/// [`rebuild_index`] with batches of `batch_entries` entries.
fn rebuild_in_batches(
    repo: &IndexedRepository,
    warn: &mut dyn FnMut(&str),
    batch_entries: usize,
) -> Result<RepairStats> {
    let mut stats = RepairStats::default();
    let backend = repo.backend_for(Purpose::Index);
    // The index files are listed in the same round as the containers and damage records
    // (a rebuild consults them all whenever there is a container; on an object store each
    // listing is a round trip, and a client with an empty cache waited for three in a row).
    let (damage, (listed, index_files)) =
        super::index_sync::damage_beside(backend.as_ref(), || {
            let (listed, index_files) = crate::request_threads::beside(
                backend.requests_are_round_trips(),
                || backend.list_names(FileKind::Index),
                || backend.list_names(FileKind::Container),
            );
            (listed, index_files.map_err(Into::into))
        });
    let (damage, notices) = damage?;
    for n in notices {
        warn(&n);
        stats.problems.push(n);
    }
    let damage = repo.remember_damage(damage);
    let listed = listed?;
    let mut wanted = Vec::new();
    let mut whole = Vec::new();
    for name in &listed {
        match ContainerId::from_hex(name) {
            None => {
                let msg = format!("ignoring {name}: not a container name");
                warn(&msg);
                stats.problems.push(msg);
            }
            // Left out, but known to the index.
            Some(id) if damage.container_damaged(&id) => whole.push(id),
            Some(id) => wanted.push(id),
        }
    }
    wanted.sort();
    repo.index().rebuild_in_steps(damage.digest(), |r| {
        let mut batch = Batch::default();
        stats.damaged_skipped += whole.len() as u64;
        batch.whole = whole;
        let mut notes = Vec::new();
        // Metadata from index files where they cover a container, else read from it (in
        // parallel groups: on an object store each read is a few round trips).
        let sources = for_each_meta(
            repo,
            &wanted,
            Consult::All,
            Some(index_files),
            &mut notes,
            &mut |id, meta, n| {
                for msg in n {
                    warn(&msg);
                    stats.problems.push(msg);
                }
                match meta {
                    Ok(meta) => {
                        batch.entries += meta.entries.len();
                        batch.metas.push((id, meta));
                    }
                    Err(e) => {
                        let msg = format!("skipping container {id}: {e}");
                        warn(&msg);
                        stats.problems.push(msg);
                    }
                }
                if batch.entries >= batch_entries {
                    std::mem::take(&mut batch).add_to(r, &damage, &mut stats, &|_| Ok(false))?;
                }
                Ok(())
            },
        )?;
        stats.sources = sources;
        for msg in notes {
            warn(&msg);
            stats.problems.push(msg);
        }
        batch.add_to(r, &damage, &mut stats, &|_| Ok(false))?;
        // A chunk without a full copy gets a delta copy whose base has a copy, if any.
        r.take_in_set_aside(|copy, full| Ok(!full(&copy.id)? && full(&copy.base)?))
    })?;
    stats.chunks = repo.index().len()?;
    Ok(stats)
}

/// Containers read and not yet added to the rebuilt (or caught-up) index.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) metas: Vec<(ContainerId, ContainerMeta)>,
    /// Containers recorded as damaged whole.
    pub(super) whole: Vec<ContainerId>,
    pub(super) entries: usize,
}

impl Batch {
    /// Adds the batch's full copies that are not recorded as damaged to the rebuild (one run)
    /// and sets its other delta copies aside; copies of chunks `indexed` says the index
    /// already names are left out (a catch-up never replaces a copy the index names).
    pub(super) fn add_to(
        self,
        r: &mut Rebuild<'_>,
        damage: &DamageSet,
        stats: &mut RepairStats,
        indexed: &dyn Fn(&ChunkId) -> Result<bool>,
    ) -> Result<()> {
        let mut named = HashSet::new();
        for (id, meta) in &self.metas {
            for (i, e) in meta.entries.iter().enumerate() {
                if damage.reason(id, &e.id).is_some() {
                    stats.damaged_skipped += 1;
                } else if indexed(&e.id)? {
                    named.insert(e.id);
                } else if let EntryKind::Delta { base, .. } = e.kind {
                    r.set_aside(&DeltaCopy {
                        id: e.id,
                        base,
                        at: ChunkLocation {
                            container: *id,
                            entry: i as u32,
                        },
                    })?;
                }
            }
        }
        stats.containers += self.metas.len() as u64;
        let keep = |id: &ContainerId, _: u32, e: &EntryMeta| {
            e.kind == EntryKind::Full
                && damage.reason(id, &e.id).is_none()
                && !named.contains(&e.id)
        };
        let known = self
            .metas
            .iter()
            .map(|(id, meta)| (*id, meta.entries.len()))
            .chain(self.whole.iter().map(|id| (*id, 0)));
        r.add(self.metas.iter().map(|(id, meta)| (*id, meta)), keep, known)
    }
}

/// Containers whose metadata a rebuild or catch-up reads at once ([`read_metas_parallel`]).
pub(super) const META_READ_GROUP: usize = 64;
/// Threads reading metadata at once: requests in flight to an object store (a local disk
/// serves them from its cache or queue just as well).
const META_READ_THREADS: usize = 8;

/// The metadata of the containers `names`, in that order, each with the notes of
/// [`read_meta_with`], read by up to [`META_READ_THREADS`] threads.
pub(super) fn read_metas_parallel(
    repo: &IndexedRepository,
    names: &[&str],
) -> Vec<(Result<ContainerMeta>, Vec<String>)> {
    let backend = repo.backend_for(Purpose::Index);
    let read = |name: &str| {
        let mut notes = Vec::new();
        let meta = read_meta_with(backend.as_ref(), name, &mut |m| notes.push(m));
        (meta, notes)
    };
    if names.len() <= 1 {
        return names.iter().map(|n| read(n)).collect();
    }
    let per = names.len().div_ceil(META_READ_THREADS);
    std::thread::scope(|s| {
        let parts: Vec<_> = names
            .chunks(per)
            .map(|part| s.spawn(move || part.iter().map(|n| read(n)).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Reads a container's metadata; a failed read is tried once more (a container left out of
/// the index by one bad read would look lost until the next rebuild), and `note` hears of a
/// read that failed once.
fn read_meta_with(
    backend: &dyn crate::backend::Backend,
    name: &str,
    note: &mut dyn FnMut(String),
) -> Result<ContainerMeta> {
    read_container_meta(backend, name).or_else(|first| {
        read_container_meta(backend, name).inspect(|_| {
            note(format!(
                "container {name}: a metadata read failed ({first}) and a second read was \
                 intact: the storage may be unreliable"
            ))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::config::RepoConfig;
    use crate::format::damage::{DamageRecord, DamagedCopy};
    use crate::repository::{ContainerWriter, Repository};

    fn chunk(name: &str) -> ChunkId {
        ChunkId::of(name.as_bytes())
    }

    /// The copy rules hold whatever the batches: a full copy if there is one (never a damaged
    /// one), else a delta copy whose base has a copy by these rules (down a delta chain), else
    /// none (a loop of deltas never has one); batches of
    /// one container each (deltas whose base is in a later batch, a full copy arriving after
    /// a delta copy) give the same index as one batch of everything.
    #[test]
    fn batches_keep_the_copy_rules() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_local_with_cache(
            &dir.path().join("repo"),
            RepoConfig::new("test".into()),
            &dir.path().join("cache"),
        )
        .unwrap()
        .open_index()
        .unwrap();
        let full = |name: &str| (chunk(name), EntryKind::Full);
        let delta = |name: &str, base: &str| (chunk(name), EntryKind::delta(chunk(base)));
        let containers = [
            // d1's base and d3's come in later containers.
            vec![delta("d1", "f0"), delta("d3", "f5"), delta("f3", "f0")],
            vec![full("f0"), full("f1"), full("f2"), full("f3"), full("f4")],
            vec![full("f5"), full("f6"), delta("d2", "gone"), full("d1")],
            vec![delta("d4", "d3"), full("f6"), full("h"), delta("d5", "h")],
            // A chain (e5 -> d4 -> d3 -> f5) and a loop, which no round can take.
            vec![delta("e5", "d4"), delta("l1", "l2"), delta("l2", "l1")],
        ];
        let mut ids = Vec::new();
        for entries in &containers {
            let mut w = ContainerWriter::new(&repo);
            for (n, (id, kind)) in entries.iter().enumerate() {
                w.push_entry(*id, *kind, &[n as u8; 10], 10, vec![n as u64, 7])
                    .unwrap();
            }
            w.seal().unwrap();
            ids.push(*w.written.last().unwrap());
        }
        crate::repository::damage::write_record(
            repo.backend().as_ref(),
            &DamageRecord {
                time: "t".into(),
                copies: vec![DamagedCopy {
                    container: ids[3],
                    chunk: Some(chunk("h")),
                    reason: "test".into(),
                }],
            },
        )
        .unwrap();
        let expect = [
            ("f0", Some(true)),
            ("f3", Some(true)),
            ("f6", Some(true)),
            ("d1", Some(true)),
            ("d3", Some(false)),
            ("d2", None),
            ("d4", Some(false)),
            ("e5", Some(false)),
            ("h", None),
            ("d5", None),
            ("l1", None),
            ("l2", None),
        ];
        for batch in [1, 4, 5, usize::MAX] {
            let st = rebuild_in_batches(&repo, &mut |_| {}, batch).unwrap();
            assert_eq!((st.containers, st.chunks, st.damaged_skipped), (5, 11, 1));
            let index = repo.index();
            assert!(index.is_complete().unwrap());
            assert_eq!(index.known_containers().unwrap().len(), 5);
            for (name, want) in expect {
                let got = index.get(&chunk(name)).unwrap().map(|loc| {
                    let meta = repo.read_container_meta(&loc.container).unwrap();
                    let e = &meta.entries[loc.entry as usize];
                    assert_eq!(e.id, chunk(name));
                    e.kind == EntryKind::Full
                });
                assert_eq!(got, want, "{name}, batches of {batch} entries");
            }
            // Super-features of full copies are found again.
            assert!(index.reader().unwrap().sketch(1, 7).unwrap().is_some());
        }
    }
}
