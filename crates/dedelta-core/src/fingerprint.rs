//! Chunk fingerprints: BLAKE3-256 of the chunk's bytes.
//!
//! BLAKE3 is collision resistant, so two chunks with the same fingerprint are treated as
//! identical (deduplication never compares bytes), and fast enough (several GB/s with SIMD)
//! not to bound backup throughput.

use std::fmt;

/// Length of a fingerprint in bytes.
pub const CHUNK_ID_LEN: usize = 32;

/// The BLAKE3-256 fingerprint of a chunk: its identity everywhere in the repository.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ChunkId(pub [u8; CHUNK_ID_LEN]);

/// Hashes a [`ChunkId`] for in-memory hash tables by its first 8 bytes: they are uniform
/// already (BLAKE3, or its keyed form), and SipHash over all 32 bytes cost a restore more
/// than the table lookups it served (7 % of a dump's samples; 6 % of an S3 restore's
/// locating thread). Ids sharing their first bytes, which only whoever writes a repository
/// could make, would make lookups slow, never wrong.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChunkIdHasher(u64);

impl std::hash::Hasher for ChunkIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(17) ^ u64::from_le_bytes(word);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`ChunkIdHasher`]s (for `HashMap::with_hasher`, `LruCache::with_hasher`).
pub type BuildChunkIdHasher = std::hash::BuildHasherDefault<ChunkIdHasher>;

impl ChunkId {
    /// Fingerprints `data`.
    pub fn of(data: &[u8]) -> Self {
        ChunkId(*blake3::hash(data).as_bytes())
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; CHUNK_ID_LEN] {
        &self.0
    }

    /// Lower-case hex form (64 characters).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses the 64-character hex form.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; CHUNK_ID_LEN];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(ChunkId(out))
    }

    /// Parses the hex form as written in repository files: exactly 64 lowercase hex digits.
    pub fn from_lowercase_hex(s: &str) -> Option<Self> {
        let lowercase = s.len() == 2 * CHUNK_ID_LEN
            && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        lowercase.then(|| Self::from_hex(s)).flatten()
    }

    /// Reads an id from the first 32 bytes of `bytes`, if there are that many.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        let arr: [u8; CHUNK_ID_LEN] = bytes.get(..CHUNK_ID_LEN)?.try_into().ok()?;
        Some(ChunkId(arr))
    }
}

/// How a repository turns chunk bytes into [`ChunkId`]s: plain BLAKE3-256, or (in an
/// encrypted repository) BLAKE3's keyed mode under a secret id key, so that an id does not let
/// someone without the key confirm a guess of a chunk's content (as borg's HMAC ids).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkHasher {
    /// `blake3(data)`: [`ChunkId::of`].
    #[default]
    Plain,
    /// `blake3::keyed_hash(key, data)`.
    Keyed([u8; 32]),
}

impl ChunkHasher {
    /// The id of `data`.
    pub fn id(&self, data: &[u8]) -> ChunkId {
        match self {
            ChunkHasher::Plain => ChunkId::of(data),
            ChunkHasher::Keyed(key) => ChunkId(*blake3::keyed_hash(key, data).as_bytes()),
        }
    }
}

impl fmt::Debug for ChunkHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key.
        match self {
            ChunkHasher::Plain => f.write_str("ChunkHasher::Plain"),
            ChunkHasher::Keyed(_) => f.write_str("ChunkHasher::Keyed(..)"),
        }
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// In JSON (snapshots, damage records, command output) a fingerprint is its 64-character
/// lowercase hex form; a reader refuses any other form.
impl serde::Serialize for ChunkId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for ChunkId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        ChunkId::from_lowercase_hex(&s)
            .ok_or_else(|| serde::de::Error::custom("not 64 lowercase hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hasher_keys_tables_by_the_ids_first_bytes() {
        use std::hash::BuildHasher;
        let build = BuildChunkIdHasher::default();
        let a = ChunkId::of(b"a");
        let mut b = a;
        b.0[31] ^= 1; // differs after the first 8 bytes only: same hash, still told apart
        let c = ChunkId::of(b"c");
        assert_eq!(build.hash_one(a), build.hash_one(b));
        assert_ne!(build.hash_one(a), build.hash_one(c));
        let mut set: std::collections::HashSet<ChunkId, BuildChunkIdHasher> = Default::default();
        assert!(set.insert(a) && set.insert(b) && set.insert(c));
        assert!(!set.insert(a));
        assert_eq!(set.len(), 3);
    }

    #[test]
    fn hex_round_trip() {
        let id = ChunkId::of(b"hello");
        assert_eq!(ChunkId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(ChunkId::from_hex("zz"), None);
        // BLAKE3 test vector for the empty input.
        assert_eq!(
            ChunkId::of(b"").to_hex(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    /// A keyed id differs from the plain one and from another key's, and is stable.
    #[test]
    fn keyed_ids_depend_on_the_key() {
        let a = ChunkHasher::Keyed([1; 32]);
        let b = ChunkHasher::Keyed([2; 32]);
        assert_eq!(ChunkHasher::Plain.id(b"x"), ChunkId::of(b"x"));
        assert_ne!(a.id(b"x"), ChunkId::of(b"x"));
        assert_ne!(a.id(b"x"), b.id(b"x"));
        assert_eq!(a.id(b"x"), a.id(b"x"));
        assert_eq!(format!("{a:?}"), "ChunkHasher::Keyed(..)");
    }
}
