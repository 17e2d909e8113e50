//! The local base cache: the bases and new full chunks of the last backup, kept on the
//! client's disk between backups.
//!
//! Why: a new chunk's DupAdj candidate is the chunk at the same place in the previous
//! snapshot, and when that one is a delta its base is the base the previous backup used, so
//! consecutive backups keep needing the same bases. Read back from the repository each one
//! costs the decompression of a whole region (for a SQLAlchemy release: ~72 MB of regions for
//! 14 MB of bases, the largest single cost of a delta backup); from this file it costs one
//! read.
//!
//! Like restic's cache it is local, optional and never trusted: the delta stage uses an entry
//! only for a base that the index holds as a full chunk, and only if its bytes hash to that
//! base's fingerprint. A missing, stale or damaged file costs speed, never correctness. The
//! file is replaced (temporary file, rename) at the end of each backup; it is not fsynced,
//! since a torn file is rejected or its entries fail their fingerprint. Format: see
//! docs/format.md, "Local base cache".

use dedelta_core::fingerprint::CHUNK_ID_LEN;
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File magic.
pub const MAGIC: &[u8; 8] = b"DDBCACHE";
/// Format version.
pub const VERSION: u32 = 1;
/// Magic, version and entry count.
const HEAD_LEN: usize = 16;
/// Fingerprint, offset (u64) and length (u32) of one entry.
const ENTRY_LEN: usize = CHUNK_ID_LEN + 12;
/// Default size budget of the file's entries.
pub const DEFAULT_BYTES: usize = 32 << 20;

/// Why a cache file was not used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The file could not be read or written.
    #[error("local base cache {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a cache file of this version, or is damaged.
    #[error("local base cache {path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Where each entry's bytes are, by fingerprint.
pub type CacheIndex = HashMap<ChunkId, (u64, u32)>;

/// How many bytes of the file's start hold the header and index, given its first
/// [`HEAD_LEN`] bytes and the file's length.
///
/// # Errors
/// A reason when the magic, version or entry count is wrong.
pub fn header_len(head: &[u8], file_len: u64) -> Result<usize, String> {
    if head.len() < HEAD_LEN || &head[..8] != MAGIC {
        return Err("not a dedelta base cache".into());
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!("version {version}, expected {VERSION}"));
    }
    let count = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) as u64;
    let len = HEAD_LEN as u64 + count * ENTRY_LEN as u64 + 4;
    if len > file_len {
        return Err(format!("{count} entries do not fit in {file_len} bytes"));
    }
    Ok(len as usize)
}

/// Decodes the header and index (the first [`header_len`] bytes of a file of `file_len`
/// bytes): checks the CRC32C and that every entry lies within the file after the index.
///
/// # Errors
/// A reason for anything inconsistent; never panics on any input.
pub fn decode_index(bytes: &[u8], file_len: u64) -> Result<CacheIndex, String> {
    let len = header_len(bytes, file_len)?;
    if bytes.len() < len {
        return Err("index truncated".into());
    }
    let (body, crc) = bytes[..len].split_at(len - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("index fails its checksum".into());
    }
    let mut index = CacheIndex::new();
    for e in body[HEAD_LEN..].chunks_exact(ENTRY_LEN) {
        let id = ChunkId(e[..CHUNK_ID_LEN].try_into().expect("32 bytes"));
        let offset = u64::from_le_bytes(e[32..40].try_into().expect("8 bytes"));
        let n = u32::from_le_bytes(e[40..44].try_into().expect("4 bytes"));
        let end = offset.checked_add(u64::from(n));
        if offset < len as u64 || end.is_none_or(|end| end > file_len) {
            return Err(format!("entry at offset {offset} lies outside the file"));
        }
        index.insert(id, (offset, n));
    }
    Ok(index)
}

/// An open cache file.
pub struct LocalBaseCache {
    path: PathBuf,
    file: File,
    index: CacheIndex,
}

impl LocalBaseCache {
    /// Opens the cache file at `path`; `Ok(None)` if there is none.
    ///
    /// # Errors
    /// [`CacheError`] if it cannot be read or is not a valid cache file.
    pub fn open(path: &Path) -> Result<Option<Self>, CacheError> {
        let io = |source| CacheError::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let file_len = file.metadata().map_err(io)?.len();
        let malformed = |reason| CacheError::Malformed {
            path: path.to_owned(),
            reason,
        };
        let mut head = [0u8; HEAD_LEN];
        file.read_exact(&mut head)
            .map_err(|_| malformed("shorter than its header".into()))?;
        let len = header_len(&head, file_len).map_err(malformed)?;
        let mut bytes = vec![0u8; len];
        bytes[..HEAD_LEN].copy_from_slice(&head);
        file.read_exact(&mut bytes[HEAD_LEN..]).map_err(io)?;
        let index = decode_index(&bytes, file_len).map_err(malformed)?;
        Ok(Some(LocalBaseCache {
            path: path.to_owned(),
            file,
            index,
        }))
    }

    /// Entries not taken yet.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no entry is left.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Takes the bytes of `id` out of the cache, if present, readable and fingerprinted `id`.
    pub fn take(&mut self, id: &ChunkId) -> Option<Vec<u8>> {
        let (offset, len) = self.index.remove(id)?;
        let bytes = self.read(offset, len).ok()?;
        (ChunkId::of(&bytes) == *id).then_some(bytes)
    }

