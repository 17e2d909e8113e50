//! The global fingerprint filter: one Bloom filter over every fingerprint the index holds, for
//! the locality fingerprint index (Zhu et al., FAST'08 §4.1: the "summary vector" that spares
//! the on-disk index the lookups of new chunks).
//!
//! Choice: the index's own blocked scheme (a key's probes all fall in one 512-bit block, so a
//! test costs one cache miss, see [`super::bloom`]), with atomic words so that the backup's
//! pool tests it while the writer thread adds the chunks it indexes, without a lock. A crate
//! (`fastbloom`, `bloomfilter`) would do the same job with its own hashing of 32-byte keys that
//! are uniform hashes already, and neither gives a stable, documented encoding to persist.
//!
//! Size: [`BITS_PER_KEY`] bits per fingerprint of its capacity, with [`PROBES`] probes; the
//! capacity is [`HEADROOM`] times the chunks when it is built. A filter that fills up grows
//! a stage (a scalable Bloom filter, Almeida et al. 2007): a new filter of twice the capacity
//! so far takes the next fingerprints, and a test asks every stage. Without stages a first
//! backup into an empty repository filled a 10 KiB filter with 50,000 fingerprints and
//! 11 % of its lookups were false positives. Stages add their false-positive rates, so a
//! filter of more than one stage is rebuilt as one at the next load. Hashes: bytes 24-31 of
//! the fingerprint pick the block and bytes 0-7 the bits (the runs' own filters use bytes
//! 8-23, so the two kinds fail independently).
//!
//! File `chunks.idx.filter` (little-endian): `DDIXFLT\0`; version u32 = 1; probes u8; 3 zero
//! bytes; the index digest u64 (see [`index_digest`]: the runs the filter was made for);
//! stage count u32 (at least 1); per stage: fingerprints added u64, capacity u64, word count
//! u64 (a multiple of 8), the words (u64 each); CRC-32C of everything before it (u32). It is a cache of a cache: written by
//! temporary file and rename without fsync, and one that is missing, torn, of another version,
//! fails its CRC or was made for other runs is rebuilt from the index. Whatever the index
//! commits while a filter is loaded is added to it (a prune's removal, which a Bloom filter
//! cannot take back, or a rebuild drops it, and the next load rebuilds it), so a filter whose
//! digest matches the index's holds every fingerprint of it: it never gives a false negative.

use super::bloom::mix64;
use super::manifest::RunRecord;
use crate::error::{Error, Result};
use dedelta_core::ChunkId;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

const MAGIC: [u8; 8] = *b"DDIXFLT\0";
/// The filter file's version; another is rebuilt.
pub const VERSION: u32 = 1;
/// Bits per fingerprint of the capacity.
pub const BITS_PER_KEY: u64 = 10;
/// Probes per fingerprint.
pub const PROBES: u8 = 6;
/// Capacity over the chunks at build time.
pub const HEADROOM: f64 = 1.5;
/// The smallest capacity (a 10 KiB filter for an empty or small index).
pub const MIN_CAPACITY: u64 = 1 << 13;
/// Bytes before the stages: magic, version, probes and 3 zero bytes, digest, stage count.
pub const HEADER_LEN: usize = 8 + 4 + 4 + 8 + 4;
/// Bytes before a stage's words: added, capacity, word count.
pub const STAGE_HEADER_LEN: usize = 8 + 8 + 8;
/// Most stages a file may hold (each doubles the capacity: more is not a filter we wrote).
const MAX_STAGES: usize = 40;
/// Words of a block (512 bits).
const BLOCK_WORDS: usize = 8;

/// The file name of the filter of the index whose manifest is `path`.
pub fn filter_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".filter");
    path.with_file_name(name)
}

/// What identifies the index's contents: a hash of its run records (numbers, counts, lengths
/// and tail CRCs). Every commit that adds or removes an entry writes a run with a new number.
pub fn index_digest(runs: &[RunRecord]) -> u64 {
    runs.iter().fold(mix64(runs.len() as u64), |acc, r| {
        [
            r.seq,
            r.chunks,
            r.sketches,
            r.file_len,
            u64::from(r.tail_crc),
        ]
        .into_iter()
        .fold(acc, |a, v| mix64(a ^ v))
    })
}

