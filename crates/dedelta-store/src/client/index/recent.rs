//! The containers the last locality backup used, in the order it first used them (and the
//! containers it wrote), kept beside the index: the next backup's locality index prefetches
//! them in that order when its cache misses, before it asks the on-disk index (logical
//! locality, LoopDelta §4.2: a backup is mostly its predecessor again, so the containers it
//! needs next are the ones its predecessor needed next). A hint, never an answer: a chunk is
//! found in a hinted container exactly as in a container an index lookup led to.
//!
//! File `chunks.idx.recent` (little-endian): `DDIXRCT\0`; version u32 = 1; count u32; the
//! container ids (32 bytes each); CRC-32C of everything before it (u32). A cache of a cache:
//! written by temporary file and rename without fsync; one that is missing, torn, of another
//! version or fails its CRC reads as no hints.

use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"DDIXRCT\0";
/// The file's version; another reads as no hints.
pub const VERSION: u32 = 1;
/// Most containers kept (8 MiB of ids: a backup of about 1 TB of 4 MiB containers).
pub const MAX_CONTAINERS: usize = 1 << 18;
const HEADER_LEN: usize = 8 + 4 + 4;

/// The file name of the hints of the index whose manifest is `path`.
pub fn recent_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".recent");
    path.with_file_name(name)
}

/// The file's bytes for `containers` (the first [`MAX_CONTAINERS`]).
pub fn encode(containers: &[ContainerId]) -> Vec<u8> {
    let containers = &containers[..containers.len().min(MAX_CONTAINERS)];
    let mut out = Vec::with_capacity(HEADER_LEN + containers.len() * 32 + 4);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(containers.len() as u32).to_le_bytes());
    for c in containers {
        out.extend_from_slice(&c.0);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a hints file; `None` if the bytes are not one this build wrote.
pub fn decode(bytes: &[u8]) -> Option<Vec<ContainerId>> {
    if bytes.len() < HEADER_LEN + 4 || bytes[..8] != MAGIC {
        return None;
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    let word = |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
    let count = word(12) as usize;
    if word(8) != VERSION || count > MAX_CONTAINERS || body.len() != HEADER_LEN + count * 32 {
        return None;
    }
    Some(
        body[HEADER_LEN..]
            .chunks_exact(32)
            .map(|c| {
                let mut id = [0u8; 32];
                id.copy_from_slice(c);
                ContainerId(id)
            })
            .collect(),
    )
}

/// The hints stored at `path`: none if the file is missing or not one this build wrote.
pub fn load(path: &Path) -> Vec<ContainerId> {
    std::fs::read(path)
        .ok()
        .and_then(|b| decode(&b))
        .unwrap_or_default()
}

/// Writes `containers` to `path` (a temporary file renamed over it; no fsync: a torn file
/// fails its CRC and reads as no hints).
pub fn store(path: &Path, containers: &[ContainerId]) -> Result<()> {
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let r = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(&encode(containers)))
        .and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u8) -> Vec<ContainerId> {
        (0..n).map(|i| ContainerId([i; 32])).collect()
    }

    #[test]
    fn round_trips_and_refuses_what_it_did_not_write() {
        for n in [0, 1, 5] {
            let bytes = encode(&ids(n));
            assert_eq!(bytes.len(), HEADER_LEN + 32 * usize::from(n) + 4);
            assert_eq!(decode(&bytes), Some(ids(n)));
            for cut in 0..bytes.len() {
                assert_eq!(decode(&bytes[..cut]), None, "cut {cut}");
            }
            for at in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[at] ^= 0x04;
                assert_eq!(decode(&bad), None, "byte {at}");
            }
        }
        // Another version, with a valid CRC, is refused too.
        let mut v2 = encode(&ids(2));
        v2[8] = 2;
        let n = v2.len() - 4;
        let crc = crc32c::crc32c(&v2[..n]).to_le_bytes();
        v2[n..].copy_from_slice(&crc);
        assert_eq!(decode(&v2), None);
    }

    #[test]
    fn stores_and_loads_and_a_missing_file_is_no_hints() {
        let dir = tempfile::tempdir().unwrap();
        let path = recent_path(&dir.path().join("chunks.idx"));
        assert!(path.ends_with("chunks.idx.recent"));
        assert!(load(&path).is_empty());
        store(&path, &ids(3)).unwrap();
        assert_eq!(load(&path), ids(3));
        std::fs::write(&path, b"DDIXRCT\0junk").unwrap();
        assert!(load(&path).is_empty());
    }
}
