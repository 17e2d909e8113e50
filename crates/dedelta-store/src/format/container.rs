//! Containers: the write-once files that hold chunk data.
//!
//! A container is a header, compression regions back to back, a metadata section describing
//! every region and every chunk entry, and a fixed-size footer that locates the metadata (so a
//! reader fetches the footer and the metadata with two ranged reads, without the data).
//! The container id is the BLAKE3 hash of the whole file: unique across clients without
//! coordination, and verifiable with `b3sum`. Byte tables are in docs/format.md; the constants
//! here mirror them.

use crate::error::{Error, Result};
use dedelta_core::compress::{self, Compression};
use dedelta_core::ChunkId;
use std::fmt;

/// Magic at the start and in the footer of every container.
pub const CONTAINER_MAGIC: &[u8; 4] = b"DDCT";
/// Container format version.
pub const CONTAINER_VERSION: u16 = 1;
/// Header: magic (4), version u16, flags u16, reserved u64.
pub const HEADER_LEN: usize = 16;
/// Footer: metadata offset u64, metadata length u32, metadata CRC32C u32, magic (4),
/// version u16, reserved u16.
pub const FOOTER_LEN: usize = 24;
/// One region record in the metadata: offset u32, stored length u32, raw length u32,
/// codec u8, CRC32C u32 of the stored bytes.
pub const REGION_RECORD_LEN: usize = 17;
/// Fixed part of an entry record: id (32), kind u8, region u32, offset u32, stored length u32,
/// original length u32, super-feature count u8.
pub const ENTRY_FIXED_LEN: usize = 32 + 1 + 4 + 4 + 4 + 4 + 1;
/// Most super-features an entry may carry.
pub const MAX_SUPER_FEATURES: usize = 16;

/// Entry kind code: the chunk's bytes as they are.
pub const KIND_FULL: u8 = 0;
/// Entry kind code: a delta against a full base chunk.
pub const KIND_DELTA: u8 = 1;

/// A container's identity: the BLAKE3 hash of its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerId(pub [u8; 32]);

impl ContainerId {
    /// Hex form, the container's object name.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses the hex form.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(ContainerId(out))
    }
}

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
    /// A delta against the full chunk `base` (one level: a base is never a delta).
    Delta {
        /// Fingerprint of the base chunk.
        base: ChunkId,
    },
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
        let (codec, stored) = compression.compress(&self.raw);
        CompressedRegion {
            codec,
            crc: crc32c::crc32c(&stored),
            raw_len: self.raw.len() as u32,
            stored,
            entries: self.entries,
        }
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
    data: Vec<u8>,
    meta: ContainerMeta,
}

impl Default for ContainerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ContainerBuilder {
    /// An empty container (header only).
    pub fn new() -> Self {
        let mut data = Vec::with_capacity(4 << 20);
        data.extend_from_slice(CONTAINER_MAGIC);
        data.extend_from_slice(&CONTAINER_VERSION.to_le_bytes());
        data.extend_from_slice(&0u16.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        ContainerBuilder {
            data,
            meta: ContainerMeta::default(),
        }
    }

    /// Bytes written so far (header and regions).
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether no region was added.
    pub fn is_empty(&self) -> bool {
        self.meta.regions.is_empty()
    }

    /// Appends a region.
    pub fn add_region(&mut self, region: CompressedRegion) {
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
            self.meta.entries.push(e);
        }
    }

    /// Finishes the file: returns its id, bytes and metadata.
    pub fn seal(mut self) -> (ContainerId, Vec<u8>, ContainerMeta) {
        let meta_bytes = encode_meta(&self.meta);
        let meta_offset = self.data.len() as u64;
        self.data.extend_from_slice(&meta_bytes);
        self.data.extend_from_slice(&meta_offset.to_le_bytes());
        self.data
            .extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
        self.data
            .extend_from_slice(&crc32c::crc32c(&meta_bytes).to_le_bytes());
        self.data.extend_from_slice(CONTAINER_MAGIC);
        self.data
            .extend_from_slice(&CONTAINER_VERSION.to_le_bytes());
        self.data.extend_from_slice(&0u16.to_le_bytes());
        let id = ContainerId(ChunkId::of(&self.data).0);
        (id, self.data, self.meta)
    }
}

