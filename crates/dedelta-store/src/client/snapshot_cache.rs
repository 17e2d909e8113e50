//! The local snapshot cache: the bytes of the repository's snapshot files, kept in one file
//! of the repository's client cache directory ([`SNAPSHOT_CACHE_FILE`]), so that listing the
//! snapshots (every `backup`, to choose its parent; `snapshots`; `latest`) reads one local
//! file instead of every snapshot object (as restic's cache of snapshot files).
//!
//! A snapshot object never changes (its name is the BLAKE3 hash of its file), so an entry
//! stays right for as long as its name is listed; the caller lists the names every time and
//! drops the entries of names no longer listed (a forgotten snapshot). Nothing in the file is
//! trusted: an entry is used only if its bytes hash to its name, else it is left out (and the
//! snapshot read from the repository again); a file that cannot be read or parsed counts as
//! empty. In an encrypted repository the entries are the snapshots' plaintext, which names
//! the backed-up paths, the host and the tags: the client cache is as private as the client's
//! files (it also holds the chunk index and plaintext delta bases).
//!
//! Format (version 1, little-endian): the 8-byte magic `DDSNAPC\0`, a u32 version, a u32
//! entry count, then per entry the 32-byte snapshot id, a u32 length and that many bytes (the
//! snapshot file as stored, before sealing).

use crate::format::snapshot::SnapshotId;
use dedelta_core::ChunkId;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The snapshot cache's file name in a repository's cache directory.
pub const SNAPSHOT_CACHE_FILE: &str = "snapshots.cache";

const MAGIC: &[u8; 8] = b"DDSNAPC\0";
const VERSION: u32 = 1;
/// Longest snapshot file kept (a larger one is read from the repository each time).
const MAX_ENTRY: usize = 64 << 20;

/// The cached snapshot files of one repository (see the module doc).
#[derive(Debug)]
pub struct SnapshotCache {
    path: PathBuf,
    entries: HashMap<SnapshotId, Vec<u8>>,
    /// Entries were added or dropped since the file was read: it is rewritten on save.
    changed: bool,
}

impl SnapshotCache {
    /// Reads the cache in the cache directory `dir`. A missing, unreadable or damaged file
    /// gives an empty cache (or the entries before the damage) and is rewritten on save; an
    /// entry whose bytes do not hash to its name is left out.
    pub fn open(dir: &Path) -> Self {
        let path = dir.join(SNAPSHOT_CACHE_FILE);
        let (entries, intact) = match std::fs::read(&path) {
            Ok(bytes) => decode(&bytes),
            Err(_) => (HashMap::new(), false),
        };
        SnapshotCache {
            path,
            entries,
            changed: !intact,
        }
    }

    /// The cached file of the snapshot `id` (verified against its name when read).
    pub fn get(&self, id: &SnapshotId) -> Option<&[u8]> {
        self.entries.get(id).map(Vec::as_slice)
    }

    /// Caches the file of the snapshot `id`, if it hashes to `id`.
    pub fn insert(&mut self, id: SnapshotId, bytes: Vec<u8>) {
        if bytes.len() <= MAX_ENTRY && ChunkId::of(&bytes).0 == id.0 {
            self.entries.insert(id, bytes);
            self.changed = true;
        }
    }

    /// Drops an entry (one that hashes right but does not decode: the snapshot is read from
    /// the repository, which reports what is wrong with it).
    pub fn remove(&mut self, id: &SnapshotId) {
        self.changed |= self.entries.remove(id).is_some();
    }

    /// Keeps only the entries `keep` says yes to (the names still listed).
    pub fn retain(&mut self, mut keep: impl FnMut(&SnapshotId) -> bool) {
        let before = self.entries.len();
        self.entries.retain(|id, _| keep(id));
        self.changed |= self.entries.len() != before;
    }

