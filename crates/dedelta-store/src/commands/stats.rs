//! `stats`: what the repository holds and how well it reduces it.
//!
//! Computed from container metadata (never chunk data) and snapshot summaries.

use crate::backend::FileKind;
use crate::error::Result;
use crate::format::container::EntryKind;
#[cfg(doc)]
use crate::format::snapshot::BackupSummary;
use crate::format::snapshot::{dce, ratio};
use crate::repository::{read_container_meta, IndexedRepository};
use dedelta_core::ChunkId;
use std::collections::HashSet;

/// Repository statistics (`stats --json` prints these keys).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RepoStats {
    /// Snapshots.
    pub snapshots: u64,
    /// Sum over snapshots of the file bytes they hold.
    pub logical_bytes: u64,
    /// Bytes of all containers (what the repository occupies for data).
    pub stored_bytes: u64,
    /// Distinct chunks stored.
    pub chunks: u64,
    /// Chunks stored in full.
    pub full_chunks: u64,
    /// Chunks stored as deltas.
    pub delta_chunks: u64,
    /// Containers.
    pub containers: u64,
    /// Raw bytes of the distinct chunks (after deduplication).
    pub unique_bytes: u64,
    /// Raw bytes of stored entries (after delta compression, before local compression).
    pub after_delta_bytes: u64,
    /// logical / unique.
    pub dedup_factor: f64,
    /// unique / after delta.
    pub delta_factor: f64,
    /// after delta / stored.
    pub compression_factor: f64,
    /// logical / stored.
    pub total_factor: f64,
    /// Delta compression ratio (Finesse §5.1): unique / after delta (= `delta_factor`).
    pub dcr: f64,
    /// Delta compression efficiency (LoopDelta §3.1.4): `1 - delta bytes / original bytes`
    /// of the chunks stored as deltas, the fraction delta encoding saved on them.
    pub dce: f64,
    /// Original / delta bytes of the chunks stored as deltas (printed as DCE before the
    /// papers' definition was adopted).
    pub delta_ratio: f64,
    /// Original bytes of the chunks stored as deltas.
    pub delta_source_bytes: u64,
    /// Bytes of their deltas.
    pub delta_bytes: u64,
    /// Detected pairs, summed over the snapshots' summaries (see
    /// [`BackupSummary::delta_detected`]; snapshots written before these counts record none,
    /// and a forgotten snapshot's are gone with it): chunks a delta was encoded for.
    pub delta_detected: u64,
    /// Of those, dropped by `min_saving`.
    pub delta_rejected_min_saving: u64,
    /// Dropped by the re-anchoring bound.
    pub delta_rejected_reanchor: u64,
    /// Dropped by the tree bound.
    pub delta_rejected_tree_bound: u64,
    /// Original bytes of the detected chunks.
    pub detected_source_bytes: u64,
    /// Bytes of their smallest deltas.
    pub detected_delta_bytes: u64,
    /// DCE over the detected pairs (`1 - detected_delta_bytes / detected_source_bytes`):
    /// what the sketch and codec found, before `min_saving` and the bounds chose.
    pub detected_dce: f64,
    /// Snapshots and containers that could not be read (left out of the figures).
    pub warnings: Vec<String>,
    /// Bytes of every file in the repository (containers, snapshots, damage records, locks,
    /// config): what the repository costs, without the file system's directory overhead.
    pub repository_bytes: u64,
    /// Bytes of this client's cache of the repository (chunk index and local base cache),
    /// which is not part of the repository.
    pub cache_bytes: u64,
    /// Bytes of the chunk index file, part of [`Self::cache_bytes`].
    pub index_bytes: u64,
    /// Where the repository's bytes go.
    pub breakdown: BytesBreakdown,
}

/// Where the repository's bytes go; the parts add up to [`RepoStats::repository_bytes`]. A
/// region is compressed whole, so its stored bytes are shared among its entries by their raw
/// lengths.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BytesBreakdown {
    /// Full chunks of file data.
    pub full_chunks: u64,
    /// Delta payloads.
    pub deltas: u64,
    /// Chunks of the snapshots' tree streams (directory entries and file recipes), deltas
    /// and the bases of tree deltas included.
    pub trees: u64,
    /// Container headers, metadata sections (entry records, sketches) and footers.
    pub container_metadata: u64,
    /// Snapshot files.
    pub snapshots: u64,
    /// The config, locks and damage records.
    pub other: u64,
}

