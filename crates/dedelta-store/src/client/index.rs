//! The chunk index: fingerprint -> (container, entry number), in redb.
//!
//! The index is a cache: the containers are the source of truth and `repair index` rebuilds
//! it from their metadata. Entries are inserted only after their container is durable, in one
//! redb transaction per container (redb commits are durable and atomic), so the index never
//! points at data that a crash could lose.
//!
//! Because it is only a cache, damage to it must never stop the repository: every redb call
//! runs under [`std::panic::catch_unwind`] (a damaged page can make redb panic, and a panic on
//! a worker thread would abort the process), and a panic or a `Corrupted` error becomes
//! [`Error::IndexDamaged`]. The repository then discards the file and rebuilds it. A rebuild
//! is one write transaction that also sets the `complete` marker, so a rebuild killed half-way
//! leaves the previous index (or none), never a partial one that looks whole.
//!
//! (Over 600 lines with its tests: one responsibility, the redb tables and every transaction
//! on them, kept together so that the damage guard wraps each; issue 14's compact index is to
//! replace it whole.)

use crate::error::{Error, Result};
use crate::format::container::{ContainerId, ContainerMeta, EntryMeta};
use dedelta_core::ChunkId;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// chunk id -> container id (32 bytes) ++ entry number (u32 LE).
const CHUNKS: TableDefinition<&[u8; 32], &[u8; 36]> = TableDefinition::new("chunks");
/// (super-feature position u8, super-feature u64 LE) -> the first full chunk that had it:
/// the persistent `full` sketch index (FirstFit keeps the oldest chunk).
const SKETCHES: TableDefinition<&[u8; 9], &[u8; 32]> = TableDefinition::new("sketches");
/// Facts about the index itself; `complete` = [`SCHEMA`] once it holds every container's
/// entries.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The key of the completeness marker in [`META`].
const COMPLETE: &str = "complete";
/// The completeness marker's value for this layout of the tables (1 was the index kept in the
/// repository, without [`CONTAINERS`]); an index with another value is rebuilt.
const SCHEMA: u64 = 2;
/// The key in [`META`] of a digest of the damage records already applied (see
/// [`ChunkIndex::damage_digest`]).
const DAMAGE_DIGEST: &str = "damage_digest";
/// The containers whose metadata the index has taken in (container id -> entry count), so
/// that a client sees which containers other clients added or deleted since.
const CONTAINERS: TableDefinition<&[u8; 32], u32> = TableDefinition::new("containers");

/// Memory redb may use to cache the index's pages (its default, 1 GiB, let a backup's resident
/// memory grow with the repository: 1.46 GB after 4 GB of unique data).
const INDEX_CACHE_BYTES: usize = 64 << 20;

/// The key in [`META`] of the file length when [`ChunkIndex::compact_if_worthwhile`] last
/// measured what the file holds.
const MEASURED_LEN: &str = "measured_len";

/// Up to this size, measuring what the file holds is cheap enough to do after every command.
const ALWAYS_MEASURE_BYTES: u64 = 64 << 20;

/// Smaller index files are not worth compacting.
const COMPACT_MIN_BYTES: u64 = 1 << 20;

/// The key of one super-feature in the sketch table.
pub fn sketch_key(position: usize, sf: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = position as u8;
    k[1..].copy_from_slice(&sf.to_le_bytes());
    k
}

/// Where a chunk is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLocation {
    /// The container.
    pub container: ContainerId,
    /// The entry's position in the container metadata.
    pub entry: u32,
}

impl ChunkLocation {
    fn to_bytes(self) -> [u8; 36] {
        let mut out = [0u8; 36];
        out[..32].copy_from_slice(&self.container.0);
        out[32..].copy_from_slice(&self.entry.to_le_bytes());
        out
    }

    fn from_bytes(b: &[u8; 36]) -> Self {
        let mut c = [0u8; 32];
        c.copy_from_slice(&b[..32]);
        ChunkLocation {
            container: ContainerId(c),
            entry: u32::from_le_bytes([b[32], b[33], b[34], b[35]]),
        }
    }
}

fn db_err(e: impl std::fmt::Display) -> Error {
    let msg = e.to_string();
    // redb reports checksum and structure failures as "corrupted" errors.
    if msg.to_ascii_lowercase().contains("corrupt") {
        Error::IndexDamaged(msg)
    } else {
        Error::Index(msg)
    }
}

