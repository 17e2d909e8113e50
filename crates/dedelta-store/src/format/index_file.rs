//! Index files (`indexes/<64 hex>`): the metadata sections of some containers, gathered in
//! one object, so that a client with an empty cache learns a repository's chunks in a few
//! requests instead of one to three per container (restic's index files, for the same
//! reason). Byte tables in docs/format.md ("Index files").
//!
//! A record is a container's footer and metadata section exactly as the container holds
//! them: the decoder checks them with the container decoders ([`container::decode_footer`],
//! [`container::decode_meta`]), so a record yields the very [`ContainerMeta`] that reading the
//! container would, and there is one layout of container metadata to keep, fuzz and
//! document, not two. Rejected: a leaner record of only what the client index takes in (ids,
//! kinds, bases, super-features): it would be a second metadata encoding for a saving of the
//! varint lengths (a few bytes of ~45 per entry; fingerprints are most of both).
//!
//! Index files are hints: readers use a record only for a container the listing has, and a
//! file that fails to decode costs only the reads of its containers' metadata.

use crate::error::{Error, Result};
use crate::format::container::{self, ContainerId, ContainerMeta, FOOTER_LEN};
use crate::format::envelope;

/// Index file magic.
pub const INDEX_MAGIC: &[u8; 4] = b"DDIF";
/// Index file format version.
pub const INDEX_VERSION: u16 = 1;
/// Offset in the envelope payload of the u64 LE length of the decompressed body.
pub const RAW_LEN_OFFSET: usize = 0;
/// Offset in the envelope payload of the zstd frame holding the body.
pub const FRAME_OFFSET: usize = RAW_LEN_OFFSET + 8;
/// The largest body a reader decompresses (a writer starts a new file long before: see
/// [`TARGET_RAW_LEN`]), so that a hostile length cannot make it allocate more.
pub const MAX_RAW_LEN: u64 = 256 << 20;
/// The body size at which writers start a new index file: about 350 containers of 4 MiB
/// with 11 KiB chunks. Bounds what a backup holds in memory for its index files and what a
/// reader decompresses at once.
pub const TARGET_RAW_LEN: usize = 16 << 20;
/// Length of a record's fixed head: the container id and its footer.
pub const RECORD_HEAD_LEN: usize = 32 + FOOTER_LEN;
/// zstd level of the body (the ids are random: a higher level gains nothing).
const ZSTD_LEVEL: i32 = 3;

/// One container as an index file records it: its footer and metadata section, verbatim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexedContainer {
    /// The container.
    pub id: ContainerId,
    /// Its footer, as the container ends.
    pub footer: [u8; FOOTER_LEN],
    /// Its metadata section, as the footer locates it.
    pub section: Vec<u8>,
}

impl IndexedContainer {
    /// The record of the container `id` whose whole file is `file` (or whose last bytes are,
    /// as long as they hold the footer and the metadata section): what a writer that has just
    /// sealed a container records. `None` if `file` does not end in a footer and a section.
    pub fn from_container_tail(id: ContainerId, file: &[u8]) -> Option<Self> {
        let at = file.len().checked_sub(FOOTER_LEN)?;
        let footer: [u8; FOOTER_LEN] = file[at..].try_into().ok()?;
        let meta_len = u32::from_le_bytes(footer[8..12].try_into().ok()?) as usize;
        let section = file.get(at.checked_sub(meta_len)?..at)?.to_vec();
        Some(IndexedContainer {
            id,
            footer,
            section,
        })
    }

    /// Bytes this record takes in a body.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEAD_LEN + self.section.len()
    }

    /// Decodes and checks the metadata, as a reader of the container would (footer, then
    /// section against the footer's checksum).
    pub fn meta(&self, what: &str) -> Result<ContainerMeta> {
        let len = container::footer_implied_len(&self.footer)
            .ok_or_else(|| Error::corrupt(what, "record footer overflows"))?;
        let footer = container::decode_footer(&self.footer, len, what)?;
        if footer.meta_len as usize != self.section.len() {
            return Err(Error::corrupt(
                what,
                "record section length differs from its footer",
            ));
        }
        container::decode_meta(&self.section, &footer, what)
    }
}

