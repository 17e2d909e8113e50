//! Containers: the write-once files that hold chunk data.
//!
//! (Over 500 lines: the builder, header and footer with their tests, about 450 lines of
//! which are tests; each metadata layout has its own module.)
//!
//! A container is a header, compression regions back to back, a metadata section describing
//! every region and every chunk entry, and a fixed-size footer that locates the metadata (so a
//! reader fetches the footer and the metadata with two ranged reads, without the data).
//! Two metadata layouts exist, named by the container version in the header and the footer:
//! version 1, fixed-size records (module [`v1`]), and version 2, the lean layout (module [`v2`]:
//! varint lengths, offsets and region numbers implied, no super-features on deltas), which
//! writers use in repositories of format version 2. Readers read both.
//! The container id is the BLAKE3 hash of the whole file: unique across clients without
//! coordination, and verifiable with `b3sum`. Byte tables are in docs/format.md; the constants
//! here mirror them, each offset built from the one before (the tests check them against the
//! encoded bytes).
//!
//! Decoders are strict: flags and reserved fields must be 0, codes must be known, regions must
//! tile the file from the header to the metadata, and the metadata must end at the footer. A
//! version-1 reader cannot know what a set bit would mean, so it refuses the container rather
//! than guess; the alternative rejected, ignoring unknown bits, would leave no room to add a
//! meaning later without old readers silently misreading it.

use crate::error::{Error, Result};
use dedelta_core::compress::{self, Compression};
use dedelta_core::ChunkId;
use std::fmt;

/// Magic at the start and in the footer of every container.
pub const CONTAINER_MAGIC: &[u8; 4] = b"DDCT";
/// Container version 1: fixed-size metadata records (repositories of format version 1).
pub const CONTAINER_V1: u16 = 1;
/// Container version 2: the lean metadata layout ([`v2`]).
pub const CONTAINER_V2: u16 = 2;
/// The newest container version, the one this build writes in a new repository; readers
/// accept 1 ..= this.
pub const CONTAINER_VERSION: u16 = CONTAINER_V2;

pub mod v1;
pub mod v2;

/// Header: offset of the magic.
pub const HEADER_MAGIC_OFFSET: usize = 0;
/// Header: offset of the u16 container version.
pub const HEADER_VERSION_OFFSET: usize = HEADER_MAGIC_OFFSET + 4;
/// Header: offset of the u16 flags (0).
pub const HEADER_FLAGS_OFFSET: usize = HEADER_VERSION_OFFSET + 2;
/// Header: offset of the reserved u64 (0).
pub const HEADER_RESERVED_OFFSET: usize = HEADER_FLAGS_OFFSET + 2;
/// Header: magic (4), version u16, flags u16, reserved u64. The first region starts here.
pub const HEADER_LEN: usize = HEADER_RESERVED_OFFSET + 8;

/// Footer: offset of the u64 metadata offset.
pub const FOOTER_META_OFFSET_OFFSET: usize = 0;
/// Footer: offset of the u32 metadata length.
pub const FOOTER_META_LEN_OFFSET: usize = FOOTER_META_OFFSET_OFFSET + 8;
/// Footer: offset of the u32 CRC32C of the metadata.
pub const FOOTER_META_CRC_OFFSET: usize = FOOTER_META_LEN_OFFSET + 4;
/// Footer: offset of the magic.
pub const FOOTER_MAGIC_OFFSET: usize = FOOTER_META_CRC_OFFSET + 4;
/// Footer: offset of the u16 container version.
pub const FOOTER_VERSION_OFFSET: usize = FOOTER_MAGIC_OFFSET + 4;
/// Footer: offset of the reserved u16 (0).
pub const FOOTER_RESERVED_OFFSET: usize = FOOTER_VERSION_OFFSET + 2;
/// Footer: metadata offset u64, metadata length u32, metadata CRC32C u32, magic (4),
/// version u16, reserved u16.
pub const FOOTER_LEN: usize = FOOTER_RESERVED_OFFSET + 2;

