//! Restore: rebuild a snapshot's files under a target directory.
//!
//! ```text
//!  reader thread ("dedelta-restore-reader")      caller's thread
//!  walk the tree, PipelinedLocator:               PipelinedDecoder: decode deltas, verify
//!  index lookup, region decompression  --Event--> every chunk; events taken in batches, the
//!  through the restore cache                      batch's hashing shared with
//!                   (bounded channel, 256)        "dedelta-verify"; directories made
//!                                                     |  each file whole to one of
//!                                                     v  two target threads
//!                                                 "dedelta-restore-target" (write.rs): write
//!                                                 through directory handles, link into place
//! ```
//!
//! The reading side is here; the writing side is [`write`].
//!
//! The restore cache ([`RestoreOptions::cache`], [`crate::read::RestoreCache`]) is an LRU of
//! containers, read chunk by chunk, or forward assembly: then the reader gathers the next
//! assembly area's worth of the recipe (nodes and chunks, across files; a large file is split),
//! reads the regions it needs container by container, and only then fetches and sends them.
//!
//! Three promises, each against a bug that restore once had:
//!
//! - **Nothing outside the target.** A snapshot is untrusted: it may hold a symlink and then
//!   nodes below it. Every file operation goes through [`target`], which resolves each path
//!   from a handle of the target directory one component at a time and never follows a
//!   symlink below it (rejected: path-based calls with an `lstat` check first, which race).
//! - **Damage costs only the damaged files.** A file whose chunk cannot be located, decoded or
//!   verified, or whose recipe does not add up to its recorded size, is skipped and listed in
//!   [`RestoreStats::errors`] with its path; restore goes on with the next one. So does a node
//!   the target refuses (a symlink above it, a directory in its place). Only an unreadable tree
//!   (the snapshot's own metadata) is fatal, after everything read before it is restored.
//! - **No partial file under a final name.** Each file is written unnamed (`O_TMPFILE`) in
//!   its directory, gets its owner, mode and times, and is linked to its final name only once
//!   every chunk verified; otherwise it goes with its handle. Where a file or symlink holds
//!   that name, or the file system has no unnamed files, it is written under a temporary name
//!   (`.dedelta-tmp-<pid>-<n>`) and renamed over the final name, so an existing file is
//!   replaced, never written through (a hard link to it elsewhere keeps its content). A
//!   restore killed mid-file leaves nothing of that file (at most a temporary one, on a file
//!   system without unnamed files), never a truncated one under the real name.
//!
//! Directory modes and times are applied last, deepest first (writing into a directory changes
//! its time, and a read-only mode would stop the writes).
//!
//! Everything else a node records is restored as restic does ([`attrs`]): owner (by id),
//! extended attributes, access time, FIFOs, sockets and devices, holes of files that were
//! sparse, and hard links: a file whose record has more than one link and the device and
//! inode of a file restored before is linked to that file instead of written again.

mod attrs;
mod passes;
pub mod select;
mod target;
mod unnamed;
mod write;

use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::format::tree::{ChunkRef, Node, NodeKind};
use crate::progress::Progress;
use crate::read::{
    receive_batch, speed_factor, FetchedChunk, PipelinedDecoder, PipelinedLocator, ReadStats,
    RestoreCacheChoice, RestoreCacheStats,
};
use crate::read::{walk_tree_restoring, Subtree};
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;
use select::{is_ancestor, Overwrite, Selector};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use target::{PendingFile, Target};
use write::write_events;

/// Events in flight between the two threads.
const CHANNEL_EVENTS: usize = 256;
/// The smallest region cache restore runs with.
const MIN_CACHE_BYTES: usize = 8 << 20;

