//! The backend: named, write-once objects.
//!
//! All repository I/O goes through [`Backend`], keyed by ([`FileKind`], name). The trait is
//! deliberately small (put, get, ranged get, list, delete, atomic create) so that an object
//! store (S3 through `object_store`) can implement it without touching the pipelines. The
//! local directory ([`local::LocalBackend`]) is the embedded default; [`memory::MemoryBackend`]
//! is test support.

pub mod fault;
pub mod local;
pub mod memory;

use crate::error::Result;

/// The kinds of objects in a repository, each in its own namespace (a folder locally).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// The repository `config` (one object, name ignored).
    Config,
    /// Containers: chunk data and metadata.
    Container,
    /// Snapshot files.
    Snapshot,
    /// Lock files.
    Lock,
    /// Damage records written by `check` (see [`crate::format::damage`]).
    Damage,
}

impl FileKind {
    /// Every kind, in [`FileKind::slot`] order (for per-kind counters).
    pub const ALL: [FileKind; 5] = [
        FileKind::Config,
        FileKind::Container,
        FileKind::Snapshot,
        FileKind::Lock,
        FileKind::Damage,
    ];

    /// This kind's position in [`FileKind::ALL`].
    pub fn slot(self) -> usize {
        match self {
            FileKind::Config => 0,
            FileKind::Container => 1,
            FileKind::Snapshot => 2,
            FileKind::Lock => 3,
            FileKind::Damage => 4,
        }
    }

    /// The folder (or key prefix) of this kind.
    pub fn dir(self) -> &'static str {
        match self {
            FileKind::Config => "",
            FileKind::Container => "containers",
            FileKind::Snapshot => "snapshots",
            FileKind::Lock => "locks",
            FileKind::Damage => "damage",
        }
    }

    /// The singular noun for messages (`container`, `snapshot`, ...).
    pub fn noun(self) -> &'static str {
        match self {
            FileKind::Config => "config",
            FileKind::Container => "container",
            FileKind::Snapshot => "snapshot",
            FileKind::Lock => "lock",
            FileKind::Damage => "damage record",
        }
    }

    /// The error for a missing object of this kind.
    pub fn missing(self, name: &str) -> crate::Error {
        crate::Error::ObjectMissing {
            kind: self.noun(),
            name: name.to_string(),
        }
    }
}

/// A store of named objects. Objects are written whole and never modified in place.
///
/// Reading an object that does not exist fails with [`crate::Error::ObjectMissing`] (not a
/// generic I/O error), so that callers can tell "gone" from "damaged".
pub trait Backend: Send + Sync {
    /// Reads a whole object.
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>>;
    /// Reads `len` bytes at `offset`; a negative `offset` counts from the end.
    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>>;
    /// Like [`Backend::get_range`], into `buf` (replacing its contents), so that a caller
    /// reading many ranges can reuse one buffer.
    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        *buf = self.get_range(kind, name, offset, len)?;
        Ok(())
    }
    /// Writes an object durably and atomically: after return it survives a crash, and a crash
    /// during the call leaves either no object or the whole one. Overwrites an existing object.
    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()>;
    /// Creates an object only if none of that name exists; `Ok(false)` if one did.
    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool>;
    /// Lists object names of a kind, with their sizes in bytes.
    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>>;
    /// Deletes an object; deleting a missing object is not an error.
    fn delete(&self, kind: FileKind, name: &str) -> Result<()>;
    /// Size of an object in bytes.
    fn size(&self, kind: FileKind, name: &str) -> Result<u64>;
    /// Whether an object exists.
    fn exists(&self, kind: FileKind, name: &str) -> Result<bool>;
    /// A human-readable location for messages.
    fn location(&self) -> String;
}