pub use v1::{
    ENTRY_BASE_LEN, ENTRY_FIXED_LEN, ENTRY_ID_OFFSET, ENTRY_KIND_OFFSET, ENTRY_OFFSET_OFFSET,
    ENTRY_ORIGINAL_LEN_OFFSET, ENTRY_REGION_OFFSET, ENTRY_SF_COUNT_OFFSET, ENTRY_SF_LEN,
    ENTRY_STORED_LEN_OFFSET, META_COUNT_LEN, REGION_CODEC_OFFSET, REGION_CRC_OFFSET,
    REGION_OFFSET_OFFSET, REGION_RAW_LEN_OFFSET, REGION_RECORD_LEN, REGION_STORED_LEN_OFFSET,
};

/// Most super-features an entry may carry.
pub const MAX_SUPER_FEATURES: usize = 16;
/// Largest raw length a region may claim: the largest `region_size` (64 MiB) plus the
/// largest chunk (16 MiB), since a writer closes a region once it reaches `region_size`.
/// Readers allocate a region's raw length before decompressing it, so a claim beyond what any
/// writer makes is refused with the metadata, not met with a 4 GiB allocation.
pub const MAX_REGION_RAW_LEN: u32 = (64 + 16) << 20;

/// Entry kind code: the chunk's bytes as they are.
pub const KIND_FULL: u8 = 0;
/// Entry kind code: a delta against a full base chunk.
pub const KIND_DELTA: u8 = 1;
/// Entry kind code (version-2 metadata, repository version
/// [`crate::format::config::INVERSED_VERSION`]): an inversed delta, laid out as a delta.
pub const KIND_INVERSED_DELTA: u8 = 2;

/// A container's identity: the BLAKE3 hash of its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerId(pub [u8; 32]);

impl ContainerId {
    /// Hex form, the container's object name.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses the object name: exactly 64 lowercase hex digits (the form [`Self::to_hex`]
    /// writes). Uppercase is refused: the name is also a path, and `AB…` is not the file
    /// `ab…` on a case-sensitive store.
    pub fn from_hex(s: &str) -> Option<Self> {
        ChunkId::from_lowercase_hex(s).map(|id| ContainerId(id.0))
    }
}

hex_id_serde!(ContainerId);

impl fmt::Debug for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContainerId({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// How an entry is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// The chunk's own bytes.
    Full,
    /// A delta against chunk `base` (stored in full, or in a version-3 repository a delta
    /// itself: a delta chain).
    Delta {
        /// Fingerprint of the base chunk.
        base: ChunkId,
        /// Written by inversed delta compression (LoopDelta §4.5, repository version
        /// [`crate::format::config::INVERSED_VERSION`]): a second copy of a chunk that was
        /// stored in full before, re-encoded against a newer similar chunk. It does not
        /// replace the full copy in the index while that is indexed; prune makes it the
        /// chunk's copy (see [`crate::backup::inverse`]).
        inversed: bool,
    },
}

impl EntryKind {
    /// A plain delta against `base`.
    pub fn delta(base: ChunkId) -> Self {
        EntryKind::Delta {
            base,
            inversed: false,
        }
    }

    /// Whether this is an inversed delta (see [`EntryKind::Delta`]).
    pub fn is_inversed(&self) -> bool {
        matches!(self, EntryKind::Delta { inversed: true, .. })
    }
}

/// One region as recorded in the metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionMeta {
    /// Offset of the stored bytes from the start of the container.
    pub offset: u32,
    /// Stored (compressed) length.
    pub stored_len: u32,
    /// Raw (decompressed) length.
    pub raw_len: u32,
    /// Codec code ([`compress::CODEC_NONE`], [`compress::CODEC_ZSTD`]).
    pub codec: u8,
    /// CRC32C of the stored bytes.
    pub crc: u32,
}