fn hashes(id: &ChunkId) -> (u64, u64) {
    let b = id.as_bytes();
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(w)
    };
    (word(24), word(0))
}

/// One blocked Bloom filter of a fixed capacity.
#[derive(Debug)]
struct Stage {
    words: Vec<AtomicU64>,
    capacity: u64,
    added: AtomicU64,
}

impl Stage {
    fn new(capacity: u64) -> Self {
        let blocks = capacity.saturating_mul(BITS_PER_KEY).div_ceil(512).max(1);
        let words = usize::try_from(blocks)
            .unwrap_or(usize::MAX >> 12)
            .saturating_mul(BLOCK_WORDS);
        Stage {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            capacity,
            added: AtomicU64::new(0),
        }
    }

    fn block(&self, h1: u64) -> usize {
        let blocks = (self.words.len() / BLOCK_WORDS) as u128;
        ((u128::from(h1) * blocks) >> 64) as usize * BLOCK_WORDS
    }

    fn insert(&self, (h1, h2): (u64, u64), probes: u8) {
        let b = self.block(h1);
        for i in 0..u32::from(probes) {
            let bit = ((h2 >> (9 * i)) & 511) as usize;
            self.words[b + bit / 64].fetch_or(1 << (bit % 64), Ordering::Relaxed);
        }
        self.added.fetch_add(1, Ordering::Relaxed);
    }

    fn contains(&self, (h1, h2): (u64, u64), probes: u8) -> bool {
        let b = self.block(h1);
        (0..u32::from(probes)).all(|i| {
            let bit = ((h2 >> (9 * i)) & 511) as usize;
            self.words[b + bit / 64].load(Ordering::Relaxed) & (1 << (bit % 64)) != 0
        })
    }

    fn is_full(&self) -> bool {
        self.added.load(Ordering::Relaxed) >= self.capacity
    }
}

/// A Bloom filter over fingerprints that can be tested and added to from several threads,
/// growing a stage when it fills up (see the module doc).
#[derive(Debug)]
pub struct FingerprintFilter {
    /// Oldest first; the last takes new fingerprints.
    stages: RwLock<Vec<Arc<Stage>>>,
    probes: u8,
    /// The index digest it holds every fingerprint of.
    digest: AtomicU64,
    /// Added to since it was last written.
    dirty: AtomicBool,
}

impl FingerprintFilter {
    /// An empty filter for `chunks` fingerprints (and [`HEADROOM`] more), made for the index
    /// whose digest is `digest`.
    pub fn with_capacity_for(chunks: u64, digest: u64) -> Self {
        let capacity = ((chunks as f64 * HEADROOM) as u64).max(MIN_CAPACITY);
        FingerprintFilter {
            stages: RwLock::new(vec![Arc::new(Stage::new(capacity))]),
            probes: PROBES,
            digest: AtomicU64::new(digest),
            dirty: AtomicBool::new(true),
        }
    }

    /// A filter whose every bit is set: every test says "maybe" (for tests of what its
    /// false positives cost).
    #[cfg(test)]
    pub fn all_set() -> Self {
        let f = Self::with_capacity_for(0, 0);
        for s in f.stages().iter() {
            for w in &s.words {
                w.store(u64::MAX, Ordering::Relaxed);
            }
        }
        f
    }

