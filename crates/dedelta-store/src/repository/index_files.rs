//! Index files in the repository (format in [`crate::format::index_file`]): written after a
//! backup's containers are durable (but for the last, stored beside it) and before its snapshot, read by clients that catch up or
//! rebuild their chunk index, consolidated by prune and repair.
//!
//! They are hints. A reader takes a record only for a container the listing has (a record of
//! a container a prune deleted is ignored), reads the metadata of every listed container no
//! readable index file covers (repositories written before index files, a backup killed
//! between its containers and its index file), and reports an index file that fails to decode
//! as a notice, then reads its containers instead. So an index file can cost speed, never
//! correctness; `check` compares them with the containers.
//!
//! Which index files a client has read is remembered beside its chunk index
//! ([`SEEN_SUFFIX`]), so that a catch-up reads only the files written since (a client's own
//! backups mark theirs as read). That list is a hint too: a file wrongly marked as read only
//! makes a catch-up read its containers' metadata instead.

use super::index_rebuild::{read_metas_parallel, META_READ_GROUP};
use super::{IndexedRepository, Repository};
use crate::backend::wrap::metered::Purpose;
use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use crate::format::container::{self, ContainerId, ContainerMeta, FOOTER_LEN};
use crate::format::index_file::{self, IndexedContainer, TARGET_RAW_LEN};
use dedelta_core::ChunkId;
use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

/// Appended to the chunk index's path: the file listing the index files this client has read.
pub const SEEN_SUFFIX: &str = ".index-files";
/// Index files read at once (each on its own thread: on an object store a read is a round
/// trip, and a catch-up after a few backups reads a few files).
const FILES_READ_AT_ONCE: usize = 8;

/// Gathers the records of the containers a writer stores and publishes them as index files:
/// one when [`Self::publish`] is called (a backup's end, beside its last container's PUT and
/// before its snapshot), and one whenever
/// [`TARGET_RAW_LEN`] of records have gathered (bounded memory however large the backup).
#[derive(Debug, Default)]
pub struct IndexFilePublisher {
    records: Vec<IndexedContainer>,
    raw_len: usize,
    /// Names of the index files written.
    pub published: Vec<String>,
}

impl IndexFilePublisher {
    /// Adds the record of a container that is durable already (the writer's, once its PUT has
    /// returned; consolidation's, read from the repository), publishing once
    /// [`TARGET_RAW_LEN`] of records have gathered.
    pub(super) fn add_record(&mut self, repo: &Repository, rec: IndexedContainer) -> Result<()> {
        self.push_record(rec);
        if self.raw_len >= TARGET_RAW_LEN {
            self.publish(repo)?;
        }
        Ok(())
    }

    /// Adds a record for the next [`Self::publish`], whatever the size gathered: a backup's
    /// last container, whose record goes into the index file written beside its PUT.
    pub(super) fn push_record(&mut self, rec: IndexedContainer) {
        self.raw_len += rec.encoded_len();
        self.records.push(rec);
    }

    /// Writes the gathered records as one index file (nothing if none gathered), durably,
    /// and marks it as read by this client (its chunk index has taken those containers in,
    /// or is about to, before anything relies on them).
    pub fn publish(&mut self, repo: &Repository) -> Result<()> {
        if self.records.is_empty() {
            return Ok(());
        }
        // The metadata this client wrote is what its next backup reads first (its parent's
        // tree and bases): kept locally where each read is a round trip.
        if let Some(cache) = repo.meta_cache() {
            for rec in &self.records {
                cache.put_written(rec);
            }
            cache.trim(crate::client::meta_cache::META_CACHE_BYTES);
        }
        let bytes = index_file::encode(&mut self.records);
        let name = ChunkId::of(&bytes).to_hex();
        repo.backend().put(FileKind::Index, &name, &bytes)?;
        self.records.clear();
        self.raw_len = 0;
        let mut seen = load_seen(repo);
        seen.insert(name.clone());
        store_seen(repo, &seen);
        self.published.push(name);
        Ok(())
    }
}

fn seen_path(repo: &Repository) -> PathBuf {
    let mut p = repo.index_path().as_os_str().to_owned();
    p.push(SEEN_SUFFIX);
    PathBuf::from(p)
}