/// One chunk entry as recorded in the metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryMeta {
    /// The chunk's fingerprint (of its original bytes, also for a delta).
    pub id: ChunkId,
    /// Full or delta.
    pub kind: EntryKind,
    /// Index of the region holding the entry's bytes.
    pub region: u32,
    /// Offset of the entry's bytes in the raw region.
    pub offset: u32,
    /// Length of the entry's bytes in the raw region (the delta's length for a delta).
    pub stored_len: u32,
    /// Length of the original chunk.
    pub original_len: u32,
    /// The chunk's super-features (empty when the repository does not sketch).
    pub super_features: Vec<u64>,
}

/// The decoded metadata section of a container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerMeta {
    /// Regions in file order.
    pub regions: Vec<RegionMeta>,
    /// Entries in region order.
    pub entries: Vec<EntryMeta>,
}

/// Where the metadata sits, from the footer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// The container version, which decides the metadata layout.
    pub version: u16,
    /// Offset of the metadata section.
    pub meta_offset: u64,
    /// Its length.
    pub meta_len: u32,
    /// Its CRC32C.
    pub meta_crc: u32,
}

/// A raw region being filled with chunk entries before compression.
#[derive(Debug, Default)]
pub struct RegionBuilder {
    /// Raw bytes of the entries, back to back.
    pub raw: Vec<u8>,
    /// Entries; `region` is filled in when the region is added to a container.
    pub entries: Vec<EntryMeta>,
}

impl RegionBuilder {
    /// Appends an entry's bytes.
    pub fn push(
        &mut self,
        id: ChunkId,
        kind: EntryKind,
        bytes: &[u8],
        original_len: usize,
        sfs: Vec<u64>,
    ) {
        self.entries.push(EntryMeta {
            id,
            kind,
            region: 0,
            offset: self.raw.len() as u32,
            stored_len: bytes.len() as u32,
            original_len: original_len as u32,
            super_features: sfs,
        });
        self.raw.extend_from_slice(bytes);
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Compresses the region; the CPU-heavy step, run on the worker pool.
    pub fn compress(self, compression: Compression) -> CompressedRegion {
        self.compress_into(compression, Vec::new()).0
    }

    /// [`Self::compress`] into the buffer `out` (its contents are dropped); also returns the
    /// raw buffer, emptied, for reuse.
    pub fn compress_into(
        self,
        compression: Compression,
        mut out: Vec<u8>,
    ) -> (CompressedRegion, Vec<u8>) {
        let codec = compression.compress_into(&self.raw, &mut out);
        let region = CompressedRegion {
            codec,
            crc: crc32c::crc32c(&out),
            raw_len: self.raw.len() as u32,
            stored: out,
            entries: self.entries,
        };
        let mut raw = self.raw;
        raw.clear();
        (region, raw)
    }
}

/// A region ready to be appended to a container.
#[derive(Debug)]
pub struct CompressedRegion {
    /// Codec code.
    pub codec: u8,
    /// CRC32C of `stored`.
    pub crc: u32,
    /// Raw length.
    pub raw_len: u32,
    /// Stored bytes.
    pub stored: Vec<u8>,
    /// Its entries.
    pub entries: Vec<EntryMeta>,
}

/// Accumulates compressed regions into one container file.
#[derive(Debug)]
pub struct ContainerBuilder {
    version: u16,
    data: Vec<u8>,
    meta: ContainerMeta,
}

impl Default for ContainerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ContainerBuilder {
    /// An empty container (header only) of the newest version, [`CONTAINER_VERSION`].
    pub fn new() -> Self {
        Self::with_version(CONTAINER_VERSION)
    }

    /// An empty container of `version`: the repository's config decides it
    /// (`RepoConfig::container_version`), so that a repository old binaries read gets only
    /// containers they read.
    ///
    /// # Panics
    /// If `version` is not 1 ..= [`CONTAINER_VERSION`] (a caller bug: configs are validated).
    pub fn with_version(version: u16) -> Self {
        Self::reusing(version, Vec::with_capacity(4 << 20))
    }