    fn stages(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Stage>>> {
        self.stages.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a fingerprint (to a new stage if the last one is full).
    pub fn insert(&self, id: &ChunkId) {
        let h = hashes(id);
        let last = {
            let stages = self.stages();
            stages.last().filter(|s| !s.is_full()).cloned()
        };
        let stage = match last {
            Some(s) => s,
            None => {
                let mut stages = self.stages.write().unwrap_or_else(|e| e.into_inner());
                match stages.last().filter(|s| !s.is_full()) {
                    Some(s) => s.clone(),
                    None => {
                        let total: u64 = stages.iter().map(|s| s.capacity).sum();
                        let s = Arc::new(Stage::new(total.max(MIN_CAPACITY).saturating_mul(2)));
                        stages.push(s.clone());
                        s
                    }
                }
            }
        };
        stage.insert(h, self.probes);
        self.dirty.store(true, Ordering::Relaxed);
    }

    /// Whether `id` may have been added: never false for one that was.
    pub fn contains(&self, id: &ChunkId) -> bool {
        let h = hashes(id);
        self.stages().iter().any(|s| s.contains(h, self.probes))
    }

    /// Fingerprints added (counting repeats).
    pub fn added(&self) -> u64 {
        self.stages()
            .iter()
            .map(|s| s.added.load(Ordering::Relaxed))
            .sum()
    }

    /// Fingerprints its stages were sized for.
    pub fn capacity(&self) -> u64 {
        self.stages().iter().map(|s| s.capacity).sum()
    }

    /// Its stages (more than one: it grew since it was built).
    pub fn stage_count(&self) -> usize {
        self.stages().len()
    }

    /// Bytes it holds in memory.
    pub fn memory_bytes(&self) -> usize {
        self.stages().iter().map(|s| s.words.len() * 8).sum()
    }

    /// The index digest it holds every fingerprint of.
    pub fn digest(&self) -> u64 {
        self.digest.load(Ordering::Relaxed)
    }

    /// Records that it holds every fingerprint of the index whose digest is `digest` (after
    /// a commit whose new fingerprints were added, or one that added none).
    pub fn set_digest(&self, digest: u64) {
        if self.digest.swap(digest, Ordering::Relaxed) != digest {
            self.dirty.store(true, Ordering::Relaxed);
        }
    }

    /// Whether it changed since it was read or written.
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Relaxed)
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let stages = self.stages();
        let words: usize = stages.iter().map(|s| s.words.len()).sum();
        let mut out =
            Vec::with_capacity(HEADER_LEN + stages.len() * STAGE_HEADER_LEN + words * 8 + 4);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[self.probes, 0, 0, 0]);
        out.extend_from_slice(&self.digest().to_le_bytes());
        out.extend_from_slice(&(stages.len() as u32).to_le_bytes());
        for s in stages.iter() {
            for v in [
                s.added.load(Ordering::Relaxed),
                s.capacity,
                s.words.len() as u64,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for w in &s.words {
                out.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a filter file; `Err` says why the bytes are not one.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        if bytes.len() < HEADER_LEN + 4 || bytes[..8] != MAGIC {
            return Err("not a fingerprint filter".into());
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version != VERSION {
            return Err(format!(
                "fingerprint filter version {version}, this build reads {VERSION}"
            ));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err("fingerprint filter checksum mismatch (torn or damaged)".into());
        }
        let bad = || "malformed fingerprint filter".to_string();
        let u64_at = |at: usize| -> std::result::Result<u64, String> {
            let w = body
                .get(at..at.checked_add(8).ok_or_else(bad)?)
                .ok_or_else(bad)?;
            Ok(u64::from_le_bytes(w.try_into().map_err(|_| bad())?))
        };
        let probes = body[12];
        if !(1..=7).contains(&probes) || body[13..16] != [0, 0, 0] {
            return Err(bad());
        }
        let digest = u64_at(16)?;
        let count = u32::from_le_bytes([body[24], body[25], body[26], body[27]]) as usize;
        if !(1..=MAX_STAGES).contains(&count) {
            return Err(bad());
        }
        let mut at = HEADER_LEN;
        let mut stages = Vec::with_capacity(count);
        for _ in 0..count {
            let (added, capacity, n) = (u64_at(at)?, u64_at(at + 8)?, u64_at(at + 16)?);
            at += STAGE_HEADER_LEN;
            let n = usize::try_from(n).map_err(|_| bad())?;
            let len = n.checked_mul(8).ok_or_else(bad)?;
            let end = at.checked_add(len).ok_or_else(bad)?;
            if n == 0 || n % BLOCK_WORDS != 0 || end > body.len() {
                return Err(bad());
            }
            let words = body[at..end]
                .chunks_exact(8)
                .map(|w| AtomicU64::new(u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))))
                .collect();
            at = end;
            stages.push(Arc::new(Stage {
                words,
                capacity,
                added: AtomicU64::new(added),
            }));
        }
        if at != body.len() {
            return Err(bad());
        }
        Ok(FingerprintFilter {
            stages: RwLock::new(stages),
            probes,
            digest: AtomicU64::new(digest),
            dirty: AtomicBool::new(false),
        })
    }

    /// Writes the filter to `path` (a temporary file renamed over it; no fsync: a torn file
    /// fails its CRC and is rebuilt) and marks it clean.
    pub fn store(&self, path: &Path) -> Result<()> {
        self.dirty.store(false, Ordering::Relaxed);
        let mut tmp = path.as_os_str().to_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let io = |e| Error::io(format!("writing fingerprint filter {}", path.display()), e);
        let r = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&self.encode()))
            .and_then(|()| std::fs::rename(&tmp, path));
        if r.is_err() {
            self.dirty.store(true, Ordering::Relaxed);
            let _ = std::fs::remove_file(&tmp);
        }
        r.map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: u64) -> ChunkId {
        ChunkId::of(&n.to_le_bytes())
    }

    proptest! {
        /// The filter never gives a false negative, whatever the fingerprints and however
        /// full it is (past its capacity too), and neither does its decoded copy.
        #[test]
        fn never_a_false_negative(
            ids in proptest::collection::vec(any::<[u8; 32]>(), 0..3000),
            sized_for in 0u64..4000,
        ) {
            let f = FingerprintFilter::with_capacity_for(sized_for, 7);
            for i in &ids {
                f.insert(&ChunkId(*i));
            }
            for i in &ids {
                prop_assert!(f.contains(&ChunkId(*i)));
            }
            let back = FingerprintFilter::decode(&f.encode()).unwrap();
            for i in &ids {
                prop_assert!(back.contains(&ChunkId(*i)));
            }
            prop_assert_eq!(back.added(), ids.len() as u64);
        }
    }

    #[test]
    fn false_positive_rate_at_capacity_is_about_one_percent() {
        let f = FingerprintFilter::with_capacity_for(133_334, 0);
        let n = f.capacity();
        assert!((199_990..200_010).contains(&n), "{n}");
        for i in 0..n {
            f.insert(&id(i));
        }
        let fp = (n..n + 200_000).filter(|&i| f.contains(&id(i))).count();
        // 10 bits, 6 probes, 512-bit blocks: under 1.5 % at capacity (a plain Bloom
        // filter would give 0.84 %).
        assert!(fp < 3_000, "{fp} false positives of 200000");
        assert!(fp > 0);
        assert_eq!(
            f.memory_bytes() as u64,
            (n * BITS_PER_KEY).div_ceil(512) * 64
        );
    }

    #[test]
    fn round_trips_and_refuses_torn_or_changed_files() {
        let f = FingerprintFilter::with_capacity_for(10, 99);
        for i in 0..10 {
            f.insert(&id(i));
        }
        let bytes = f.encode();
        assert_eq!(
            bytes.len(),
            HEADER_LEN + STAGE_HEADER_LEN + f.memory_bytes() + 4
        );
        let back = FingerprintFilter::decode(&bytes).unwrap();
        assert_eq!(back.encode(), bytes);
        assert_eq!(back.digest(), 99);
        assert!(!back.is_dirty());
        for cut in [0, 7, 12, HEADER_LEN, bytes.len() - 1] {
            assert!(
                FingerprintFilter::decode(&bytes[..cut]).is_err(),
                "cut {cut}"
            );
        }
        for at in (0..bytes.len())
            .step_by(97)
            .chain([8, 12, 40, bytes.len() - 1])
        {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(FingerprintFilter::decode(&bad).is_err(), "byte {at}");
        }
        let mut v2 = bytes.clone();
        v2[8] = 2;
        assert!(FingerprintFilter::decode(&v2)
            .unwrap_err()
            .contains("version 2"));
    }

    #[test]
    fn store_writes_a_file_that_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chunks.idx.filter");
        let f = FingerprintFilter::with_capacity_for(100, 5);
        f.insert(&id(1));
        assert!(f.is_dirty());
        f.store(&path).unwrap();
        assert!(!f.is_dirty());
        let back = FingerprintFilter::decode(&std::fs::read(&path).unwrap()).unwrap();
        assert!(back.contains(&id(1)));
        assert_eq!(filter_path(&dir.path().join("chunks.idx")), path);
    }
}
