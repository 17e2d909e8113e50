//! dedelta-store: the repository and its pipelines.
//!
//! - [`backend`]: named write-once objects (local directory; in-memory for tests).
//! - [`config`], [`container`], [`index`], [`snapshot`], [`tree`], [`lock`], [`damage`]: the
//!   on-disk format
//!   (docs/format.md).
//! - [`repository`]: opening a repository, reading chunks back through caches.
//! - [`commands`]: backup, restore, check, stats, ls/dump, repair; one file each.

pub mod backend;
pub mod chunk_read;
pub mod commands;
pub mod config;
pub mod container;
pub mod damage;
pub mod delta_stage;
pub mod envelope;
pub mod error;
pub mod index;
pub mod local_cache;
pub mod lock;
pub mod progress;
pub mod repository;
pub mod sketch_index;
pub mod snapshot;
pub mod tree;

pub use error::{Error, Result};
pub use repository::{IndexedRepository, Repository};
