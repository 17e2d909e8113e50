//! The repository format: exactly what docs/format.md specifies, and nothing that runs.
//!
//! Each module encodes and decodes one kind of object; constants mirror the document's byte
//! tables. Decoders reject malformed input with an error and never panic (fuzz targets in
//! `fuzz/`).

pub mod config;
pub mod container;
pub mod damage;
pub mod envelope;
pub mod snapshot;
pub mod tree;