/// What to restore and where.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// The part of the snapshot to restore: the whole tree, or what one directory holds,
    /// restored straight into the target (restic's `SNAPSHOT:SUBFOLDER`).
    pub subtree: Subtree,
    /// Target directory (created if missing). It may be given through a symlink; nothing
    /// below it is ever followed.
    pub target: PathBuf,
    /// Restore only what these patterns match (and what is below it); empty means
    /// everything. Globs as restic's ([`select`]); a pattern that is not UTF-8 is a literal
    /// path (stored names need not be UTF-8). A pattern that matches nothing is an error.
    pub include: Vec<Vec<u8>>,
    /// Do not restore what these patterns match (nor what is below it).
    pub exclude: Vec<Vec<u8>>,
    /// As `include`, ignoring case.
    pub iinclude: Vec<Vec<u8>>,
    /// As `exclude`, ignoring case.
    pub iexclude: Vec<Vec<u8>>,
    /// What to do with entries the target already holds.
    pub overwrite: Overwrite,
    /// Only count what would be restored; write nothing (not even the target directory).
    pub dry_run: bool,
    /// Read every restored file back and compare it with the snapshot.
    pub verify: bool,
    /// Remove what the target holds within the selection but the snapshot does not.
    pub delete: bool,
    /// Bytes of decompressed regions the LRU restore cache holds at most (besides its bound
    /// in containers; whichever binds first). At least 8 MiB is used.
    pub cache_bytes: usize,
    /// The restore cache: an LRU of containers (the default, 512 containers) or forward
    /// assembly. Its container reads give the papers' restore speed factor.
    pub cache: RestoreCacheChoice,
}

/// A node that could not be restored.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeError {
    /// Its path in the snapshot (raw bytes, relative); serialized as `/` plus the path, with
    /// bytes that are not UTF-8 replaced.
    #[serde(serialize_with = "serialize_path")]
    pub path: Vec<u8>,
    /// Why.
    pub message: String,
}

impl NodeError {
    /// The path as shown to users: `/` and the stored path, non-UTF-8 bytes replaced.
    pub fn path_lossy(&self) -> String {
        format!("/{}", String::from_utf8_lossy(&self.path))
    }
}

fn serialize_path<S: serde::Serializer>(path: &[u8], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format!("/{}", String::from_utf8_lossy(path)))
}

/// What a restore did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RestoreStats {
    /// Files written.
    pub files: u64,
    /// Directories created (or found in place).
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// FIFOs, sockets and devices created.
    pub special_files: u64,
    /// Files restored as hard links to a file restored before.
    pub hard_links: u64,
    /// Bytes of file content written (of the files written).
    pub bytes_written: u64,
    /// Nodes that could not be restored, in tree order: damaged files, and nodes the target
    /// refused. Empty when everything was restored.
    pub errors: Vec<NodeError>,
    /// Metadata the target refused without failing a node (owners when not root, extended
    /// attributes), one line per kind.
    pub warnings: Vec<String>,
    /// Files left as they were by `--overwrite` (or, in a dry run, that would be).
    pub files_unchanged: u64,
    /// Entries `--delete` removed.
    pub deleted: u64,
    /// Files `--verify` read back and found equal to the snapshot's (`None`: not verified).
    pub files_verified: Option<u64>,
    /// A dry run: the counts say what would have been restored; nothing was written.
    pub dry_run: bool,
    /// Reads from the repository.
    pub reads: ReadStats,
    /// What the restore cache ([`RestoreOptions::cache`]) read.
    pub restore_cache: RestoreCacheStats,
}

impl RestoreStats {
    /// Adds the counts of what `other` wrote (a target thread's, see [`write`]).
    fn add_counts(&mut self, other: &RestoreStats) {
        self.files += other.files;
        self.dirs += other.dirs;
        self.symlinks += other.symlinks;
        self.special_files += other.special_files;
        self.hard_links += other.hard_links;
        self.bytes_written += other.bytes_written;
        self.files_unchanged += other.files_unchanged;
    }

    /// The papers' restore speed factor (DARE §4.5, LoopDelta §5.1): MB restored per
    /// container read through the restore cache; `None` when no container was read.
    pub fn speed_factor(&self) -> Option<f64> {
        speed_factor(self.bytes_written, self.restore_cache.containers_read)
    }
}