    /// How many snapshots are cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no snapshot is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the file back if it changed (temporary file, rename). Best effort, as the
    /// cache itself: a failure only costs the next listing its reads.
    pub fn save(&mut self) {
        if !self.changed {
            return;
        }
        let Some(dir) = self.path.parent() else {
            return;
        };
        let tmp = dir.join(format!("{SNAPSHOT_CACHE_FILE}.tmp-{}", std::process::id()));
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, self.encode()))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if written.is_ok() {
            self.changed = false;
        } else {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut ids: Vec<&SnapshotId> = self.entries.keys().collect();
        ids.sort();
        let size: usize = self.entries.values().map(|b| b.len() + 36).sum();
        let mut out = Vec::with_capacity(16 + size);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        for id in ids {
            let bytes = &self.entries[id];
            out.extend_from_slice(&id.0);
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }
}

/// The entries of a cache file that hash to their names, and whether the whole file was
/// intact (else it is rewritten). Never panics on short or lying input.
fn decode(bytes: &[u8]) -> (HashMap<SnapshotId, Vec<u8>>, bool) {
    let mut entries = HashMap::new();
    let mut rest = bytes;
    let Some(header) = take(&mut rest, 16) else {
        return (entries, false);
    };
    if &header[..8] != MAGIC || u32_at(header, 8) != VERSION {
        return (entries, false);
    }
    let count = u32_at(header, 12);
    let mut intact = true;
    for _ in 0..count {
        let Some(head) = take(&mut rest, 36) else {
            return (entries, false);
        };
        let mut id = [0u8; 32];
        id.copy_from_slice(&head[..32]);
        let Some(body) = take(&mut rest, u32_at(head, 32) as usize) else {
            return (entries, false);
        };
        if ChunkId::of(body).0 == id {
            entries.insert(SnapshotId(id), body.to_vec());
        } else {
            intact = false;
        }
    }
    (entries, intact && rest.is_empty())
}

/// The next `n` bytes of `rest`, if it has them.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if rest.len() < n {
        return None;
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Some(head)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap_file(n: u8) -> (SnapshotId, Vec<u8>) {
        let bytes = vec![n; 100 + n as usize];
        (SnapshotId(ChunkId::of(&bytes).0), bytes)
    }

    #[test]
    fn entries_round_trip_and_only_a_changed_cache_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = SnapshotCache::open(tmp.path());
        assert!(c.is_empty());
        let (a, fa) = snap_file(1);
        let (b, fb) = snap_file(2);
        c.insert(a, fa.clone());
        c.insert(b, fb.clone());
        // Bytes that do not hash to the name are not cached.
        c.insert(SnapshotId([7; 32]), fa.clone());
        c.save();
        let path = tmp.path().join(SNAPSHOT_CACHE_FILE);
        let mut c = SnapshotCache::open(tmp.path());
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&a), Some(fa.as_slice()));
        assert_eq!(c.get(&b), Some(fb.as_slice()));
        std::fs::remove_file(&path).unwrap();
        c.save();
        assert!(!path.exists(), "an unchanged cache is not rewritten");
        c.retain(|id| *id == b);
        c.save();
        let c = SnapshotCache::open(tmp.path());
        assert_eq!((c.len(), c.get(&a).is_none()), (1, true));
    }

    #[test]
    fn a_damaged_entry_is_left_out_and_damaged_files_never_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = SnapshotCache::open(tmp.path());
        let (a, fa) = snap_file(1);
        let (b, fb) = snap_file(2);
        c.insert(a, fa);
        c.insert(b, fb.clone());
        c.save();
        let path = tmp.path().join(SNAPSHOT_CACHE_FILE);
        let good = std::fs::read(&path).unwrap();
        // Ids sort a before b or b before a: flip a byte of the first entry's body.
        let mut bad = good.clone();
        bad[16 + 36 + 5] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let c = SnapshotCache::open(tmp.path());
        assert_eq!(c.len(), 1, "the damaged entry is left out, the other kept");
        assert!(c.changed, "a damaged file is rewritten");
        for cut in 0..good.len() {
            let (entries, intact) = decode(&good[..cut]);
            assert!(!intact && entries.len() <= 2);
        }
        let mut lying = good.clone();
        lying[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(!decode(&lying).1);
        lying[16 + 32..16 + 36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&lying).0.is_empty());
    }
}