    fn read(&mut self, offset: u64, len: u32) -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0u8; len as usize];
        self.file.seek(SeekFrom::Start(offset))?;
        self.file.read_exact(&mut bytes)?;
        Ok(bytes)
    }

    /// Writes a new cache file at `path`: `fresh` entries first (most useful first), then the
    /// entries of `old` that were not taken, as long as they fit in `budget` bytes.
    ///
    /// # Errors
    /// [`CacheError::Io`] if the file cannot be written; the previous file is then left as
    /// it was.
    pub fn save(
        path: &Path,
        fresh: impl IntoIterator<Item = (ChunkId, Arc<Vec<u8>>)>,
        mut old: Option<&mut LocalBaseCache>,
        budget: usize,
    ) -> Result<(), CacheError> {
        enum Source {
            Fresh(Arc<Vec<u8>>),
            Old(u64),
        }
        let mut chosen: Vec<(ChunkId, u32, Source)> = Vec::new();
        let mut seen = HashSet::new();
        let mut used = 0usize;
        for (id, bytes) in fresh {
            if used + bytes.len() > budget {
                break;
            }
            if seen.insert(id) {
                used += bytes.len();
                chosen.push((id, bytes.len() as u32, Source::Fresh(bytes)));
            }
        }
        if let Some(old) = old.as_deref() {
            // In file order, so that copying them reads the old file forward.
            let mut rest: Vec<_> = old
                .index
                .iter()
                .filter(|(id, _)| !seen.contains(*id))
                .collect();
            rest.sort_by_key(|(_, (offset, _))| *offset);
            for (id, &(offset, len)) in rest {
                if used + len as usize > budget {
                    break;
                }
                used += len as usize;
                chosen.push((*id, len, Source::Old(offset)));
            }
        }
        let io = |source| CacheError::Io {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let mut write = || -> std::io::Result<()> {
            let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
            let mut head = Vec::with_capacity(HEAD_LEN + chosen.len() * ENTRY_LEN + 4);
            head.extend_from_slice(MAGIC);
            head.extend_from_slice(&VERSION.to_le_bytes());
            head.extend_from_slice(&(chosen.len() as u32).to_le_bytes());
            let mut offset = (HEAD_LEN + chosen.len() * ENTRY_LEN + 4) as u64;
            for (id, len, _) in &chosen {
                head.extend_from_slice(id.as_bytes());
                head.extend_from_slice(&offset.to_le_bytes());
                head.extend_from_slice(&len.to_le_bytes());
                offset += u64::from(*len);
            }
            let crc = crc32c::crc32c(&head);
            head.extend_from_slice(&crc.to_le_bytes());
            w.write_all(&head)?;
            for (_, len, source) in &chosen {
                match source {
                    Source::Fresh(bytes) => w.write_all(bytes)?,
                    Source::Old(offset) => {
                        let old = old.as_deref_mut().expect("old entries come from old");
                        w.write_all(&old.read(*offset, *len)?)?;
                    }
                }
            }
            w.into_inner().map_err(|e| e.into_error())?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }

    /// The file this cache was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u8, len: usize) -> (ChunkId, Arc<Vec<u8>>) {
        let bytes = vec![n; len];
        (ChunkId::of(&bytes), Arc::new(bytes))
    }

    #[test]
    fn saves_reopens_and_carries_untaken_entries_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/bases");
        assert!(LocalBaseCache::open(&path).unwrap().is_none());
        let (a, b, c) = (entry(1, 100), entry(2, 200), entry(3, 300));
        LocalBaseCache::save(&path, [a.clone(), b.clone()], None, 1 << 20).unwrap();
        let mut old = LocalBaseCache::open(&path).unwrap().unwrap();
        assert_eq!(old.len(), 2);
        assert_eq!(old.take(&a.0).as_deref(), Some(a.1.as_slice()));
        assert!(old.take(&a.0).is_none(), "taken once");
        // c is fresh; b was not taken and is carried over; the budget leaves a out.
        LocalBaseCache::save(&path, [c.clone()], Some(&mut old), 500).unwrap();
        let mut new = LocalBaseCache::open(&path).unwrap().unwrap();
        assert_eq!(new.len(), 2);
        assert_eq!(new.take(&c.0).as_deref(), Some(c.1.as_slice()));
        assert_eq!(new.take(&b.0).as_deref(), Some(b.1.as_slice()));
    }

    #[test]
    fn damaged_files_are_rejected_or_their_entries_fail_their_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bases");
        let a = entry(7, 1000);
        LocalBaseCache::save(&path, [a.clone()], None, 1 << 20).unwrap();
        let good = std::fs::read(&path).unwrap();
        // A flipped data byte: the file opens, the entry is refused.
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let mut cache = LocalBaseCache::open(&path).unwrap().unwrap();
        assert!(cache.take(&a.0).is_none());
        // A flipped index byte, a truncated file, garbage: not opened.
        for bad in [
            {
                let mut b = good.clone();
                b[HEAD_LEN + 3] ^= 1;
                b
            },
            good[..good.len() - 1].to_vec(),
            good[..10].to_vec(),
            b"garbage".to_vec(),
        ] {
            std::fs::write(&path, &bad).unwrap();
            assert!(matches!(
                LocalBaseCache::open(&path),
                Err(CacheError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn decode_index_never_panics_on_short_or_lying_input() {
        for n in 0..64 {
            let mut b = vec![0u8; n];
            if n >= 16 {
                b[..8].copy_from_slice(MAGIC);
                b[8..12].copy_from_slice(&VERSION.to_le_bytes());
                b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
            }
            assert!(decode_index(&b, n as u64).is_err());
            assert!(decode_index(&b, u64::MAX).is_err());
        }
    }
}
