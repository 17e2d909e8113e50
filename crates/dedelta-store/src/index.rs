//! The chunk index: fingerprint -> (container, entry number), in redb.
//!
//! The index is a cache: the containers are the source of truth and `repair index` rebuilds
//! it from their metadata. Entries are inserted only after their container is durable, in one
//! redb transaction per container (redb commits are durable and atomic), so the index never
//! points at data that a crash could lose.

use crate::container::{ContainerId, ContainerMeta};
use crate::error::{Error, Result};
use dedelta_core::ChunkId;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::path::Path;

/// chunk id -> container id (32 bytes) ++ entry number (u32 LE).
const CHUNKS: TableDefinition<&[u8; 32], &[u8; 36]> = TableDefinition::new("chunks");
/// (super-feature position u8, super-feature u64 LE) -> the first full chunk that had it:
/// the persistent `full` sketch index (FirstFit keeps the oldest chunk).
const SKETCHES: TableDefinition<&[u8; 9], &[u8; 32]> = TableDefinition::new("sketches");

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
    Error::Index(e.to_string())
}

/// The persistent chunk index.
pub struct ChunkIndex {
    db: Database,
}

impl std::fmt::Debug for ChunkIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChunkIndex")
    }
}

impl ChunkIndex {
    /// Opens (creating if needed) the index at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        let db = Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .create(path)
            .map_err(|e| Error::Index(format!("opening {}: {e}", path.display())))?;
        let txn = db.begin_write().map_err(db_err)?;
        txn.open_table(CHUNKS).map_err(db_err)?;
        txn.open_table(SKETCHES).map_err(db_err)?;
        txn.commit().map_err(db_err)?;
        Ok(ChunkIndex { db })
    }

    /// Looks up a chunk.
    pub fn get(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        self.reader()?.get(id)
    }

    /// A consistent read view, cheaper than one transaction per lookup.
    pub fn reader(&self) -> Result<IndexReader> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(CHUNKS).map_err(db_err)?;
        let sketches = txn.open_table(SKETCHES).map_err(db_err)?;
        Ok(IndexReader { table, sketches })
    }

    /// Records every entry of a durable container, and the super-features of its full
    /// entries (FirstFit: an existing super-feature keeps its chunk), in one durable transaction.
    pub fn insert_container(&self, id: ContainerId, meta: &ContainerMeta) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = txn.open_table(CHUNKS).map_err(db_err)?;
            let mut sketches = txn.open_table(SKETCHES).map_err(db_err)?;
            for (i, e) in meta.entries.iter().enumerate() {
                let loc = ChunkLocation {
                    container: id,
                    entry: i as u32,
                };
                table
                    .insert(e.id.as_bytes(), &loc.to_bytes())
                    .map_err(db_err)?;
                if e.kind != crate::container::EntryKind::Full {
                    continue;
                }
                for (pos, sf) in e.super_features.iter().enumerate() {
                    let key = sketch_key(pos, *sf);
                    if sketches.get(&key).map_err(db_err)?.is_none() {
                        sketches.insert(&key, e.id.as_bytes()).map_err(db_err)?;
                    }
                }
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Removes the entries of `dead` chunks, and every super-feature that names one of them,
    /// in one durable transaction. Prune calls this before deleting any container, so that no
    /// later backup deduplicates against a chunk about to disappear.
    pub fn remove_chunks(&self, dead: &std::collections::HashSet<ChunkId>) -> Result<()> {
        if dead.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(db_err)?;
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
    }

    /// Removes every entry (before a rebuild).
    pub fn clear(&self) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        txn.delete_table(CHUNKS).map_err(db_err)?;
        txn.delete_table(SKETCHES).map_err(db_err)?;
        txn.open_table(CHUNKS).map_err(db_err)?;
        txn.open_table(SKETCHES).map_err(db_err)?;
        txn.commit().map_err(db_err)
    }

    /// Number of indexed chunks.
    pub fn len(&self) -> Result<u64> {
        let r = self.reader()?;
        r.table.len().map_err(db_err)
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Calls `f` for every indexed chunk.
    pub fn for_each(&self, mut f: impl FnMut(ChunkId, ChunkLocation)) -> Result<()> {
        let r = self.reader()?;
        for item in r.table.iter().map_err(db_err)? {
            let (k, v) = item.map_err(db_err)?;
            f(ChunkId(*k.value()), ChunkLocation::from_bytes(v.value()));
        }
        Ok(())
    }
}

/// A read view of the index.
pub struct IndexReader {
    table: redb::ReadOnlyTable<&'static [u8; 32], &'static [u8; 36]>,
    sketches: redb::ReadOnlyTable<&'static [u8; 9], &'static [u8; 32]>,
}

impl IndexReader {
    /// Looks up a chunk.
    pub fn get(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        Ok(self
            .table
            .get(id.as_bytes())
            .map_err(db_err)?
            .map(|v| ChunkLocation::from_bytes(v.value())))
    }

    /// The first full chunk recorded with super-feature `sf` at `position`.
    pub fn sketch(&self, position: usize, sf: u64) -> Result<Option<ChunkId>> {
        Ok(self
            .sketches
            .get(&sketch_key(position, sf))
            .map_err(db_err)?
            .map(|v| ChunkId(*v.value())))
    }
}