/// Encodes an index file of `records` (sorted by container id here; a container recorded
/// twice is recorded once).
///
/// # Panics
/// If the body exceeds [`MAX_RAW_LEN`] (writers start a new file at [`TARGET_RAW_LEN`];
/// one container's section is at most a few MiB).
pub fn encode(records: &mut Vec<IndexedContainer>) -> Vec<u8> {
    records.sort_by_key(|a| a.id);
    records.dedup_by(|a, b| a.id == b.id);
    let mut body = Vec::with_capacity(10 + records.iter().map(|r| r.encoded_len()).sum::<usize>());
    dedelta_core::varint::put(&mut body, records.len() as u64);
    for r in records.iter() {
        body.extend_from_slice(&r.id.0);
        body.extend_from_slice(&r.footer);
        body.extend_from_slice(&r.section);
    }
    assert!(
        body.len() as u64 <= MAX_RAW_LEN,
        "index file body too large"
    );
    let frame = zstd::bulk::compress(&body, ZSTD_LEVEL).expect("zstd compresses in memory");
    let mut payload = Vec::with_capacity(FRAME_OFFSET + frame.len());
    payload.extend_from_slice(&(body.len() as u64).to_le_bytes());
    payload.extend_from_slice(&frame);
    envelope::seal(INDEX_MAGIC, INDEX_VERSION, &payload)
}

/// A decoded index file: its records, each with its checked metadata.
pub type Decoded = Vec<(IndexedContainer, ContainerMeta)>;

/// Decodes and checks an index file: envelope (checksum), body length within
/// [`MAX_RAW_LEN`], a zstd frame of exactly that length, records in strictly ascending
/// container order, each footer and section as a container decoder checks them, nothing
/// after the last record. `what` names the file in errors.
pub fn decode(bytes: &[u8], what: &str) -> Result<Decoded> {
    let payload = envelope::open(bytes, INDEX_MAGIC, INDEX_VERSION, what)?;
    let bad = |r: &str| Error::corrupt(what, r.to_string());
    let raw_len = payload
        .get(RAW_LEN_OFFSET..FRAME_OFFSET)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| bad("payload too short"))?;
    if raw_len > MAX_RAW_LEN {
        return Err(bad("body length above the limit"));
    }
    let body = zstd::bulk::decompress(&payload[FRAME_OFFSET..], raw_len as usize)
        .map_err(|e| Error::corrupt(what, format!("body does not decompress: {e}")))?;
    if body.len() as u64 != raw_len {
        return Err(bad("body length differs from its header"));
    }
    decode_body(&body, what)
}

