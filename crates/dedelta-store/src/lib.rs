//! dedelta-store: the repository and its pipelines.
//!
//! - [`format`]: what is written to the repository, byte for byte as docs/format.md says
//!   (envelope, config, containers, snapshots, tree streams, damage records).
//! - [`repository`]: opening a repository, its lock, its snapshots and damage records, and
//!   writing containers (the only place that writes chunk data).
//! - [`client`]: state kept by a client and rebuildable from the repository (the chunk index,
//!   the local base cache).
//! - [`read`]: reading chunks back (locator, decoder, caches).
//! - [`backup`]: the backup pipeline, one module per stage.
//! - [`commands`]: one file per command (backup, restore, check, ls/dump, stats, forget,
//!   prune, repair, tag, find, diff, mount).
//! - [`crypto`]: encryption at rest (master key, key files, the sealing backend wrapper).
//! - [`io_report`]: a command's metered I/O by purpose, with its modelled seconds.
//! - `write_behind`, `request_threads`, `share`, `buffers`: threads and buffers the pipelines
//!   share (output written behind restore's and dump's decoding, requests sent at once on an
//!   object store, a batch shared with free threads, reused buffers).
//! - [`backend`]: the `dedelta-backend` crate (named write-once objects; local directory,
//!   memory, fault injection, metering, the I/O cost models), re-exported.

pub use dedelta_backend as backend;
pub mod backup;
pub mod buffers;
pub mod client;
pub mod commands;
pub mod crypto;
pub mod error;
pub mod format;
pub mod io_report;
pub mod progress;
pub mod read;
pub mod repository;
pub(crate) mod request_threads;
pub(crate) mod share;
pub(crate) mod write_behind;

pub use error::{Error, Result};
pub use repository::{IndexedRepository, Repository};
