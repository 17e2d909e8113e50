//! The local base cache: the bases and new full chunks of the last backups, kept on the
//! client's disk between backups.
//!
//! Why: a new chunk's DupAdj candidate is the chunk at the same place in the previous
//! snapshot, and when that one is a delta its base is the base the previous backup used, so
//! consecutive backups keep needing the same bases. Read back from the repository each one
//! costs the decompression of a whole region (for a SQLAlchemy release: ~72 MB of regions for
//! 14 MB of bases, the largest single cost of a delta backup); from this cache it costs one
//! read.
//!
//! Two files per repository: an append-only data file, `bases.<generation>`, and a small
//! index, `bases.idx`, naming the generation and where each entry lies. Since the same bases
//! serve many backups in a row, a backup appends only the entries the cache did not have
//! (about 1 MB per SQLAlchemy release) and replaces the index; the data file is rewritten
//! (a new generation) only when dead entries make it twice the budget.
//!
//! Like restic's cache it is local, optional and never trusted: the delta stage uses an entry
//! only for a base that the index holds, and only if its bytes still hash to the 64-bit XXH3
//! recorded when they were written (bytes that were the chunk's: the save writes only chunks
//! this or an earlier backup verified). A missing, stale or damaged cache costs speed, never
//! correctness, so nothing is fsynced. Format: see docs/format.md, "Local base cache".
//!
//! Why XXH3 and not the chunk's fingerprint: the BLAKE3 check cost 2.5 % of a SQLAlchemy
//! backup's CPU (the whole cache is read back per version), XXH3 a tenth of that, and a
//! keyed fingerprint (encrypted repositories) would need the key here.
//!
//! The data file is memory-mapped and entries are handed out as slices of the mapping: copied
//! into fresh heap memory instead, the kernel's zeroing of those pages cost as much as the
//! reads themselves. dedelta only ever appends to a data file or replaces it with a new one
//! (written under a temporary name and renamed: two processes may write the same generation),
//! never truncates it, so the mapping stays valid (as with ripgrep, a file truncated by
//! another program while mapped would end the process).
//!
//! Dead entries are never punched out of a data file in place (`fallocate(PUNCH_HOLE)`):
//! entries are handed out as slices of the mapping, verified once, and a save running beside
//! a backup (another process, or a crashed backup's saving thread) would zero bytes a delta is
//! being encoded against, after their check. Tried on 2026-11-24 (1 % of a backup's CPU); the
//! campaign test caught restores failing on such deltas.

mod index;

pub use index::{CacheIndex, Extent, MAGIC, VERSION};

use crate::client::index::LayoutMark;
use bytes::Bytes;
use dedelta_core::BuildChunkIdHasher;
use dedelta_core::ChunkId;
use memmap2::Mmap;
use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Write};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

/// Default size budget of the live entries. With delta chains a version's candidates are the
/// previous versions' chunks, which a cache holding little more than the last backup's new
/// chunks misses: 20 SQLAlchemy sdists (about 22 MB of new chunks each) read 6,786 bases back
/// from the repository with 32 MiB, 4,379 with 64 MiB and 2,486 with 128 MiB, for 4.50, 4.46
/// and 4.26 s of backup CPU (docs/benchmarks.md §6, "Meeting the size targets"). Measured
/// again on 2026-11-28, when the rest of a backup had become faster, 128 MiB against 64: the
/// 20 sdists' backups 641-646 MB/s against 561-566 (CPU 3.5 s against 3.94), 10 Redis dumps'
/// 2.94 s inside the commands against 3.32-3.68 (bases spread over every earlier dump), for a
/// data file of up to 256 MiB on the client's disk (docs/benchmarks.md, "The local base
/// cache doubled"). Doubled again on 2026-11-29 with the base cache's share for new chunks
/// (`backup::base_cache`): the 10 Redis dumps' backups 2.96 s against 3.43 (bases read back
/// from the repository 851 against 1,989 at the tenth), the 20 SQLAlchemy tars' 3.07 s
/// against 3.27, for a data file of up to 512 MiB (docs/benchmarks.md, "The local base cache
/// holds a whole version").
pub const DEFAULT_BYTES: usize = 256 << 20;
/// The index file's name.
const INDEX_FILE: &str = "bases.idx";

/// Why the cache was not used or not written.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A file could not be read or written. The cause is in the message only (a field named
    /// `source` would also be the error's `source()`, and a printed chain would repeat it).
    #[error("local base cache {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        cause: std::io::Error,
    },
    /// The index is not of this version, or is damaged, or does not fit its data file.
    #[error("local base cache {path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn data_file_name(generation: u64) -> String {
    format!("bases.{generation:016x}")
}