/// Runs a redb operation on the index file at `path`, turning a panic inside redb (a damaged
/// page) into [`Error::IndexDamaged`]. On damage the file is unlinked at once, so that the next
/// command starts from a fresh index and rebuilds it; this process keeps its open handle.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic inside the index library".into());
            Err(Error::IndexDamaged(msg))
        }
    };
    if let Err(Error::IndexDamaged(_)) = &result {
        // A cache: losing it costs a rebuild, keeping it would fail every command.
        let _ = std::fs::remove_file(path);
    }
    result
}

/// The persistent chunk index.
pub struct ChunkIndex {
    /// Behind a lock only so that an integrity check (which needs the database alone) and a
    /// reset can run through a shared reference; every other use takes it shared, briefly.
    db: std::sync::RwLock<Database>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for ChunkIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChunkIndex")
    }
}

impl ChunkIndex {
    /// Opens (creating if needed) the index at `path`.
    ///
    /// # Errors
    /// [`Error::IndexDamaged`] if the file is damaged (the caller discards and rebuilds it).
    pub fn open(path: &Path) -> Result<Self> {
        let path = Arc::new(path.to_path_buf());
        let db = open_db(&path)?;
        Ok(ChunkIndex {
            db: std::sync::RwLock::new(db),
            path,
        })
    }

    fn db(&self) -> std::sync::RwLockReadGuard<'_, Database> {
        // Poisoned only if a panic escaped while it was held for writing, which `guarded`
        // prevents; the database handle itself is still valid.
        self.db.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the database with a new, empty one (incomplete: the caller rebuilds it). For
    /// an index found damaged while open.
    pub fn reset(&self) -> Result<()> {
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        let _ = std::fs::remove_file(self.path.as_path());
        *db = open_db(&self.path)?;
        Ok(())
    }

    /// Whether the index holds every container's entries: set by [`Self::rebuild`], which is
    /// the only way an index becomes complete (a fresh file is not).
    pub fn is_complete(&self) -> Result<bool> {
        guarded(&self.path, || {
            let txn = self.db().begin_read().map_err(db_err)?;
            let meta = txn.open_table(META).map_err(db_err)?;
            Ok(meta.get(COMPLETE).map_err(db_err)?.map(|v| v.value()) == Some(SCHEMA))
        })
    }

    /// Compacts the file when most of it is free space (redb never gives pages back to the
    /// file system by itself: an index grows with every commit, and stays large after a prune
    /// or a rebuild). Returns the file's sizes before and after, if it compacted. Needs no
    /// read view to be alive (the caller's command is over).
    ///
    /// Measuring what the file holds walks the whole tree, so above
    /// [`ALWAYS_MEASURE_BYTES`] it is done only when the file has grown by half since it was
    /// last measured (the length then is kept in [`META`]).
    pub fn compact_if_worthwhile(&self) -> Result<Option<(u64, u64)>> {
        let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let before = len(&self.path);
        if before < COMPACT_MIN_BYTES {
            return Ok(None);
        }
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        guarded(&self.path, || {
            let txn = db.begin_write().map_err(db_err)?;
            let measured = {
                let meta = txn.open_table(META).map_err(db_err)?;
                let v = meta.get(MEASURED_LEN).map_err(db_err)?.map(|v| v.value());
                v.unwrap_or(0)
            };
            if before > ALWAYS_MEASURE_BYTES && before < measured + measured / 2 {
                txn.abort().map_err(db_err)?;
                return Ok(None);
            }
            let st = txn.stats().map_err(db_err)?;
            let live = st.stored_bytes() + st.metadata_bytes();
            // Pages redb holds free (its "fragmented" bytes) are what compaction gives back.
            let worthwhile = before >= 2 * live;
            // Recorded before compacting (a commit after it would grow the file again): when
            // compacting, the length at which it would be worth it.
            let mark = if worthwhile { 2 * live } else { before };
            txn.open_table(META)
                .map_err(db_err)?
                .insert(MEASURED_LEN, mark)
                .map_err(db_err)?;
            txn.commit().map_err(db_err)?;
            if !worthwhile {
                return Ok(None);
            }
            while db.compact().map_err(db_err)? {}
            Ok(Some((before, len(&self.path))))
        })
    }

    /// Verifies every page of the index file (slow: reads it whole). `Ok(false)` if damage was
    /// found and redb repaired it; [`Error::IndexDamaged`] if it could not.
    pub fn check_integrity(&self) -> Result<bool> {
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        guarded(&self.path, || db.check_integrity().map_err(db_err))
    }

    /// Looks up a chunk.
    pub fn get(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        self.reader()?.get(id)
    }

