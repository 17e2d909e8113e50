//! Restore: rebuild a snapshot's files under a target directory.
//!
//! Every chunk's fingerprint is verified before its bytes are written, so a damaged
//! repository makes restore fail loudly instead of writing wrong bytes. Directory modes and
//! times are applied last (writing into a directory changes its mtime).

use crate::chunk_read::{FetchedChunk, PipelinedDecoder, PipelinedLocator, ReadStats};
use crate::commands::ls::{normalize_path, walk_tree};
use crate::error::{Error, IoContext, Result};
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use crate::snapshot::Snapshot;
use crate::tree::{Node, NodeKind};
use filetime::FileTime;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// What to restore and where.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Target directory (created if missing).
    pub target: PathBuf,
    /// Restore only these paths (and what is below them); empty means everything.
    pub include: Vec<String>,
    /// Bytes of decompressed regions to cache.
    pub cache_bytes: usize,
}

/// What a restore did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RestoreStats {
    /// Files written.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Bytes of file content written.
    pub bytes_written: u64,
    /// Reads from the repository.
    pub reads: ReadStats,
}

/// A stored path turned into a safe relative path: no `..`, no root, no empty names.
fn safe_relative(path: &[u8]) -> Result<PathBuf> {
    let p = Path::new(std::ffi::OsStr::from_bytes(path));
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            _ => {
                return Err(Error::corrupt(
                    "tree stream",
                    format!("unsafe path {:?}", String::from_utf8_lossy(path)),
                ))
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(Error::corrupt("tree stream", "empty path"));
    }
    Ok(out)
}

fn included(path: &[u8], include: &[String]) -> bool {
    if include.is_empty() {
        return true;
    }
    include.iter().any(|inc| {
        let inc = inc.as_bytes();
        path == inc
            || (path.starts_with(inc) && path.get(inc.len()) == Some(&b'/'))
            // an ancestor directory of an included path
            || (inc.starts_with(path) && inc.get(path.len()) == Some(&b'/'))
    })
}

fn mtime(node: &Node) -> FileTime {
    FileTime::from_unix_time(node.mtime_secs, node.mtime_nanos)
}

const STOPPED: &str = "restore stopped";

/// What the reading thread sends to the writing thread, in tree order.
enum Event {
    /// A node; for a file, its chunks follow as [`Event::Data`] and then [`Event::FileEnd`].
    Node(Node),
    /// The next chunk of the current file, located with its region decompressed.
    Data(FetchedChunk),
    /// The current file is complete.
    FileEnd,
}

