//! Run files: immutable, sorted tables of chunk entries and super-feature keys.
//!
//! Layout (all integers little-endian):
//! - header: `DDIXRUN\0`, version u32 = 1, 4 zero bytes;
//! - chunk area: one entry per chunk, sorted by chunk id: id (32 bytes) ++ global entry number
//!   (u40, see [`super::ChunkLocation`]);
//! - sketch area: one entry per truncated super-feature key (40 bits), sorted by key: the key's
//!   low 32 bits when its bucket number implies the top 8 (8 or more bucket bits), else all 40
//!   bits (u40), ++ the number of the chunk entry in this run it names (u24 or u32,
//!   `ref_width`);
//! - tail: chunk count u64, sketch count u64, chunk bucket bits u8, sketch bucket bits u8,
//!   ref width u8; the first entry of every chunk bucket (2^bits + 1 u32) and every bucket's
//!   CRC-32C (2^bits u32); the same for sketch buckets; the chunk Bloom filter; the sketch
//!   Bloom filter;
//! - trailer: tail offset u64, tail length u64, tail CRC-32C u32, `DDIXEND\0`.
//!
//! Entries are grouped in buckets by the top bits of the id (of the key): a lookup reads one
//! bucket (about 64 entries) with one `pread`, after the in-memory Bloom filter let it
//! through, and verifies the bucket's CRC before trusting a byte of it. The tail (buckets'
//! starts and CRCs, filters: about 1.4 bytes per chunk and 1.2 per super-feature) is read
//! and verified whole when the run is opened; the bucket directories stay in memory, the
//! filters are read again when a lookup first needs them ([`LazyBloom`]).
//!
//! A run whose entries take at most [`RESIDENT_MAX`] bytes is read whole, and every bucket's
//! CRC verified, once [`RESIDENT_AFTER_READS`] lookups read their bucket alone
//! ([`Run::resident`]): an
//! incremental backup of 60 MB into a 1.3 MB index made 8,943 `pread`s of its runs (15.8 MB,
//! each bucket's CRC computed again at every read), a few percent of its CPU. A run that
//! cannot be read whole, or has a bad bucket, is read a bucket at a time as before, which
//! reports the damage where a lookup meets it.

use super::bloom::{mix64, Bloom, FilterBudget, LazyBloom};
use crate::error::{Error, Result};
use dedelta_core::ChunkId;
use std::borrow::Cow;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

mod buckets;
mod cursor;
mod merge;
mod writer;
pub use super::sketch_cost::SketchCounts;
use buckets::Buckets;
pub use cursor::{Cursor, Entry};
#[cfg(test)]
pub use merge::write_batch;
pub use merge::{merge, write_batch_noting};
pub use writer::RunWriter;

