//! Reading a chunk straight from the copies the damage records name: check verifies a delta
//! whose base is recorded as damaged (so out of the index) against a recorded copy of the base
//! that reads whole again.

use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::config::MAX_DELTA_DEPTH;
use crate::format::container::{self, ContainerId, EntryKind};
use dedelta_core::ChunkId;

/// The bytes of a recorded copy of `chunk` (in a container `recorded` names, read straight
/// from it and verified; the first that reads whole), for a base whose copies are recorded as
/// damaged and so out of the index. A delta copy is decoded against its base, read through
/// `reader`, else (when that base is recorded as damaged too) the same way, at most
/// [`MAX_DELTA_DEPTH`] links down.
pub(super) fn read_recorded_copy(
    backend: &dyn crate::backend::Backend,
    reader: &mut crate::read::ChunkReader<'_>,
    recorded: &dyn Fn(&ChunkId) -> Vec<ContainerId>,
    chunk: &ChunkId,
    depth: u8,
) -> Result<Vec<u8>> {
    let mut last = Error::chunk_missing(chunk.to_hex());
    for container in recorded(chunk) {
        match read_copy_in(backend, reader, recorded, &container, chunk, depth) {
            Ok(bytes) => return Ok(bytes),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// [`read_recorded_copy`] from one container.
fn read_copy_in(
    backend: &dyn crate::backend::Backend,
    reader: &mut crate::read::ChunkReader<'_>,
    recorded: &dyn Fn(&ChunkId) -> Vec<ContainerId>,
    container: &ContainerId,
    chunk: &ChunkId,
    depth: u8,
) -> Result<Vec<u8>> {
    let name = container.to_hex();
    let what = format!("container {name}");
    let file = backend.get(FileKind::Container, &name)?;
    let meta = container::decode_container_body(&file, &what)?;
    let bad = |reason: &str| Error::CorruptChunk {
        container: name.clone(),
        chunk: chunk.to_hex(),
        reason: reason.into(),
    };
    let e = meta
        .entries
        .iter()
        .filter(|e| e.id == *chunk)
        .min_by_key(|e| e.kind != EntryKind::Full)
        .ok_or_else(|| bad("no copy in its recorded container"))?;
    let r = meta
        .regions
        .get(e.region as usize)
        .ok_or_else(|| bad("entry names a region that does not exist"))?;
    let stored = file
        .get(r.offset as usize..(r.offset + r.stored_len) as usize)
        .ok_or_else(|| bad("region lies outside the container"))?;
    let raw = container::open_region(stored, r, &what)?;
    let bytes = raw
        .get(e.offset as usize..(e.offset + e.stored_len) as usize)
        .ok_or_else(|| bad("entry lies outside its region"))?;
    let bytes = match e.kind {
        EntryKind::Full => bytes.to_vec(),
        EntryKind::Delta { .. } if depth >= MAX_DELTA_DEPTH => {
            return Err(bad("its delta chain is too long"))
        }
        EntryKind::Delta { base, .. } => {
            let base_bytes = match reader.read_chunk(&base) {
                Ok(b) => b,
                Err(_) => read_recorded_copy(backend, reader, recorded, &base, depth + 1)?,
            };
            let mut out = Vec::with_capacity(e.original_len as usize);
            dedelta_core::delta::new_codec(dedelta_core::delta::DeltaKind::Ddelta)
                .decode(&base_bytes, bytes, &mut out)
                .map_err(|err| bad(&err.to_string()))?;
            out
        }
    };
    if reader.hasher().id(&bytes) != *chunk {
        return Err(bad("content does not match its fingerprint"));
    }
    Ok(bytes)
}