/// Checks that a file's recipe holds as many bytes as its node records: a file whose chunks
/// disagree with its size is not restored, whatever the chunks hold.
///
/// # Errors
/// [`Error::Corrupt`]: "recorded size N but its chunks hold M bytes" (the caller names the
/// file).
fn recipe_matches_size(node: &Node, chunks: &[ChunkRef]) -> Result<()> {
    let held: u64 = chunks.iter().map(|c| u64::from(c.len)).sum();
    if held == node.size {
        return Ok(());
    }
    Err(Error::corrupt(
        "recipe",
        format!(
            "recorded size {} but its chunks hold {held} bytes",
            node.size
        ),
    ))
}

/// What the reading thread sends to the writing thread, in tree order.
enum Event {
    /// A directory or symlink.
    Node(Node),
    /// A file; its chunks follow as [`Event::Data`], then [`Event::FileEnd`] or
    /// [`Event::FileFailed`].
    FileStart(Node),
    /// The next chunk of the current file, located with its region decompressed.
    Data(FetchedChunk),
    /// The current file is complete.
    FileEnd,
    /// The rest of the current file cannot be read: the file is abandoned.
    FileFailed(Error),
    /// A file refused before any of its chunks was read (its recipe is inconsistent).
    Refused(Node, Error),
    /// A file to restore as a hard link to this path, restored before.
    HardLink(Node, Vec<u8>),
    /// A file `--overwrite` leaves as the target holds it.
    Unchanged(Node),
}

/// The reader stopped because the writing side is gone (it panicked).
struct Stopped;