/// The index files this client has read (empty when the list is missing or unreadable).
fn load_seen(repo: &Repository) -> BTreeSet<String> {
    std::fs::read_to_string(seen_path(repo))
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Replaces the list of index files read (temp file and rename; a failure only costs reads
/// later, so it is ignored).
fn store_seen(repo: &Repository, seen: &BTreeSet<String>) {
    let path = seen_path(repo);
    let mut tmp = path.clone().into_os_string();
    tmp.push(".tmp");
    let mut text = String::with_capacity(seen.len() * 65);
    for n in seen {
        text.push_str(n);
        text.push('\n');
    }
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// Which index files a reader of container metadata consults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Consult {
    /// Every one (a rebuild: the client knows nothing).
    All,
    /// Those this client has not read yet (a catch-up).
    Unseen,
}

/// Where the metadata a rebuild or catch-up took in came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetaSources {
    /// Index files read.
    pub index_files_read: u64,
    /// Containers whose metadata came from index files.
    pub from_index_files: u64,
    /// Containers whose metadata was read from the container (no readable index file
    /// covered it).
    pub from_containers: u64,
}

/// Calls `take` with the metadata of every container of `wanted` (sorted; each once), with
/// the notes of its read: first those index files cover, an index file at a time, then the
/// others read from their containers, [`META_READ_GROUP`] at a time in parallel (a failed
/// read comes as an error). Index files that fail to decode become notices in `notes`. Marks
/// the index files listed now as read once `take` has seen everything. `listed_already`: the
/// index files' names when the caller listed them beside its listing of the containers (a
/// rebuild: one round trip fewer on an object store), else they are listed here when any
/// container is wanted.
pub(super) fn for_each_meta(
    repo: &IndexedRepository,
    wanted: &[ContainerId],
    consult: Consult,
    listed_already: Option<Result<Vec<String>>>,
    notes: &mut Vec<String>,
    take: &mut dyn FnMut(ContainerId, Result<ContainerMeta>, Vec<String>) -> Result<()>,
) -> Result<MetaSources> {
    let mut out = MetaSources::default();
    let backend = repo.backend_for(Purpose::Index);
    let mut left: HashSet<ContainerId> = wanted.iter().copied().collect();
    let mut listed = Vec::new();
    if !left.is_empty() {
        listed = match listed_already {
            Some(names) => names?,
            None => backend.list_names(FileKind::Index)?,
        };
        let seen = match consult {
            Consult::All => BTreeSet::new(),
            Consult::Unseen => load_seen(repo),
        };
        let to_read: Vec<&String> = listed.iter().filter(|n| !seen.contains(*n)).collect();
        for group in to_read.chunks(FILES_READ_AT_ONCE) {
            if left.is_empty() {
                break;
            }
            for (name, decoded) in read_files(backend.as_ref(), group) {
                out.index_files_read += 1;
                let records = match decoded {
                    Ok(r) => r,
                    Err(e) => {
                        notes.push(format!(
                            "index file {name} not used ({e}); reading its containers' \
                             metadata instead"
                        ));
                        continue;
                    }
                };
                for (rec, meta) in records {
                    if left.remove(&rec.id) {
                        out.from_index_files += 1;
                        repo.metas_at_open.keep(rec.id, &meta);
                        take(rec.id, Ok(meta), Vec::new())?;
                    }
                }
            }
        }
    }
    let rest: Vec<ContainerId> = wanted
        .iter()
        .filter(|c| left.contains(c))
        .copied()
        .collect();
    out.from_containers = rest.len() as u64;
    for group in rest.chunks(META_READ_GROUP) {
        let names: Vec<String> = group.iter().map(ContainerId::to_hex).collect();
        let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
        for (id, (meta, n)) in group.iter().zip(read_metas_parallel(repo, &wanted)) {
            if let Ok(m) = &meta {
                repo.metas_at_open.keep(*id, m);
            }
            take(*id, meta, n)?;
        }
    }
    if !listed.is_empty() {
        let mut seen = load_seen(repo);
        seen.extend(listed);
        store_seen(repo, &seen);
    }
    Ok(out)
}

/// Reads and decodes the index files `names`, in parallel, in that order.
fn read_files<'n>(
    backend: &dyn Backend,
    names: &[&'n String],
) -> Vec<(&'n String, Result<index_file::Decoded>)> {
    let read = |name: &'n String| {
        let what = format!("index file {name}");
        let decoded = backend
            .get(FileKind::Index, name)
            .map_err(Error::from)
            .and_then(|bytes| index_file::decode(&bytes, &what));
        (name, decoded)
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = names.iter().map(|n| s.spawn(move || read(n))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Reads a container's footer and metadata section as an index file records them (its
/// size, footer and section: three requests), checked as [`super::read_container_meta`]
/// checks them.
pub fn read_record(backend: &dyn Backend, id: &ContainerId) -> Result<IndexedContainer> {
    let name = id.to_hex();
    let what = format!("container {name}");
    let size = backend.size(FileKind::Container, &name)?;
    let footer = backend.get_range(FileKind::Container, &name, -(FOOTER_LEN as i64), FOOTER_LEN)?;
    let f = container::decode_footer(&footer, size, &what)?;
    let section = backend.get_range(
        FileKind::Container,
        &name,
        f.meta_offset as i64,
        f.meta_len as usize,
    )?;
    let rec = IndexedContainer {
        id: *id,
        footer: footer
            .try_into()
            .map_err(|_| Error::corrupt(&what, "short footer"))?,
        section,
    };
    rec.meta(&what)?;
    Ok(rec)
}

/// What a consolidation did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Consolidated {
    /// Index files written (one, or more past [`TARGET_RAW_LEN`] of records).
    pub written: u64,
    /// Index files deleted (replaced, or unreadable).
    pub deleted: u64,
    /// Containers the new files cover.
    pub containers: u64,
    /// Containers left uncovered (metadata unreadable): readers read them directly.
    pub uncovered: u64,
    /// What the user should know (index files that did not decode).
    pub notices: Vec<String>,
}

/// Replaces every index file with as few as hold the records of the containers listed now
/// (a prune or repair has just deleted some). Order, for crash safety: the new files are
/// durable before any old one is deleted, and only files listed before the new ones were
/// written are deleted; a crash in between leaves records twice (identical: a container's
/// record is its own bytes), which readers take once. The caller holds the exclusive lock, so
/// no backup publishes meanwhile (and one that did would keep its file: it was not listed).
pub fn consolidate(repo: &IndexedRepository) -> Result<Consolidated> {
    let mut out = Consolidated::default();
    let backend = repo.backend();
    let old: Vec<String> = backend
        .list(FileKind::Index)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    if old.is_empty() && !repo.writes_index_files() {
        return Ok(out); // a local repository without index files keeps none
    }
    let mut left: HashSet<ContainerId> = backend
        .list(FileKind::Container)?
        .iter()
        .filter_map(|(n, _)| ContainerId::from_hex(n))
        .collect();
    let mut publisher = IndexFilePublisher::default();
    let names: Vec<&String> = old.iter().collect();
    for group in names.chunks(FILES_READ_AT_ONCE) {
        for (name, decoded) in read_files(backend.as_ref(), group) {
            match decoded {
                Ok(records) => {
                    for (rec, _) in records {
                        if left.remove(&rec.id) {
                            out.containers += 1;
                            publisher.add_record(repo, rec)?;
                        }
                    }
                }
                Err(e) => out
                    .notices
                    .push(format!("index file {name} was unreadable ({e}); replaced")),
            }
        }
    }
    let mut rest: Vec<ContainerId> = left.into_iter().collect();
    rest.sort();
    for id in rest {
        match read_record(backend.as_ref(), &id) {
            Ok(rec) => {
                out.containers += 1;
                publisher.add_record(repo, rec)?;
            }
            Err(e) => {
                out.uncovered += 1;
                out.notices
                    .push(format!("container {id} left out of the index files: {e}"));
            }
        }
    }
    publisher.publish(repo)?;
    out.written = publisher.published.len() as u64;
    let kept: HashSet<&String> = publisher.published.iter().collect();
    for name in old.iter().filter(|n| !kept.contains(n)) {
        backend.delete(FileKind::Index, name)?;
        out.deleted += 1;
    }
    Ok(out)
}
