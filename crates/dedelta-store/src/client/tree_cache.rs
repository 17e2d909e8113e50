//! The local tree cache: the tree chunks of the last snapshots this client wrote, kept so
//! that its next backup finds its parent's tree without reading it.
//!
//! Why: a backup reads its parent's tree first (which files are unchanged, DupAdj's recipe,
//! the bases of the new tree's chunks). From the repository that is the tree's regions and,
//! down their delta chains, the parent's parent's: on an object store a round of requests
//! before the first file is read (45-60 ms on the Garage benchmark, where a round often
//! stalls in the cluster), and on any backend their decompression. The tree was in this
//! client's memory when it wrote it.
//!
//! Like the other client caches it is never trusted: a file is used only if it decodes, its
//! XXH3 matches, and every chunk hashes to the fingerprint the snapshot names for it (with
//! the repository's chunk hasher, keyed for an encrypted repository), else the tree is read
//! from the repository. A file is named by a hash of the tree's chunk ids, so it serves
//! whichever snapshot has that tree. At most [`TREE_CACHE_FILES`] files are kept (the most
//! recently written), each at most [`TREE_CACHE_MAX_BYTES`] of tree; nothing is fsynced (a
//! lost file costs a read). Like the local base cache it holds repository data in clear:
//! the cache directory is the user's. Format: see docs/format.md, "Local tree cache".

use bytes::Bytes;
use dedelta_core::fingerprint::ChunkHasher;
use dedelta_core::ChunkId;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

/// The cache's directory in a repository's cache directory.
pub const TREE_CACHE_DIR: &str = "trees";
/// How many trees are kept: the parents of a client's next backups of a few path sets.
pub const TREE_CACHE_FILES: usize = 4;
/// The largest tree kept (a tree of some 1.5 million files' records); a larger one is read
/// from the repository, and a backup does not hold more than this of its tree to keep it.
pub const TREE_CACHE_MAX_BYTES: usize = 64 << 20;
/// A file's first bytes, then a u16 LE version.
const MAGIC: &[u8; 6] = b"DDTREE";
const VERSION: u16 = 1;

/// The tree cache of one repository (see the module doc).
#[derive(Clone, Debug)]
pub struct TreeCache {
    dir: PathBuf,
}

impl TreeCache {
    /// The cache in the repository cache directory `repo_dir` (created when first written).
    pub fn new(repo_dir: &Path) -> Self {
        TreeCache {
            dir: repo_dir.join(TREE_CACHE_DIR),
        }
    }

    /// The file of the tree made of `ids`: the first 16 bytes of BLAKE3 over the ids, in hex.
    fn path(&self, ids: &[ChunkId]) -> PathBuf {
        let all: Vec<u8> = ids.iter().flat_map(|id| id.as_bytes()).copied().collect();
        let name = ChunkId::of(&all).to_hex();
        self.dir.join(&name[..32])
    }

    /// The chunks of the tree `ids` (in order), if a file holds them and each hashes to its
    /// id with `hasher`.
    pub fn get(&self, ids: &[ChunkId], hasher: &ChunkHasher) -> Option<Vec<Bytes>> {
        if ids.is_empty() {
            return None;
        }
        let chunks = decode(Bytes::from(std::fs::read(self.path(ids)).ok()?))?;
        let matches =
            chunks.len() == ids.len() && chunks.iter().zip(ids).all(|(c, id)| hasher.id(c) == *id);
        matches.then_some(chunks)
    }

