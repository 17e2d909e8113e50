//! Runs on: the caller's thread.
//!
//! Walks the sources in a fixed order (depth first, names sorted), turns every directory,
//! symlink and file into [`Item`]s for the dedup thread, and reads each file as blocks of
//! chunks ([`super::chunk`]) whose fingerprinting it hands to the worker pool. A file that
//! cannot be read, or that changes while it is read, is a warning (exit code 3), not an error:
//! the backup goes on, and the snapshot records what was read.

use super::chunk::{BlockPool, BlockReader};
use super::fingerprint::{submit, FingerprintJob};
use super::{closed, Item, StdinSource};
use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::progress::Progress;
use crossbeam_channel::Sender;
use crossbeam_utils::sync::WaitGroup;
use dedelta_core::chunker::Chunker;
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What the walker counted.
#[derive(Debug, Default)]
pub(super) struct WalkStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes_read: u64,
}

/// The walker's state for one backup.
pub(super) struct Walker<'a> {
    pub chunker: &'a dyn Chunker,
    pub pool: &'a rayon::ThreadPool,
    pub tx: Sender<Item>,
    pub excludes: &'a GlobSet,
    pub progress: &'a dyn Progress,
    pub warnings: &'a mut Vec<String>,
    pub stats: &'a mut WalkStats,
    pub job: FingerprintJob,
    /// Held by every job in flight, so that the backup can wait for them all before it
    /// returns (they hold the index's read view), also when it fails.
    pub jobs_in_flight: WaitGroup,
    /// Block buffers, reused from file to file and block to block.
    pub blocks: BlockPool,
}

