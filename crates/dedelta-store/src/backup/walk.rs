//! Runs on: the caller's thread.
//!
//! Walks the sources in a fixed order (depth first, names sorted), turns every directory,
//! symlink, special file and file into [`Item`]s for the dedup thread (with the metadata of
//! [`super::meta`]), and reads each file as blocks of chunks ([`super::chunk`]) whose
//! fingerprinting it hands to the worker pool, unless the parent snapshot holds it unchanged
//! ([`super::unchanged`]): then it is not opened. Small files, and the nodes and unchanged
//! files around them, go in runs ([`super::small_files`]). A file that cannot be read, or
//! that changes while it is read, is a warning (exit code 3), not an error: the backup goes
//! on, and the snapshot records what was read.

use super::chunk::{BlockPool, BlockReader};
use super::fingerprint::{submit, FingerprintJob};
use super::fingerprint_index::FingerprintIndex;
use super::meta::{kind_of, MetaReader};
use super::select::{Entry, SelectedWalk, Selection};
use super::small_files::{
    fingerprint_run, Packed, PackedRun, RunBuilder, SmallRead, SMALL_FILE_BYTES,
};
use super::unchanged::{ParentFiles, Verdict};
use super::{closed, Item, NodeSource, StdinSource};
use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind, NodeMeta};
use crate::progress::Progress;
use crossbeam_channel::Sender;
use crossbeam_utils::sync::WaitGroup;
use dedelta_core::chunker::Chunker;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the walker counted.
#[derive(Debug, Default)]
pub(super) struct WalkStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, sockets and devices.
    pub special: u64,
    pub bytes_read: u64,
    /// Files not in the parent snapshot.
    pub files_new: u64,
    /// Files in the parent snapshot, read again.
    pub files_changed: u64,
    /// Files stored with the parent's recipe, not read.
    pub files_unmodified: u64,
    /// Their bytes.
    pub bytes_unmodified: u64,
}

/// The walker's state for one backup.
pub(super) struct Walker<'a> {
    pub chunker: Arc<dyn Chunker>,
    pub pool: &'a rayon::ThreadPool,
    pub tx: Sender<Item>,
    /// What to leave out.
    pub selection: &'a Selection,
    pub progress: &'a dyn Progress,
    pub warnings: &'a mut Vec<String>,
    pub stats: &'a mut WalkStats,
    pub job: FingerprintJob,
    /// Held by every job in flight, so that the backup can wait for them all before it
    /// returns (they hold the index's read view), also when it fails.
    pub jobs_in_flight: WaitGroup,
    /// Block buffers, reused from file to file and block to block.
    pub blocks: BlockPool,
    /// Metadata of each node.
    pub meta: MetaReader,
    /// The parent snapshot's files, unless the backup reads every file.
    pub parent: Option<ParentFiles>,
    /// Where unchanged files' chunks are (a file whose chunks are gone is read again).
    pub presence: Arc<dyn FingerprintIndex>,
    /// Stay on each source's file system.
    pub one_file_system: bool,
    /// Nodes, unchanged files and small files not sent yet (see [`super::small_files`]);
    /// `None`: every item is sent alone, every file read in blocks of its own.
    pub run: Option<RunBuilder>,
}

