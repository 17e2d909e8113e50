//! Container version 2: the lean metadata section.
//!
//! Version 1 spends 50 fixed bytes on every entry, plus 8 per super-feature on deltas too;
//! on 20 SQLAlchemy versions that was 97 bytes per entry, 13% of the repository, and zstd gains
//! only 8.5% on it (fingerprints are random). Version 2 keeps only what cannot be recomputed
//! from the rest of the section:
//!
//! - offsets are implied: entries lie back to back in their region from offset 0 (what every
//!   writer already did), so an entry's offset is the sum of the stored lengths before it;
//! - region numbers are implied by a per-region entry count, and a region's raw length is the
//!   sum of its entries' stored lengths, and its file offset the sum of the regions before it;
//! - lengths are varints, and a full entry's original length is its stored length;
//! - super-features are recorded where something reads them: the sketch indexes (client
//!   index, stream index) and the copies of prune and repair read those of full entries only,
//!   because with one-level deltas a delta is never a base (with chains, DupAdj's positional
//!   hint finds them). Writers record none on deltas; the count field stays per entry, so a
//!   later writer may record them without a new layout;
//! - a delta whose base is the base of an earlier delta of the same container names that
//!   entry by its distance instead of repeating 32 bytes.
//!
//! Compressing the section was measured and rejected: zstd -3 of the whole section gains
//! 0.2% of it (fingerprints, bases and super-features are random, and they are 90% of the
//! bytes), which does not pay for a second decoder with a decompression bound to fuzz.
//! Byte tables in docs/format.md ("Metadata section, version 2").
//!
//! Implied fields make the decoder's checks stronger, not weaker: entries cannot overlap or
//! leave gaps by construction, and a region's raw length must match what its codec yields
//! when it is read.

use super::{
    ContainerMeta, Cursor, EntryKind, EntryMeta, Footer, RegionMeta, HEADER_LEN, KIND_DELTA,
    KIND_FULL, KIND_INVERSED_DELTA, MAX_REGION_RAW_LEN, MAX_SUPER_FEATURES,
};
use crate::error::{Error, Result};
use dedelta_core::compress;
use dedelta_core::{varint, ChunkId};
use std::collections::HashMap;

/// Entry head, bits 0-1: the kind code ([`KIND_FULL`], [`KIND_DELTA`], [`KIND_INVERSED_DELTA`];
/// 3 is invalid).
pub const HEAD_KIND_MASK: u8 = 0b0000_0011;
/// Entry head, bit 2 (deltas only): the base is that of an earlier delta entry, named by a
/// varint distance, instead of a 32-byte fingerprint.
pub const HEAD_BASE_BACKREF: u8 = 0b0000_0100;
/// Entry head, bits 3-7: the super-feature count (0 ..= [`MAX_SUPER_FEATURES`]).
pub const HEAD_SF_SHIFT: u32 = 3;
/// Smallest region record: codec u8, CRC32C u32, stored length and entry count (one byte each).
pub const MIN_REGION_RECORD_LEN: usize = 1 + 4 + 1 + 1;
/// Smallest entry record: head u8, fingerprint (32), stored length (one byte).
pub const MIN_ENTRY_LEN: usize = 1 + 32 + 1;