    /// A consistent read view, cheaper than one transaction per lookup.
    pub fn reader(&self) -> Result<IndexReader> {
        guarded(&self.path, || {
            let txn = self.db().begin_read().map_err(db_err)?;
            let table = txn.open_table(CHUNKS).map_err(db_err)?;
            let sketches = txn.open_table(SKETCHES).map_err(db_err)?;
            Ok(IndexReader {
                table,
                sketches,
                path: self.path.clone(),
            })
        })
    }

    /// Records every entry of a durable container, and the super-features of its full
    /// entries (FirstFit: an existing super-feature keeps its chunk), in one durable transaction.
    pub fn insert_container(&self, id: ContainerId, meta: &ContainerMeta) -> Result<()> {
        self.insert_containers([(id, meta)])
    }

    /// [`Self::insert_container`] for several containers in one durable transaction: a
    /// backup indexes its containers in batches, since one durable commit per container
    /// made the index most of a backup of new data.
    pub fn insert_containers<'m>(
        &self,
        containers: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
    ) -> Result<()> {
        guarded(&self.path, || {
            let txn = self.db().begin_write().map_err(db_err)?;
            for (id, meta) in containers {
                insert_entries(&txn, id, meta, |_, _| true)?;
                mark_known(&txn, [(id, meta.entries.len())])?;
            }
            txn.commit().map_err(db_err)
        })
    }

    /// Replaces the whole index with the entries of `containers` that `keep` accepts and
    /// marks it complete, in one durable transaction: a rebuild killed before the commit
    /// leaves the previous index as it was.
    ///
    /// `known` are the containers the index has taken in: those of `containers`, and those
    /// deliberately left out (recorded as damaged whole), so that [`Self::sync`] does not take
    /// them in again.
    pub fn rebuild<'m>(
        &self,
        containers: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
        keep: impl Fn(&ContainerId, u32, &EntryMeta) -> bool,
        known: impl IntoIterator<Item = (ContainerId, usize)>,
        damage_digest: u64,
    ) -> Result<()> {
        guarded(&self.path, || {
            let txn = self.db().begin_write().map_err(db_err)?;
            txn.delete_table(CHUNKS).map_err(db_err)?;
            txn.delete_table(SKETCHES).map_err(db_err)?;
            txn.delete_table(CONTAINERS).map_err(db_err)?;
            for (id, meta) in containers {
                insert_entries(&txn, id, meta, |i, e| keep(&id, i, e))?;
            }
            mark_known(&txn, known)?;
            txn.open_table(CHUNKS).map_err(db_err)?;
            txn.open_table(SKETCHES).map_err(db_err)?;
            txn.open_table(META)
                .map_err(db_err)?
                .insert(DAMAGE_DIGEST, damage_digest)
                .map_err(db_err)?;
            txn.open_table(META)
                .map_err(db_err)?
                .insert(COMPLETE, SCHEMA)
                .map_err(db_err)?;
            txn.commit().map_err(db_err)
        })
    }

    /// Removes the entries of `dead` chunks, and every super-feature that names one of them,
    /// in one durable transaction. Prune calls this before deleting any container, so that no
    /// later backup deduplicates against a chunk about to disappear.
    pub fn remove_chunks(&self, dead: &std::collections::HashSet<ChunkId>) -> Result<()> {
        if dead.is_empty() {
            return Ok(());
        }
        guarded(&self.path, || {
            let txn = self.db().begin_write().map_err(db_err)?;
            {
                let mut table = txn.open_table(CHUNKS).map_err(db_err)?;
                for id in dead {
                    table.remove(id.as_bytes()).map_err(db_err)?;
                }
                let mut sketches = txn.open_table(SKETCHES).map_err(db_err)?;
                sketches
                    .retain(|_, v| !dead.contains(&ChunkId(*v)))
                    .map_err(db_err)?;
            }
            txn.commit().map_err(db_err)
        })
    }

    /// The containers the index has taken in (see [`CONTAINERS`]).
    pub fn known_containers(&self) -> Result<std::collections::HashSet<ContainerId>> {
        guarded(&self.path, || {
            let txn = self.db().begin_read().map_err(db_err)?;
            let table = txn.open_table(CONTAINERS).map_err(db_err)?;
            let mut out = std::collections::HashSet::new();
            for item in table.iter().map_err(db_err)? {
                let (k, _) = item.map_err(db_err)?;
                out.insert(ContainerId(*k.value()));
            }
            Ok(out)
        })
    }

    /// The digest of the damage records this index has applied (0 if none was stored).
    pub fn damage_digest(&self) -> Result<u64> {
        guarded(&self.path, || {
            let txn = self.db().begin_read().map_err(db_err)?;
            let meta = txn.open_table(META).map_err(db_err)?;
            Ok(meta
                .get(DAMAGE_DIGEST)
                .map_err(db_err)?
                .map(|v| v.value())
                .unwrap_or(0))
        })
    }

    /// Takes in the entries of `added` containers that `keep` accepts and marks `known`
    /// containers as taken in, in one durable transaction (see
    /// [`crate::repository::index_sync`]).
    pub fn take_in<'m>(
        &self,
        added: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
        keep: impl Fn(&ContainerId, u32, &EntryMeta) -> bool,
        known: impl IntoIterator<Item = (ContainerId, usize)>,
    ) -> Result<()> {
        guarded(&self.path, || {
            let txn = self.db().begin_write().map_err(db_err)?;
            for (id, meta) in added {
                insert_entries(&txn, id, meta, |i, e| keep(&id, i, e))?;
            }
            mark_known(&txn, known)?;
            txn.commit().map_err(db_err)
        })
    }

    /// Records that the index reflects the damage records whose digest is `digest` (after a
    /// command that wrote records has adjusted the index itself).
    pub fn set_damage_digest(&self, digest: u64) -> Result<()> {
        guarded(&self.path, || {
            let txn = self.db().begin_write().map_err(db_err)?;
            txn.open_table(META)
                .map_err(db_err)?
                .insert(DAMAGE_DIGEST, digest)
                .map_err(db_err)?;
            txn.commit().map_err(db_err)
        })
    }

    /// Forgets containers this client deleted (their entries already left the index), so that
    /// the next [`Self::sync`] need not look for entries in them.
    pub fn forget_containers(&self, deleted: &[ContainerId]) -> Result<()> {
        if deleted.is_empty() {
            return Ok(());
        }
        guarded(&self.path, || {
            let txn = self.db().begin_write().map_err(db_err)?;
            {
                let mut table = txn.open_table(CONTAINERS).map_err(db_err)?;
                for c in deleted {
                    table.remove(&c.0).map_err(db_err)?;
                }
            }
            txn.commit().map_err(db_err)
        })
    }

    /// Number of indexed chunks.
    pub fn len(&self) -> Result<u64> {
        let r = self.reader()?;
        guarded(&self.path, || r.table.len().map_err(db_err))
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Calls `f` for every indexed chunk.
    pub fn for_each(&self, mut f: impl FnMut(ChunkId, ChunkLocation)) -> Result<()> {
        let r = self.reader()?;
        guarded(&self.path, || {
            for item in r.table.iter().map_err(db_err)? {
                let (k, v) = item.map_err(db_err)?;
                f(ChunkId(*k.value()), ChunkLocation::from_bytes(v.value()));
            }
            Ok(())
        })
    }
}

