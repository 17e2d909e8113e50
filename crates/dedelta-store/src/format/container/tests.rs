//! Tests of [`super`] (container.rs).

use super::*;
use proptest::prelude::*;

/// Both versions, for the tests that hold for each.
const VERSIONS: [u16; 2] = [CONTAINER_V1, CONTAINER_V2];

/// A version-1 container of three zstd regions, four entries each (the last a delta).
fn sample() -> (ContainerId, Vec<u8>, ContainerMeta) {
    sample_of(CONTAINER_V1)
}

fn sample_of(version: u16) -> (ContainerId, Vec<u8>, ContainerMeta) {
    let mut b = ContainerBuilder::with_version(version);
    for r in 0..3u8 {
        let mut reg = RegionBuilder::default();
        for i in 0..4u8 {
            let data = vec![r * 10 + i; 1000 + usize::from(i)];
            let id = ChunkId::of(&data);
            let kind = if i == 3 {
                EntryKind::delta(ChunkId::of(b"base"))
            } else {
                EntryKind::Full
            };
            let orig = if i == 3 { 5000 } else { data.len() };
            reg.push(id, kind, &data, orig, vec![1, 2, 3]);
        }
        b.add_region(reg.compress(Compression::zstd(3)));
    }
    b.seal()
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// The footer of `file`, decoded.
fn footer_of(file: &[u8]) -> Footer {
    decode_footer(&file[file.len() - FOOTER_LEN..], file.len() as u64, "c").unwrap()
}

/// Applies `edit` to the metadata section of `file` and recomputes the footer's length
/// and CRC32C, so that only the edited record is wrong.
fn edit_meta(file: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let f = footer_of(file);
    let start = f.meta_offset as usize;
    let mut meta = file[start..start + f.meta_len as usize].to_vec();
    edit(&mut meta);
    let mut out = file[..start].to_vec();
    out.extend_from_slice(&meta);
    out.extend_from_slice(&f.meta_offset.to_le_bytes());
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&meta).to_le_bytes());
    out.extend_from_slice(&file[file.len() - FOOTER_LEN + FOOTER_MAGIC_OFFSET..]);
    out
}

#[test]
fn round_trip() {
    for v in VERSIONS {
        round_trip_of(v);
    }
}