fn encode_meta(meta: &ContainerMeta) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(8 + meta.regions.len() * REGION_RECORD_LEN + meta.entries.len() * 64);
    out.extend_from_slice(&(meta.regions.len() as u32).to_le_bytes());
    for r in &meta.regions {
        out.extend_from_slice(&r.offset.to_le_bytes());
        out.extend_from_slice(&r.stored_len.to_le_bytes());
        out.extend_from_slice(&r.raw_len.to_le_bytes());
        out.push(r.codec);
        out.extend_from_slice(&r.crc.to_le_bytes());
    }
    out.extend_from_slice(&(meta.entries.len() as u32).to_le_bytes());
    for e in &meta.entries {
        out.extend_from_slice(e.id.as_bytes());
        out.push(match e.kind {
            EntryKind::Full => KIND_FULL,
            EntryKind::Delta { .. } => KIND_DELTA,
        });
        out.extend_from_slice(&e.region.to_le_bytes());
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.stored_len.to_le_bytes());
        out.extend_from_slice(&e.original_len.to_le_bytes());
        out.push(e.super_features.len().min(MAX_SUPER_FEATURES) as u8);
        if let EntryKind::Delta { base } = e.kind {
            out.extend_from_slice(base.as_bytes());
        }
        for sf in e.super_features.iter().take(MAX_SUPER_FEATURES) {
            out.extend_from_slice(&sf.to_le_bytes());
        }
    }
    out
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
}

/// Parses a footer (the last [`FOOTER_LEN`] bytes of a container) given the container length.
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
    let version = u32::from(u16::from_le_bytes([bytes[20], bytes[21]]));
    if version != u32::from(CONTAINER_VERSION) {
        return Err(Error::UnsupportedVersion {
            what: what.to_string(),
            found: version,
            supported: CONTAINER_VERSION.into(),
        });
    }
    let end = meta_offset.checked_add(u64::from(meta_len));
    if meta_offset < HEADER_LEN as u64
        || end != Some(container_len.saturating_sub(FOOTER_LEN as u64))
    {
        return Err(bad("footer points outside the container"));
    }
    Ok(Footer {
        meta_offset,
        meta_len,
        meta_crc,
    })
}

/// Parses and checks a metadata section. `meta_offset` bounds the regions; every record is
/// checked, so a hostile container yields an error, never a panic.
pub fn decode_meta(bytes: &[u8], footer: &Footer, what: &str) -> Result<ContainerMeta> {
    let bad = |r: String| Error::corrupt(what, r);
    if crc32c::crc32c(bytes) != footer.meta_crc {
        return Err(bad("metadata checksum mismatch".into()));
    }
    let short = || bad("metadata truncated".into());
    let mut c = Cursor { buf: bytes, pos: 0 };
    let nregions = c.u32().ok_or_else(short)? as usize;
    if nregions > bytes.len() / REGION_RECORD_LEN {
        return Err(bad(format!("implausible region count {nregions}")));
    }
    let mut regions = Vec::with_capacity(nregions);
    let mut expect_offset = HEADER_LEN as u64;
    for i in 0..nregions {
        let r = RegionMeta {
            offset: c.u32().ok_or_else(short)?,
            stored_len: c.u32().ok_or_else(short)?,
            raw_len: c.u32().ok_or_else(short)?,
            codec: c.u8().ok_or_else(short)?,
            crc: c.u32().ok_or_else(short)?,
        };
        if u64::from(r.offset) != expect_offset {
            return Err(bad(format!(
                "region {i} is not where the previous one ends"
            )));
        }
        expect_offset += u64::from(r.stored_len);
        if expect_offset > footer.meta_offset {
            return Err(bad(format!("region {i} overlaps the metadata")));
        }
        regions.push(r);
    }
    let nentries = c.u32().ok_or_else(short)? as usize;
    if nentries > bytes.len() / ENTRY_FIXED_LEN {
        return Err(bad(format!("implausible entry count {nentries}")));
    }
    let mut entries = Vec::with_capacity(nentries);
    for i in 0..nentries {
        let id = c.id().ok_or_else(short)?;
        let kind_code = c.u8().ok_or_else(short)?;
        let region = c.u32().ok_or_else(short)?;
        let offset = c.u32().ok_or_else(short)?;
        let stored_len = c.u32().ok_or_else(short)?;
        let original_len = c.u32().ok_or_else(short)?;
        let nsf = c.u8().ok_or_else(short)? as usize;
        if nsf > MAX_SUPER_FEATURES {
            return Err(bad(format!("entry {i} has {nsf} super-features")));
        }
        let kind = match kind_code {
            KIND_FULL => EntryKind::Full,
            KIND_DELTA => EntryKind::Delta {
                base: c.id().ok_or_else(short)?,
            },
            k => return Err(bad(format!("entry {i} has unknown kind {k}"))),
        };
        let mut super_features = Vec::with_capacity(nsf);
        for _ in 0..nsf {
            super_features.push(c.u64().ok_or_else(short)?);
        }
        let reg = regions
            .get(region as usize)
            .ok_or_else(|| bad(format!("entry {i} names region {region} of {nregions}")))?;
        if u64::from(offset) + u64::from(stored_len) > u64::from(reg.raw_len) {
            return Err(bad(format!("entry {i} lies outside its region")));
        }
        if kind == EntryKind::Full && stored_len != original_len {
            return Err(bad(format!(
                "full entry {i} has stored length != original length"
            )));
        }
        entries.push(EntryMeta {
            id,
            kind,
            region,
            offset,
            stored_len,
            original_len,
            super_features,
        });
    }
    if c.pos != bytes.len() {
        return Err(bad("trailing bytes after the metadata".into()));
    }
    Ok(ContainerMeta { regions, entries })
}