/// Computes the statistics.
pub fn stats(repo: &IndexedRepository) -> Result<RepoStats> {
    let mut s = RepoStats::default();
    let snapshots = repo.snapshots()?;
    s.warnings = snapshots.warnings();
    let mut tree_chunks = HashSet::new();
    for (_, snap) in snapshots.snapshots {
        s.snapshots += 1;
        s.logical_bytes += snap.summary.bytes_read;
        let m = &snap.summary;
        s.delta_detected += m.delta_detected;
        s.delta_rejected_min_saving += m.delta_rejected_min_saving;
        s.delta_rejected_reanchor += m.delta_rejected_reanchor;
        s.delta_rejected_tree_bound += m.delta_rejected_tree_bound;
        s.detected_source_bytes += m.detected_source_bytes;
        s.detected_delta_bytes += m.detected_delta_bytes;
        tree_chunks.extend(snap.tree.chunks);
    }
    // Full chunks are attributed once every tree delta's base is known: a full chunk that
    // no tree names but a tree delta is based on is a tree chunk of a forgotten snapshot.
    let mut full_shares: Vec<(ChunkId, u64)> = Vec::new();
    let mut tree_bases: HashSet<ChunkId> = HashSet::new();
    let b = &mut s.breakdown;
    for (name, size) in repo.backend().list(FileKind::Container)? {
        s.repository_bytes += size;
        let meta = match read_container_meta(repo.backend().as_ref(), &name) {
            Ok(m) => m,
            Err(e) => {
                s.warnings.push(format!("left out: {e}"));
                continue;
            }
        };
        s.containers += 1;
        s.stored_bytes += size;
        let regions: u64 = meta.regions.iter().map(|r| u64::from(r.stored_len)).sum();
        b.container_metadata += size.saturating_sub(regions);
        for e in &meta.entries {
            let share = meta.regions.get(e.region as usize).map_or(0, |r| {
                u64::from(r.stored_len) * u64::from(e.stored_len) / u64::from(r.raw_len).max(1)
            });
            match e.kind {
                _ if tree_chunks.contains(&e.id) => {
                    b.trees += share;
                    if let EntryKind::Delta { base, .. } = e.kind {
                        tree_bases.insert(base);
                    }
                }
                EntryKind::Full => full_shares.push((e.id, share)),
                EntryKind::Delta { .. } => b.deltas += share,
            }
            s.chunks += 1;
            s.unique_bytes += u64::from(e.original_len);
            s.after_delta_bytes += u64::from(e.stored_len);
            match e.kind {
                EntryKind::Full => s.full_chunks += 1,
                EntryKind::Delta { .. } => {
                    s.delta_chunks += 1;
                    s.delta_source_bytes += u64::from(e.original_len);
                    s.delta_bytes += u64::from(e.stored_len);
                }
            }
        }
    }
    for (id, share) in full_shares {
        if tree_bases.contains(&id) {
            b.trees += share;
        } else {
            b.full_chunks += share;
        }
    }
    // Containers were listed above.
    for kind in FileKind::ALL
        .into_iter()
        .filter(|k| *k != FileKind::Container)
    {
        let bytes: u64 = repo
            .backend()
            .list(kind)?
            .iter()
            .map(|(_, size)| size)
            .sum();
        s.repository_bytes += bytes;
        match kind {
            FileKind::Snapshot => s.breakdown.snapshots += bytes,
            _ => s.breakdown.other += bytes,
        }
    }
    // What rounding in the shares left out of the entries goes to the metadata.
    let b = &mut s.breakdown;
    let parts = b.full_chunks + b.deltas + b.trees + b.container_metadata;
    b.container_metadata += s.stored_bytes.saturating_sub(parts);
    if let Some(dir) = repo.index_path().parent() {
        s.cache_bytes = crate::client::cache::dir_bytes(dir);
    }
    s.index_bytes = crate::client::index::files_bytes(repo.index_path());
    s.dedup_factor = ratio(s.logical_bytes, s.unique_bytes);
    s.delta_factor = ratio(s.unique_bytes, s.after_delta_bytes);
    s.compression_factor = ratio(s.after_delta_bytes, s.stored_bytes);
    s.total_factor = ratio(s.logical_bytes, s.stored_bytes);
    s.dcr = s.delta_factor;
    s.dce = dce(s.delta_source_bytes, s.delta_bytes);
    s.delta_ratio = ratio(s.delta_source_bytes, s.delta_bytes);
    s.detected_dce = dce(s.detected_source_bytes, s.detected_delta_bytes);
    Ok(s)
}
