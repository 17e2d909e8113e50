//! Encryption at rest: the master key, the key files that hold it under passwords, and the
//! backend wrapper that seals every object (docs/format.md, "Encryption").
//!
//! As restic does: `init` draws a random master key (a data key for XChaCha20-Poly1305 and a
//! separate id key for keyed BLAKE3 chunk ids), and stores it in a key file (`keys/<id>`)
//! sealed under a key derived from a password by Argon2id, whose parameters and salt the file
//! records. Several key files may hold the same master key (`key add`), so a password can be
//! changed or revoked without re-encrypting the repository. Everything else but locks is
//! sealed by [`backend::SealedBackend`] (format in [`crate::format::sealed`]).
//!
//! Primitives come from RustCrypto (`chacha20poly1305` for key files, `chacha20`'s HChaCha20
//! and `argon2`), `ring` (ChaCha20-Poly1305 of sealed objects' segments, see
//! [`crate::format::sealed`]) and `blake3`; nothing here implements one.

pub mod backend;
mod kdf_memory;
pub mod keys;

pub use backend::SealedBackend;
pub use keys::{KdfParams, KeyInfo, KeyOrigin};

use dedelta_core::ChunkHasher;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// The repository's secret keys, from a key file.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct MasterKey {
    /// XChaCha20-Poly1305 key of every sealed object.
    pub(crate) data: [u8; 32],
    /// BLAKE3 key of chunk ids (and so of everything named by content).
    pub(crate) id: [u8; 32],
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// A new random master key.
    pub fn random() -> crate::Result<Self> {
        let mut bytes = random_bytes::<64>()?;
        let k = Self::from_bytes(&bytes);
        bytes.zeroize();
        Ok(k)
    }

    fn from_bytes(b: &[u8; 64]) -> Self {
        let mut data = [0u8; 32];
        let mut id = [0u8; 32];
        data.copy_from_slice(&b[..32]);
        id.copy_from_slice(&b[32..]);
        MasterKey { data, id }
    }

    fn to_bytes(&self) -> zeroize::Zeroizing<[u8; 64]> {
        let mut b = zeroize::Zeroizing::new([0u8; 64]);
        b[..32].copy_from_slice(&self.data);
        b[32..].copy_from_slice(&self.id);
        b
    }

    /// How this repository computes chunk ids.
    pub fn chunk_hasher(&self) -> ChunkHasher {
        ChunkHasher::Keyed(self.id)
    }
}

/// `N` random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> crate::Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b).map_err(|e| {
        crate::Error::io(
            "reading random bytes from the operating system",
            std::io::Error::other(e.to_string()),
        )
    })?;
    Ok(b)
}

/// The name of the cipher suite an encrypted repository's config records.
pub const SUITE: &str = "xchacha20poly1305-16k+blake3-keyed";
