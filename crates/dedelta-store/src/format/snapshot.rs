//! Snapshot files: one small, write-once file per backup.
//!
//! An envelope (magic `DDSN`) around JSON: time, host, paths, tags, the backup summary and the
//! tree reference (the chunk ids of the tree stream). The snapshot id is the BLAKE3 hash of the
//! file, so ids are unique without coordination between clients, and any unique prefix names it.

use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use crate::format::envelope;
use dedelta_core::ChunkId;
use serde::{Deserialize, Serialize};

/// Snapshot file magic.
pub const SNAPSHOT_MAGIC: &[u8; 4] = b"DDSN";
/// Snapshot format version: 2 since the summary holds only what describes the snapshot
/// (version 1 also held runtime counters, which readers ignore). Versions 1 and 2 are read.
pub const SNAPSHOT_VERSION: u16 = 2;

/// A snapshot's id: BLAKE3 of its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotId(pub [u8; 32]);

impl SnapshotId {
    /// Full hex form (the object name).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    /// The 8-character short form shown in listings.
    pub fn short(&self) -> String {
        self.to_hex()[..8].to_string()
    }
    /// Parses the object name: 64 lowercase hex digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        ChunkId::from_lowercase_hex(s).map(|id| SnapshotId(id.0))
    }
}

hex_id_serde!(SnapshotId);

impl std::fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The reference to a snapshot's tree stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeRef {
    /// Chunk ids of the tree stream, in order (64 lowercase hex digits each in JSON).
    pub chunks: Vec<ChunkId>,
    /// Total length of the stream in bytes.
    pub len: u64,
}

/// What a backup did; stored in the snapshot and printed by `backup`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackupSummary {
    /// Regular files backed up.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Bytes of file content (logical bytes of this snapshot): read, or, `bytes_unmodified`
    /// of them, taken unchanged from the parent snapshot without reading.
    pub bytes_read: u64,
    /// Chunks processed (file content and tree).
    pub chunks: u64,
    /// Chunks that were new to the repository.
    pub new_chunks: u64,
    /// Raw bytes of the new chunks (after deduplication, before compression).
    pub bytes_new: u64,
    /// Bytes added to the repository (containers written, compressed).
    pub bytes_added: u64,
    /// Bytes of the tree stream (metadata).
    pub tree_bytes: u64,
    /// Containers written.
    pub containers_written: u64,
    /// Sources that could not be read.
    pub warnings: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Raw bytes of the new chunks after delta compression (full chunks plus deltas).
    #[serde(default)]
    pub bytes_after_delta: u64,
    /// New chunks stored as deltas.
    #[serde(default)]
    pub delta_chunks: u64,
    /// Original bytes of the chunks stored as deltas.
    #[serde(default)]
    pub delta_source_bytes: u64,
    /// Bytes of their deltas.
    #[serde(default)]
    pub delta_bytes: u64,
    /// Deltas whose base DupAdj found.
    #[serde(default)]
    pub dupadj_deltas: u64,
    /// Deltas whose base the sketch index found.
    #[serde(default)]
    pub sketch_deltas: u64,
    /// Detected pairs: new chunks for which a candidate base was found and at least one
    /// delta was encoded, whether or not a delta was kept. `delta_detected = delta_chunks +
    /// delta_rejected_min_saving + delta_rejected_reanchor + delta_rejected_tree_bound`.
    #[serde(default)]
    pub delta_detected: u64,
    /// Original bytes of the detected chunks.
    #[serde(default)]
    pub detected_source_bytes: u64,
    /// Bytes of their smallest encoded deltas (kept or not).
    #[serde(default)]
    pub detected_delta_bytes: u64,
    /// Detected chunks stored in full because no delta saved `min_saving` of the chunk's
    /// compressed size (within the re-anchoring bound); with `min_saving` 0, those whose
    /// delta was not smaller than the chunk compressed alone.
    #[serde(default)]
    pub delta_rejected_min_saving: u64,
    /// Detected file-data chunks stored in full because their smallest delta was above the
    /// re-anchoring bound (`delta.reanchor`; checked before `min_saving`).
    #[serde(default)]
    pub delta_rejected_reanchor: u64,
    /// Detected tree chunks stored in full because their smallest delta was above the tree
    /// bound (half the chunk; checked before `min_saving`).
    #[serde(default)]
    pub delta_rejected_tree_bound: u64,
    /// FIFOs, sockets and devices.
    #[serde(default)]
    pub special_files: u64,
    /// Files not in the parent snapshot (every file without a parent; 0 with `--force`).
    #[serde(default)]
    pub files_new: u64,
    /// Files in the parent snapshot, changed, and read again.
    #[serde(default)]
    pub files_changed: u64,
    /// Files unchanged since the parent snapshot: stored with its recipe, not read.
    #[serde(default)]
    pub files_unmodified: u64,
    /// Bytes of the unchanged files (counted in `bytes_read`, but not read).
    #[serde(default)]
    pub bytes_unmodified: u64,
}