/// Classifies an error opening the index: anything that says the file's bytes are wrong (bad
/// magic, corruption, an old or failed format) is damage, to be discarded; being locked or an
/// I/O failure is not.
fn open_error(e: redb::DatabaseError, path: &Path) -> Error {
    use redb::{DatabaseError as D, StorageError as S};
    match e {
        D::Storage(S::Corrupted(m)) => Error::IndexDamaged(m),
        D::Storage(S::Io(io)) if io.kind() == std::io::ErrorKind::InvalidData => {
            Error::IndexDamaged(io.to_string())
        }
        D::RepairAborted | D::UpgradeRequired(_) => Error::IndexDamaged(e.to_string()),
        other => Error::Index(format!("opening {}: {other}", path.display())),
    }
}

/// Opens (creating if needed) the redb file at `path` with the tables the index uses.
fn open_db(path: &Arc<PathBuf>) -> Result<Database> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    guarded(path, || {
        let db = Database::builder()
            .set_cache_size(INDEX_CACHE_BYTES)
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .create(path.as_path())
            .map_err(|e| open_error(e, path))?;
        let txn = db.begin_write().map_err(db_err)?;
        txn.open_table(CHUNKS).map_err(db_err)?;
        txn.open_table(SKETCHES).map_err(db_err)?;
        txn.open_table(META).map_err(db_err)?;
        txn.open_table(CONTAINERS).map_err(db_err)?;
        txn.commit().map_err(db_err)?;
        Ok(db)
    })
}

