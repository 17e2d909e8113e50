//! The local base cache's index file (`bases.idx`): what each entry of the data file holds
//! and where, with the layout mark its depths hold under. Format: docs/format.md, "Local
//! base cache". Decoding never trusts the file (fuzz target `local_cache`).

use crate::client::index::LayoutMark;
use dedelta_core::fingerprint::CHUNK_ID_LEN;
use dedelta_core::ChunkId;

/// Index file magic.
pub const MAGIC: &[u8; 8] = b"DDBCACHE";
/// Format version (3: an XXH3 per entry; 4: a flags byte per entry; 5: the index's layout
/// mark and a delta depth per entry).
pub const VERSION: u32 = 5;
/// Magic, version, generation, entry count and the layout mark (four u64).
pub(super) const HEAD_LEN: usize = 56;
/// Fingerprint, offset (u64), length (u32), XXH3-64 (u64), flags (u8) and depth (u8) of one
/// entry.
pub(super) const ENTRY_LEN: usize = CHUNK_ID_LEN + 22;
/// Depth byte of an entry whose depth is not known.
const DEPTH_UNKNOWN: u8 = 0xff;
/// Entry flag: the chunk was stored in full when the entry was written (see [`Extent::full`]).
const FLAG_FULL: u8 = 1;
/// Where an entry's bytes lie in the data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Offset in the data file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
    /// XXH3-64 of the bytes, checked on every read.
    pub xxh3: u64,
    /// Whether the chunk was stored in full when the entry was written: a hint for which old
    /// entries a save keeps (see [`super::LocalBaseCache::save_preferring`]), never used for a
    /// delta's depth.
    pub full: bool,
    /// The delta depth of the chunk's indexed copy when the entry was written (0: stored in
    /// full), valid while the index keeps the layout of [`CacheIndex::mark`]; `None` if not
    /// known.
    pub depth: Option<u8>,
}

/// A decoded index file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CacheIndex {
    /// Names the data file, `bases.<generation as 16 hex digits>`.
    pub generation: u64,
    /// The index layout the entries' depths hold under (see [`LayoutMark`]): taken at the
    /// start of the backup that wrote the cache, which wrote depths only once its snapshot
    /// and index were committed.
    pub mark: LayoutMark,
    /// The entries, in the order stored (most recently useful first).
    pub entries: Vec<(ChunkId, Extent)>,
}

impl CacheIndex {
    /// Decodes an index file: magic, version, CRC32C, entry count and that no extent
    /// overflows.
    ///
    /// # Errors
    /// A reason for anything inconsistent; never panics on any input.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < HEAD_LEN + 4 || &bytes[..8] != MAGIC {
            return Err("not a dedelta base cache index".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!("version {version}, expected {VERSION}"));
        }
        let generation = u64_at(12);
        let count = u32_at(20) as usize;
        let mark = LayoutMark {
            epoch: u64_at(24),
            slots: u64_at(32),
            slots_hash: u64_at(40),
            superseded_hash: u64_at(48),
        };
        let entry_bytes = bytes.len() - HEAD_LEN - 4;
        if entry_bytes / ENTRY_LEN != count || !entry_bytes.is_multiple_of(ENTRY_LEN) {
            return Err(format!(
                "{count} entries do not match {} bytes",
                bytes.len()
            ));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err("index fails its checksum".into());
        }
        let mut entries = Vec::with_capacity(count);
        for e in body[HEAD_LEN..].chunks_exact(ENTRY_LEN) {
            let id = ChunkId(e[..CHUNK_ID_LEN].try_into().expect("32 bytes"));
            let offset = u64::from_le_bytes(e[32..40].try_into().expect("8 bytes"));
            let len = u32::from_le_bytes(e[40..44].try_into().expect("4 bytes"));
            let xxh3 = u64::from_le_bytes(e[44..52].try_into().expect("8 bytes"));
            let full = match e[52] {
                0 => false,
                FLAG_FULL => true,
                other => return Err(format!("entry flags {other:#04x} are not defined")),
            };
            let depth = match e[53] {
                DEPTH_UNKNOWN => None,
                d if d <= crate::format::config::MAX_DELTA_DEPTH => Some(d),
                other => return Err(format!("entry depth {other} is beyond any chain")),
            };
            if full && depth.is_some_and(|d| d != 0) {
                return Err("an entry stored in full has a delta depth".into());
            }
            if offset.checked_add(u64::from(len)).is_none() {
                return Err(format!("entry at offset {offset} overflows"));
            }
            entries.push((
                id,
                Extent {
                    offset,
                    len,
                    xxh3,
                    full,
                    depth,
                },
            ));
        }
        Ok(CacheIndex {
            generation,
            mark,
            entries,
        })
    }

    /// Encodes the index file.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEAD_LEN + self.entries.len() * ENTRY_LEN + 4);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.generation.to_le_bytes());
        b.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for v in [
            self.mark.epoch,
            self.mark.slots,
            self.mark.slots_hash,
            self.mark.superseded_hash,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for (id, x) in &self.entries {
            b.extend_from_slice(id.as_bytes());
            b.extend_from_slice(&x.offset.to_le_bytes());
            b.extend_from_slice(&x.len.to_le_bytes());
            b.extend_from_slice(&x.xxh3.to_le_bytes());
            b.push(if x.full { FLAG_FULL } else { 0 });
            b.push(x.depth.unwrap_or(DEPTH_UNKNOWN));
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Checks that every entry lies within a data file of `data_len` bytes.
    ///
    /// # Errors
    /// A reason naming the first entry that does not.
    pub fn check_within(&self, data_len: u64) -> Result<(), String> {
        match self
            .entries
            .iter()
            .find(|(_, x)| x.offset + u64::from(x.len) > data_len)
        {
            Some((_, x)) => Err(format!(
                "entry at offset {} lies outside the {data_len}-byte data file",
                x.offset
            )),
            None => Ok(()),
        }
    }
}