impl BackupSummary {
    /// Counts `node` in the files, directories, symlinks and file bytes, as a backup counts
    /// what its tree holds (`rewrite` recounts a tree it cut, `copy` a source's tree).
    pub fn count_node(&mut self, node: &crate::format::tree::Node) {
        use crate::format::tree::NodeKind;
        match node.kind {
            NodeKind::File => {
                self.files += 1;
                self.bytes_read += node.size;
            }
            NodeKind::Dir => self.dirs += 1,
            NodeKind::Symlink => self.symlinks += 1,
            _ => {}
        }
    }

    /// bytes read / new bytes.
    pub fn dedup_factor(&self) -> f64 {
        ratio(self.bytes_read, self.bytes_new)
    }

    /// Delta compression ratio (Finesse §5.1): new bytes before / after delta compression.
    pub fn dcr(&self) -> f64 {
        ratio(self.bytes_new, self.bytes_after_delta)
    }

    /// Delta compression efficiency as the papers define it (LoopDelta §3.1.4, Finesse
    /// Table 3): the fraction of the delta-encoded chunks' bytes that delta encoding saved,
    /// `1 - delta bytes / original bytes`, over the chunks stored as deltas; 0 without any.
    pub fn dce(&self) -> f64 {
        dce(self.delta_source_bytes, self.delta_bytes)
    }

    /// Original / delta bytes of the chunks stored as deltas (what an earlier build printed
    /// as DCE): `1 / (1 - dce)`.
    pub fn delta_ratio(&self) -> f64 {
        ratio(self.delta_source_bytes, self.delta_bytes)
    }

    /// Delta compression efficiency over the detected pairs (Finesse Table 3 measures
    /// detection so): `1 - delta / original` of every chunk a delta was encoded for, with its
    /// smallest delta, whether kept or rejected by `min_saving` or a bound; 0 without any.
    pub fn detected_dce(&self) -> f64 {
        dce(self.detected_source_bytes, self.detected_delta_bytes)
    }

    /// Detected pairs rejected, for any reason.
    pub fn delta_rejected(&self) -> u64 {
        self.delta_rejected_min_saving
            + self.delta_rejected_reanchor
            + self.delta_rejected_tree_bound
    }
}

/// Delta compression efficiency (see [`BackupSummary::dce`]) of chunks of `source_bytes`
/// stored as deltas of `delta_bytes`: `1 - delta / source`, 0 when nothing was delta-encoded.
pub fn dce(source_bytes: u64, delta_bytes: u64) -> f64 {
    if source_bytes == 0 {
        return 0.0;
    }
    1.0 - delta_bytes as f64 / source_bytes as f64
}

/// `a / b`; 1 when both are 0; infinite when only `b` is (serialized as JSON `null`).
pub fn ratio(a: u64, b: u64) -> f64 {
    match (a, b) {
        (0, 0) => 1.0,
        (_, 0) => f64::INFINITY,
        _ => a as f64 / b as f64,
    }
}