/// Restores `snapshot` into `opts.target`.
///
/// Two threads: one walks the tree, looks chunks up and decompresses their regions; the
/// caller's thread decodes deltas, verifies every chunk and writes the files. A bounded
/// channel keeps memory small.
pub fn restore(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreStats> {
    let include: Vec<String> = opts.include.iter().map(|p| normalize_path(p)).collect();
    fs::create_dir_all(&opts.target)
        .ctx(|| format!("creating restore target {}", opts.target.display()))?;
    let probe = opts.target.join(".dedelta-write-test");
    fs::write(&probe, b"")
        .and_then(|_| fs::remove_file(&probe))
        .ctx(|| format!("restore target {} is not writable", opts.target.display()))?;
    progress.set_total(snapshot.summary.bytes_read);
    let (tx, rx) = crossbeam_channel::bounded::<Event>(256);
    let cache_bytes = opts.cache_bytes.max(8 << 20);
    std::thread::scope(|s| {
        let producer = s.spawn(move || -> Result<ReadStats> {
            let mut locator = PipelinedLocator::new(repo, cache_bytes)?;
            let sent = walk_tree(repo, snapshot, |node, chunks| {
                if !included(&node.path, &include) {
                    return Ok(());
                }
                let is_file = node.kind == NodeKind::File;
                if tx.send(Event::Node(node)).is_err() {
                    return Err(Error::InvalidOption(STOPPED.into()));
                }
                if is_file {
                    for c in &chunks {
                        let fetched = locator.fetch(&c.id)?;
                        if fetched.len() != c.len as usize {
                            return Err(Error::corrupt(
                                "recipe",
                                format!(
                                    "chunk {} has length {} but the recipe says {}",
                                    c.id,
                                    fetched.len(),
                                    c.len
                                ),
                            ));
                        }
                        if tx.send(Event::Data(fetched)).is_err() {
                            return Err(Error::InvalidOption(STOPPED.into()));
                        }
                    }
                    let _ = tx.send(Event::FileEnd);
                }
                Ok(())
            });
            drop(tx);
            sent.map(|_| locator.stats())
        });
        let written = write_events(&rx, opts, progress);
        drop(rx);
        let read = producer
            .join()
            .unwrap_or_else(|_| Err(Error::Index("restore reader panicked".into())));
        match (read, written) {
            (Ok(reads), Ok(mut stats)) => {
                stats.reads = reads.merged(stats.reads);
                Ok(stats)
            }
            // The reader stopped only because the writer failed: the writer's error is the cause.
            (Err(Error::InvalidOption(m)), Err(e)) if m == STOPPED => Err(e),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    })
}

fn write_events(
    rx: &crossbeam_channel::Receiver<Event>,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreStats> {
    let mut stats = RestoreStats::default();
    let mut decoder = PipelinedDecoder::default();
    let mut dirs: Vec<(PathBuf, Node)> = Vec::new();
    let mut file: Option<(PathBuf, Node, std::io::BufWriter<fs::File>)> = None;
    for ev in rx.iter() {
        match ev {
            Event::Node(node) => {
                let dest = opts.target.join(safe_relative(&node.path)?);
                if let Some(parent) = dest.parent() {
                    fs::create_dir_all(parent).ctx(|| format!("creating {}", parent.display()))?;
                }
                match node.kind {
                    NodeKind::Dir => {
                        fs::create_dir_all(&dest).ctx(|| format!("creating {}", dest.display()))?;
                        stats.dirs += 1;
                        dirs.push((dest, node));
                    }
                    NodeKind::Symlink => {
                        if fs::symlink_metadata(&dest).is_ok() {
                            fs::remove_file(&dest)
                                .ctx(|| format!("replacing {}", dest.display()))?;
                        }
                        std::os::unix::fs::symlink(
                            std::ffi::OsStr::from_bytes(&node.target),
                            &dest,
                        )
                        .ctx(|| format!("creating symlink {}", dest.display()))?;
                        filetime::set_symlink_file_times(&dest, mtime(&node), mtime(&node))
                            .ctx(|| format!("setting times of {}", dest.display()))?;
                        stats.symlinks += 1;
                    }
                    NodeKind::File => {
                        if fs::symlink_metadata(&dest).is_ok_and(|m| !m.is_file()) {
                            return Err(Error::InvalidOption(format!(
                                "{} exists and is not a regular file",
                                dest.display()
                            )));
                        }
                        let f = fs::File::create(&dest)
                            .ctx(|| format!("creating {}", dest.display()))?;
                        file = Some((dest, node, std::io::BufWriter::with_capacity(1 << 20, f)));
                    }
                }
            }
            Event::Data(fetched) => {
                let Some((dest, _, w)) = file.as_mut() else {
                    return Err(Error::corrupt("tree stream", "file data outside a file"));
                };
                let data = decoder.decode(&fetched)?;
                w.write_all(data)
                    .ctx(|| format!("writing {}", dest.display()))?;
                stats.bytes_written += data.len() as u64;
                progress.inc(data.len() as u64);
            }
            Event::FileEnd => {
                let Some((dest, node, mut w)) = file.take() else {
                    return Err(Error::corrupt("tree stream", "file end outside a file"));
                };
                w.flush().ctx(|| format!("writing {}", dest.display()))?;
                drop(w);
                fs::set_permissions(&dest, fs::Permissions::from_mode(node.mode & 0o7777))
                    .ctx(|| format!("setting mode of {}", dest.display()))?;
                filetime::set_file_times(&dest, mtime(&node), mtime(&node))
                    .ctx(|| format!("setting times of {}", dest.display()))?;
                stats.files += 1;
            }
        }
    }
    stats.reads = decoder.stats();
    // Deepest first, so that setting a child's times does not disturb its parent's.
    for (dest, node) in dirs.iter().rev() {
        fs::set_permissions(dest, fs::Permissions::from_mode(node.mode & 0o7777))
            .ctx(|| format!("setting mode of {}", dest.display()))?;
        filetime::set_file_times(dest, mtime(node), mtime(node))
            .ctx(|| format!("setting times of {}", dest.display()))?;
    }
    Ok(stats)
}
