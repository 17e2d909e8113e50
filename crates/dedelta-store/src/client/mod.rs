//! State a client keeps beside the repository: caches that speed it up and can always be
//! rebuilt from the repository (deleting them loses nothing).
//!
//! - [`index`]: the chunk index (fingerprint -> container entry, super-feature -> base).
//! - [`local_cache`]: the local base cache of the last backups' delta bases.

pub mod index;
pub mod local_cache;