/// Parses the metadata of a whole container file held in memory.
pub fn decode_container_meta(file: &[u8], what: &str) -> Result<ContainerMeta> {
    if file.len() < HEADER_LEN + FOOTER_LEN || &file[..4] != CONTAINER_MAGIC {
        return Err(Error::corrupt(what, "not a container (bad header)"));
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
    if crc32c::crc32c(stored) != region.crc {
        return Err(Error::corrupt(
            what,
            format!("region at offset {} fails its checksum", region.offset),
        ));
    }
    dec.decompress_into(region.codec, stored, region.raw_len as usize, out)
        .map_err(|e| Error::corrupt(what, format!("region at offset {}: {e}", region.offset)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> (ContainerId, Vec<u8>, ContainerMeta) {
        let mut b = ContainerBuilder::new();
        for r in 0..3u8 {
            let mut reg = RegionBuilder::default();
            for i in 0..4u8 {
                let data = vec![r * 10 + i; 1000 + usize::from(i)];
                let id = ChunkId::of(&data);
                let kind = if i == 3 {
                    EntryKind::Delta {
                        base: ChunkId::of(b"base"),
                    }
                } else {
                    EntryKind::Full
                };
                let orig = if i == 3 { 5000 } else { data.len() };
                reg.push(id, kind, &data, orig, vec![1, 2, 3]);
            }
            b.add_region(reg.compress(Compression::Zstd { level: 3 }));
        }
        b.seal()
    }

    #[test]
    fn round_trip() {
        let (id, file, meta) = sample();
        assert_eq!(id.0, ChunkId::of(&file).0);
        let decoded = decode_container_meta(&file, "c").unwrap();
        assert_eq!(decoded, meta);
        assert_eq!(decoded.entries.len(), 12);
        for e in &decoded.entries {
            let r = &decoded.regions[e.region as usize];
            let stored = &file[r.offset as usize..(r.offset + r.stored_len) as usize];
            let raw = open_region(stored, r, "c").unwrap();
            let bytes = &raw[e.offset as usize..(e.offset + e.stored_len) as usize];
            assert_eq!(ChunkId::of(bytes), e.id);
        }
    }

    #[test]
    fn sizes_match_the_doc() {
        let mut b = ContainerBuilder::new();
        assert_eq!(b.len(), HEADER_LEN);
        let mut reg = RegionBuilder::default();
        reg.push(ChunkId::of(b"x"), EntryKind::Full, b"x", 1, vec![]);
        b.add_region(reg.compress(Compression::None));
        let (_, file, _) = b.seal();
        // header + 1 byte region + meta (4 + 17 + 4 + entry 50) + footer
        assert_eq!(
            file.len(),
            HEADER_LEN + 1 + 4 + REGION_RECORD_LEN + 4 + ENTRY_FIXED_LEN + FOOTER_LEN
        );
    }

    #[test]
    fn flipped_bytes_are_detected() {
        let (_, file, _) = sample();
        for pos in (0..file.len()).step_by(97) {
            let mut bad = file.clone();
            bad[pos] ^= 0x40;
            let meta_ok = decode_container_meta(&bad, "c");
            if let Ok(meta) = meta_ok {
                // The flip hit region data: some region CRC must fail.
                let any_bad = meta.regions.iter().any(|r| {
                    let s = &bad[r.offset as usize..(r.offset + r.stored_len) as usize];
                    open_region(s, r, "c").is_err()
                });
                assert!(any_bad || pos < HEADER_LEN, "flip at {pos} undetected");
            }
        }
    }

    proptest! {
        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..2000) {
            let _ = decode_container_meta(&bytes, "c");
            let (_, file, _) = sample();
            let cut = cut.min(file.len());
            let _ = decode_container_meta(&file[cut..], "c");
            let _ = decode_container_meta(&file[..cut], "c");
        }
    }
}