fn round_trip_of(version: u16) {
    let (id, file, meta) = sample_of(version);
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
    let mut b = ContainerBuilder::with_version(CONTAINER_V1);
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

/// The byte tables of docs/format.md ("Containers"), field by field: every constant is the
/// number the document prints, and the builder puts every field where the constant says.
#[test]
fn layout_matches_the_doc() {
    // Header (16 bytes).
    assert_eq!(
        (
            HEADER_MAGIC_OFFSET,
            HEADER_VERSION_OFFSET,
            HEADER_FLAGS_OFFSET,
            HEADER_RESERVED_OFFSET,
            HEADER_LEN
        ),
        (0, 4, 6, 8, 16)
    );
    // Footer (24 bytes).
    assert_eq!(
        (
            FOOTER_META_OFFSET_OFFSET,
            FOOTER_META_LEN_OFFSET,
            FOOTER_META_CRC_OFFSET,
            FOOTER_MAGIC_OFFSET,
            FOOTER_VERSION_OFFSET,
            FOOTER_RESERVED_OFFSET,
            FOOTER_LEN
        ),
        (0, 8, 12, 16, 20, 22, 24)
    );
    // Region record (17 bytes).
    assert_eq!(
        (
            REGION_OFFSET_OFFSET,
            REGION_STORED_LEN_OFFSET,
            REGION_RAW_LEN_OFFSET,
            REGION_CODEC_OFFSET,
            REGION_CRC_OFFSET,
            REGION_RECORD_LEN
        ),
        (0, 4, 8, 12, 13, 17)
    );
    // Entry record (50 bytes, + 32 for a delta, + 8 per super-feature).
    assert_eq!(
        (
            ENTRY_ID_OFFSET,
            ENTRY_KIND_OFFSET,
            ENTRY_REGION_OFFSET,
            ENTRY_OFFSET_OFFSET,
            ENTRY_STORED_LEN_OFFSET,
            ENTRY_ORIGINAL_LEN_OFFSET,
            ENTRY_SF_COUNT_OFFSET,
            ENTRY_FIXED_LEN
        ),
        (0, 32, 33, 37, 41, 45, 49, 50)
    );
    assert_eq!((ENTRY_BASE_LEN, ENTRY_SF_LEN, META_COUNT_LEN), (32, 8, 4));

    // One raw region with a full entry (two super-features), one zstd region with a delta.
    let full = b"full chunk bytes".to_vec();
    let base = ChunkId::of(b"the base");
    let delta = vec![7u8; 4000];
    let mut b = ContainerBuilder::with_version(CONTAINER_V1);
    let mut r0 = RegionBuilder::default();
    r0.push(
        ChunkId::of(&full),
        EntryKind::Full,
        &full,
        full.len(),
        vec![11, 12],
    );
    b.add_region(r0.compress(Compression::None));
    let mut r1 = RegionBuilder::default();
    r1.push(
        ChunkId::of(b"target"),
        EntryKind::delta(base),
        &delta,
        9000,
        vec![],
    );
    b.add_region(r1.compress(Compression::zstd(3)));
    let (_, file, meta) = b.seal();

    let h = &file[..HEADER_LEN];
    assert_eq!(&h[HEADER_MAGIC_OFFSET..HEADER_VERSION_OFFSET], b"DDCT");
    assert_eq!(&h[HEADER_VERSION_OFFSET..HEADER_FLAGS_OFFSET], &[1, 0]);
    assert!(h[HEADER_FLAGS_OFFSET..].iter().all(|&b| b == 0));

    let f = &file[file.len() - FOOTER_LEN..];
    let meta_offset = u64::from_le_bytes(f[..8].try_into().unwrap());
    let meta_len = le32(f, FOOTER_META_LEN_OFFSET) as usize;
    // The metadata starts where the last region ends and ends where the footer begins.
    let last = meta.regions.last().unwrap();
    assert_eq!(meta_offset, u64::from(last.offset + last.stored_len));
    assert_eq!(meta_offset as usize + meta_len, file.len() - FOOTER_LEN);
    let m = &file[meta_offset as usize..meta_offset as usize + meta_len];
    assert_eq!(le32(f, FOOTER_META_CRC_OFFSET), crc32c::crc32c(m));
    assert_eq!(&f[FOOTER_MAGIC_OFFSET..FOOTER_VERSION_OFFSET], b"DDCT");
    assert_eq!(&f[FOOTER_VERSION_OFFSET..FOOTER_RESERVED_OFFSET], &[1, 0]);
    assert_eq!(&f[FOOTER_RESERVED_OFFSET..], &[0, 0]);

    // Metadata section: region count, region records, entry count, entry records.
    assert_eq!(le32(m, 0), 2);
    let regions = &m[META_COUNT_LEN..META_COUNT_LEN + 2 * REGION_RECORD_LEN];
    let mut expect_offset = HEADER_LEN as u32;
    for (i, rec) in regions.chunks(REGION_RECORD_LEN).enumerate() {
        let r = &meta.regions[i];
        assert_eq!(le32(rec, REGION_OFFSET_OFFSET), expect_offset);
        assert_eq!(le32(rec, REGION_STORED_LEN_OFFSET), r.stored_len);
        assert_eq!(le32(rec, REGION_RAW_LEN_OFFSET), r.raw_len);
        assert_eq!(le32(rec, REGION_CRC_OFFSET), r.crc);
        expect_offset += r.stored_len;
    }
    assert_eq!(regions[REGION_CODEC_OFFSET], compress::CODEC_NONE);
    assert_eq!(
        regions[REGION_RECORD_LEN + REGION_CODEC_OFFSET],
        compress::CODEC_ZSTD
    );
    let entries = &m[META_COUNT_LEN + 2 * REGION_RECORD_LEN..];
    assert_eq!(le32(entries, 0), 2);
    let e0 = &entries[META_COUNT_LEN..];
    assert_eq!(&e0[..ENTRY_KIND_OFFSET], ChunkId::of(&full).as_bytes());
    assert_eq!(e0[ENTRY_KIND_OFFSET], KIND_FULL);
    assert_eq!(le32(e0, ENTRY_REGION_OFFSET), 0);
    assert_eq!(le32(e0, ENTRY_OFFSET_OFFSET), 0);
    assert_eq!(le32(e0, ENTRY_STORED_LEN_OFFSET), full.len() as u32);
    assert_eq!(le32(e0, ENTRY_ORIGINAL_LEN_OFFSET), full.len() as u32);
    assert_eq!(e0[ENTRY_SF_COUNT_OFFSET], 2);
    let sf0 = &e0[ENTRY_FIXED_LEN..ENTRY_FIXED_LEN + ENTRY_SF_LEN];
    assert_eq!(sf0, &11u64.to_le_bytes());
    let e0_len = ENTRY_FIXED_LEN + 2 * ENTRY_SF_LEN;
    let e1 = &e0[e0_len..];
    assert_eq!(e1.len(), ENTRY_FIXED_LEN + ENTRY_BASE_LEN);
    assert_eq!(e1[ENTRY_KIND_OFFSET], KIND_DELTA);
    assert_eq!(le32(e1, ENTRY_REGION_OFFSET), 1);
    assert_eq!(le32(e1, ENTRY_STORED_LEN_OFFSET), delta.len() as u32);
    assert_eq!(le32(e1, ENTRY_ORIGINAL_LEN_OFFSET), 9000);
    assert_eq!(e1[ENTRY_SF_COUNT_OFFSET], 0);
    assert_eq!(&e1[ENTRY_FIXED_LEN..], base.as_bytes());
    assert_eq!(decode_container_meta(&file, "c").unwrap(), meta);
}

/// Flags and reserved fields are 0 in versions 1 and 2 and a reader refuses anything else
/// (docs/format.md, "Header" and "Footer"); an unknown version is refused as such, and the
/// header and footer versions must agree.
#[test]
fn non_zero_flags_and_reserved_fields_are_refused() {
    for v in VERSIONS {
        flags_and_reserved_of(v);
    }
}

fn flags_and_reserved_of(version: u16) {
    let (_, file, _) = sample_of(version);
    assert!(decode_header(&file[..HEADER_LEN], "c").is_ok());
    for pos in HEADER_FLAGS_OFFSET..HEADER_LEN {
        let mut bad = file.clone();
        bad[pos] = 0x01;
        assert!(
            matches!(decode_container_meta(&bad, "c"), Err(Error::Corrupt { .. })),
            "header byte {pos} set to 1 was accepted"
        );
    }
    for pos in FOOTER_RESERVED_OFFSET..FOOTER_LEN {
        let mut bad = file.clone();
        let at = bad.len() - FOOTER_LEN + pos;
        bad[at] = 0x80;
        assert!(
            matches!(decode_container_meta(&bad, "c"), Err(Error::Corrupt { .. })),
            "footer byte {pos} set was accepted"
        );
        let f = &bad[bad.len() - FOOTER_LEN..];
        assert!(decode_footer(f, bad.len() as u64, "c").is_err());
    }
    let other = if version == CONTAINER_V1 { 2 } else { 1 };
    for (at, what) in [
        (HEADER_VERSION_OFFSET, "header"),
        (file.len() - FOOTER_LEN + FOOTER_VERSION_OFFSET, "footer"),
    ] {
        for unknown in [0u8, 3, 0xff] {
            let mut bad = file.clone();
            bad[at] = unknown;
            assert!(
                matches!(
                    decode_container_meta(&bad, "c"),
                    Err(Error::UnsupportedVersion { found, .. }) if found == u32::from(unknown)
                ),
                "{what} version {unknown} accepted"
            );
        }
        let mut swapped = file.clone();
        swapped[at] = other;
        let err = decode_container_meta(&swapped, "c")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("differs from footer version"),
            "{what} {other}: {err}"
        );
    }
    // Read from the footer alone, a version-1 footer on version-2 metadata (or the
    // reverse) fails the other layout's checks.
    let mut swapped = file.clone();
    let at = file.len() - FOOTER_LEN + FOOTER_VERSION_OFFSET;
    swapped[at] = other;
    assert!(decode_container_body(&swapped, "c").is_err());
}

