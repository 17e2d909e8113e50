//! Dense container lists (LoopDelta §4.2): the containers a backup referenced densely, which
//! the next backup of the same lineage (host and paths) loads whole when deduplication
//! prefetches their metadata, so that their full chunks become delta bases without a read of
//! their own (§4.3).
//!
//! One list beside each snapshot that has one: an envelope with magic `DDDL` around JSON,
//! in `dense/`, named by the snapshot's id. A list is a hint, never needed to read anything:
//! it is written after its snapshot (a backup killed between leaves a snapshot without one,
//! and the next backup prefetches no data), a missing or unreadable list only costs the next
//! backup its bases, and prune drops the containers it deletes or rewrites from every list and
//! the lists of snapshots that are gone.

use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use crate::format::envelope;
use crate::format::snapshot::SnapshotId;
use serde::{Deserialize, Serialize};

/// Dense container list magic.
pub const DENSE_MAGIC: &[u8; 4] = b"DDDL";
/// Dense container list format version.
pub const DENSE_VERSION: u16 = 1;

/// The dense container list of one snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DenseList {
    /// The snapshot the list was made by (also the object's name).
    pub snapshot: SnapshotId,
    /// The reuse ratio a container had to exceed (the backup's `delta.dense_threshold`).
    pub threshold: f64,
    /// The dense containers, in the order the backup first referenced them (its own new
    /// containers last).
    pub containers: Vec<ContainerId>,
}

impl DenseList {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of ids and a float serializes.
        let json = serde_json::to_vec(self).unwrap_or_default();
        envelope::seal(DENSE_MAGIC, DENSE_VERSION, &json)
    }

    /// Parses and checks a file; `what` names it in errors.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for damage or a list naming another snapshot than `name`;
    /// [`Error::UnsupportedVersion`] for a newer version.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Self> {
        let what = format!("dense container list {name}");
        let payload = envelope::open(bytes, DENSE_MAGIC, DENSE_VERSION, &what)?;
        let list: DenseList = serde_json::from_slice(payload)
            .map_err(|e| Error::corrupt(&what, format!("unreadable JSON: {e}")))?;
        if list.snapshot.to_hex() != name {
            return Err(Error::corrupt(&what, "names another snapshot"));
        }
        if !(0.0..=1.0).contains(&list.threshold) {
            return Err(Error::corrupt(&what, "threshold outside 0..=1"));
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> DenseList {
        DenseList {
            snapshot: SnapshotId([7; 32]),
            threshold: 0.3,
            containers: vec![ContainerId([1; 32]), ContainerId([2; 32])],
        }
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let l = list();
        let name = l.snapshot.to_hex();
        let bytes = l.to_bytes();
        assert_eq!(DenseList::from_bytes(&bytes, &name).unwrap(), l);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(DenseList::from_bytes(&bad, &name).is_err(), "byte {i}");
        }
        assert!(DenseList::from_bytes(&bytes[..bytes.len() - 1], &name).is_err());
        let other = SnapshotId([8; 32]).to_hex();
        assert!(DenseList::from_bytes(&bytes, &other)
            .unwrap_err()
            .to_string()
            .contains("another snapshot"));
    }
}
