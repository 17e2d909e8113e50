//! Runs on: the caller's thread (the walker); built while the parent snapshot's tree is read.
//!
//! Unchanged files are not read again. A file whose path, size, modification time, status
//! change time and inode are those its record in the parent snapshot holds (restic's rules,
//! with restic's `--ignore-ctime` and `--ignore-inode` to drop the last two) is stored with the
//! parent's recipe, without opening it, as long as every chunk of that recipe is still in the
//! index (and not recorded as damaged). The chunks then count as duplicates, shown to the
//! delta stage's candidate search in stream order as a read would have shown them (DupAdj's
//! walk goes on after the file).
//!
//! Capping (see [`super::rewrite`]) never rewrites an unchanged file's chunks: it decides on
//! the data it reads, and these are not read (`--force` reads them, and then caps them).
//!
//! The ctime is the guard against a file changed without its mtime moving (`touch -d`, a
//! restored mtime): a write or `utimes` sets the ctime, and nothing can set it back. A file
//! that changed while the parent read it was recorded with the metadata from before the read,
//! which it no longer has, so it is read again.

use super::fingerprint_index::FingerprintIndex;
use crate::error::Result;
use crate::format::container::ContainerId;
use crate::format::tree::{ChunkRef, Node, NodeKind, Timestamp};
use std::collections::HashMap;

/// How the backup reads its sources.
#[derive(Clone, Debug, Default)]
pub struct SourceOptions {
    /// The snapshot whose files are compared (an id prefix or `latest`); `None` picks the
    /// newest snapshot of the same host and paths.
    pub parent: Option<String>,
    /// Reads every file, unchanged or not.
    pub force: bool,
    /// A file whose inode changed but nothing else counts as unchanged (for file systems
    /// without stable inodes: network and FUSE mounts).
    pub ignore_inode: bool,
    /// A file whose status change time changed but nothing else counts as unchanged.
    pub ignore_ctime: bool,
    /// Does not cross into other file systems below a source (their mount points are kept,
    /// empty).
    pub one_file_system: bool,
    /// What to leave out (excludes, caches, large files).
    pub select: super::select::SelectOptions,
    /// Reads the parent's tree from the repository even when the local tree cache holds it
    /// ([`crate::client::tree_cache`]): the eval, which measures the papers' systems (they
    /// read the parent's recipe), counts that read in every configuration's I/O.
    pub parent_tree_from_repository: bool,
    /// Sends every file to the pool in blocks of its own, small files too, as backups did
    /// before small files were packed into runs ([`super::small_files`]; for tests, which
    /// compare the two).
    pub one_job_per_file: bool,
}

/// What the parent recorded of one file.
struct ParentFile {
    size: u64,
    mtime: Timestamp,
    ctime: Timestamp,
    ino: u64,
    chunks: Box<[ChunkRef]>,
}

/// The parent snapshot's files, by path.
pub(super) struct ParentFiles {
    files: HashMap<Box<[u8]>, ParentFile>,
    ignore_inode: bool,
    ignore_ctime: bool,
}

/// What the parent says of a file.
pub(super) enum Verdict {
    /// Not in the parent.
    New,
    /// In the parent, but changed (or its chunks are gone): read it.
    Changed,
    /// Unchanged: its chunks and where the index has them.
    Unchanged(Vec<(ChunkRef, ContainerId)>),
}

impl ParentFiles {
    /// No files yet, compared by `opts`' rules.
    pub fn new(opts: &SourceOptions) -> Self {
        ParentFiles {
            files: HashMap::new(),
            ignore_inode: opts.ignore_inode,
            ignore_ctime: opts.ignore_ctime,
        }
    }

    /// The parent's next node (only files are kept).
    pub fn add(&mut self, node: &Node, chunks: &[ChunkRef]) {
        if node.kind != NodeKind::File {
            return;
        }
        self.files.insert(
            node.path.clone().into_boxed_slice(),
            ParentFile {
                size: node.size,
                mtime: Timestamp {
                    secs: node.mtime_secs,
                    nanos: node.mtime_nanos,
                },
                ctime: node.meta.ctime,
                ino: node.meta.ino,
                chunks: chunks.into(),
            },
        );
    }

    /// Judges file `node` (as `lstat` describes it now); each path is judged once.
    pub fn judge(&mut self, node: &Node, index: &dyn FingerprintIndex) -> Result<Verdict> {
        let Some(old) = self.files.remove(node.path.as_slice()) else {
            return Ok(Verdict::New);
        };
        let mtime = Timestamp {
            secs: node.mtime_secs,
            nanos: node.mtime_nanos,
        };
        let held: u64 = old.chunks.iter().map(|c| u64::from(c.len)).sum();
        let same = old.size == node.size
            && held == node.size
            && old.mtime == mtime
            && (self.ignore_ctime || old.ctime == node.meta.ctime)
            && (self.ignore_inode || old.ino == node.meta.ino);
        if !same {
            return Ok(Verdict::Changed);
        }
        let mut located = Vec::with_capacity(old.chunks.len());
        for c in old.chunks.iter() {
            match index.container_of(&c.id)? {
                Some(container) => located.push((*c, container)),
                None => return Ok(Verdict::Changed),
            }
        }
        Ok(Verdict::Unchanged(located))
    }
}
