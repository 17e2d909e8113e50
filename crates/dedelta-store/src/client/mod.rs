//! State a client keeps beside the repository: caches that speed it up and can always be
//! rebuilt from the repository (deleting them loses nothing).
//!
//! - [`cache`]: where they live (one directory per repository under the cache root).
//! - [`index`]: the chunk index (fingerprint -> container entry, super-feature -> base).
//! - [`local_cache`]: the local base cache of the last backups' delta bases.
//! - [`snapshot_cache`]: the repository's snapshot files, for listing them without reading
//!   every one.
//! - [`meta_cache`]: container metadata sections, where every read is a round trip.
//! - [`tree_cache`]: the trees of the last snapshots written, for the next backup's parent.

pub mod cache;
pub mod index;
pub mod local_cache;
pub mod meta_cache;
pub mod snapshot_cache;
pub mod tree_cache;