/// Restores `snapshot` into `opts.target`.
///
/// Three threads: one walks the tree, looks chunks up and decompresses their regions; the
/// caller's thread decodes deltas and verifies every chunk (with the verify helper); a target
/// thread makes the nodes and writes the files (`restore/write.rs`). Bounded channels keep
/// memory small.
///
/// # Errors
/// Only what stops the whole restore: the target cannot be created or written, or the
/// snapshot's tree cannot be read (then what was read before it is restored first). A file
/// or other node that cannot be restored is listed in [`RestoreStats::errors`] instead.
pub fn restore(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreStats> {
    let selector = Selector::new(&opts.include, &opts.exclude)?.merged(Selector::with_case(
        &opts.iinclude,
        &opts.iexclude,
        true,
    )?);
    // The plan walk also gives the progress bar its total when only part of the snapshot is
    // restored.
    let mut total = snapshot.summary.bytes_read;
    if selector.has_includes() || opts.dry_run || !opts.subtree.is_whole() {
        let quiet = crate::progress::NoProgress;
        let report: &dyn Progress = if opts.dry_run { progress } else { &quiet };
        let planned = passes::plan(
            repo,
            snapshot,
            &opts.subtree,
            &selector,
            opts.overwrite,
            &opts.target,
            report,
        )?;
        if opts.dry_run {
            return Ok(RestoreStats {
                dry_run: true,
                ..planned
            });
        }
        total = planned.bytes_written;
    }
    // What the snapshot does not hold goes first: the restore then sets the directories'
    // times last, as it always does.
    let mut pruned = RestoreStats::default();
    if opts.delete && opts.target.exists() {
        passes::delete(
            repo,
            snapshot,
            &opts.subtree,
            &selector,
            &opts.target,
            &mut pruned,
            progress,
        )?;
    }
    let mut stats = restore_selected(repo, snapshot, opts, &selector, total, progress)?;
    stats.deleted = pruned.deleted;
    stats.errors.extend(pruned.errors);
    stats.warnings.extend(pruned.warnings);
    if opts.verify {
        passes::verify(
            repo,
            snapshot,
            &opts.subtree,
            &selector,
            &opts.target,
            &mut stats,
        )?;
    }
    Ok(stats)
}

/// The restore itself: what `selector` selects, written into the target.
fn restore_selected(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    opts: &RestoreOptions,
    selector: &Selector,
    total: u64,
    progress: &dyn Progress,
) -> Result<RestoreStats> {
    let target = Target::open(&opts.target, std::process::id())?;
    progress.set_total(total);
    let (tx, rx) = crossbeam_channel::bounded::<Event>(CHANNEL_EVENTS);
    let cache_bytes = opts.cache_bytes.max(MIN_CACHE_BYTES);
    std::thread::scope(|s| {
        let producer = std::thread::Builder::new()
            .name("dedelta-restore-reader".into())
            .spawn_scoped(s, move || {
                read_events(repo, snapshot, selector, opts, cache_bytes, &tx)
            })
            .map_err(|e| Error::io("starting the restore reader thread", e))?;
        let decoder = PipelinedDecoder::new(repo.chunk_hasher(), &opts.cache);
        let mut stats = write_events(&rx, target, decoder, progress, s);
        drop(rx);
        let (reads, restore_cache) = producer
            .join()
            .unwrap_or_else(|_| Err(Error::ThreadPanicked("restore reader".into())))?;
        stats.reads = reads.merged(stats.reads);
        stats.restore_cache = restore_cache;
        Ok(stats)
    })
}

/// The reading thread: walks the tree and fetches each included file's chunks. A file whose
/// chunk cannot be fetched is abandoned with [`Event::FileFailed`]; only a tree error ends the
/// walk.
fn read_events(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    selector: &Selector,
    opts: &RestoreOptions,
    cache_bytes: usize,
    tx: &crossbeam_channel::Sender<Event>,
) -> Result<(ReadStats, RestoreCacheStats)> {
    let cache = opts.cache;
    let mut reader = Reader {
        area: None,
        ahead: None,
        locator: PipelinedLocator::new(repo, cache, cache_bytes)?
            .reading_own_copies(&snapshot.containers),
        pending: VecDeque::new(),
        pending_bytes: 0,
        failed: false,
        tx,
    };
    reader.area = reader.locator.area_bytes();
    reader.ahead = reader.locator.read_ahead_bytes();
    let mut stopped = false;
    // The first path of each (device, inode) of the files with more than one link.
    let mut linked: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    // Directories not selected themselves, above the node: created only if something below
    // them is selected (with include patterns).
    let mut above: Vec<Node> = Vec::new();
    let walked = walk_tree_restoring(repo, snapshot, &opts.subtree, |node, chunks| {
        if stopped {
            return Ok(());
        }
        while above
            .last()
            .is_some_and(|d| !is_ancestor(&d.path, &node.path))
        {
            above.pop();
        }
        if !selector.selects(&node.path) {
            if node.kind == NodeKind::Dir && !selector.excluded(&node.path) {
                above.push(node);
            }
            return Ok(());
        }
        for dir in above.drain(..) {
            if reader.step(Step::Send(Box::new(Event::Node(dir)))).is_err() {
                stopped = true;
                return Ok(());
            }
        }
        let keep = opts.overwrite != Overwrite::Always
            && node.kind != NodeKind::Dir
            && passes::existing(&opts.target, &node.path)
                .is_some_and(|e| !opts.overwrite.replaces(&node, &e));
        if keep {
            stopped = reader
                .step(Step::Send(Box::new(Event::Unchanged(node))))
                .is_err();
            return Ok(());
        }
        let link_to = match (&node.kind, node.meta.nlink > 1 && node.meta.ino != 0) {
            (NodeKind::File, true) => match linked.entry((node.meta.dev, node.meta.ino)) {
                std::collections::hash_map::Entry::Occupied(first) => Some(first.get().clone()),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(node.path.clone());
                    None
                }
            },
            _ => None,
        };
        let sent = if let Some(first) = link_to {
            reader.step(Step::Send(Box::new(Event::HardLink(node, first))))
        } else if node.kind != NodeKind::File {
            reader.step(Step::Send(Box::new(Event::Node(node))))
        } else if let Err(e) = recipe_matches_size(&node, &chunks) {
            reader.step(Step::Send(Box::new(Event::Refused(node, e))))
        } else {
            reader
                .step(Step::Send(Box::new(Event::FileStart(node))))
                .and_then(|()| {
                    for c in &chunks {
                        reader.step(Step::Chunk(c.id, c.len))?;
                    }
                    reader.step(Step::End)
                })
        };
        // The writer is gone only if it panicked, which the caller reports; read no further.
        stopped = sent.is_err();
        Ok(())
    });
    let flushed = if stopped { Ok(()) } else { reader.flush() };
    // A flush fails only if the writer is gone, which the caller reports.
    drop(flushed);
    walked.map(|()| (reader.locator.stats(), reader.locator.cache_stats()))
}