/// The content of a snapshot file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// When the backup started (RFC 3339).
    pub time: String,
    /// Host name.
    pub host: String,
    /// The backed-up paths as given (absolute).
    pub paths: Vec<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The tree stream.
    pub tree: TreeRef,
    /// What the backup did.
    pub summary: BackupSummary,
    /// The snapshot this one was made from by `repair snapshots` (full hex id), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// Files whose lost chunks `repair snapshots` removed: their content is incomplete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damaged_paths: Vec<String>,
    /// `repair snapshots` could read only the first part of the original's tree: files and
    /// directories after that point are missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tree_truncated: bool,
    /// The containers whose copies of its chunks the backup referenced (the duplicates'
    /// containers and the ones it wrote), sorted: restore reads a chunk from one of these
    /// when a later backup stored the chunk again (Capping), and prune keeps those copies.
    /// Empty in snapshots written before it was recorded: they read the index's copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerId>,
}

impl Snapshot {
    /// Serializes into the enveloped file form.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        let json = serde_json::to_vec(self).expect("snapshot serializes");
        envelope::seal(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, &json)
    }

    /// Parses the file form.
    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Self> {
        let payload = envelope::open(bytes, SNAPSHOT_MAGIC, SNAPSHOT_VERSION, what)?;
        serde_json::from_slice(payload).map_err(|e| Error::corrupt(what, e.to_string()))
    }
}

#[cfg(test)]
mod metric_tests {
    use super::*;

    /// A hand-computed example: 1,000 new bytes, of which 800 in two chunks stored as deltas
    /// of 100 and 60 bytes, the other 200 stored in full.
    #[test]
    fn dcr_and_dce_as_the_papers_define_them() {
        let s = BackupSummary {
            bytes_read: 4_000,
            bytes_new: 1_000,
            bytes_after_delta: 360,
            delta_source_bytes: 800,
            delta_bytes: 160,
            delta_chunks: 2,
            ..BackupSummary::default()
        };
        assert_eq!(s.dedup_factor(), 4.0);
        assert!((s.dcr() - 1_000.0 / 360.0).abs() < 1e-12);
        // 1 - 160 / 800: delta encoding saved 80% of the delta chunks' bytes.
        assert!((s.dce() - 0.8).abs() < 1e-12);
        assert_eq!(s.delta_ratio(), 5.0);
        assert_eq!(BackupSummary::default().dce(), 0.0);
        assert_eq!(dce(100, 0), 1.0);
    }

    /// Detection against acceptance, by hand: three chunks of 1,000 bytes each got a delta.
    /// One delta of 100 bytes was kept; one of 400 was dropped by the re-anchoring bound
    /// (30 %), one of 950 by `min_saving`. Kept: DCE 1 - 100/1000 = 0.9. Detected: DCE
    /// 1 - (100 + 400 + 950) / 3000 = 0.51666...
    #[test]
    fn detected_pairs_against_kept_pairs() {
        let s = BackupSummary {
            delta_chunks: 1,
            delta_source_bytes: 1_000,
            delta_bytes: 100,
            delta_detected: 3,
            detected_source_bytes: 3_000,
            detected_delta_bytes: 1_450,
            delta_rejected_reanchor: 1,
            delta_rejected_min_saving: 1,
            ..BackupSummary::default()
        };
        assert!((s.dce() - 0.9).abs() < 1e-12);
        assert!((s.detected_dce() - (1.0 - 1_450.0 / 3_000.0)).abs() < 1e-12);
        assert_eq!(s.delta_rejected(), 2);
        assert_eq!(s.delta_detected, s.delta_chunks + s.delta_rejected());
        // Old snapshots, without the keys, read as none detected.
        let v1: BackupSummary = serde_json::from_value(serde_json::json!({
            "files": 1, "dirs": 0, "symlinks": 0, "bytes_read": 1, "chunks": 1, "new_chunks": 1,
            "bytes_new": 1, "bytes_added": 1, "tree_bytes": 1, "containers_written": 1,
            "warnings": 0, "seconds": 0.5
        }))
        .unwrap();
        assert_eq!((v1.delta_detected, v1.detected_dce()), (0, 0.0));
    }
}