/// Bytes of a chunk entry: the id and a u40 entry number.
pub const CHUNK_ENTRY: usize = 32 + LOC_LEN;
/// Bytes of a global entry number.
const LOC_LEN: usize = 5;
/// The largest global entry number (u40).
pub const MAX_LOC: u64 = (1 << 40) - 1;
/// Header: magic and version (2: 40-bit super-feature keys; version 1 had 32-bit keys).
const HEADER: [u8; 16] = *b"DDIXRUN\0\x02\0\0\0\0\0\0\0";
/// Bits of a super-feature key (see [`super::sketch_key`]).
pub const KEY_BITS: u32 = 40;
/// The largest super-feature key.
pub const MAX_KEY: u64 = (1 << KEY_BITS) - 1;
/// Trailer magic.
const END_MAGIC: [u8; 8] = *b"DDIXEND\0";
/// Trailer: tail offset, tail length, tail CRC, magic.
const TRAILER_LEN: usize = 8 + 8 + 4 + 8;
/// Chunk entries per bucket aimed at: one lookup reads about 64 x 37 bytes.
const BUCKET_ENTRIES: u64 = 64;
/// Keys per bucket aimed at: one lookup reads about 256 x 7 bytes, still one random read,
/// and the directory (8 bytes a bucket, held in memory) costs 0.03 bytes a key rather than
/// the 0.12 it cost at 64 (issue 16: RAM per chunk outside the bounded caches). Readers take
/// any bucket count, so runs written with 64 read as before.
const SKETCH_BUCKET_ENTRIES: u64 = 256;
/// Most bucket bits (16 M buckets).
const MAX_BUCKET_BITS: u8 = 24;
/// Bloom filter bits per chunk, and probes: about 1.2 % false positives. A false positive
/// costs a `pread`, which on new data, once the index's pages left the page cache, is a disk
/// read: 8 bits (2.5 %) made index lookups a third of a backup into a 12 GB repository.
const CHUNK_BLOOM: (u64, u8) = (10, 7);
/// Bloom filter bits per super-feature key, and probes: about 1.8 % false positives (three
/// keys are looked up per new chunk).
const SKETCH_BLOOM: (u64, u8) = (9, 6);
/// Bytes a sequential reader reads at a time.
const READ_AHEAD: usize = 256 << 10;
/// Runs whose entry areas take at most this many bytes are held in memory once a lookup
/// needs them (see the module doc). Small indexes are merged into one run below
/// `COMPACT_ALL_BYTES` (8 MiB), and the runs below a large one add up to about as much
/// again, so this holds at most about 16 MiB however large the index.
const RESIDENT_MAX: u64 = 8 << 20;
/// Buckets a run reads one at a time before it reads its entry areas whole: a command that
/// looks up a few chunks (`ls`, a restore that finds most chunks beside the last one) reads
/// a few buckets, not the whole run (44 page faults and the CRC of every bucket of a 190 KB
/// run, for the tree's handful of lookups); a backup's thousands of lookups make it
/// resident after these few.
const RESIDENT_AFTER_READS: u32 = 32;

fn damaged(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::IndexDamaged(format!("{}: {what}", path.display()))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::io(format!("index file {}", path.display()), e)
}

/// Reads `buf.len()` bytes at `offset`; a short file is damage.
fn read_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            damaged(path, "shorter than its tail says")
        } else {
            io(path)(e)
        }
    })
}

fn bucket_bits(entries: u64) -> u8 {
    bits_for(entries, BUCKET_ENTRIES)
}

fn sketch_bucket_bits(keys: u64) -> u8 {
    bits_for(keys, SKETCH_BUCKET_ENTRIES)
}

/// The fewest bucket bits that put at most `per_bucket` of `entries` in a bucket on average.
fn bits_for(entries: u64, per_bucket: u64) -> u8 {
    let mut bits = 0;
    while bits < MAX_BUCKET_BITS && (per_bucket << bits) < entries {
        bits += 1;
    }
    bits
}

fn top_bits(prefix: u32, bits: u8) -> usize {
    if bits == 0 {
        0
    } else {
        (prefix >> (32 - u32::from(bits))) as usize
    }
}

/// The bucket of a super-feature key: its top `bits` bits.
fn key_bucket(key: u64, bits: u8) -> usize {
    (key >> (KEY_BITS - u32::from(bits))) as usize
}

/// Bytes a key takes in a run whose sketch area has `bits` bucket bits: with 8 or more, the
/// bucket number holds the key's top 8 bits, and only the low 32 are stored (so 40-bit keys
/// cost what 32-bit keys did in any run of more than 16,384 keys).
fn key_len(bits: u8) -> usize {
    if bits >= 8 {
        4
    } else {
        5
    }
}

/// The key stored as `e` (its first [`key_len`] bytes) in bucket `bucket` of `bits` bits.
fn decode_key(e: &[u8], bucket: usize, bits: u8) -> u64 {
    let mut w = [0u8; 8];
    let len = key_len(bits);
    w[..len].copy_from_slice(&e[..len]);
    let low = u64::from_le_bytes(w);
    if len == 4 {
        ((bucket as u64) >> (bits - 8)) << 32 | low
    } else {
        low
    }
}