/// The metadata section starts exactly where the last region ends (16 without regions).
#[test]
fn metadata_must_follow_the_last_region() {
    for v in VERSIONS {
        metadata_must_follow_of(v);
    }
}

fn metadata_must_follow_of(version: u16) {
    let (_, file, _) = sample_of(version);
    let f = footer_of(&file);
    let start = f.meta_offset as usize;
    // One stray byte between the last region and the metadata.
    let mut gap = file[..start].to_vec();
    gap.push(0);
    gap.extend_from_slice(&file[start..file.len() - FOOTER_LEN]);
    gap.extend_from_slice(&(f.meta_offset + 1).to_le_bytes());
    gap.extend_from_slice(&file[file.len() - FOOTER_LEN + FOOTER_META_LEN_OFFSET..]);
    let err = decode_container_meta(&gap, "c").unwrap_err().to_string();
    assert!(err.contains("not where the last region ends"), "{err}");

    // A container without regions: the metadata starts at 16.
    let (_, empty, _) = ContainerBuilder::with_version(version).seal();
    assert_eq!(footer_of(&empty).meta_offset, HEADER_LEN as u64);
    assert_eq!(
        decode_container_meta(&empty, "c").unwrap(),
        ContainerMeta::default()
    );
}

/// Codec codes other than 0 and 1 are invalid; a raw region's lengths agree.
#[test]
fn region_codes_are_checked() {
    let (_, file, _) = sample();
    let codec_at = META_COUNT_LEN + REGION_CODEC_OFFSET;
    for code in [2u8, 7, 255] {
        let bad = edit_meta(&file, |m| m[codec_at] = code);
        let err = decode_container_meta(&bad, "c").unwrap_err().to_string();
        assert!(err.contains("unknown codec"), "{err}");
    }
    // Relabelling a zstd region as raw makes its lengths disagree.
    let bad = edit_meta(&file, |m| m[codec_at] = compress::CODEC_NONE);
    let err = decode_container_meta(&bad, "c").unwrap_err().to_string();
    assert!(err.contains("raw region 0"), "{err}");
    // Unknown entry kind.
    let kind_at = META_COUNT_LEN + 3 * REGION_RECORD_LEN + META_COUNT_LEN + ENTRY_KIND_OFFSET;
    let bad = edit_meta(&file, |m| m[kind_at] = 2);
    let err = decode_container_meta(&bad, "c").unwrap_err().to_string();
    assert!(err.contains("unknown kind"), "{err}");
    // A raw length beyond any writer's regions (readers allocate it before decompressing).
    let raw_at = META_COUNT_LEN + REGION_RAW_LEN_OFFSET;
    let bad = edit_meta(&file, |m| {
        m[raw_at..raw_at + 4].copy_from_slice(&(MAX_REGION_RAW_LEN + 1).to_le_bytes())
    });
    let err = decode_container_meta(&bad, "c").unwrap_err().to_string();
    assert!(err.contains("claims 83886081 raw bytes"), "{err}");
    // More than 16 super-features.
    let sf_at = META_COUNT_LEN + 3 * REGION_RECORD_LEN + META_COUNT_LEN + ENTRY_SF_COUNT_OFFSET;
    let bad = edit_meta(&file, |m| m[sf_at] = 17);
    assert!(decode_container_meta(&bad, "c").is_err());
}

