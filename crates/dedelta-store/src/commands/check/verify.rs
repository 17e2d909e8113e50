//! What check (and repair packs) decide about stored chunks: whether each entry of a container
//! read whole verifies, and, from metadata alone, whether a referenced chunk can be read.

use super::EntryIds;
use crate::client::index::IndexReader;
use crate::error::Result;
use crate::format::config::MAX_DELTA_DEPTH;
use crate::format::container::{self, ContainerMeta, EntryKind, EntryMeta};
use crate::repository::damage::DamageSet;
use dedelta_core::ChunkId;
use std::collections::HashMap;

pub(crate) fn entry_pair(e: &EntryMeta) -> (ChunkId, Option<ChunkId>) {
    match e.kind {
        EntryKind::Full => (e.id, None),
        EntryKind::Delta { base, .. } => (e.id, Some(base)),
    }
}

/// Verifies every entry of a container held in memory: regions must pass their CRC and
/// decompress, full chunks must match their fingerprint, deltas must decode (against a full
/// chunk of the same container, else against `base`) to bytes that match theirs. Calls
/// `verdict(entry number, entry, Ok(original bytes) or Err(reason))` for each entry in order.
/// Shared by `check --read-data` and `repair packs`.
pub(crate) fn verify_entries(
    file: &[u8],
    meta: &ContainerMeta,
    what: &str,
    hasher: &dedelta_core::ChunkHasher,
    base: &mut dyn FnMut(&ChunkId) -> Result<Vec<u8>>,
    mut verdict: impl FnMut(u32, &EntryMeta, std::result::Result<&[u8], String>) -> Result<()>,
) -> Result<()> {
    let regions: Vec<std::result::Result<Vec<u8>, String>> = meta
        .regions
        .iter()
        .map(|r| {
            let stored = &file[r.offset as usize..(r.offset + r.stored_len) as usize];
            container::open_region(stored, r, what).map_err(|e| e.to_string())
        })
        .collect();
    let raw_of = |e: &EntryMeta| -> std::result::Result<&[u8], String> {
        let raw = regions[e.region as usize].as_ref().map_err(Clone::clone)?;
        raw.get(e.offset as usize..(e.offset + e.stored_len) as usize)
            .ok_or_else(|| "entry lies outside its region".to_string())
    };
    // Full chunks of this container that verify, for deltas whose base is here.
    let mut local_full: HashMap<ChunkId, &[u8]> = HashMap::new();
    for e in &meta.entries {
        if let (EntryKind::Full, Ok(b)) = (e.kind, raw_of(e)) {
            if hasher.id(b) == e.id {
                local_full.insert(e.id, b);
            }
        }
    }
    let codec = dedelta_core::delta::new_codec(dedelta_core::delta::DeltaKind::Ddelta);
    let mut out = Vec::new();
    for (i, e) in meta.entries.iter().enumerate() {
        let result: std::result::Result<&[u8], String> = match (raw_of(e), e.kind) {
            (Err(err), _) => Err(err),
            (Ok(b), EntryKind::Full) => {
                if local_full.contains_key(&e.id) {
                    Ok(b)
                } else {
                    Err("content does not match its fingerprint".into())
                }
            }
            (Ok(b), EntryKind::Delta { base: base_id, .. }) => {
                let base_bytes = match local_full.get(&base_id) {
                    Some(bytes) => Ok(bytes.to_vec()),
                    None => base(&base_id),
                };
                match base_bytes {
                    Err(err) => Err(format!("its delta base {base_id} is unusable: {err}")),
                    Ok(base_bytes) => {
                        out.clear();
                        out.reserve(e.original_len as usize);
                        match codec.decode(&base_bytes, b, &mut out) {
                            Err(err) => Err(err.to_string()),
                            Ok(()) if hasher.id(&out) != e.id => {
                                Err("content does not match its fingerprint".into())
                            }
                            Ok(()) => Ok(&out[..]),
                        }
                    }
                }
            }
        };
        verdict(i as u32, e, result)?;
    }
    Ok(())
}

/// Decides whether a referenced chunk can be read, from metadata only.
pub(crate) struct RefChecker<'a> {
    /// The index.
    pub index: &'a IndexReader,
    /// Entries of every container whose metadata is readable.
    pub entries: &'a EntryIds,
    /// Chunks found damaged in this run.
    pub bad: &'a HashMap<ChunkId, String>,
    /// Damage recorded earlier.
    pub recorded: &'a DamageSet,
}

impl RefChecker<'_> {
    /// Why chunk `id` cannot be read, or `None` if it can (a delta needs its base, down its
    /// chain).
    pub fn problem(&self, id: &ChunkId) -> Option<String> {
        self.problem_at(id, 0)
    }

    /// [`Self::problem`] for a chunk `depth` links down a delta chain.
    fn problem_at(&self, id: &ChunkId, depth: u8) -> Option<String> {
        if let Some(reason) = self.bad.get(id) {
            return Some(format!("damaged: {reason}"));
        }
        let loc = match self.index.get(id) {
            Ok(Some(l)) => l,
            Ok(None) => {
                return Some(match self.recorded.chunk_reason(id) {
                    Some(reason) => format!(
                        "damaged ({reason}); back up the file again, or run `dedelta repair \
                         snapshots`"
                    ),
                    None => "missing from the index".into(),
                })
            }
            Err(e) => return Some(e.to_string()),
        };
        let Some(entries) = self.entries.get(&loc.container) else {
            return Some(format!(
                "its container {} is missing or damaged",
                loc.container
            ));
        };
        match entries.get(loc.entry as usize) {
            Some((e, None)) if e == id => None,
            Some((e, Some(base))) if e == id => {
                if depth >= MAX_DELTA_DEPTH {
                    return Some(format!(
                        "its delta chain is longer than {MAX_DELTA_DEPTH} (or loops)"
                    ));
                }
                self.problem_at(base, depth + 1)
                    .map(|m| format!("its delta base {base} is unusable: {m}"))
            }
            _ => Some(format!(
                "index entry points at the wrong place in container {}",
                loc.container
            )),
        }
    }
}