/// Encodes the metadata section. `meta` is what [`super::ContainerBuilder`] accumulated:
/// entries in region order, back to back from offset 0 in each region, every region with at
/// least one entry.
pub(super) fn encode(meta: &ContainerMeta) -> Vec<u8> {
    let mut counts = vec![0u64; meta.regions.len()];
    for e in &meta.entries {
        counts[e.region as usize] += 1;
    }
    let mut out = Vec::with_capacity(8 + meta.regions.len() * 12 + meta.entries.len() * 72);
    varint::put(&mut out, meta.regions.len() as u64);
    for (r, n) in meta.regions.iter().zip(&counts) {
        debug_assert!(*n > 0, "a region without entries");
        out.push(r.codec);
        out.extend_from_slice(&r.crc.to_le_bytes());
        varint::put(&mut out, u64::from(r.stored_len));
        varint::put(&mut out, *n);
    }
    // The entry number of the last delta seen on each base.
    let mut last_on_base: HashMap<ChunkId, usize> = HashMap::new();
    let mut at = (0u32, 0u32); // (region, offset) the next entry must have
    for (i, e) in meta.entries.iter().enumerate() {
        if e.region != at.0 {
            at = (e.region, 0);
        }
        debug_assert_eq!(e.offset, at.1, "entries are not back to back");
        debug_assert!(e.kind != EntryKind::Full || e.stored_len == e.original_len);
        at.1 += e.stored_len;
        let sfs = &e.super_features[..e.super_features.len().min(MAX_SUPER_FEATURES)];
        let (kind, backref) = match e.kind {
            EntryKind::Full => (KIND_FULL, None),
            EntryKind::Delta { base, inversed } => (
                if inversed {
                    KIND_INVERSED_DELTA
                } else {
                    KIND_DELTA
                },
                last_on_base.insert(base, i),
            ),
        };
        let mut head = kind | (sfs.len() as u8) << HEAD_SF_SHIFT;
        if backref.is_some() {
            head |= HEAD_BASE_BACKREF;
        }
        out.push(head);
        out.extend_from_slice(e.id.as_bytes());
        varint::put(&mut out, u64::from(e.stored_len));
        if let EntryKind::Delta { base, .. } = e.kind {
            varint::put(&mut out, u64::from(e.original_len));
            match backref {
                Some(j) => varint::put(&mut out, (i - j) as u64),
                None => out.extend_from_slice(base.as_bytes()),
            }
        }
        for sf in sfs {
            out.extend_from_slice(&sf.to_le_bytes());
        }
    }
    out
}