impl Walker<'_> {
    fn warn(&mut self, msg: String) {
        self.progress.warn(&msg);
        self.warnings.push(msg);
    }

    fn excluded(&self, p: &Path) -> bool {
        !self.excludes.is_empty()
            && (self.excludes.is_match(p)
                || p.file_name().is_some_and(|n| self.excludes.is_match(n)))
    }

    /// Walks one source (a resolved path: see [`resolve_sources`]).
    pub fn walk(&mut self, root: &Path) -> Result<()> {
        let walker = walkdir::WalkDir::new(root)
            .follow_links(false)
            .follow_root_links(false)
            .sort_by(|a, b| a.file_name().cmp(b.file_name()));
        let mut it = walker.into_iter();
        loop {
            let ent = match it.next() {
                None => break,
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    let p = e
                        .path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default();
                    self.warn(format!("{p}: {e}"));
                    continue;
                }
            };
            let path = ent.path();
            if self.excluded(path) {
                if ent.file_type().is_dir() {
                    it.skip_current_dir();
                }
                continue;
            }
            let md = match ent.metadata() {
                Ok(m) => m,
                Err(e) => {
                    self.warn(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            let ft = md.file_type();
            if ft.is_dir() {
                self.stats.dirs += 1;
                self.tx
                    .send(Item::Node(node_from(path, &md, NodeKind::Dir)))
                    .map_err(closed)?;
            } else if ft.is_symlink() {
                match std::fs::read_link(path) {
                    Ok(t) => {
                        let mut n = node_from(path, &md, NodeKind::Symlink);
                        n.target = t.as_os_str().as_bytes().to_vec();
                        self.stats.symlinks += 1;
                        self.tx.send(Item::Node(n)).map_err(closed)?;
                    }
                    Err(e) => self.warn(format!("{}: {e}", path.display())),
                }
            } else if ft.is_file() {
                match std::fs::File::open(path).and_then(|f| Ok((f.metadata()?, f))) {
                    Ok((before, mut f)) => {
                        let display = path.display().to_string();
                        self.progress.message(&display);
                        let read =
                            self.file(node_from(path, &before, NodeKind::File), &mut f, &display)?;
                        if let Some(change) = changed_while_read(&before, f.metadata(), read) {
                            self.warn(format!(
                                "{display}: changed while it was being read ({change}); \
                                 stored as read: {read} bytes"
                            ));
                        }
                    }
                    Err(e) => self.warn(format!("{}: {e}", path.display())),
                }
            } else {
                self.warn(format!(
                    "{}: skipped (not a file, directory or symlink)",
                    path.display()
                ));
            }
        }
        Ok(())
    }

    /// Backs up one stream as a file named `src.name`.
    pub fn stdin(&mut self, src: StdinSource) -> Result<()> {
        let node = Node {
            path: src.name.as_bytes().to_vec(),
            kind: NodeKind::File,
            mode: 0o100644,
            mtime_secs: src.mtime_secs,
            mtime_nanos: 0,
            size: 0,
            target: Vec::new(),
        };
        let mut reader = src.reader;
        self.file(node, &mut reader, &src.name).map(|_| ())
    }

    /// Streams one file: blocks of chunks are fingerprinted on the pool. Returns the number of
    /// bytes read, which is the size the snapshot records (whatever `stat` said before).
    fn file(&mut self, node: Node, f: &mut dyn Read, display: &str) -> Result<u64> {
        self.stats.files += 1;
        self.tx.send(Item::FileStart(node)).map_err(closed)?;
        let mut total = 0u64;
        let mut blocks = BlockReader::new(self.chunker, self.blocks.clone());
        loop {
            let Some(block) = blocks.next_block(f, &self.job.times) else {
                break;
            };
            self.stats.bytes_read += block.len as u64;
            total += block.len as u64;
            self.progress.inc(block.len as u64);
            let job = self.job.clone();
            let in_flight = self.jobs_in_flight.clone();
            let rx = submit(self.pool, move || {
                let out = job.run(block.bytes, block.cuts);
                drop((job, in_flight));
                out
            });
            self.tx.send(Item::FileData(rx)).map_err(closed)?;
        }
        if let Some(e) = blocks.error.take() {
            self.warn(format!("{display}: read error, file stored truncated: {e}"));
        }
        self.tx.send(Item::FileEnd).map_err(closed)?;
        Ok(total)
    }
}

/// How a file changed while it was read, judged by its size, modification time and inode
/// before and after, and the bytes actually read; `None` if it did not.
fn changed_while_read(
    before: &std::fs::Metadata,
    after: std::io::Result<std::fs::Metadata>,
    read: u64,
) -> Option<String> {
    let after = match after {
        Ok(a) => a,
        Err(e) => return Some(format!("cannot stat it again: {e}")),
    };
    if after.len() != before.len() || read != before.len() {
        Some(format!(
            "size {} bytes when opened, {} bytes after reading",
            before.len(),
            after.len()
        ))
    } else if (after.mtime(), after.mtime_nsec()) != (before.mtime(), before.mtime_nsec())
        || after.ino() != before.ino()
    {
        Some("modified while being read".into())
    } else {
        None
    }
}

/// The stored path of an absolute path: without the leading `/`.
fn stored_path(p: &Path) -> Vec<u8> {
    let b = p.as_os_str().as_bytes();
    let trimmed = b.strip_prefix(b"/").unwrap_or(b);
    trimmed.to_vec()
}

fn node_from(path: &Path, md: &std::fs::Metadata, kind: NodeKind) -> Node {
    Node {
        path: stored_path(path),
        kind,
        mode: md.mode(),
        mtime_secs: md.mtime(),
        mtime_nanos: u32::try_from(md.mtime_nsec()).unwrap_or(0),
        size: if kind == NodeKind::File { md.len() } else { 0 },
        target: Vec::new(),
    }
}

/// The exclude patterns as one matcher.
pub(super) fn build_excludes(patterns: &[String]) -> Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(
            Glob::new(p)
                .map_err(|e| Error::InvalidOption(format!("exclude pattern {p:?}: {e}")))?,
        );
    }
    b.build().map_err(|e| Error::InvalidOption(e.to_string()))
}

/// The sources as stored: absolute, with symlinks in their *parent* directories resolved (a
/// symlink given as a source is stored as the symlink itself, never followed), and without
/// sources that lie inside another source (which would store them twice, and restore a file
/// under a path that holds a symlink). restic resolves its targets the same way.
pub(super) fn resolve_sources(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut sources = Vec::new();
    for p in paths {
        let abs = std::path::absolute(p)
            .map_err(|e| Error::io(format!("resolving {}", p.display()), e))?;
        if std::fs::symlink_metadata(&abs).is_err() {
            return Err(Error::SourceNotFound(p.clone()));
        }
        let resolve = |q: &Path| {
            std::fs::canonicalize(q).map_err(|e| Error::io(format!("resolving {}", q.display()), e))
        };
        let resolved = match (abs.parent(), abs.components().next_back()) {
            (Some(parent), Some(std::path::Component::Normal(name))) => resolve(parent)?.join(name),
            // `/`, or a path ending in `..` or `.`: a directory, resolved whole.
            _ => resolve(&abs)?,
        };
        sources.push(resolved);
    }
    sources.sort();
    sources.dedup();
    // Sorted, an ancestor comes before everything inside it.
    let mut kept: Vec<PathBuf> = Vec::with_capacity(sources.len());
    for s in sources {
        if !kept.iter().any(|k| s.starts_with(k)) {
            kept.push(s);
        }
    }
    Ok(kept)
}