/// Decodes and checks the decompressed body of an index file (see [`decode`]).
pub fn decode_body(body: &[u8], what: &str) -> Result<Decoded> {
    let bad = |r: &str| Error::corrupt(what, r.to_string());
    let mut pos = 0;
    let count = dedelta_core::varint::get(body, &mut pos).ok_or_else(|| bad("bad count"))?;
    // Each record takes at least its head: a count the body cannot hold is damage, and must
    // not reserve memory.
    if count > (body.len() / RECORD_HEAD_LEN) as u64 {
        return Err(bad("count exceeds the body"));
    }
    let mut out: Decoded = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let head = body
            .get(pos..pos + RECORD_HEAD_LEN)
            .ok_or_else(|| bad("truncated record"))?;
        let id = ContainerId(head[..32].try_into().expect("32 bytes"));
        if out.last().is_some_and(|(prev, _)| prev.id >= id) {
            return Err(bad("records not in ascending container order"));
        }
        let footer: [u8; FOOTER_LEN] = head[32..].try_into().expect("footer length");
        let meta_len = u32::from_le_bytes(footer[8..12].try_into().expect("4 bytes")) as usize;
        pos += RECORD_HEAD_LEN;
        let section = body
            .get(pos..pos.saturating_add(meta_len))
            .ok_or_else(|| bad("truncated metadata section"))?
            .to_vec();
        pos += meta_len;
        let record = IndexedContainer {
            id,
            footer,
            section,
        };
        let meta = record.meta(&format!("{what}, container {id}"))?;
        out.push((record, meta));
    }
    if pos != body.len() {
        return Err(bad("bytes after the last record"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::container::{ContainerBuilder, EntryKind, RegionBuilder};
    use dedelta_core::compress::Compression;
    use dedelta_core::ChunkId;

    fn sealed(seed: u8, version: u16) -> (ContainerId, Vec<u8>, ContainerMeta) {
        let mut b = ContainerBuilder::with_version(version);
        let mut r = RegionBuilder::default();
        for i in 0..5u8 {
            let bytes = vec![seed ^ i; 100 + i as usize];
            let kind = if i == 3 {
                EntryKind::delta(ChunkId::of(&[seed]))
            } else {
                EntryKind::Full
            };
            r.push(
                ChunkId::of(&bytes),
                kind,
                &bytes,
                bytes.len(),
                vec![u64::from(i), 9],
            );
        }
        b.add_region(r.compress(Compression::default()));
        b.seal()
    }

    fn records(n: u8) -> (Vec<IndexedContainer>, Vec<(ContainerId, ContainerMeta)>) {
        let mut recs = Vec::new();
        let mut metas = Vec::new();
        for s in 0..n {
            let (id, file, meta) = sealed(s, if s % 2 == 0 { 1 } else { 2 });
            recs.push(IndexedContainer::from_container_tail(id, &file).unwrap());
            metas.push((id, meta));
        }
        metas.sort_by_key(|a| a.0);
        (recs, metas)
    }

    /// A record decodes to the metadata the container's own reader finds, for both container
    /// versions, and records come back sorted by id, once each.
    #[test]
    fn round_trip_gives_the_containers_metadata() {
        let (mut recs, metas) = records(6);
        recs.push(recs[0].clone());
        let bytes = encode(&mut recs);
        let got = decode(&bytes, "index file").unwrap();
        assert_eq!(got.len(), 6);
        for ((rec, meta), (id, want)) in got.iter().zip(&metas) {
            assert_eq!(rec.id, *id);
            assert_eq!(meta, want);
        }
    }

    /// Every flipped byte and every truncation is an error, never a panic.
    #[test]
    fn damage_is_an_error() {
        let (mut recs, _) = records(3);
        let bytes = encode(&mut recs);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x41;
            assert!(decode(&b, "x").is_err(), "flip at {i}");
        }
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n], "x").is_err());
        }
    }

    /// A body that passes the checksum but breaks the record rules is refused: records out of
    /// order, a count the body cannot hold, a section whose checksum fails, trailing bytes.
    #[test]
    fn well_sealed_but_malformed_bodies_are_refused() {
        let (mut recs, _) = records(2);
        recs.sort_by_key(|a| a.id);
        let body_of = |recs: &[IndexedContainer], count: u64, extra: &[u8]| {
            let mut body = Vec::new();
            dedelta_core::varint::put(&mut body, count);
            for r in recs {
                body.extend_from_slice(&r.id.0);
                body.extend_from_slice(&r.footer);
                body.extend_from_slice(&r.section);
            }
            body.extend_from_slice(extra);
            let mut payload = (body.len() as u64).to_le_bytes().to_vec();
            payload.extend(zstd::bulk::compress(&body, 3).unwrap());
            envelope::seal(INDEX_MAGIC, INDEX_VERSION, &payload)
        };
        assert!(decode(&body_of(&recs, 2, &[]), "x").is_ok());
        let reversed: Vec<_> = recs.iter().rev().cloned().collect();
        assert!(decode(&body_of(&reversed, 2, &[]), "x").is_err());
        assert!(decode(&body_of(&recs, 1 << 40, &[]), "x").is_err());
        assert!(decode(&body_of(&recs, 2, &[0]), "x").is_err());
        let mut broken = recs.clone();
        broken[1].section[0] ^= 1;
        assert!(decode(&body_of(&broken, 2, &[]), "x").is_err());
    }
}
