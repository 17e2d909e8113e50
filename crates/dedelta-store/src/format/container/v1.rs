//! The version-1 metadata section: fixed-size records, every field written out (see
//! docs/format.md, "Metadata section"). Version-1 repositories still write it, byte for byte,
//! so that builds that know only version 1 keep reading them; [`super::v2`] is the lean layout
//! of later versions.

use super::{
    ContainerMeta, Cursor, EntryKind, EntryMeta, Footer, RegionMeta, HEADER_LEN, KIND_DELTA,
    KIND_FULL, MAX_REGION_RAW_LEN, MAX_SUPER_FEATURES,
};
use crate::error::{Error, Result};
use dedelta_core::compress;

/// Metadata section: size of the u32 region count, and of the u32 entry count.
pub const META_COUNT_LEN: usize = 4;

/// Region record: offset of the u32 offset of the stored bytes in the file.
pub const REGION_OFFSET_OFFSET: usize = 0;
/// Region record: offset of the u32 stored length.
pub const REGION_STORED_LEN_OFFSET: usize = REGION_OFFSET_OFFSET + 4;
/// Region record: offset of the u32 raw length.
pub const REGION_RAW_LEN_OFFSET: usize = REGION_STORED_LEN_OFFSET + 4;
/// Region record: offset of the u8 codec code.
pub const REGION_CODEC_OFFSET: usize = REGION_RAW_LEN_OFFSET + 4;
/// Region record: offset of the u32 CRC32C of the stored bytes.
pub const REGION_CRC_OFFSET: usize = REGION_CODEC_OFFSET + 1;
/// One region record in the metadata: offset u32, stored length u32, raw length u32,
/// codec u8, CRC32C u32 of the stored bytes.
pub const REGION_RECORD_LEN: usize = REGION_CRC_OFFSET + 4;

/// Entry record: offset of the 32-byte fingerprint.
pub const ENTRY_ID_OFFSET: usize = 0;
/// Entry record: offset of the u8 kind code.
pub const ENTRY_KIND_OFFSET: usize = ENTRY_ID_OFFSET + 32;
/// Entry record: offset of the u32 region number.
pub const ENTRY_REGION_OFFSET: usize = ENTRY_KIND_OFFSET + 1;
/// Entry record: offset of the u32 offset in the raw region.
pub const ENTRY_OFFSET_OFFSET: usize = ENTRY_REGION_OFFSET + 4;
/// Entry record: offset of the u32 stored length.
pub const ENTRY_STORED_LEN_OFFSET: usize = ENTRY_OFFSET_OFFSET + 4;
/// Entry record: offset of the u32 original length.
pub const ENTRY_ORIGINAL_LEN_OFFSET: usize = ENTRY_STORED_LEN_OFFSET + 4;
/// Entry record: offset of the u8 super-feature count.
pub const ENTRY_SF_COUNT_OFFSET: usize = ENTRY_ORIGINAL_LEN_OFFSET + 4;
/// Fixed part of an entry record: id (32), kind u8, region u32, offset u32, stored length u32,
/// original length u32, super-feature count u8. A delta's base id (32) and the super-features
/// (8 each) follow.
pub const ENTRY_FIXED_LEN: usize = ENTRY_SF_COUNT_OFFSET + 1;
/// Size of a delta entry's base fingerprint, right after the fixed part.
pub const ENTRY_BASE_LEN: usize = 32;
/// Size of one super-feature (u64) in an entry record.
pub const ENTRY_SF_LEN: usize = 8;
/// The version-1 metadata section: fixed-size records.
pub fn encode(meta: &ContainerMeta) -> Vec<u8> {
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
        // Inversed deltas exist only in version-4 repositories, whose containers are v2.
        debug_assert!(!e.kind.is_inversed(), "an inversed delta in a v1 container");
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
        if let EntryKind::Delta { base, .. } = e.kind {
            out.extend_from_slice(base.as_bytes());
        }
        for sf in e.super_features.iter().take(MAX_SUPER_FEATURES) {
            out.extend_from_slice(&sf.to_le_bytes());
        }
    }
    out
}

/// The version-1 metadata section (checksum already checked).
pub fn decode(bytes: &[u8], footer: &Footer, what: &str) -> Result<ContainerMeta> {
    let bad = |r: String| Error::corrupt(what, r);
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
        if r.raw_len > MAX_REGION_RAW_LEN {
            return Err(bad(format!(
                "region {i} claims {} raw bytes, more than {MAX_REGION_RAW_LEN}",
                r.raw_len
            )));
        }
        match r.codec {
            compress::CODEC_ZSTD => {}
            compress::CODEC_NONE if r.stored_len == r.raw_len => {}
            compress::CODEC_NONE => {
                return Err(bad(format!(
                    "raw region {i} has stored length {} != raw length {}",
                    r.stored_len, r.raw_len
                )))
            }
            c => return Err(bad(format!("region {i} has unknown codec {c}"))),
        }
        expect_offset += u64::from(r.stored_len);
        if expect_offset > footer.meta_offset {
            return Err(bad(format!("region {i} overlaps the metadata")));
        }
        regions.push(r);
    }
    if expect_offset != footer.meta_offset {
        return Err(bad(format!(
            "metadata starts at {}, not where the last region ends ({expect_offset})",
            footer.meta_offset
        )));
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
            KIND_DELTA => EntryKind::delta(c.id().ok_or_else(short)?),
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