    /// Keeps the tree `chunks` (whose ids are `ids`), then removes all but the
    /// [`TREE_CACHE_FILES`] most recently written trees. Best effort: a failure only costs
    /// the next backup a read.
    pub fn put(&self, ids: &[ChunkId], chunks: &[Bytes]) {
        let len: usize = chunks.iter().map(Bytes::len).sum();
        if ids.is_empty() || ids.len() != chunks.len() || len > TREE_CACHE_MAX_BYTES {
            return;
        }
        let path = self.path(ids);
        if std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let bytes = encode(chunks);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("tree");
        let tmp = self.dir.join(format!(".{name}.tmp-{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_err() || std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
            return;
        }
        self.trim(TREE_CACHE_FILES);
    }

    /// Removes all but the `keep` most recently written files (and any temporary file).
    fn trim(&self, keep: usize) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        files.sort();
        let n = files.len();
        for (_, path) in files.into_iter().take(n.saturating_sub(keep)) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A cache file: magic, version, the chunk count (u32), each chunk's length (u32) and
/// bytes, then the XXH3-64 of everything before it (u64); little-endian.
fn encode(chunks: &[Bytes]) -> Vec<u8> {
    let len: usize = chunks.iter().map(|c| c.len() + 4).sum();
    let mut out = Vec::with_capacity(MAGIC.len() + 2 + 4 + len + 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
    for c in chunks {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
        out.extend_from_slice(c);
    }
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The chunks a cache file holds, `None` unless it is whole and its checksum matches (never
/// panics, whatever the bytes: fuzz target `tree_cache`).
pub fn decode(bytes: Bytes) -> Option<Vec<Bytes>> {
    let body_len = bytes.len().checked_sub(8)?;
    let sum = u64::from_le_bytes(bytes[body_len..].try_into().ok()?);
    if xxh3_64(&bytes[..body_len]) != sum {
        return None;
    }
    let rest = bytes[..body_len].strip_prefix(MAGIC.as_slice())?;
    if u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) != VERSION {
        return None;
    }
    let count = u32::from_le_bytes(rest.get(2..6)?.try_into().ok()?) as usize;
    let mut at = MAGIC.len() + 6;
    // Every chunk takes at least its length's 4 bytes: a count beyond that is a lie.
    if count > (body_len - at) / 4 {
        return None;
    }
    let mut chunks = Vec::with_capacity(count);
    for _ in 0..count {
        let len_bytes = bytes.get(at..at + 4)?;
        let len = u32::from_le_bytes(len_bytes.try_into().ok()?) as usize;
        let start = at + 4;
        let end = start.checked_add(len).filter(|&e| e <= body_len)?;
        chunks.push(bytes.slice(start..end));
        at = end;
    }
    (at == body_len).then_some(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(seed: u8, n: usize) -> (Vec<ChunkId>, Vec<Bytes>) {
        let chunks: Vec<Bytes> = (0..n)
            .map(|i| Bytes::from(vec![seed.wrapping_add(i as u8); 100 + i * 7]))
            .collect();
        let ids = chunks.iter().map(|c| ChunkHasher::Plain.id(c)).collect();
        (ids, chunks)
    }

    #[test]
    fn a_kept_tree_comes_back_and_damage_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = TreeCache::new(tmp.path());
        let (ids, chunks) = tree(1, 5);
        assert!(cache.get(&ids, &ChunkHasher::Plain).is_none());
        cache.put(&ids, &chunks);
        assert_eq!(cache.get(&ids, &ChunkHasher::Plain), Some(chunks.clone()));
        // Another hasher (a keyed repository's): the ids do not match.
        let keyed = ChunkHasher::Keyed([7; 32]);
        assert!(cache.get(&ids, &keyed).is_none());
        // Any byte changed, or the file cut short: not used.
        let path = cache.path(&ids);
        let good = std::fs::read(&path).unwrap();
        for at in [0, 7, 9, 12, good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            std::fs::write(&path, &bad).unwrap();
            assert!(cache.get(&ids, &ChunkHasher::Plain).is_none(), "byte {at}");
        }
        for len in [0, 5, 13, good.len() - 1] {
            std::fs::write(&path, &good[..len]).unwrap();
            assert!(
                cache.get(&ids, &ChunkHasher::Plain).is_none(),
                "cut to {len}"
            );
        }
        // A whole file of other chunks under this name (its checksum right): ids differ.
        let (_, others) = tree(2, 5);
        std::fs::write(&path, encode(&others)).unwrap();
        assert!(cache.get(&ids, &ChunkHasher::Plain).is_none());
    }

    #[test]
    fn only_the_newest_trees_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = TreeCache::new(tmp.path());
        let trees: Vec<_> = (0..TREE_CACHE_FILES as u8 + 2)
            .map(|s| tree(s * 10, 3))
            .collect();
        for (i, (ids, chunks)) in trees.iter().enumerate() {
            cache.put(ids, chunks);
            let t = std::time::SystemTime::UNIX_EPOCH
                + std::time::Duration::from_secs(1000 * (i as u64 + 1));
            let f = std::fs::File::options()
                .write(true)
                .open(cache.path(ids))
                .unwrap();
            f.set_modified(t).unwrap();
        }
        cache.trim(TREE_CACHE_FILES);
        let kept: Vec<bool> = trees
            .iter()
            .map(|(ids, _)| cache.get(ids, &ChunkHasher::Plain).is_some())
            .collect();
        assert_eq!(kept, vec![false, false, true, true, true, true]);
    }

    #[test]
    fn decode_rejects_lying_counts_and_lengths() {
        let (_, chunks) = tree(3, 2);
        let good = encode(&chunks);
        assert_eq!(decode(Bytes::from(good.clone())), Some(chunks));
        let reseal = |mut body: Vec<u8>| {
            body.truncate(body.len() - 8);
            let sum = xxh3_64(&body);
            body.extend_from_slice(&sum.to_le_bytes());
            Bytes::from(body)
        };
        for (at, v) in [(8usize, u32::MAX), (8, 3), (12, u32::MAX), (12, 1)] {
            let mut bad = good.clone();
            bad[at..at + 4].copy_from_slice(&v.to_le_bytes());
            assert!(decode(reseal(bad)).is_none(), "{at} = {v}");
        }
    }
}
