//! The local snapshot cache: the bytes of the repository's snapshot files, kept in one file
//! of the repository's client cache directory ([`SNAPSHOT_CACHE_FILE`]), so that listing the
//! snapshots (every `backup`, to choose its parent; `snapshots`; `latest`) reads one local
//! file instead of every snapshot object (as restic's cache of snapshot files).
//!
//! A snapshot object never changes (its name is the BLAKE3 hash of its file), so an entry
//! stays right for as long as its name is listed; the caller lists the names every time and
//! drops the entries of names no longer listed (a forgotten snapshot). Nothing in the file is
//! trusted: an entry is used only if its checksum holds, else it is left out (and the
//! snapshot read from the repository again); a file that cannot be read or parsed counts as
//! empty (or as the entries before the damage) and is rewritten. New entries are appended
//! (a backup adds its own snapshot: the next listing reads no snapshot file); the file is
//! rewritten whole only when entries go or it was damaged. In an encrypted repository the
//! entries are the snapshots' plaintext, which names the backed-up paths, the host and the
//! tags: the client cache is as private as the client's files (it also holds the chunk index
//! and plaintext delta bases).
//!
//! Format (version 1, little-endian): the 8-byte magic `DDSNAPC\0`, a u32 version, then
//! entries to the end of the file: the 32-byte snapshot id, a u32 length `len`, the XXH3-64
//! of the id and the file, and the `len` bytes of the snapshot file as stored (before
//! sealing).

use crate::format::snapshot::SnapshotId;
use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::Xxh3;

/// The snapshot cache's file name in a repository's cache directory.
pub const SNAPSHOT_CACHE_FILE: &str = "snapshots.cache";

const MAGIC: &[u8; 8] = b"DDSNAPC\0";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 12;
/// An entry's id, length and checksum.
const ENTRY_HEAD_LEN: usize = 44;
/// Longest snapshot file kept (a larger one is read from the repository each time).
const MAX_ENTRY: usize = 64 << 20;

/// The cached snapshot files of one repository (see the module doc).
#[derive(Debug)]
pub struct SnapshotCache {
    path: PathBuf,
    /// The file as read.
    file: Vec<u8>,
    /// Where each good entry of `file` lies.
    entries: HashMap<SnapshotId, Range<usize>>,
    /// Entries added since, to append.
    added: HashMap<SnapshotId, Vec<u8>>,
    /// The file must be written whole: missing, damaged, or entries were dropped.
    rewrite: bool,
}

impl SnapshotCache {
    /// Reads the cache in the cache directory `dir`. A missing, unreadable or damaged file
    /// gives an empty cache (or the entries before the damage) and is rewritten on save; an
    /// entry whose checksum fails is left out.
    pub fn open(dir: &Path) -> Self {
        let path = dir.join(SNAPSHOT_CACHE_FILE);
        let file = std::fs::read(&path).unwrap_or_default();
        let (entries, intact) = decode(&file);
        SnapshotCache {
            path,
            file,
            entries,
            added: HashMap::new(),
            rewrite: !intact,
        }
    }

    /// The cached file of the snapshot `id`.
    pub fn get(&self, id: &SnapshotId) -> Option<&[u8]> {
        match self.entries.get(id) {
            Some(r) => Some(&self.file[r.clone()]),
            None => self.added.get(id).map(Vec::as_slice),
        }
    }

    /// Caches the file of the snapshot `id` (read from the repository and checked against its
    /// name by the caller).
    pub fn insert(&mut self, id: SnapshotId, bytes: Vec<u8>) {
        if bytes.len() <= MAX_ENTRY && !self.entries.contains_key(&id) {
            self.added.insert(id, bytes);
        }
    }

    /// Drops an entry (one that does not decode: the snapshot is read from the repository,
    /// which reports what is wrong with it).
    pub fn remove(&mut self, id: &SnapshotId) {
        self.retain(|i| i != id);
    }

    /// Keeps only the entries `keep` says yes to (the names still listed).
    pub fn retain(&mut self, mut keep: impl FnMut(&SnapshotId) -> bool) {
        let before = self.entries.len();
        self.entries.retain(|id, _| keep(id));
        self.added.retain(|id, _| keep(id));
        self.rewrite |= self.entries.len() != before;
    }

    /// How many snapshots are cached.
    pub fn len(&self) -> usize {
        self.entries.len() + self.added.len()
    }

