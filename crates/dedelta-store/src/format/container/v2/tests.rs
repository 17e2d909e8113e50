//! Tests of [`super`] (v2.rs).

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