impl Walker<'_> {
    fn warn(&mut self, msg: String) {
        self.progress.warn(&msg);
        self.warnings.push(msg);
    }

    /// Walks one source (a resolved path: see [`resolve_sources`]).
    pub fn walk(&mut self, root: &Path) -> Result<()> {
        for entry in SelectedWalk::new(root, self.selection, self.one_file_system) {
            let (ent, md) = match entry {
                Entry::Selected(ent, md) => (ent, md),
                Entry::Unreadable(msg) => {
                    self.warn(msg);
                    continue;
                }
            };
            let path = ent.path();
            let kind = kind_of(md.file_type());
            let mut node = self.meta.node(stored_path(path), &md, kind);
            match self.meta.xattrs(path) {
                Ok(x) => node.meta.xattrs = x,
                Err(w) => self.warn(w),
            }
            match kind {
                NodeKind::Dir => {
                    self.stats.dirs += 1;
                    self.gather(Item::Node(node))?;
                }
                NodeKind::Symlink => match std::fs::read_link(path) {
                    Ok(t) => {
                        node.target = t.as_os_str().as_bytes().to_vec();
                        self.stats.symlinks += 1;
                        self.gather(Item::Node(node))?;
                    }
                    Err(e) => self.warn(format!("{}: {e}", path.display())),
                },
                NodeKind::File => self.regular_file(path, node)?,
                NodeKind::Fifo
                | NodeKind::Socket
                | NodeKind::CharDevice
                | NodeKind::BlockDevice => {
                    self.stats.special += 1;
                    self.gather(Item::Node(node))?;
                }
            }
        }
        Ok(())
    }

    /// Sends `item` after the run gathered before it.
    fn send(&mut self, item: Item) -> Result<()> {
        self.send_run()?;
        self.tx.send(item).map_err(closed)
    }

    /// Adds a node or an unchanged file to the run (sent when full); sends any other item,
    /// or every item when nothing is packed.
    fn gather(&mut self, item: Item) -> Result<()> {
        let Some(run) = self.run.as_mut() else {
            return self.tx.send(item).map_err(closed);
        };
        match item {
            Item::Node(n) => run.push(Packed::Node(n)),
            Item::Unchanged(n, chunks) => run.push(Packed::Unchanged(n, chunks)),
            item => return self.send(item),
        }
        if run.is_full() {
            self.send_run()?;
        }
        Ok(())
    }

    /// Sends the run gathered so far, its small files' chunks handed to the pool in one job.
    fn send_run(&mut self) -> Result<()> {
        let Some(run) = self.run.as_mut().filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        let (entries, data) = run.take();
        let chunks = data.map(|files| {
            let chunker = self.chunker.clone();
            self.on_pool(move |job| fingerprint_run(job, chunker.as_ref(), files))
        });
        self.tx
            .send(Item::Packed(PackedRun { entries, chunks }))
            .map_err(closed)
    }

    /// Sends what is still gathered: the end of a walk that succeeded.
    pub fn finish(&mut self) -> Result<()> {
        self.send_run()
    }

    /// Runs `work` on the pool with the fingerprinting job, counted in flight (see
    /// [`Self::jobs_in_flight`]).
    fn on_pool<T: Send + 'static>(
        &self,
        work: impl FnOnce(&FingerprintJob) -> T + Send + 'static,
    ) -> crossbeam_channel::Receiver<T> {
        let job = self.job.clone();
        let in_flight = self.jobs_in_flight.clone();
        submit(self.pool, move || {
            let out = work(&job);
            drop((job, in_flight));
            out
        })
    }

    /// A regular file, as `lstat` described it in `node`: stored with the parent's recipe if
    /// unchanged, else read.
    fn regular_file(&mut self, path: &Path, node: Node) -> Result<()> {
        // Counted once the file is open: one that cannot be read is a warning, not a file.
        // Without a parent (`--force`, or none found) every file is new, as restic counts.
        let mut changed = false;
        if let Some(parent) = self.parent.as_mut() {
            match parent.judge(&node, self.presence.as_ref())? {
                Verdict::Unchanged(chunks) => {
                    self.stats.files += 1;
                    self.stats.files_unmodified += 1;
                    self.stats.bytes_unmodified += node.size;
                    self.stats.bytes_read += node.size;
                    self.progress.inc(node.size);
                    self.progress
                        .item("unchanged", &path.display().to_string(), node.size);
                    return self.gather(Item::Unchanged(node, chunks));
                }
                Verdict::Changed => changed = true,
                Verdict::New => {}
            }
        }
        match open_noatime(path).and_then(|f| Ok((f.metadata()?, f))) {
            Ok((before, mut f)) => {
                if changed {
                    self.stats.files_changed += 1;
                } else {
                    self.stats.files_new += 1;
                }
                let display = path.display().to_string();
                self.progress.message(&display);
                // What the open file says, with the attributes read from the path.
                let mut opened = self.meta.node(node.path, &before, NodeKind::File);
                opened.meta.xattrs = node.meta.xattrs;
                let read = if before.len() <= SMALL_FILE_BYTES as u64 && self.run.is_some() {
                    self.small_file(opened, &mut f, &display)?
                } else {
                    self.file(opened, &mut f, &display, false)?
                };
                let action = if changed { "modified" } else { "new" };
                self.progress.item(action, &display, read);
                if let Some(change) = changed_while_read(&before, f.metadata(), read) {
                    self.warn(format!(
                        "{display}: changed while it was being read ({change}); \
                         stored as read: {read} bytes"
                    ));
                }
            }
            Err(e) => self.warn(format!("{}: {e}", path.display())),
        }
        Ok(())
    }

    /// Backs up the nodes of `src` as they are recorded there (`copy`); every file is read
    /// whole or the backup fails.
    pub fn nodes(&mut self, src: &dyn NodeSource) -> Result<()> {
        src.walk(&mut |node, content| {
            match (node.kind, content) {
                (NodeKind::File, Some(r)) => {
                    let display = format!("/{}", node.path_lossy());
                    self.progress.message(&display);
                    let read = self.file(node, r, &display, true)?;
                    self.progress.item("new", &display, read);
                }
                (NodeKind::File, None) => {
                    return Err(Error::Pipeline(format!(
                        "/{}: a file without content from its source",
                        node.path_lossy()
                    )))
                }
                (kind, _) => {
                    match kind {
                        NodeKind::Dir => self.stats.dirs += 1,
                        NodeKind::Symlink => self.stats.symlinks += 1,
                        _ => self.stats.special += 1,
                    }
                    self.send(Item::Node(node))?;
                }
            }
            Ok(())
        })
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
            // No owner or other times: a stream has none, and restore leaves the owner alone.
            meta: NodeMeta::default(),
        };
        let mut reader = src.reader;
        self.file(node, &mut reader, &src.name, src.whole_or_nothing)
            .map(|_| ())
    }

    /// Streams one file: blocks of chunks are fingerprinted on the pool. Returns the number of
    /// bytes read, which is the size the snapshot records (whatever `stat` said before). A
    /// read error ends the file with a warning, or fails the backup when `whole_or_nothing`.
    fn file(
        &mut self,
        node: Node,
        f: &mut dyn Read,
        display: &str,
        whole_or_nothing: bool,
    ) -> Result<u64> {
        self.stats.files += 1;
        self.send(Item::FileStart(node))?;
        let mut total = 0u64;
        let chunker = self.chunker.clone();
        let mut blocks = BlockReader::new(chunker.as_ref(), self.blocks.clone());
        loop {
            let Some(block) = blocks.next_block(f, &self.job.times) else {
                break;
            };
            self.stats.bytes_read += block.len as u64;
            total += block.len as u64;
            self.progress.inc(block.len as u64);
            let rx = self.on_pool(move |job| job.run(block.bytes, block.cuts));
            self.tx.send(Item::FileData(rx)).map_err(closed)?;
        }
        if let Some(e) = blocks.error.take() {
            if whole_or_nothing {
                return Err(Error::io(format!("reading {display}"), e));
            }
            self.warn(format!("{display}: read error, file stored truncated: {e}"));
        }
        self.tx.send(Item::FileEnd).map_err(closed)?;
        Ok(total)
    }

    /// Reads a file that `stat` found small into the run (see [`super::small_files`]); one
    /// that turns out larger is read as [`Self::file`] reads it. Returns the bytes read.
    fn small_file(&mut self, node: Node, f: &mut std::fs::File, display: &str) -> Result<u64> {
        let size = node.size;
        if !self.run.as_ref().is_some_and(|r| r.has_room_for(size)) {
            self.send_run()?;
        }
        let Some(run) = self.run.as_mut() else {
            return self.file(node, f, display, false);
        };
        match run.read_file(f) {
            SmallRead::Read { len, error } => {
                run.push(Packed::File(node));
                let full = run.is_full();
                self.stats.files += 1;
                self.stats.bytes_read += len as u64;
                self.progress.inc(len as u64);
                if let Some(e) = error {
                    self.warn(format!("{display}: read error, file stored truncated: {e}"));
                }
                if full {
                    self.send_run()?;
                }
                Ok(len as u64)
            }
            SmallRead::TooBig(head) => {
                let mut rest = std::io::Cursor::new(head).chain(f);
                self.file(node, &mut rest, display, false)
            }
        }
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

/// Opens `path` for reading without updating its access time (`O_NOATIME`), as borg does, so
/// that a backup leaves the atimes it records as they were; where that is not allowed (a
/// file of another user, without root), opens it plainly.
fn open_noatime(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let noatime = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(path);
    match noatime {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => std::fs::File::open(path),
        r => r,
    }
}

/// The stored path of an absolute path: without the leading `/`.
fn stored_path(p: &Path) -> Vec<u8> {
    let b = p.as_os_str().as_bytes();
    let trimmed = b.strip_prefix(b"/").unwrap_or(b);
    trimmed.to_vec()
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