    /// Whether no snapshot is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes what changed: the added entries appended, or the whole file (temporary file,
    /// rename) when entries went or it was damaged. Best effort, as the cache itself: a
    /// failure only costs the next listing its reads.
    pub fn save(&mut self) {
        if !self.rewrite && self.added.is_empty() {
            return;
        }
        let Some(dir) = self.path.parent().map(Path::to_path_buf) else {
            return;
        };
        if self.rewrite {
            let all = self.encode_all();
            let tmp = dir.join(format!("{SNAPSHOT_CACHE_FILE}.tmp-{}", std::process::id()));
            let written = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&tmp, &all))
                .and_then(|()| std::fs::rename(&tmp, &self.path));
            if written.is_err() {
                let _ = std::fs::remove_file(&tmp);
                return;
            }
            self.entries = decode(&all).0;
            self.file = all;
        } else {
            // One write of whole entries at the end (another process appending at once
            // leaves whole entries too; a torn one fails its checksum).
            let mut out = Vec::new();
            let mut at = Vec::new();
            for (id, bytes) in sorted(&self.added) {
                at.push((*id, push_entry(&mut out, id, bytes)));
            }
            let appended = std::fs::OpenOptions::new()
                .append(true)
                .open(&self.path)
                .and_then(|mut f| f.write_all(&out));
            if appended.is_err() {
                return;
            }
            let base = self.file.len();
            self.file.extend_from_slice(&out);
            for (id, r) in at {
                self.entries.insert(id, base + r.start..base + r.end);
            }
        }
        self.added.clear();
        self.rewrite = false;
    }

    /// Appends the file of the snapshot `id`, just written, to the cache in `dir` without
    /// reading it (a backup's own snapshot: the next listing then reads no snapshot file).
    /// Nothing is done if the cache does not exist yet (the next listing makes it).
    pub fn append(dir: &Path, id: SnapshotId, bytes: &[u8]) {
        if bytes.len() > MAX_ENTRY {
            return;
        }
        let mut out = Vec::with_capacity(ENTRY_HEAD_LEN + bytes.len());
        push_entry(&mut out, &id, bytes);
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(SNAPSHOT_CACHE_FILE))
            .and_then(|mut f| f.write_all(&out));
    }

    fn encode_all(&self) -> Vec<u8> {
        let mut all: HashMap<SnapshotId, &[u8]> = self
            .entries
            .iter()
            .map(|(id, r)| (*id, &self.file[r.clone()]))
            .collect();
        all.extend(self.added.iter().map(|(id, b)| (*id, b.as_slice())));
        let mut out = Vec::with_capacity(
            HEADER_LEN
                + all
                    .values()
                    .map(|b| b.len() + ENTRY_HEAD_LEN)
                    .sum::<usize>(),
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        for (id, bytes) in sorted(&all) {
            push_entry(&mut out, id, bytes);
        }
        out
    }
}

/// The entries of `map` in id order (the file's bytes do not depend on hashing).
fn sorted<B>(map: &HashMap<SnapshotId, B>) -> Vec<(&SnapshotId, &B)> {
    let mut v: Vec<_> = map.iter().collect();
    v.sort_by_key(|(id, _)| **id);
    v
}

/// The checksum of an entry: XXH3-64 of its id and bytes.
fn checksum(id: &SnapshotId, bytes: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(&id.0);
    h.update(bytes);
    h.digest()
}

/// Appends an entry to `out`; returns where its bytes lie in `out`.
fn push_entry(out: &mut Vec<u8>, id: &SnapshotId, bytes: &[u8]) -> Range<usize> {
    out.extend_from_slice(&id.0);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(id, bytes).to_le_bytes());
    let start = out.len();
    out.extend_from_slice(bytes);
    start..out.len()
}