/// A region stored raw inside a zstd repository: what `Compression::compress` falls back
/// to when zstd does not shrink the bytes.
#[test]
fn incompressible_region_is_stored_raw_under_zstd() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..5000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut reg = RegionBuilder::default();
    reg.push(
        ChunkId::of(&noise),
        EntryKind::Full,
        &noise,
        noise.len(),
        vec![],
    );
    let region = reg.compress(Compression::zstd(3));
    assert_eq!(region.codec, compress::CODEC_NONE);
    assert_eq!(region.stored, noise);
    let mut b = ContainerBuilder::new();
    b.add_region(region);
    let (_, file, meta) = b.seal();
    assert_eq!(decode_container_meta(&file, "c").unwrap(), meta);
    let r = &meta.regions[0];
    let stored = &file[r.offset as usize..(r.offset + r.stored_len) as usize];
    assert_eq!(open_region(stored, r, "c").unwrap(), noise);
}

/// Object names are 64 lowercase hex digits, nothing else.
#[test]
fn names_are_lowercase_hex() {
    let (id, _, _) = sample();
    let name = id.to_hex();
    assert_eq!(name.len(), 64);
    assert!(name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    assert_eq!(ContainerId::from_hex(&name), Some(id));
    assert_eq!(ContainerId::from_hex(&name.to_uppercase()), None);
    assert_eq!(ContainerId::from_hex(&name[..63]), None);
    assert_eq!(ContainerId::from_hex(&format!("{name}0")), None);
    assert_eq!(ContainerId::from_hex(&format!(".tmp-{}", &name[5..])), None);
}

/// Every byte of a container is covered by a check: a flipped bit anywhere fails the
/// header, footer or metadata checks, or the CRC32C of the region it hits.
#[test]
fn flipped_bytes_are_detected() {
    for v in VERSIONS {
        flipped_bytes_of(v);
    }
}

fn flipped_bytes_of(version: u16) {
    let (_, file, _) = sample_of(version);
    for pos in 0..file.len() {
        let mut bad = file.clone();
        bad[pos] ^= 0x40;
        if let Ok(meta) = decode_container_meta(&bad, "c") {
            // The flip hit region data: some region CRC must fail.
            let any_bad = meta.regions.iter().any(|r| {
                let s = &bad[r.offset as usize..(r.offset + r.stored_len) as usize];
                open_region(s, r, "c").is_err()
            });
            assert!(any_bad, "flip at {pos} undetected");
        }
    }
}

proptest! {
    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..2000) {
        let _ = decode_container_meta(&bytes, "c");
        for v in VERSIONS {
            let (_, file, _) = sample_of(v);
            let cut = cut.min(file.len());
            let _ = decode_container_meta(&file[cut..], "c");
            let _ = decode_container_meta(&file[..cut], "c");
        }
    }
}