/// Records containers as taken in (id, entry count).
fn mark_known(
    txn: &redb::WriteTransaction,
    known: impl IntoIterator<Item = (ContainerId, usize)>,
) -> Result<()> {
    let mut table = txn.open_table(CONTAINERS).map_err(db_err)?;
    for (id, entries) in known {
        table
            .insert(&id.0, u32::try_from(entries).unwrap_or(u32::MAX))
            .map_err(db_err)?;
    }
    Ok(())
}

/// Inserts the entries of one container that `keep` accepts (entry number, entry), with the
/// super-features of its full entries (FirstFit: an existing super-feature keeps its chunk).
fn insert_entries(
    txn: &redb::WriteTransaction,
    id: ContainerId,
    meta: &ContainerMeta,
    keep: impl Fn(u32, &EntryMeta) -> bool,
) -> Result<()> {
    let mut table = txn.open_table(CHUNKS).map_err(db_err)?;
    let mut sketches = txn.open_table(SKETCHES).map_err(db_err)?;
    for (i, e) in meta.entries.iter().enumerate() {
        let entry = i as u32;
        if !keep(entry, e) {
            continue;
        }
        let loc = ChunkLocation {
            container: id,
            entry,
        };
        table
            .insert(e.id.as_bytes(), &loc.to_bytes())
            .map_err(db_err)?;
        if e.kind != crate::format::container::EntryKind::Full {
            continue;
        }
        for (pos, sf) in e.super_features.iter().enumerate() {
            let key = sketch_key(pos, *sf);
            if sketches.get(&key).map_err(db_err)?.is_none() {
                sketches.insert(&key, e.id.as_bytes()).map_err(db_err)?;
            }
        }
    }
    Ok(())
}

/// A read view of the index.
pub struct IndexReader {
    table: redb::ReadOnlyTable<&'static [u8; 32], &'static [u8; 36]>,
    sketches: redb::ReadOnlyTable<&'static [u8; 9], &'static [u8; 32]>,
    path: Arc<PathBuf>,
}

impl IndexReader {
    /// Looks up a chunk.
    pub fn get(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        guarded(&self.path, || {
            Ok(self
                .table
                .get(id.as_bytes())
                .map_err(db_err)?
                .map(|v| ChunkLocation::from_bytes(v.value())))
        })
    }

    /// The first full chunk recorded with super-feature `sf` at `position`.
    pub fn sketch(&self, position: usize, sf: u64) -> Result<Option<ChunkId>> {
        guarded(&self.path, || {
            Ok(self
                .sketches
                .get(&sketch_key(position, sf))
                .map_err(db_err)?
                .map(|v| ChunkId(*v.value())))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::container::EntryKind;

    /// A container of `n` full entries with three super-features each.
    fn container(seed: u64, n: u32) -> (ContainerId, ContainerMeta) {
        let entries = (0..n)
            .map(|i| EntryMeta {
                id: ChunkId::of(&[seed.to_le_bytes(), u64::from(i).to_le_bytes()].concat()),
                kind: EntryKind::Full,
                region: 0,
                offset: i * 100,
                stored_len: 100,
                original_len: 100,
                super_features: vec![seed * 1_000_003 + u64::from(i), 1, 2],
            })
            .collect();
        let id = ContainerId(ChunkId::of(&seed.to_le_bytes()).0);
        (
            id,
            ContainerMeta {
                regions: vec![],
                entries,
            },
        )
    }

    /// One durable commit per container, as a backup makes them, leaves most of the file
    /// free; compaction gives it back, and every entry is still found.
    #[test]
    fn compaction_shrinks_a_grown_index_and_keeps_every_entry() {
        let dir = tempfile::tempdir().unwrap();
        let index = ChunkIndex::open(&dir.path().join("chunks.redb")).unwrap();
        let mut all = Vec::new();
        for seed in 0..200 {
            let (id, meta) = container(seed, 100);
            index.insert_container(id, &meta).unwrap();
            all.push((id, meta));
        }
        let (before, after) = index
            .compact_if_worthwhile()
            .unwrap()
            .expect("a grown index is compacted");
        assert!(after * 2 < before, "{before} -> {after}");
        let r = index.reader().unwrap();
        for (id, meta) in &all {
            for (i, e) in meta.entries.iter().enumerate() {
                let loc = r.get(&e.id).unwrap().unwrap();
                assert_eq!((loc.container, loc.entry), (*id, i as u32));
            }
        }
        drop(r);
        // Compacted already: nothing more to gain.
        assert_eq!(index.compact_if_worthwhile().unwrap(), None);
    }
}
