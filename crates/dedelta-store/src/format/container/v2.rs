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
mod tests {
    use super::super::{
        decode_container_meta, open_region, ContainerBuilder, RegionBuilder, CONTAINER_V1,
        CONTAINER_V2, CONTAINER_VERSION, FOOTER_LEN, FOOTER_META_LEN_OFFSET, FOOTER_VERSION_OFFSET,
        HEADER_VERSION_OFFSET,
    };
    use super::*;
    use dedelta_core::compress::Compression;

    /// The metadata section of `file`.
    fn meta_of(file: &[u8]) -> &[u8] {
        let f = &file[file.len() - FOOTER_LEN..];
        let start = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
        let len = u32::from_le_bytes(f[8..12].try_into().unwrap()) as usize;
        &file[start..start + len]
    }

    /// `file` with its metadata section replaced by `meta`, the footer's length and CRC32C
    /// recomputed: only the metadata is wrong.
    fn with_meta(file: &[u8], meta: &[u8]) -> Vec<u8> {
        let start = file.len() - FOOTER_LEN - meta_of(file).len();
        let mut out = file[..start].to_vec();
        out.extend_from_slice(meta);
        out.extend_from_slice(&(start as u64).to_le_bytes());
        out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(meta).to_le_bytes());
        out.extend_from_slice(&file[file.len() - FOOTER_LEN + FOOTER_META_LEN_OFFSET + 8..]);
        out
    }

    fn err(file: &[u8]) -> String {
        match decode_container_meta(file, "c") {
            Ok(m) => panic!("accepted: {m:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// The version-2 example of docs/format.md, byte by byte: a raw region with a full entry
    /// (two super-features), a zstd region with two deltas on one base (the second names it
    /// by back-reference; their super-features are not recorded).
    #[test]
    fn layout_matches_the_doc() {
        let full = b"full chunk bytes".to_vec();
        let base = ChunkId::of(b"the base");
        let (t1, t2) = (ChunkId::of(b"target 1"), ChunkId::of(b"target 2"));
        let mut b = ContainerBuilder::new();
        assert_eq!(b.version(), CONTAINER_VERSION);
        let mut r0 = RegionBuilder::default();
        r0.push(ChunkId::of(&full), EntryKind::Full, &full, 16, vec![11, 12]);
        b.add_region(r0.compress(Compression::None));
        let mut r1 = RegionBuilder::default();
        r1.push(t1, EntryKind::delta(base), &[7u8; 4000], 9000, vec![5]);
        r1.push(t2, EntryKind::delta(base), &[7u8; 3000], 8000, vec![6]);
        b.add_region(r1.compress(Compression::zstd(3)));
        let (_, file, meta) = b.seal();
        assert_eq!(&file[HEADER_VERSION_OFFSET..][..2], &[2, 0]);
        assert_eq!(
            &file[file.len() - FOOTER_LEN + FOOTER_VERSION_OFFSET..][..2],
            &[2, 0]
        );
        let (g0, g1) = (&meta.regions[0], &meta.regions[1]);
        assert_eq!(g0.stored_len, 16);
        assert!(g1.stored_len < 128, "one-byte varint expected");

        let mut expect = vec![0x02]; // two regions
        expect.push(0x00); // region 0: codec raw, CRC32C, stored length 16, one entry
        expect.extend_from_slice(&g0.crc.to_le_bytes());
        expect.extend_from_slice(&[0x10, 0x01]);
        expect.push(0x01); // region 1: codec zstd, CRC32C, stored length, two entries
        expect.extend_from_slice(&g1.crc.to_le_bytes());
        expect.extend_from_slice(&[g1.stored_len as u8, 0x02]);
        expect.push(0x10); // full, no back-reference, 2 super-features: 2 << 3
        expect.extend_from_slice(ChunkId::of(&full).as_bytes());
        expect.push(0x10); // stored length 16 (= original length)
        expect.extend_from_slice(&11u64.to_le_bytes());
        expect.extend_from_slice(&12u64.to_le_bytes());
        expect.push(0x01); // delta, base inline, no super-features
        expect.extend_from_slice(t1.as_bytes());
        expect.extend_from_slice(&[0xa0, 0x1f, 0xa8, 0x46]); // 4000, 9000
        expect.extend_from_slice(base.as_bytes());
        expect.push(0x05); // delta, base by back-reference
        expect.extend_from_slice(t2.as_bytes());
        expect.extend_from_slice(&[0xb8, 0x17, 0xc0, 0x3e, 0x01]); // 3000, 8000, 1 entry back
        assert_eq!(meta_of(&file), expect.as_slice());
        assert_eq!(
            expect.len(),
            1 + 2 * 7 + (1 + 32 + 1 + 16) + (1 + 32 + 4 + 32) + 38
        );

        let decoded = decode_container_meta(&file, "c").unwrap();
        assert_eq!(decoded, meta);
        assert!(decoded.entries[1].super_features.is_empty());
        assert_eq!(decoded.entries[2].kind, EntryKind::delta(base));
        assert_eq!(
            (decoded.entries[2].offset, decoded.regions[1].raw_len),
            (4000, 7000)
        );
        assert_eq!(decoded.regions[1].offset, 16 + 16);
    }

    /// An inversed delta (kind 2) round-trips, with its kind byte, and back-references to it
    /// and from it to a plain delta on the same base keep each entry's own kind.
    #[test]
    fn inversed_deltas_round_trip() {
        let base = ChunkId::of(b"base");
        let (a, b2, c) = (ChunkId::of(b"a"), ChunkId::of(b"b"), ChunkId::of(b"c"));
        let inv = EntryKind::Delta {
            base,
            inversed: true,
        };
        let mut builder = ContainerBuilder::with_version(CONTAINER_V2);
        let mut r = RegionBuilder::default();
        r.push(a, inv, &[1u8; 40], 900, vec![]);
        r.push(b2, EntryKind::delta(base), &[2u8; 30], 800, vec![]);
        r.push(c, inv, &[3u8; 20], 700, vec![]);
        builder.add_region(r.compress(Compression::None));
        let (_, file, meta) = builder.seal();
        let section = meta_of(&file);
        // Heads: region count, region (1 + 4 + 1 + 1), then the first entry's head.
        assert_eq!(section[1 + 7] & HEAD_KIND_MASK, KIND_INVERSED_DELTA);
        let decoded = decode_container_meta(&file, "c").unwrap();
        assert_eq!(decoded, meta);
        let kinds: Vec<bool> = decoded
            .entries
            .iter()
            .map(|e| e.kind.is_inversed())
            .collect();
        assert_eq!(kinds, [true, false, true]);
    }

    /// The same entries cost far less than in version 1.
    #[test]
    fn version_2_is_leaner() {
        let build = |version| {
            let mut b = ContainerBuilder::with_version(version);
            let mut r = RegionBuilder::default();
            for i in 0..100u32 {
                let data = format!("chunk {i}").into_bytes();
                let id = ChunkId::of(&data);
                if i % 4 == 0 {
                    r.push(id, EntryKind::Full, &data, data.len(), vec![1, 2, 3]);
                } else {
                    let base = ChunkId::of(format!("base {}", i / 2).as_bytes());
                    r.push(id, EntryKind::delta(base), &data, 8000, vec![1, 2, 3]);
                }
            }
            b.add_region(r.compress(Compression::zstd(3)));
            let (_, file, meta) = b.seal();
            assert_eq!(decode_container_meta(&file, "c").unwrap(), meta);
            meta_of(&file).len()
        };
        let (v1, v2) = (build(CONTAINER_V1), build(CONTAINER_V2));
        // v1: 25 × (50 + 24) + 75 × (50 + 32 + 24). v2: 25 × (34 + 24) + 75 × (34 + 2), plus
        // 50 bases inline and 25 back-references (deltas 4k + 2 and 4k + 3 share a base).
        assert_eq!(v1, 4 + 17 + 4 + 25 * 74 + 75 * 106);
        assert_eq!(v2, 1 + 7 + 25 * 58 + 75 * 36 + 50 * 32 + 25);
    }

    const DATA: &[u8] = b"abcdefgh";

    /// A version-2 container whose one raw region holds [`DATA`], with metadata `meta`.
    fn file_with(meta: &[u8]) -> Vec<u8> {
        let mut b = ContainerBuilder::new();
        let mut r = RegionBuilder::default();
        r.push(ChunkId::of(DATA), EntryKind::Full, DATA, DATA.len(), vec![]);
        b.add_region(r.compress(Compression::None));
        with_meta(&b.seal().1, meta)
    }

    fn region(codec: u8, stored: u64, count: u64) -> Vec<u8> {
        let mut out = vec![codec];
        out.extend_from_slice(&crc32c::crc32c(DATA).to_le_bytes());
        varint::put(&mut out, stored);
        varint::put(&mut out, count);
        out
    }

    fn full(seed: u8, len: u64) -> Vec<u8> {
        let mut out = vec![KIND_FULL];
        out.extend_from_slice(&[seed; 32]);
        varint::put(&mut out, len);
        out
    }

    /// A delta entry; `backref` names its base by distance, else the base is inline.
    fn delta(seed: u8, len: u64, backref: Option<u64>) -> Vec<u8> {
        let mut out = vec![
            KIND_DELTA
                | if backref.is_some() {
                    HEAD_BASE_BACKREF
                } else {
                    0
                },
        ];
        out.extend_from_slice(&[seed; 32]);
        varint::put(&mut out, len);
        varint::put(&mut out, 100);
        match backref {
            Some(d) => varint::put(&mut out, d),
            None => out.extend_from_slice(&[0xbb; 32]),
        }
        out
    }

    fn section(parts: &[Vec<u8>]) -> Vec<u8> {
        parts.concat()
    }

    /// Hand-made sections: the valid ones decode to what they say, every malformed one is
    /// refused with an error naming what is wrong.
    #[test]
    fn malformed_sections_are_refused() {
        let one = [1u8];
        // Valid: one raw region of 8 bytes holding a full entry of 3 and two deltas of 3 and 2
        // on one base, the second by back-reference.
        let good = section(&[
            one.to_vec(),
            region(0, 8, 3),
            full(1, 3),
            delta(2, 3, None),
            delta(3, 2, Some(1)),
        ]);
        let m = decode_container_meta(&file_with(&good), "c").unwrap();
        let offsets: Vec<u32> = m.entries.iter().map(|e| e.offset).collect();
        assert_eq!(offsets, [0, 3, 6]);
        assert_eq!(m.entries[2].kind, m.entries[1].kind);
        assert_eq!(m.regions[0].raw_len, 8);
        let r = &m.regions[0];
        assert_eq!(open_region(DATA, r, "c").unwrap(), DATA);

        let cases: Vec<(Vec<u8>, &str)> = vec![
            // Regions and the file.
            (
                section(&[vec![2], region(0, 8, 1)]),
                "implausible region count 2",
            ),
            (
                section(&[one.to_vec(), region(0, 8, 1), full(1, 8)[..20].to_vec()]),
                "implausible entry count",
            ),
            (
                section(&[
                    one.to_vec(),
                    region(0, 8, 1),
                    {
                        let mut e = full(1, 8);
                        e[0] = 3 << 3;
                        e
                    },
                    vec![9; 8],
                ]),
                "truncated",
            ),
            (
                section(&[one.to_vec(), region(0, 9, 1), full(1, 9)]),
                "overlaps the metadata",
            ),
            (
                section(&[one.to_vec(), region(0, 7, 1), full(1, 7)]),
                "not where the last region ends",
            ),
            (
                section(&[one.to_vec(), region(0, 8, 1), full(1, 7)]),
                "stored length 8 != raw length 7",
            ),
            (section(&[one.to_vec(), region(0, 8, 0)]), "no entries"),
            (
                section(&[one.to_vec(), region(2, 8, 1), full(1, 8)]),
                "unknown codec 2",
            ),
            (
                section(&[vec![0xff, 0xff, 0x03]]),
                "implausible region count",
            ),
            (
                section(&[one.to_vec(), region(0, 8, 1000), full(1, 8)]),
                "implausible entry count",
            ),
            (section(&[vec![0]]), "not where the last region ends"),
            // Lengths.
            (
                section(&[one.to_vec(), region(0, 8, 2), full(1, 0), full(2, 8)]),
                "stored length 0",
            ),
            (
                section(&[
                    one.to_vec(),
                    region(1, 8, 2),
                    full(1, 0xffff_ffff),
                    full(2, 1),
                ]),
                "larger than 83886080 bytes raw",
            ),
            (
                section(&[one.to_vec(), region(1, 8, 2), full(1, 80 << 20), full(2, 1)]),
                "larger than 83886080 bytes raw",
            ),
            (
                section(&[one.to_vec(), region(0, 1 << 32, 1), full(1, 8)]),
                "exceeds 32 bits",
            ),
            (
                section(&[one.to_vec(), region(0, 8, 1), full(1, 1 << 32)]),
                "exceeds 32 bits",
            ),
            // A varint of 11 bytes, and one cut short at the end of the section.
            (
                section(&[
                    one.to_vec(),
                    vec![0, 0, 0, 0, 0],
                    vec![0x88; 10],
                    vec![0x00, 1],
                ]),
                "bad varint",
            ),
            (
                section(&[
                    one.to_vec(),
                    region(0, 8, 1),
                    full(1, 8)[..33].to_vec(),
                    vec![0x88],
                ]),
                "bad varint",
            ),
            // Heads and back-references.
            (
                section(&[one.to_vec(), region(0, 8, 1), {
                    let mut e = full(1, 8);
                    e[0] = 3;
                    e
                }]),
                "unknown kind 3",
            ),
            (
                section(&[one.to_vec(), region(0, 8, 1), {
                    let mut e = full(1, 8);
                    e[0] = 17 << 3;
                    e
                }]),
                "17 super-features",
            ),
            (
                section(&[one.to_vec(), region(0, 8, 1), {
                    let mut e = full(1, 8);
                    e[0] |= HEAD_BASE_BACKREF;
                    e
                }]),
                "back-reference bit",
            ),
            (
                section(&[
                    one.to_vec(),
                    region(0, 8, 2),
                    delta(2, 4, None),
                    delta(3, 4, Some(0)),
                ]),
                "refers back 0",
            ),
            (
                section(&[
                    one.to_vec(),
                    region(0, 8, 2),
                    delta(2, 4, None),
                    delta(3, 4, Some(2)),
                ]),
                "refers back 2",
            ),
            (
                section(&[one.to_vec(), region(0, 8, 1), delta(3, 8, Some(1))]),
                "refers back 1",
            ),
            (
                section(&[
                    one.to_vec(),
                    region(0, 8, 2),
                    full(2, 4),
                    delta(3, 4, Some(1)),
                ]),
                "base of full entry 0",
            ),
            // Trailing bytes.
            (section(&[good.clone(), vec![0]]), "trailing bytes"),
        ];
        for (meta, want) in cases {
            let e = err(&file_with(&meta));
            assert!(
                e.contains(want),
                "wanted {want:?}, got {e:?} for {meta:02x?}"
            );
        }
    }

    /// Every prefix of a real section is refused (never decoded as fewer entries), and so is
    /// the section with any byte appended.
    #[test]
    fn truncated_sections_are_refused() {
        let mut b = ContainerBuilder::new();
        for r in 0..3u8 {
            let mut reg = RegionBuilder::default();
            for i in 0..5u8 {
                let data = vec![r * 10 + i; 300 + usize::from(i)];
                let kind = if i % 2 == 1 {
                    EntryKind::delta(ChunkId::of(&[r]))
                } else {
                    EntryKind::Full
                };
                let original = if i % 2 == 1 { 5000 } else { data.len() };
                reg.push(
                    ChunkId::of(&data),
                    kind,
                    &data,
                    original,
                    vec![9; usize::from(i)],
                );
            }
            b.add_region(reg.compress(Compression::zstd(3)));
        }
        let (_, file, meta) = b.seal();
        assert_eq!(decode_container_meta(&file, "c").unwrap(), meta);
        let section = meta_of(&file).to_vec();
        for cut in 0..section.len() {
            let e = err(&with_meta(&file, &section[..cut]));
            assert!(e.contains("corrupt"), "{cut}: {e}");
        }
        for extra in [0u8, 1, 0x80] {
            let mut longer = section.clone();
            longer.push(extra);
            err(&with_meta(&file, &longer));
        }
        // Every entry lies in its region, back to back, and reads back.
        for (i, r) in meta.regions.iter().enumerate() {
            let stored = &file[r.offset as usize..(r.offset + r.stored_len) as usize];
            let raw = open_region(stored, r, "c").unwrap();
            let mut at = 0;
            for e in meta.entries.iter().filter(|e| e.region as usize == i) {
                assert_eq!(e.offset, at);
                at += e.stored_len;
                assert_eq!(ChunkId::of(&raw[e.offset as usize..at as usize]), e.id);
            }
            assert_eq!(at as usize, raw.len());
        }
    }

    /// A region without entries is not written: every version-2 region has one.
    #[test]
    fn empty_regions_are_left_out() {
        let mut b = ContainerBuilder::new();
        b.add_region(RegionBuilder::default().compress(Compression::zstd(3)));
        assert!(b.is_empty());
        let (_, file, meta) = b.seal();
        assert_eq!(meta, ContainerMeta::default());
        assert_eq!(meta_of(&file), &[0]);
        assert_eq!(decode_container_meta(&file, "c").unwrap(), meta);
    }
}