fn chunk_bucket(id: &[u8; 32], bits: u8) -> usize {
    top_bits(u32::from_be_bytes([id[0], id[1], id[2], id[3]]), bits)
}

/// The Bloom hashes of a chunk id (a BLAKE3 hash: its bytes are uniform already; the bucket
/// uses the first four).
fn chunk_hashes(id: &[u8; 32]) -> (u64, u64) {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&id[i..i + 8]);
        u64::from_le_bytes(w)
    };
    (word(8), word(16))
}

fn sketch_hashes(key: u64) -> (u64, u64) {
    let h = mix64(key);
    (h, mix64(h))
}

fn ref_width(chunks: u64) -> u8 {
    if chunks <= 1 << 24 {
        3
    } else {
        4
    }
}

/// An open run file: its tail in memory, its entries read on demand.
#[derive(Debug)]
pub struct Run {
    /// The run's sequence number (its file name).
    pub seq: u64,
    path: PathBuf,
    file: File,
    /// Chunk entries.
    pub chunks: u64,
    /// Super-feature keys.
    pub sketches: u64,
    /// File length.
    pub file_len: u64,
    /// CRC-32C of the tail (the manifest records it: a run file replaced under the same name
    /// is refused).
    pub tail_crc: u32,
    ref_width: u8,
    chunk_buckets: Buckets,
    sketch_buckets: Buckets,
    chunk_bloom: LazyBloom,
    sketch_bloom: LazyBloom,
    /// Where the tail starts (the entry areas end).
    tail_offset: u64,
    /// The entry areas (from the end of the header), every bucket verified, once a lookup
    /// needed them; `None` when the run is too large or could not be read whole.
    resident: OnceLock<Option<Box<[u8]>>>,
    /// Buckets read one at a time so far (see [`RESIDENT_AFTER_READS`]).
    bucket_reads: AtomicU32,
}