    /// [`Self::with_version`] writing into `data` (its contents are dropped): the buffer of a
    /// sealed container, reused for the next.
    ///
    /// # Panics
    /// If `version` is not 1 ..= [`CONTAINER_VERSION`] (a caller bug: configs are validated).
    pub fn reusing(version: u16, mut data: Vec<u8>) -> Self {
        assert!(
            (CONTAINER_V1..=CONTAINER_VERSION).contains(&version),
            "container version {version}"
        );
        data.clear();
        data.extend_from_slice(CONTAINER_MAGIC);
        data.extend_from_slice(&version.to_le_bytes());
        data.extend_from_slice(&0u16.to_le_bytes()); // flags
        data.extend_from_slice(&0u64.to_le_bytes()); // reserved
        ContainerBuilder {
            version,
            data,
            meta: ContainerMeta::default(),
        }
    }

    /// The container version being written.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Bytes written so far (header and regions).
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether no region was added.
    pub fn is_empty(&self) -> bool {
        self.meta.regions.is_empty()
    }

    /// Appends a region. A region without entries holds nothing and is left out. Version 2
    /// records super-features of full entries only (a delta is never a base, so nothing reads
    /// a delta's): they are dropped here, so that the metadata returned by [`Self::seal`] is
    /// what a reader decodes.
    pub fn add_region(&mut self, region: CompressedRegion) {
        self.add_region_returning(region);
    }

    /// [`Self::add_region`], returning the region's stored-bytes buffer (emptied) for reuse.
    pub fn add_region_returning(&mut self, region: CompressedRegion) -> Vec<u8> {
        if region.entries.is_empty() {
            return region.stored;
        }
        let index = self.meta.regions.len() as u32;
        self.meta.regions.push(RegionMeta {
            offset: self.data.len() as u32,
            stored_len: region.stored.len() as u32,
            raw_len: region.raw_len,
            codec: region.codec,
            crc: region.crc,
        });
        self.data.extend_from_slice(&region.stored);
        for mut e in region.entries {
            e.region = index;
            if self.version >= CONTAINER_V2 && e.kind != EntryKind::Full {
                e.super_features = Vec::new();
            }
            self.meta.entries.push(e);
        }
        let mut stored = region.stored;
        stored.clear();
        stored
    }

    /// Finishes the file: returns its id, bytes and metadata.
    pub fn seal(mut self) -> (ContainerId, Vec<u8>, ContainerMeta) {
        let meta_bytes = match self.version {
            CONTAINER_V1 => v1::encode(&self.meta),
            _ => v2::encode(&self.meta),
        };
        let meta_offset = self.data.len() as u64;
        self.data.extend_from_slice(&meta_bytes);
        self.data.extend_from_slice(&meta_offset.to_le_bytes());
        self.data
            .extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
        self.data
            .extend_from_slice(&crc32c::crc32c(&meta_bytes).to_le_bytes());
        self.data.extend_from_slice(CONTAINER_MAGIC);
        self.data.extend_from_slice(&self.version.to_le_bytes());
        self.data.extend_from_slice(&0u16.to_le_bytes()); // reserved
        let id = ContainerId(ChunkId::of(&self.data).0);
        (id, self.data, self.meta)
    }
}

/// A bounds-checked little-endian reader over untrusted bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn id(&mut self) -> Option<ChunkId> {
        ChunkId::from_slice(self.take(32)?)
    }
    /// A varint (at most 10 bytes, at most 64 bits; `None` when truncated or overlong).
    fn varint(&mut self) -> Option<u64> {
        dedelta_core::varint::get(self.buf, &mut self.pos)
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}