/// Where the good entries' snapshot files lie in the cache file `file`, and whether the whole
/// file was intact (else it is rewritten). Never panics on short or lying input (fuzz target
/// `snapshot_cache`).
pub fn decode(file: &[u8]) -> (HashMap<SnapshotId, Range<usize>>, bool) {
    let mut entries = HashMap::new();
    if file.len() < HEADER_LEN || &file[..8] != MAGIC || u32_at(file, 8) != VERSION {
        return (entries, false);
    }
    let mut at = HEADER_LEN;
    let mut intact = true;
    while at < file.len() {
        let Some(head) = file.get(at..at + ENTRY_HEAD_LEN) else {
            return (entries, false);
        };
        let mut id = SnapshotId([0; 32]);
        id.0.copy_from_slice(&head[..32]);
        let len = u32_at(head, 32) as usize;
        let sum = u64::from_le_bytes(head[36..44].try_into().expect("8 bytes"));
        let start = at + ENTRY_HEAD_LEN;
        let Some(body) = start.checked_add(len).and_then(|end| file.get(start..end)) else {
            return (entries, false);
        };
        if checksum(&id, body) != sum {
            // A damaged entry: its length may be damaged too, so nothing after it is
            // believed.
            return (entries, false);
        }
        // The same entry twice (two clients appended it): kept once, the file rewritten.
        intact &= entries.insert(id, start..start + len).is_none();
        at = start + len;
    }
    (entries, intact)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dedelta_core::ChunkId;

    fn snap_file(n: u8) -> (SnapshotId, Vec<u8>) {
        let bytes = vec![n; 100 + n as usize];
        (SnapshotId(ChunkId::of(&bytes).0), bytes)
    }

    fn cache_with(dir: &Path, files: &[(SnapshotId, Vec<u8>)]) -> SnapshotCache {
        let mut c = SnapshotCache::open(dir);
        for (id, bytes) in files {
            c.insert(*id, bytes.clone());
        }
        c.save();
        c
    }

    /// Entries round-trip; a new one is appended (the file's bytes before it unchanged), a
    /// dropped one rewrites the file; an unchanged cache writes nothing.
    #[test]
    fn entries_round_trip_are_appended_and_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(SNAPSHOT_CACHE_FILE);
        let (a, b, c) = (snap_file(1), snap_file(2), snap_file(3));
        let mut cache = cache_with(tmp.path(), &[a.clone(), b.clone()]);
        assert_eq!(cache.get(&a.0), Some(a.1.as_slice()), "kept after saving");
        let first = std::fs::read(&path).unwrap();
        let reread = SnapshotCache::open(tmp.path());
        assert_eq!((reread.len(), reread.rewrite), (2, false));
        assert_eq!(reread.get(&b.0), Some(b.1.as_slice()));
        cache.insert(c.0, c.1.clone());
        cache.save();
        let second = std::fs::read(&path).unwrap();
        assert_eq!(&second[..first.len()], first.as_slice(), "appended");
        assert_eq!(second.len(), first.len() + ENTRY_HEAD_LEN + c.1.len());
        let mut reread = SnapshotCache::open(tmp.path());
        assert_eq!(reread.get(&c.0), Some(c.1.as_slice()));
        std::fs::remove_file(&path).unwrap();
        reread.save();
        assert!(!path.exists(), "an unchanged cache is not written");
        reread.retain(|id| *id != a.0);
        reread.save();
        let after = SnapshotCache::open(tmp.path());
        assert_eq!((after.len(), after.get(&a.0)), (2, None));
        assert_eq!(after.get(&c.0), Some(c.1.as_slice()));
    }

    /// A damaged entry and everything after it are left out and the file is rewritten; an
    /// entry appended twice is read once; short and lying files never panic.
    #[test]
    fn damaged_entries_are_left_out_and_damaged_files_never_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(SNAPSHOT_CACHE_FILE);
        let files = [snap_file(1), snap_file(2), snap_file(3)];
        cache_with(tmp.path(), &files);
        let good = std::fs::read(&path).unwrap();
        let mut bodies: Vec<Range<usize>> = decode(&good).0.into_values().collect();
        bodies.sort_by_key(|r| r.start);
        let mut bad = good.clone();
        bad[bodies[1].start + 10] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let mut c = SnapshotCache::open(tmp.path());
        assert_eq!(
            (c.len(), c.rewrite),
            (1, true),
            "only the entry before the damage"
        );
        for (id, bytes) in &files {
            c.insert(*id, bytes.clone());
        }
        c.save();
        assert_eq!(std::fs::read(&path).unwrap(), good, "rewritten whole");
        let mut twice = good.clone();
        twice.extend_from_slice(&good[HEADER_LEN..bodies[0].end]);
        let (entries, intact) = decode(&twice);
        assert_eq!((entries.len(), intact), (3, false));
        // A file cut at an entry's end reads as the entries before (and whole); anywhere
        // else as the entries before the cut, damaged.
        for cut in 0..good.len() {
            let (entries, intact) = decode(&good[..cut]);
            let whole = bodies.iter().filter(|r| r.end <= cut).count();
            assert_eq!(entries.len(), whole, "cut at {cut}");
            let at_end = cut == HEADER_LEN || bodies.iter().any(|r| r.end == cut);
            assert_eq!(intact, at_end, "cut at {cut}");
        }
        let mut lying = good.clone();
        lying[HEADER_LEN + 32..HEADER_LEN + 36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&lying), (HashMap::new(), false));
        assert_eq!(decode(b"DDSNAPC\0\x02\0\0\0"), (HashMap::new(), false));
    }
}
