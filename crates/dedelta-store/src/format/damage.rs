//! Damage records: what `check` found unreadable, kept in the repository.
//!
//! Without them, one damaged region poisons every later backup: new backups deduplicate
//! against the damaged chunks (the index still names them), and `repair index` would put them
//! back. So `check` writes a record (an envelope with magic `DDDM` around JSON, named by its
//! BLAKE3 hash, in `damage/`) naming each damaged stored copy, and drops those copies from the
//! index. From then on:
//! - a backup does not find them and stores those chunks again, which heals every snapshot
//!   that needs them (the index points at the new copy);
//! - `repair index` does not index recorded copies;
//! - `repair packs` salvages what is readable of a damaged container, deletes it and drops
//!   the records that name it.
//!
//! A record names a *copy* (container and chunk), not a chunk: the same chunk stored again
//! elsewhere is good. A record without a chunk names a whole container whose metadata cannot
//! be read. Records are write-once like every repository file; rewriting the set writes the new
//! record before deleting the old ones.

use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use crate::format::envelope;
use dedelta_core::ChunkId;
use serde::{Deserialize, Serialize};

/// Damage record magic.
pub const DAMAGE_MAGIC: &[u8; 4] = b"DDDM";
/// Damage record format version.
pub const DAMAGE_VERSION: u16 = 1;

/// One damaged stored copy, or (without `chunk`) a whole container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamagedCopy {
    /// The container.
    pub container: ContainerId,
    /// The chunk; `None` when the container's metadata is unreadable or it is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<ChunkId>,
    /// What check found.
    pub reason: String,
}

/// The content of one damage record file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamageRecord {
    /// When it was written (RFC 3339).
    pub time: String,
    /// The damaged copies.
    pub copies: Vec<DamagedCopy>,
}

impl DamageRecord {
    /// The enveloped file form.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Strings only: serialization cannot fail.
        let json = serde_json::to_vec(self).expect("damage record serializes");
        envelope::seal(DAMAGE_MAGIC, DAMAGE_VERSION, &json)
    }

    /// Parses the file form.
    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Self> {
        let payload = envelope::open(bytes, DAMAGE_MAGIC, DAMAGE_VERSION, what)?;
        serde_json::from_slice(payload).map_err(|e| Error::corrupt(what, e.to_string()))
    }
}