/// One step of the reader, in tree order.
enum Step {
    /// An event sent as it is (boxed: nodes are few, chunks many).
    Send(Box<Event>),
    /// The next chunk of the current file, and its length in the recipe.
    Chunk(ChunkId, u32),
    /// The current file's recipe ends.
    End,
}

/// The reading side: runs steps at once (an LRU cache), or gathers an assembly area of them
/// and reads its containers first (forward assembly), or where the locator reads ahead (an
/// object store) runs them a horizon behind announcing their chunks.
struct Reader<'r, 'a> {
    locator: PipelinedLocator<'a>,
    /// Forward assembly's area in restored bytes.
    area: Option<u64>,
    /// The read-ahead horizon in restored bytes.
    ahead: Option<u64>,
    pending: VecDeque<Step>,
    pending_bytes: u64,
    /// The current file failed: its remaining chunks are skipped.
    failed: bool,
    tx: &'r crossbeam_channel::Sender<Event>,
}

impl Reader<'_, '_> {
    fn step(&mut self, step: Step) -> std::result::Result<(), Stopped> {
        if let Some(horizon) = self.ahead {
            return self.step_ahead(step, horizon);
        }
        let Some(area) = self.area else {
            return self.run(step);
        };
        if let Step::Chunk(_, len) = step {
            if self.pending_bytes > 0 && self.pending_bytes + u64::from(len) > area {
                self.flush()?;
            }
            self.pending_bytes += u64::from(len);
        }
        self.pending.push_back(step);
        Ok(())
    }

    /// Announces the step's chunk to the locator and runs the steps more than `horizon`
    /// restored bytes behind.
    fn step_ahead(&mut self, step: Step, horizon: u64) -> std::result::Result<(), Stopped> {
        if let Step::Chunk(id, len) = step {
            self.locator.announce([id]);
            self.pending_bytes += u64::from(len);
        }
        self.pending.push_back(step);
        while self.pending_bytes > horizon {
            let Some(s) = self.pending.pop_front() else {
                break;
            };
            if let Step::Chunk(_, len) = s {
                self.pending_bytes -= u64::from(len);
            }
            self.run(s)?;
        }
        Ok(())
    }

    /// Assembles the pending area and runs its steps.
    fn flush(&mut self) -> std::result::Result<(), Stopped> {
        let steps = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let ids: Vec<ChunkId> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Chunk(id, _) => Some(*id),
                _ => None,
            })
            .collect();
        if !ids.is_empty() && self.area.is_some() {
            self.locator.assemble(&ids);
        }
        steps.into_iter().try_for_each(|s| self.run(s))
    }

    fn run(&mut self, step: Step) -> std::result::Result<(), Stopped> {
        let send = |ev: Event| self.tx.send(ev).map_err(|_| Stopped);
        match step {
            Step::Send(ev) => {
                if matches!(*ev, Event::FileStart(_)) {
                    self.failed = false;
                }
                send(*ev)
            }
            Step::Chunk(_, _) if self.failed => Ok(()),
            Step::Chunk(id, len) => {
                let failure = match self.locator.fetch(&id) {
                    Ok(fetched) if fetched.len() == len as usize => {
                        return send(Event::Data(fetched))
                    }
                    Ok(fetched) => Error::corrupt(
                        "recipe",
                        format!(
                            "chunk {id} has length {} but the recipe says {len}",
                            fetched.len(),
                        ),
                    ),
                    Err(e) => e,
                };
                self.failed = true;
                send(Event::FileFailed(failure))
            }
            Step::End if self.failed => Ok(()),
            Step::End => send(Event::FileEnd),
        }
    }
}