/// Checks a container version read from a header or footer.
fn check_version(version: u16, what: &str) -> Result<()> {
    if (CONTAINER_V1..=CONTAINER_VERSION).contains(&version) {
        return Ok(());
    }
    Err(Error::UnsupportedVersion {
        what: what.to_string(),
        found: version.into(),
        supported: CONTAINER_VERSION.into(),
    })
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

/// Checks a container header (the first [`HEADER_LEN`] bytes): magic, version, and that the
/// flags and the reserved field are 0. Returns the version.
///
/// Readers that only need the metadata never read the header (the footer carries magic and
/// version too); readers of the whole file check it. No flag is defined in versions 1 and 2,
/// and the header has no checksum of its own, so a set bit there is damage (or a writer bug),
/// never a feature: a container format change comes with a new container version.
///
/// # Errors
/// [`Error::Corrupt`] for a wrong length or magic, non-zero flags or reserved bytes;
/// [`Error::UnsupportedVersion`] for a version outside 1 ..= [`CONTAINER_VERSION`].
pub fn decode_header(bytes: &[u8], what: &str) -> Result<u16> {
    let bad = |r: &str| Error::corrupt(what, r.to_string());
    if bytes.len() != HEADER_LEN {
        return Err(bad("header has the wrong length"));
    }
    if &bytes[HEADER_MAGIC_OFFSET..HEADER_VERSION_OFFSET] != CONTAINER_MAGIC {
        return Err(bad("not a container (bad header magic)"));
    }
    let version = u16_at(bytes, HEADER_VERSION_OFFSET);
    check_version(version, what)?;
    let flags = u16_at(bytes, HEADER_FLAGS_OFFSET);
    if flags != 0 {
        return Err(Error::corrupt(
            what,
            format!("header flags are {flags:#06x}, must be 0"),
        ));
    }
    if bytes[HEADER_RESERVED_OFFSET..HEADER_LEN]
        .iter()
        .any(|&b| b != 0)
    {
        return Err(bad("header reserved bytes are not 0"));
    }
    Ok(version)
}

/// The container length a footer implies (where its metadata section ends, plus the footer),
/// for a reader that read the container's end without asking its length; `None` if `bytes`
/// are not a footer's length or the sum overflows. [`decode_footer`] then checks the rest.
pub fn footer_implied_len(bytes: &[u8]) -> Option<u64> {
    if bytes.len() != FOOTER_LEN {
        return None;
    }
    let mut c = Cursor { buf: bytes, pos: 0 };
    let meta_offset = c.u64()?;
    let meta_len = c.u32()?;
    meta_offset
        .checked_add(u64::from(meta_len))?
        .checked_add(FOOTER_LEN as u64)
}

/// Parses a footer (the last [`FOOTER_LEN`] bytes of a container) given the container length.
///
/// # Errors
/// [`Error::Corrupt`] for a wrong length or magic, a non-zero reserved field, or a metadata
/// section that does not end exactly where the footer begins (or starts inside the header);
/// [`Error::UnsupportedVersion`] for a version outside 1 ..= [`CONTAINER_VERSION`].
pub fn decode_footer(bytes: &[u8], container_len: u64, what: &str) -> Result<Footer> {
    let bad = |r: &str| Error::corrupt(what, r.to_string());
    if bytes.len() != FOOTER_LEN {
        return Err(bad("footer has the wrong length"));
    }
    let mut c = Cursor { buf: bytes, pos: 0 };
    let meta_offset = c.u64().ok_or_else(|| bad("short footer"))?;
    let meta_len = c.u32().ok_or_else(|| bad("short footer"))?;
    let meta_crc = c.u32().ok_or_else(|| bad("short footer"))?;
    if c.take(4) != Some(CONTAINER_MAGIC.as_slice()) {
        return Err(bad("bad footer magic (truncated or not a container)"));
    }
    let version = u16_at(bytes, FOOTER_VERSION_OFFSET);
    check_version(version, what)?;
    if u16_at(bytes, FOOTER_RESERVED_OFFSET) != 0 {
        return Err(bad("footer reserved bytes are not 0"));
    }
    let end = meta_offset.checked_add(u64::from(meta_len));
    if meta_offset < HEADER_LEN as u64
        || end != Some(container_len.saturating_sub(FOOTER_LEN as u64))
    {
        return Err(bad("footer points outside the container"));
    }
    Ok(Footer {
        version,
        meta_offset,
        meta_len,
        meta_crc,
    })
}

/// Parses and checks a metadata section, in the layout of `footer.version`. Every record is
/// checked, so a hostile container yields an error, never a panic: the regions must lie back
/// to back from [`HEADER_LEN`] up to exactly `footer.meta_offset`, with a known codec (a raw
/// region's stored and raw lengths equal); every entry must lie inside its region's raw bytes,
/// with a known kind, at most [`MAX_SUPER_FEATURES`] super-features, and (full entries)
/// stored length = original length; nothing may follow the last entry. Version 2 checks more,
/// since its offsets are implied: see [`v2`].
pub fn decode_meta(bytes: &[u8], footer: &Footer, what: &str) -> Result<ContainerMeta> {
    if crc32c::crc32c(bytes) != footer.meta_crc {
        return Err(Error::corrupt(what, "metadata checksum mismatch"));
    }
    match footer.version {
        CONTAINER_V1 => v1::decode(bytes, footer, what),
        CONTAINER_V2 => v2::decode(bytes, footer, what),
        v => Err(Error::UnsupportedVersion {
            what: what.to_string(),
            found: v.into(),
            supported: CONTAINER_VERSION.into(),
        }),
    }
}

/// Parses the metadata of a whole container file held in memory, checking its header too
/// ([`decode_header`]): the header and the footer must name the same version.
pub fn decode_container_meta(file: &[u8], what: &str) -> Result<ContainerMeta> {
    if file.len() < HEADER_LEN + FOOTER_LEN {
        return Err(Error::corrupt(what, "not a container (too short)"));
    }
    let version = decode_header(&file[..HEADER_LEN], what)?;
    let footer_version = u16_at(file, file.len() - FOOTER_LEN + FOOTER_VERSION_OFFSET);
    if footer_version != version && check_version(footer_version, what).is_ok() {
        return Err(Error::corrupt(
            what,
            format!("header version {version} differs from footer version {footer_version}"),
        ));
    }
    decode_container_body(file, what)
}

/// Parses the metadata of a whole container file from its footer, without looking at the
/// header: what a reader with ranged reads sees. Repair uses it to reach the entries of a
/// container whose header (which carries nothing the entries need) is damaged.
pub fn decode_container_body(file: &[u8], what: &str) -> Result<ContainerMeta> {
    if file.len() < HEADER_LEN + FOOTER_LEN {
        return Err(Error::corrupt(what, "not a container (too short)"));
    }
    let footer = decode_footer(&file[file.len() - FOOTER_LEN..], file.len() as u64, what)?;
    let start = footer.meta_offset as usize;
    decode_meta(
        &file[start..start + footer.meta_len as usize],
        &footer,
        what,
    )
}

/// Checks a region's CRC and decompresses it.
pub fn open_region(stored: &[u8], region: &RegionMeta, what: &str) -> Result<Vec<u8>> {
    open_region_with(
        &mut compress::RegionDecompressor::default(),
        stored,
        region,
        what,
    )
}

/// [`open_region`] with a reused decompression context.
pub fn open_region_with(
    dec: &mut compress::RegionDecompressor,
    stored: &[u8],
    region: &RegionMeta,
    what: &str,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    open_region_into(dec, stored, region, what, &mut out)?;
    Ok(out)
}

/// [`open_region_with`] into a reused buffer.
pub fn open_region_into(
    dec: &mut compress::RegionDecompressor,
    stored: &[u8],
    region: &RegionMeta,
    what: &str,
    out: &mut Vec<u8>,
) -> Result<()> {
    open_region_prefix_into(dec, stored, region, usize::MAX, what, out)
}

/// [`open_region_into`], decompressing only the region's first `upto` bytes (all of them if
/// `upto` is at least its raw length): see
/// [`compress::RegionDecompressor::decompress_prefix_into`].
pub fn open_region_prefix_into(
    dec: &mut compress::RegionDecompressor,
    stored: &[u8],
    region: &RegionMeta,
    upto: usize,
    what: &str,
    out: &mut Vec<u8>,
) -> Result<()> {
    if crc32c::crc32c(stored) != region.crc {
        return Err(Error::corrupt(
            what,
            format!("region at offset {} fails its checksum", region.offset),
        ));
    }
    dec.decompress_prefix_into(region.codec, stored, region.raw_len as usize, upto, out)
        .map_err(|e| Error::corrupt(what, format!("region at offset {}: {e}", region.offset)))
}

#[cfg(test)]
mod tests;