impl Run {
    /// Opens run `seq` at `path`, verifying its trailer and tail.
    ///
    /// # Errors
    /// [`Error::IndexDamaged`] if the file is short, or its tail or trailer malformed.
    pub fn open(path: &Path, seq: u64) -> Result<Run> {
        let file = File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                damaged(path, "missing")
            } else {
                io(path)(e)
            }
        })?;
        let file_len = file.metadata().map_err(io(path))?.len();
        if file_len < (HEADER.len() + TRAILER_LEN) as u64 {
            return Err(damaged(path, "too short"));
        }
        let mut header = [0u8; 16];
        read_at(&file, path, &mut header, 0)?;
        if header != HEADER {
            return Err(damaged(path, "not an index run of version 2"));
        }
        let mut trailer = [0u8; TRAILER_LEN];
        read_at(&file, path, &mut trailer, file_len - TRAILER_LEN as u64)?;
        let u64_at = |b: &[u8], i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let tail_offset = u64_at(&trailer, 0);
        let tail_len = u64_at(&trailer, 8);
        let tail_crc = u32::from_le_bytes([trailer[16], trailer[17], trailer[18], trailer[19]]);
        if trailer[20..] != END_MAGIC
            || tail_offset.checked_add(tail_len) != Some(file_len - TRAILER_LEN as u64)
        {
            return Err(damaged(path, "torn or malformed trailer"));
        }
        let mut tail = vec![0u8; usize::try_from(tail_len).map_err(|_| damaged(path, "tail"))?];
        read_at(&file, path, &mut tail, tail_offset)?;
        if crc32c::crc32c(&tail) != tail_crc {
            return Err(damaged(path, "tail checksum mismatch"));
        }
        let bad = || damaged(path, "malformed tail");
        if tail.len() < 19 {
            return Err(bad());
        }
        let chunks = u64_at(&tail, 0);
        let sketches = u64_at(&tail, 8);
        let (cbits, sbits, ref_width) = (tail[16], tail[17], tail[18]);
        if !(3..=4).contains(&ref_width) || chunks > u64::from(u32::MAX) {
            return Err(bad());
        }
        let mut at = 19;
        let (chunk_buckets, n) = Buckets::decode(&tail[at..], cbits, chunks).ok_or_else(bad)?;
        at += n;
        let (sketch_buckets, n) = Buckets::decode(&tail[at..], sbits, sketches).ok_or_else(bad)?;
        at += n;
        // Decoded to check them, then let go of (see [`LazyBloom`]).
        let (_, n) = Bloom::decode(&tail[at..]).ok_or_else(bad)?;
        let chunk_bloom = LazyBloom::unloaded(tail_offset + at as u64, &tail[at..at + n]);
        at += n;
        let (_, n) = Bloom::decode(&tail[at..]).ok_or_else(bad)?;
        let sketch_bloom = LazyBloom::unloaded(tail_offset + at as u64, &tail[at..at + n]);
        at += n;
        let areas = chunks
            .checked_mul(CHUNK_ENTRY as u64)
            .and_then(|c| {
                let len = (key_len(sbits) + usize::from(ref_width)) as u64;
                c.checked_add(sketches.checked_mul(len)?)
            })
            .and_then(|a| a.checked_add(HEADER.len() as u64));
        if at != tail.len() || areas != Some(tail_offset) {
            return Err(bad());
        }
        Ok(Run {
            seq,
            path: path.to_path_buf(),
            file,
            chunks,
            sketches,
            file_len,
            tail_crc,
            ref_width,
            chunk_buckets,
            sketch_buckets,
            chunk_bloom,
            sketch_bloom,
            tail_offset,
            resident: OnceLock::new(),
            bucket_reads: AtomicU32::new(0),
        })
    }

    /// The entry areas in memory, every bucket's CRC verified, read at the first call after
    /// [`RESIDENT_AFTER_READS`] buckets were read alone (see the module doc); `None` before,
    /// for a run larger than [`RESIDENT_MAX`], or one that cannot be read whole or has a
    /// bad bucket (its lookups then read and check their bucket alone).
    fn resident(&self) -> Option<&[u8]> {
        if self.resident.get().is_none()
            && self.bucket_reads.fetch_add(1, Ordering::Relaxed) < RESIDENT_AFTER_READS
        {
            return None;
        }
        self.resident
            .get_or_init(|| {
                let len = self.tail_offset.checked_sub(HEADER.len() as u64)?;
                if len > RESIDENT_MAX {
                    return None;
                }
                let mut bytes = vec![0u8; usize::try_from(len).ok()?];
                read_at(&self.file, &self.path, &mut bytes, HEADER.len() as u64).ok()?;
                let areas = [
                    (&self.chunk_buckets, 0, CHUNK_ENTRY),
                    (
                        &self.sketch_buckets,
                        self.sketch_area() - HEADER.len() as u64,
                        self.sketch_entry_len(),
                    ),
                ];
                for (buckets, base, len) in areas {
                    for b in 0..buckets.crcs.len() {
                        let (s, e) = buckets.range(b);
                        let at = |i: u64| usize::try_from(base + i * len as u64).ok();
                        let bucket = bytes.get(at(s)?..at(e)?)?;
                        if crc32c::crc32c(bucket) != buckets.crcs[b] {
                            return None;
                        }
                    }
                }
                Some(bytes.into_boxed_slice())
            })
            .as_deref()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes this run holds in memory outside its super-feature filter: its bucket
    /// directories, and its fingerprint filter once a lookup asked it.
    pub fn memory_bytes(&self) -> usize {
        self.chunk_bloom.memory_bytes()
            + (self.chunk_buckets.starts.len() + self.sketch_buckets.starts.len()) * 8
    }

    /// Bytes of its entries held in memory (see [`Self::resident`]): counted apart, like the
    /// super-feature filter, as a bounded cache (at most [`RESIDENT_MAX`] a run, and only
    /// the small runs hold them).
    #[cfg(test)]
    pub fn resident_bytes(&self) -> usize {
        self.resident
            .get()
            .and_then(|r| r.as_ref())
            .map_or(0, |r| r.len())
    }

    /// Bytes of its super-feature filter in memory (0 until a lookup asked it, or while its
    /// budget has no room).
    pub fn sketch_filter_bytes(&self) -> usize {
        self.sketch_bloom.memory_bytes()
    }

    /// Holds its super-feature filter within `budget` (see [`FilterBudget`]).
    pub fn hold_sketch_filter_within(&self, budget: &Arc<FilterBudget>) {
        self.sketch_bloom.hold_within(budget);
    }

    fn sketch_entry_len(&self) -> usize {
        key_len(self.sketch_buckets.bits) + usize::from(self.ref_width)
    }

    fn sketch_area(&self) -> u64 {
        HEADER.len() as u64 + self.chunks * CHUNK_ENTRY as u64
    }

    /// Where an area starts in the file, and the bytes of its entries.
    fn area(&self, sketch: bool) -> (&Buckets, u64, usize) {
        if sketch {
            (
                &self.sketch_buckets,
                self.sketch_area(),
                self.sketch_entry_len(),
            )
        } else {
            (&self.chunk_buckets, HEADER.len() as u64, CHUNK_ENTRY)
        }
    }

    /// Reads buckets `first..end` of an area, verifying each bucket's CRC.
    fn read_buckets(
        &self,
        sketch: bool,
        first: usize,
        end: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let (buckets, base, len) = self.area(sketch);
        let from = u64::from(buckets.starts[first]);
        let to = u64::from(buckets.starts[end]);
        buf.clear();
        buf.resize((to - from) as usize * len, 0);
        read_at(&self.file, &self.path, buf, base + from * len as u64)?;
        for b in first..end {
            let (s, e) = buckets.range(b);
            let bytes = &buf[(s - from) as usize * len..(e - from) as usize * len];
            if crc32c::crc32c(bytes) != buckets.crcs[b] {
                return Err(damaged(&self.path, "bucket checksum mismatch"));
            }
        }
        Ok(())
    }

    /// Bucket `b` of an area, verified: from memory when the run is resident, else read.
    fn bucket(&self, sketch: bool, b: usize) -> Result<Cow<'_, [u8]>> {
        if let Some(bytes) = self.resident() {
            let (buckets, base, len) = self.area(sketch);
            let (s, e) = buckets.range(b);
            let at = |i: u64| (base - HEADER.len() as u64 + i * len as u64) as usize;
            return Ok(Cow::Borrowed(&bytes[at(s)..at(e)]));
        }
        let mut buf = Vec::new();
        self.read_buckets(sketch, b, b + 1, &mut buf)?;
        Ok(Cow::Owned(buf))
    }

    /// Whether this run's filter lets chunk `id` through (a [`Self::get`] would read a
    /// bucket).
    pub fn may_hold(&self, id: &ChunkId) -> bool {
        let (h1, h2) = chunk_hashes(id.as_bytes());
        self.chunk_bloom.contains(&self.file, h1, h2)
    }

    /// Looks up chunk `id`: its global entry number if this run holds it (reading one
    /// bucket when the filter lets it through).
    pub fn get(&self, id: &ChunkId) -> Result<Option<u64>> {
        let id = id.as_bytes();
        let (h1, h2) = chunk_hashes(id);
        if !self.chunk_bloom.contains(&self.file, h1, h2) {
            return Ok(None);
        }
        let b = chunk_bucket(id, self.chunk_buckets.bits);
        let (s, e) = self.chunk_buckets.range(b);
        if s == e {
            return Ok(None);
        }
        let buf = self.bucket(false, b)?;
        Ok(search(&buf, CHUNK_ENTRY, |e| e[..32].cmp(&id[..])).map(|e| decode_loc(&e[32..])))
    }

    /// The chunk entry a super-feature key names, if this run holds the key.
    pub fn sketch(&self, key: u64) -> Result<Option<ChunkId>> {
        self.sketch_counting(key, &SketchCounts::default())
    }

    /// [`Self::sketch`], counting in `counts` what the lookup cost.
    pub fn sketch_counting(&self, key: u64, counts: &SketchCounts) -> Result<Option<ChunkId>> {
        if key > MAX_KEY {
            return Ok(None);
        }
        counts.probes.fetch_add(1, Ordering::Relaxed);
        let (h1, h2) = sketch_hashes(key);
        let filtered = match self.sketch_bloom.test(&self.file, h1, h2) {
            Some(false) => return Ok(None),
            Some(true) => {
                counts.passed.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => {
                counts.unfiltered.fetch_add(1, Ordering::Relaxed);
                false
            }
        };
        let found = self.sketch_in_bucket(key, counts)?;
        if filtered && found.is_some() {
            counts.passed_found.fetch_add(1, Ordering::Relaxed);
        }
        Ok(found)
    }

    /// Looks key `key` up in its bucket (one read, none for an empty bucket).
    fn sketch_in_bucket(&self, key: u64, counts: &SketchCounts) -> Result<Option<ChunkId>> {
        let bits = self.sketch_buckets.bits;
        let b = key_bucket(key, bits);
        let (s, e) = self.sketch_buckets.range(b);
        if s == e {
            return Ok(None);
        }
        counts.bucket_reads.fetch_add(1, Ordering::Relaxed);
        let buf = self.bucket(true, b)?;
        let len = self.sketch_entry_len();
        let Some(e) = search(&buf, len, |e| decode_key(e, b, bits).cmp(&key)) else {
            return Ok(None);
        };
        let entry = decode_ref(&e[key_len(bits)..]);
        self.chunk_at(entry).map(Some)
    }

    /// The id of chunk entry `i` of this run.
    fn chunk_at(&self, i: u64) -> Result<ChunkId> {
        if i >= self.chunks {
            return Err(damaged(&self.path, "a super-feature names no chunk entry"));
        }
        let b = self.chunk_buckets.of_entry(i);
        let buf = self.bucket(false, b)?;
        let at = (i - self.chunk_buckets.range(b).0) as usize * CHUNK_ENTRY;
        let mut id = [0u8; 32];
        id.copy_from_slice(&buf[at..at + 32]);
        Ok(ChunkId(id))
    }

    /// Whether this run may hold the key (its filter's answer).
    #[cfg(test)]
    pub fn may_hold_sketch(&self, key: u64) -> bool {
        let (h1, h2) = sketch_hashes(key);
        self.sketch_bloom.contains(&self.file, h1, h2)
    }

    /// Reads the chunk entries in order.
    pub fn chunk_cursor(&self) -> Cursor<'_> {
        Cursor::new(self, false)
    }

    /// Reads the super-feature keys in order.
    pub fn sketch_cursor(&self) -> Cursor<'_> {
        Cursor::new(self, true)
    }
}

/// The entry of `len` bytes in the sorted `entries` for which `cmp` says Equal (a binary
/// search without collecting the entries first).
fn search(entries: &[u8], len: usize, cmp: impl Fn(&[u8]) -> std::cmp::Ordering) -> Option<&[u8]> {
    let (mut lo, mut hi) = (0, entries.len() / len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let e = &entries[mid * len..(mid + 1) * len];
        match cmp(e) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(e),
        }
    }
    None
}

fn decode_loc(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..LOC_LEN].copy_from_slice(&b[..LOC_LEN]);
    u64::from_le_bytes(w)
}

fn decode_ref(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests;