/// Decodes and checks a version-2 metadata section (its checksum already checked). Beyond the
/// version-1 checks: every count and length a varint of at most 10 bytes that fits its field
/// (u32), at least one entry per region, no entry of 0 bytes, a back-reference that names an
/// earlier delta entry, no back-reference bit on a full entry, a region's implied raw length
/// at most [`MAX_REGION_RAW_LEN`], and nothing after the last entry.
pub(super) fn decode(bytes: &[u8], footer: &Footer, what: &str) -> Result<ContainerMeta> {
    let bad = |r: String| Error::corrupt(what, r);
    let short = || bad("metadata truncated".into());
    let mut c = Cursor { buf: bytes, pos: 0 };
    let u32_of = |v: Option<u64>, field: &str| -> Result<u32> {
        let v = v.ok_or_else(|| bad(format!("metadata truncated or bad varint ({field})")))?;
        u32::try_from(v).map_err(|_| bad(format!("{field} {v} exceeds 32 bits")))
    };
    let nregions = c.varint().ok_or_else(short)?;
    if nregions > (c.remaining() / MIN_REGION_RECORD_LEN) as u64 {
        return Err(bad(format!("implausible region count {nregions}")));
    }
    // (codec, crc, offset, stored length, entry count) of each region.
    let mut records = Vec::with_capacity(nregions as usize);
    let mut next_offset = HEADER_LEN as u64;
    let mut nentries = 0u64;
    for i in 0..nregions {
        let codec = c.u8().ok_or_else(short)?;
        let crc = c.u32().ok_or_else(short)?;
        let stored_len = u32_of(c.varint(), "region stored length")?;
        let count = c.varint().ok_or_else(short)?;
        if !matches!(codec, compress::CODEC_NONE | compress::CODEC_ZSTD) {
            return Err(bad(format!("region {i} has unknown codec {codec}")));
        }
        if count == 0 {
            return Err(bad(format!("region {i} has no entries")));
        }
        nentries = nentries.saturating_add(count);
        if nentries > (c.remaining() / MIN_ENTRY_LEN) as u64 {
            return Err(bad(format!("implausible entry count in region {i}")));
        }
        let offset = u32::try_from(next_offset)
            .map_err(|_| bad(format!("region {i} starts beyond 4 GiB")))?;
        next_offset += u64::from(stored_len);
        if next_offset > footer.meta_offset {
            return Err(bad(format!("region {i} overlaps the metadata")));
        }
        records.push((codec, crc, offset, stored_len, count));
    }
    if next_offset != footer.meta_offset {
        return Err(bad(format!(
            "metadata starts at {}, not where the last region ends ({next_offset})",
            footer.meta_offset
        )));
    }
    let mut regions = Vec::with_capacity(records.len());
    let mut entries: Vec<EntryMeta> = Vec::with_capacity(nentries as usize);
    for (region, &(codec, crc, offset, stored_len, count)) in records.iter().enumerate() {
        let mut raw_len = 0u32;
        for _ in 0..count {
            let i = entries.len();
            let head = c.u8().ok_or_else(short)?;
            let id = c.id().ok_or_else(short)?;
            let len = u32_of(c.varint(), "entry stored length")?;
            if len == 0 {
                return Err(bad(format!("entry {i} has stored length 0")));
            }
            let nsf = usize::from(head >> HEAD_SF_SHIFT);
            if nsf > MAX_SUPER_FEATURES {
                return Err(bad(format!("entry {i} has {nsf} super-features")));
            }
            let backref = head & HEAD_BASE_BACKREF != 0;
            let (kind, original_len) = match head & HEAD_KIND_MASK {
                KIND_FULL if backref => {
                    return Err(bad(format!(
                        "full entry {i} has the base back-reference bit"
                    )))
                }
                KIND_FULL => (EntryKind::Full, len),
                k @ (KIND_DELTA | KIND_INVERSED_DELTA) => {
                    let original_len = u32_of(c.varint(), "entry original length")?;
                    let base = if backref {
                        let d = c.varint().ok_or_else(short)?;
                        let earlier = (d >= 1 && d <= i as u64)
                            .then(|| &entries[i - d as usize])
                            .ok_or_else(|| bad(format!("entry {i} refers back {d} entries")))?;
                        match earlier.kind {
                            EntryKind::Delta { base, .. } => base,
                            EntryKind::Full => {
                                return Err(bad(format!(
                                    "entry {i} takes the base of full entry {}",
                                    i - d as usize
                                )))
                            }
                        }
                    } else {
                        c.id().ok_or_else(short)?
                    };
                    let inversed = k == KIND_INVERSED_DELTA;
                    (EntryKind::Delta { base, inversed }, original_len)
                }
                k => return Err(bad(format!("entry {i} has unknown kind {k}"))),
            };
            let mut super_features = Vec::with_capacity(nsf);
            for _ in 0..nsf {
                super_features.push(c.u64().ok_or_else(short)?);
            }
            entries.push(EntryMeta {
                id,
                kind,
                region: region as u32,
                offset: raw_len,
                stored_len: len,
                original_len,
                super_features,
            });
            raw_len = raw_len
                .checked_add(len)
                .filter(|&n| n <= MAX_REGION_RAW_LEN)
                .ok_or_else(|| {
                    bad(format!(
                        "region {region} is larger than {MAX_REGION_RAW_LEN} bytes raw"
                    ))
                })?;
        }
        if codec == compress::CODEC_NONE && stored_len != raw_len {
            return Err(bad(format!(
                "raw region {region} has stored length {stored_len} != raw length {raw_len}"
            )));
        }
        regions.push(RegionMeta {
            offset,
            stored_len,
            raw_len,
            codec,
            crc,
        });
    }
    if c.pos != bytes.len() {
        return Err(bad("trailing bytes after the metadata".into()));
    }
    Ok(ContainerMeta { regions, entries })
}

#[cfg(test)]
mod tests;
