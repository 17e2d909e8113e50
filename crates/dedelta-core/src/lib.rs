//! dedelta-core: the research algorithms of dedelta, with no I/O, clock or randomness.
//!
//! Everything here is a pure function of its input and of constants fixed in code, so that
//! the same chunk gives the same cut points, fingerprint and sketch in every process, forever:
//! the repository relies on that to deduplicate and to find delta bases across runs.
//!
//! - [`chunker`]: content-defined chunkers (FastCDC, Gear, Rabin) and fixed-size chunking.
//! - [`fingerprint`]: BLAKE3-256 chunk fingerprints ([`ChunkId`]).
//! - [`sketch`]: resemblance sketches ([`sketch::SuperFeatures`]): N-transform, Finesse, Odess.
//! - [`delta`]: delta codecs (Xdelta-style, Ddelta, Edelta) over one instruction format.
//! - [`compress`]: local compression of compression regions (zstd).
//! - [`varint`]: LEB128 integers used by the binary formats.

pub mod chunker;
pub mod compress;
pub mod delta;
pub mod fingerprint;
pub mod sketch;
pub mod varint;

pub use fingerprint::{BuildChunkIdHasher, ChunkHasher, ChunkId, ChunkIdHasher};