/// An open cache: its index and mapped data file.
pub struct LocalBaseCache {
    generation: u64,
    /// The layout the entries' depths hold under.
    mark: LayoutMark,
    /// The data file as long as it was when opened (every entry lies within it).
    data: Bytes,
    entries: HashMap<ChunkId, Extent, BuildChunkIdHasher>,
}

impl LocalBaseCache {
    /// Opens the cache in directory `dir`; `Ok(None)` if there is none.
    ///
    /// # Errors
    /// [`CacheError`] if it cannot be read or its index is invalid.
    pub fn open(dir: &Path) -> Result<Option<Self>, CacheError> {
        let index_path = dir.join(INDEX_FILE);
        let bytes = match std::fs::read(&index_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(cause) => {
                return Err(CacheError::Io {
                    path: index_path,
                    cause,
                })
            }
        };
        let malformed = |reason| CacheError::Malformed {
            path: index_path.clone(),
            reason,
        };
        let index = CacheIndex::decode(&bytes).map_err(malformed)?;
        let data_path = dir.join(data_file_name(index.generation));
        let io = |cause| CacheError::Io {
            path: data_path.clone(),
            cause,
        };
        let file = File::open(&data_path).map_err(io)?;
        let data_len = file.metadata().map_err(io)?.len();
        index.check_within(data_len).map_err(malformed)?;
        let data = if data_len == 0 {
            Bytes::new()
        } else {
            // SAFETY: dedelta never truncates a data file (see the module documentation).
            Bytes::from_owner(unsafe { Mmap::map(&file) }.map_err(io)?)
        };
        Ok(Some(LocalBaseCache {
            generation: index.generation,
            mark: index.mark,
            data,
            entries: index.entries.into_iter().collect(),
        }))
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The index layout under which the entries' depths hold.
    pub fn mark(&self) -> LayoutMark {
        self.mark
    }

    /// Forgets every entry's depth: the index no longer keeps the layout they hold under
    /// (see [`LayoutMark`]).
    pub fn forget_depths(&mut self) {
        for x in self.entries.values_mut() {
            x.depth = None;
        }
    }

    /// The recorded delta depth of `id`'s indexed copy, if known (see [`Extent::depth`]).
    pub fn depth_of(&self, id: &ChunkId) -> Option<u8> {
        self.entries.get(id)?.depth
    }

    /// Whether an entry for `id` is held (not yet checked against its XXH3).
    pub fn contains(&self, id: &ChunkId) -> bool {
        self.entries.contains_key(id)
    }

    /// The bytes of `id`, if present and still hashing to the XXH3 recorded when they were
    /// written. An entry that fails is dropped, so that the next save writes the chunk afresh.
    pub fn get(&mut self, id: &ChunkId) -> Option<Bytes> {
        let x = *self.entries.get(id)?;
        let bytes = self.slice(x);
        if xxh3_64(&bytes) == x.xxh3 {
            Some(bytes)
        } else {
            self.entries.remove(id);
            None
        }
    }

    /// An entry's bytes (within the mapping: checked at open).
    fn slice(&self, x: Extent) -> Bytes {
        self.data
            .slice(x.offset as usize..x.offset as usize + x.len as usize)
    }

    /// Updates the cache in `dir` to hold `fresh` (most useful first), then as many of
    /// `old`'s other entries as fit in `budget` bytes. Entries `old` already has are not
    /// written again: only the others are appended to its data file, and the index is
    /// replaced (temporary file, rename). When the data file would grow past twice the
    /// budget, or there is no `old`, a new data file holding just the live entries is
    /// written instead and the previous one removed.
    ///
    /// # Errors
    /// [`CacheError::Io`] if a file cannot be written; the index then still describes a
    /// consistent cache (possibly with unused bytes at the end of its data file).
    pub fn save(
        dir: &Path,
        fresh: impl IntoIterator<Item = (ChunkId, Bytes)>,
        old: Option<&LocalBaseCache>,
        budget: usize,
    ) -> Result<(), CacheError> {
        let fresh = fresh.into_iter().map(|(id, bytes)| (id, bytes, None));
        Self::save_preferring(dir, fresh, old, budget, |_| false, || None)
    }

    /// [`Self::save`], taking first, of `old`'s other entries, those `current` names: the
    /// chunks the backup met as duplicates, which are in its snapshot and so the next
    /// version's DupAdj bases when they change. Without it the old entries went in file
    /// order, and a chunk unchanged for some versions aged out of the cache while still
    /// current: from the seventh of the 10 Redis dumps on, 679-851 bases a backup read back
    /// from the repository were such chunks (DupAdj candidates one to seven versions old).
    ///
    /// Each `fresh` entry has its delta depth if known (0: stored in full, see
    /// [`Extent::full`] and [`Extent::depth`]). Depths are written only under the layout
    /// `mark` returns, which it is asked for once the data file is written: the backup's
    /// mark from before it changed the index, given once its snapshot is committed (a backup
    /// that failed gives `None`, and every depth is written unknown: its last containers may
    /// never have been stored, and another copy of those chunks indexed later would have
    /// other depths). Old entries keep the depths they have ([`Self::forget_depths`] when
    /// the index no longer keeps their mark). After
    /// the current chunks come the old entries of chunks stored in full, then the others:
    /// chunks in full are the roots of every delta chain and the only chunks the sketch
    /// index names, so a chunk that DupAdj's base leaves in full (a delta above the
    /// re-anchoring bound) is tried against one of them next, however old. Kept in file order
    /// with the rest, they aged out: on a 30-version Redis series the backups read 350-416
    /// such candidates back from the repository per version from the twenty-second on (a
    /// whole region each, 0.2 s of a 0.7 s backup); kept first, 0-3.
    pub fn save_preferring<Old: Borrow<LocalBaseCache> + Send>(
        dir: &Path,
        fresh: impl IntoIterator<Item = (ChunkId, Bytes, Option<u8>)>,
        old: Option<Old>,
        budget: usize,
        current: impl Fn(&ChunkId) -> bool,
        mark: impl FnOnce() -> Option<LayoutMark>,
    ) -> Result<(), CacheError> {
        /// Where a chosen entry's bytes come from.
        enum Source {
            New(Bytes),
            Old(Extent),
        }
        // Each chosen entry with whether its chunk is stored in full and its depth if known.
        let mut chosen: Vec<(ChunkId, Source, bool, Option<u8>)> = Vec::new();
        let mut seen: HashSet<ChunkId, BuildChunkIdHasher> = HashSet::default();
        let mut used = 0usize;
        let mut added = 0u64;
        let len_of = |s: &Source| match s {
            Source::New(b) => b.len(),
            Source::Old(x) => x.len as usize,
        };
        // `old` itself is needed again only to be dropped or read (see below).
        let old_ref: Option<&LocalBaseCache> = old.as_ref().map(Borrow::borrow);
        for (id, bytes, depth) in fresh {
            let source = match old_ref.and_then(|o| o.entries.get(&id)) {
                Some(x) => Source::Old(*x),
                None => Source::New(bytes),
            };
            if used + len_of(&source) > budget {
                break;
            }
            if seen.insert(id) {
                used += len_of(&source);
                if let Source::New(b) = &source {
                    added += b.len() as u64;
                }
                chosen.push((id, source, depth == Some(0), depth));
            }
        }
        if let Some(old) = old_ref {
            // The current chunks first, then chunks stored in full; each group in file
            // order, so that a rewrite reads the old file forward. The key is computed once
            // per entry, not per comparison (`current` is a set lookup): this choice took
            // 9-12 ms of the save's 30 on a Redis dump's backup, 3-7 ms now.
            let mut rest: Vec<_> = old
                .entries
                .iter()
                .filter(|(id, _)| !seen.contains(*id))
                .map(|(id, x)| ((!current(id), !x.full), x.offset, id, x))
                .collect();
            rest.sort_unstable_by_key(|&(later, offset, _, _)| (later, offset));
            for (_, _, id, x) in rest {
                if used + x.len as usize > budget {
                    break;
                }
                used += x.len as usize;
                chosen.push((*id, Source::Old(*x), x.full, x.depth));
            }
        }
        std::fs::create_dir_all(dir).map_err(|cause| CacheError::Io {
            path: dir.to_owned(),
            cause,
        })?;

        // Append to the old data file, or write a new one.
        let append = old_ref.is_some_and(|o| o.data.len() as u64 + added <= 2 * budget as u64);
        let generation = match old_ref {
            Some(o) if append => o.generation,
            o => o.map_or(1, |o| o.generation.wrapping_add(1)),
        };
        let data_path = dir.join(data_file_name(generation));
        let new_data_tmp = dir.join(format!(
            "{}.tmp-{}",
            data_file_name(generation),
            std::process::id()
        ));
        let io = |path: &Path| {
            let path = path.to_owned();
            move |cause| CacheError::Io { path, cause }
        };
        let write_data = |old: Option<&LocalBaseCache>| -> std::io::Result<Vec<(ChunkId, Extent)>> {
            let (mut file, mut offset) = if append {
                let file = OpenOptions::new().append(true).open(&data_path)?;
                let len = file.metadata()?.len();
                (file, len)
            } else {
                // A new file under a temporary name, renamed into place below: another
                // process saving beside this one (each on its own copy of the index) may
                // create the same generation, and truncating a data file a third process
                // has mapped would fault its reads.
                (File::create(&new_data_tmp)?, 0)
            };
            let mut entries = Vec::with_capacity(chosen.len());
            let mut batch = WriteBatch::default();
            for (id, source, full, depth) in &chosen {
                let (full, depth) = (*full, *depth);
                let (bytes, xxh3) = match source {
                    // Already in the data file being appended to.
                    Source::Old(x) if append => {
                        entries.push((*id, Extent { full, depth, ..*x }));
                        continue;
                    }
                    Source::Old(x) => {
                        let old = old.expect("old entries come from old");
                        (old.slice(*x), x.xxh3)
                    }
                    Source::New(b) => (b.clone(), xxh3_64(b)),
                };
                let len = bytes.len() as u32;
                entries.push((
                    *id,
                    Extent {
                        offset,
                        len,
                        xxh3,
                        full,
                        depth,
                    },
                ));
                offset += u64::from(len);
                batch.push(&mut file, bytes)?;
            }
            batch.flush(&mut file)?;
            if !append {
                std::fs::rename(&new_data_tmp, &data_path)?;
            }
            Ok(entries)
        };
        // Appending, the old cache is needed no more: it is dropped beside the write, since
        // unmapping its data file took 8 ms of a Redis dump's backup, at its end, where it
        // waited on the write (33 samples at 4 kHz after the write's 48).
        let (old, dropped) = if append { (None, old) } else { (old, None) };
        let written = std::thread::scope(|s| {
            if let Some(dropped) = dropped.filter(|_| std::mem::needs_drop::<Old>()) {
                // Could the thread not start, the closure and so `dropped` go here.
                let _ = std::thread::Builder::new().spawn_scoped(s, move || drop(dropped));
            }
            write_data(old.as_ref().map(Borrow::borrow))
        });
        let mut entries = written.map_err(|e| {
            let _ = std::fs::remove_file(&new_data_tmp);
            io(&data_path)(e)
        })?;
        let mark = mark();
        if mark.is_none() {
            for (_, x) in &mut entries {
                x.depth = None;
            }
        }
        let index = CacheIndex {
            generation,
            mark: mark.unwrap_or_default(),
            entries,
        };

        let index_path = dir.join(INDEX_FILE);
        let tmp = dir.join(format!("{INDEX_FILE}.tmp-{}", std::process::id()));
        let write_index = || -> std::io::Result<()> {
            std::fs::write(&tmp, index.encode())?;
            std::fs::rename(&tmp, &index_path)
        };
        write_index().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(&index_path)(e)
        })?;
        if !append {
            // Data files of other generations (the previous one, or one left by a crash).
            let keep = data_file_name(generation);
            if let Ok(names) = std::fs::read_dir(dir) {
                for name in names.flatten().map(|e| e.file_name()) {
                    let name = name.to_string_lossy();
                    let other_generation = name.len() == keep.len() && name != keep;
                    // A new data file a process did not live to rename.
                    let abandoned = name.split_once(".tmp-").is_some_and(|(_, pid)| {
                        pid.parse()
                            .is_ok_and(|p| !crate::repository::lock::process_alive(p))
                    });
                    if name.starts_with("bases.") && (other_generation || abandoned) {
                        let _ = std::fs::remove_file(dir.join(&*name));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Entries written to a data file with one `writev` per mebibyte: through a `BufWriter`
/// each byte was copied twice, into its buffer and then into the file.
#[derive(Default)]
struct WriteBatch {
    parts: Vec<Bytes>,
    len: usize,
}

impl WriteBatch {
    /// At most this many entries per write (Linux's `IOV_MAX` is 1,024).
    const MAX_PARTS: usize = 512;
    /// Written once this many bytes are held.
    const MAX_LEN: usize = 1 << 20;

    /// Adds `bytes`, writing the batch to `file` when it is full.
    fn push(&mut self, file: &mut File, bytes: Bytes) -> std::io::Result<()> {
        self.len += bytes.len();
        self.parts.push(bytes);
        if self.parts.len() >= Self::MAX_PARTS || self.len >= Self::MAX_LEN {
            self.flush(file)?;
        }
        Ok(())
    }

    /// Writes what is held.
    fn flush(&mut self, file: &mut File) -> std::io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = self.parts.iter().map(|b| IoSlice::new(b)).collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            match file.write_vectored(rest) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        drop(slices);
        self.parts.clear();
        self.len = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
