//! Backup: walk the sources, chunk, fingerprint, deduplicate, compress, write containers,
//! index them, and finally write the snapshot.
//!
//! The pipeline runs as three threads plus a worker pool, connected by bounded channels:
//!
//! ```text
//! reader (caller's thread)   walk, read 1 MiB blocks, cut chunks --> pool: BLAKE3
//! dedup thread               in order: index lookup, recipes, tree stream, regions --> pool: zstd
//! writer thread              in order: append regions, seal containers, put, index
//! ```
//!
//! Order is kept by sending, for each job, the receiving end of a one-shot channel that the
//! pool fills: consumers wait for the results in submission order while the pool works on
//! several at once. Memory is bounded by the channel capacities (blocks and regions in
//! flight), never by file size.
//!
//! Crash safety: a container is durable (`Backend::put`) before its chunks are indexed, and
//! every container is indexed before the snapshot is written. A backup killed anywhere leaves
//! at worst unreferenced containers, which `check` accepts and a later prune removes.

pub mod delta;
pub mod sketch_index;

use crate::backup::delta::{DeltaStage, PrevRecipe, StageTimes, Stored};
use crate::client::index::IndexReader;
use crate::error::{Error, Result};
use crate::format::config::{DeltaConfig, RepoConfig};
use crate::format::container::{CompressedRegion, ContainerId, EntryKind, RegionBuilder};
use crate::format::snapshot::{BackupSummary, Snapshot, SnapshotId, TreeRef};
use crate::format::tree::{ChunkRef, Node, NodeKind, TreeEncoder};
use crate::progress::Progress;
use crate::repository::lock::RepoLock;
use crate::repository::{ContainerWriter, IndexedRepository};
use bytes::Bytes;
use crossbeam_channel::{bounded, Receiver, Sender};
use dedelta_core::chunker::{new_chunker, Chunker};
use dedelta_core::sketch::{Sketcher, SuperFeatures};
use dedelta_core::ChunkId;
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::collections::HashSet;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Bytes read from a file per block (before cutting chunks).
const BLOCK_SIZE: usize = 1 << 20;
/// Blocks in flight between reader and dedup thread.
const BLOCKS_IN_FLIGHT: usize = 16;
/// Regions in flight between dedup and writer thread.
const REGIONS_IN_FLIGHT: usize = 48;
/// Most worker threads a backup starts: beyond this, threads only cost memory and start-up
/// time (100,000 took minutes to create and then failed).
pub const MAX_THREADS: usize = 256;

/// A source read from standard input (or any reader).
pub struct StdinSource {
    /// The stream.
    pub reader: Box<dyn Read + Send>,
    /// The file name it is stored under.
    pub name: String,
    /// Modification time to record (seconds since the epoch).
    pub mtime_secs: i64,
}

/// What to back up and how.
pub struct BackupOptions {
    /// Files and directories to back up (made absolute).
    pub paths: Vec<PathBuf>,
    /// Glob patterns; a path is skipped when a pattern matches its full path or its name.
    pub excludes: Vec<String>,
    /// Tags recorded in the snapshot.
    pub tags: Vec<String>,
    /// Back up one stream instead of `paths`.
    pub stdin: Option<StdinSource>,
    /// Host name recorded in the snapshot.
    pub host: String,
    /// Start time recorded in the snapshot (RFC 3339).
    pub time: String,
    /// Worker threads for hashing, sketching, delta encoding and compression.
    pub threads: usize,
    /// Delta settings for this backup; `None` uses the repository's.
    pub delta: Option<DeltaConfig>,
    /// Directory of this client's local caches (see [`crate::client::local_cache`]); `None` for none.
    /// The repository's base cache is in `<cache_dir>/<repository id>/`.
    pub cache_dir: Option<PathBuf>,
}

/// The result of a backup.
#[derive(Debug)]
pub struct BackupResult {
    /// The new snapshot.
    pub snapshot_id: SnapshotId,
    /// What was done.
    pub summary: BackupSummary,
    /// Sources that could not be read.
    pub warnings: Vec<String>,
    /// Problems that do not touch the snapshot (an unusable local cache).
    pub notices: Vec<String>,
}

/// Messages from the reader to the dedup thread, in stream order.
enum Item {
    /// A directory or symlink.
    Node(Node),
    /// Start of a regular file.
    FileStart(Node),
    /// The next chunks of the current file, fingerprinted by the pool.
    FileData(Receiver<Vec<Fingerprinted>>),
    /// End of the current file.
    FileEnd,
}

/// A chunk as the pool hands it to the dedup thread: fingerprinted, looked up in the index
/// as it was when the backup started, and, when the backup sketches and the chunk is not
/// indexed, with its super-features. Doing both on the pool keeps them off the dedup
/// thread's path, and looking up first spares sketching the (usually many) duplicates.
struct Fingerprinted {
    id: ChunkId,
    data: Bytes,
    sfs: Option<SuperFeatures>,
    indexed: Indexed,
}

/// What the pool's index lookup found.
#[derive(Clone, Copy)]
enum Indexed {
    /// Stored before this backup, in this container.
    In(ContainerId),
    /// Not stored before this backup (it may still be a new chunk of this backup).
    No,
    /// Not looked up (or the lookup failed: the dedup thread looks again and reports errors).
    Unknown,
}

/// Runs `f` on the pool; the returned receiver yields its result.
fn submit<T: Send + 'static>(
    pool: &rayon::ThreadPool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Receiver<T> {
    let (tx, rx) = bounded(1);
    pool.spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// Backs up `opts` into the repository; the caller holds the exclusive lock.
pub fn backup(
    repo: &IndexedRepository,
    _lock: &RepoLock,
    mut opts: BackupOptions,
    progress: &dyn Progress,
) -> Result<BackupResult> {
    let started = Instant::now();
    let config = repo.config().clone();
    let chunker = new_chunker(config.chunker.kind, config.chunker.params)
        .map_err(|e| Error::InvalidOption(e.to_string()))?;
    let excludes = build_excludes(&opts.excludes)?;
    let sources = resolve_sources(&opts.paths)?;
    if sources.is_empty() && opts.stdin.is_none() {
        return Err(Error::InvalidOption(
            "nothing to back up: give a path or --stdin".into(),
        ));
    }
    let mut notices = Vec::new();
    let threads = opts.threads.clamp(1, MAX_THREADS);
    if threads != opts.threads.max(1) {
        notices.push(format!(
            "--threads {} capped at {MAX_THREADS}",
            opts.threads
        ));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("dedelta-worker-{i}"))
        .build()
        .map_err(|e| Error::InvalidOption(format!("thread pool: {e}")))?;

    let stdin_name = opts.stdin.as_ref().map(|s| s.name.clone());
    let delta_cfg = opts.delta.take().unwrap_or_else(|| config.delta.clone());
    let times = Arc::new(StageTimes::default());
    let snapshot_paths: Vec<String> = match &stdin_name {
        Some(name) => vec![name.clone()],
        None => sources
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
    };
    let sketcher: Option<Arc<dyn Sketcher>> = match delta_cfg.sketch {
        Some(kind) if delta_cfg.enabled() => Some(Arc::from(
            dedelta_core::sketch::new_sketcher(kind, delta_cfg.sketch_params)
                .map_err(|e| Error::InvalidOption(e.to_string()))?,
        )),
        _ => None,
    };
    let delta_stage = if delta_cfg.enabled() {
        let prev = if delta_cfg.dupadj {
            parent_recipe(repo, &snapshot_paths, &mut notices)
        } else {
            None
        };
        let mut stage = DeltaStage::new(repo, delta_cfg, prev, times.clone(), threads)?;
        if let Some(dir) = &opts.cache_dir {
            // The id names a directory: anything but a plain name (a crafted config) is
            // refused rather than joined.
            let id = &config.id;
            if !id.is_empty()
                && id.len() <= 64
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                notices.extend(stage.use_local_cache(dir.join(id)));
            } else {
                notices.push(format!(
                    "repository id {id:?} is not a plain name; no local base cache"
                ));
            }
        }
        Some(stage)
    } else {
        None
    };
    let (damage, skipped) = crate::repository::damage::DamageSet::load(repo.backend().as_ref())?;
    notices.extend(skipped);
    let damage = Arc::new(damage);
    // One read view for the pool, taken before anything of this backup is indexed.
    let index_view = Arc::new(DedupIndex {
        reader: repo.index().reader()?,
        damage: damage.clone(),
    });
    let (item_tx, item_rx) = bounded::<Item>(BLOCKS_IN_FLIGHT);
    let (region_tx, region_rx) = bounded::<Receiver<CompressedRegion>>(REGIONS_IN_FLIGHT);
    let mut warnings = Vec::new();
    let mut reader_stats = ReaderStats::default();

    let (dedup_result, writer_result) = std::thread::scope(|s| {
        let named = |name: &str| std::thread::Builder::new().name(format!("dedelta-{name}"));
        let spawned = named("dedup").spawn_scoped(s, || {
            dedup_stage(
                repo,
                &config,
                chunker.as_ref(),
                &pool,
                item_rx,
                region_tx,
                delta_stage,
                &times,
                damage.clone(),
            )
        });
        let dedup = match spawned {
            Ok(h) => h,
            Err(e) => {
                return (
                    Err(Error::io("starting a thread", e)),
                    Ok(Default::default()),
                )
            }
        };
        let spawned =
            named("writer").spawn_scoped(s, || writer_stage(repo, &config, region_rx, &times));
        let writer = match spawned {
            Ok(h) => h,
            Err(e) => {
                return (
                    Err(Error::io("starting a thread", e)),
                    Ok(Default::default()),
                )
            }
        };
        let mut reader = Reader {
            chunker: chunker.as_ref(),
            pool: &pool,
            tx: item_tx,
            excludes: &excludes,
            progress,
            warnings: &mut warnings,
            stats: &mut reader_stats,
            times: &times,
            sketcher: sketcher.clone(),
            index: index_view.clone(),
        };
        let read_result = match opts.stdin.take() {
            Some(src) => reader.stdin(src),
            None => sources.iter().try_for_each(|src| reader.walk(src)),
        };
        drop(reader); // closes the item channel: the dedup thread drains and finishes
        let dedup_result = dedup
            .join()
            .unwrap_or_else(|_| Err(Error::Index("dedup thread panicked".into())));
        let writer_result = writer
            .join()
            .unwrap_or_else(|_| Err(Error::Index("writer thread panicked".into())));
        // A reader error caused by a closed channel is secondary to the stage's own error.
        match read_result {
            Err(e) if !matches!(e, Error::Index(ref m) if m == CHANNEL_CLOSED) => {
                (Err(e), writer_result)
            }
            _ => (dedup_result, writer_result),
        }
    });
    let writer_stats = writer_result?;
    let dedup_out = dedup_result?;

    notices.extend(dedup_out.notices);
    let mut summary = dedup_out.summary;
    summary.files = reader_stats.files;
    summary.dirs = reader_stats.dirs;
    summary.symlinks = reader_stats.symlinks;
    summary.bytes_read = reader_stats.bytes_read;
    summary.bytes_added = writer_stats.bytes_written;
    summary.containers_written = writer_stats.containers;
    summary.warnings = warnings.len() as u64;
    summary.seconds = started.elapsed().as_secs_f64();
    summary.stage_seconds = times.seconds();
    let snapshot = Snapshot {
        time: opts.time,
        host: opts.host,
        paths: snapshot_paths,
        tags: opts.tags,
        tree: dedup_out.tree,
        summary: summary.clone(),
        ..Default::default()
    };
    let snapshot_id = crate::repository::snapshots::save(repo.backend().as_ref(), &snapshot)?;
    Ok(BackupResult {
        snapshot_id,
        summary,
        warnings,
        notices,
    })
}

/// The chunk sequence of the newest snapshot with the same paths (else the newest), for DupAdj.
/// A parent that cannot be read only costs DupAdj its hints: the backup goes on without one,
/// with a notice (a damaged tree must not block every later backup of its paths).
fn parent_recipe(
    repo: &IndexedRepository,
    paths: &[String],
    notices: &mut Vec<String>,
) -> Option<PrevRecipe> {
    let listed = match repo.snapshots() {
        Ok(l) => l,
        Err(e) => {
            notices.push(format!("no parent snapshot for DupAdj: {e}"));
            return None;
        }
    };
    notices.extend(listed.warnings());
    let all = &listed.snapshots;
    let (id, snap) = all
        .iter()
        .rev()
        .find(|(_, s)| s.paths == paths)
        .or_else(|| all.last())?;
    let mut ids = Vec::new();
    let walked = crate::commands::ls::walk_tree(repo, snap, |_, chunks| {
        ids.extend(chunks.iter().map(|c| c.id));
        Ok(())
    });
    match walked {
        Ok(()) => Some(PrevRecipe::new(ids)),
        Err(e) => {
            notices.push(format!(
                "parent snapshot {} is unreadable ({e}); backing up without a parent",
                id.short()
            ));
            None
        }
    }
}

/// The sources as stored: absolute, with symlinks in their *parent* directories resolved (a
/// symlink given as a source is stored as the symlink itself, never followed), and without
/// sources that lie inside another source (which would store them twice, and restore a file
/// under a path that holds a symlink). restic resolves its targets the same way.
fn resolve_sources(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
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

const CHANNEL_CLOSED: &str = "pipeline stopped";

fn closed<T>(_: T) -> Error {
    Error::Index(CHANNEL_CLOSED.into())
}

fn build_excludes(patterns: &[String]) -> Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(
            Glob::new(p)
                .map_err(|e| Error::InvalidOption(format!("exclude pattern {p:?}: {e}")))?,
        );
    }
    b.build().map_err(|e| Error::InvalidOption(e.to_string()))
}

#[derive(Default)]
struct ReaderStats {
    files: u64,
    dirs: u64,
    symlinks: u64,
    bytes_read: u64,
}

struct Reader<'a> {
    chunker: &'a dyn Chunker,
    pool: &'a rayon::ThreadPool,
    tx: Sender<Item>,
    excludes: &'a GlobSet,
    progress: &'a dyn Progress,
    warnings: &'a mut Vec<String>,
    stats: &'a mut ReaderStats,
    times: &'a Arc<StageTimes>,
    sketcher: Option<Arc<dyn Sketcher>>,
    index: Arc<DedupIndex>,
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

impl Reader<'_> {
    fn warn(&mut self, msg: String) {
        self.progress.warn(&msg);
        self.warnings.push(msg);
    }

    fn excluded(&self, p: &Path) -> bool {
        !self.excludes.is_empty()
            && (self.excludes.is_match(p)
                || p.file_name().is_some_and(|n| self.excludes.is_match(n)))
    }

    fn walk(&mut self, root: &Path) -> Result<()> {
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

    fn stdin(&mut self, src: StdinSource) -> Result<()> {
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
        let mut total = 0u64;
        self.tx.send(Item::FileStart(node)).map_err(closed)?;
        let max = self.chunker.max_size();
        let mut buf: Vec<u8> = Vec::with_capacity(BLOCK_SIZE + max);
        let mut eof = false;
        while !eof || !buf.is_empty() {
            while !eof && buf.len() < BLOCK_SIZE {
                let old = buf.len();
                buf.resize(BLOCK_SIZE.max(old + max), 0);
                match f.read(&mut buf[old..]) {
                    Ok(0) => {
                        buf.truncate(old);
                        eof = true;
                    }
                    Ok(n) => buf.truncate(old + n),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => buf.truncate(old),
                    Err(e) => {
                        buf.truncate(old);
                        self.warn(format!("{display}: read error, file stored truncated: {e}"));
                        eof = true;
                    }
                }
            }
            let t = Instant::now();
            let mut cuts = Vec::new();
            let mut pos = 0;
            while pos < buf.len() && (eof || buf.len() - pos >= max) {
                let end = (pos + max).min(buf.len());
                let len = self.chunker.next_chunk_len(&buf[pos..end]);
                cuts.push(pos..pos + len);
                pos += len;
            }
            StageTimes::add(&self.times.chunk, t);
            let rest = buf[pos..].to_vec();
            let mut next = Vec::with_capacity(BLOCK_SIZE + max);
            next.extend_from_slice(&rest);
            let block = Bytes::from(std::mem::replace(&mut buf, next));
            self.stats.bytes_read += pos as u64;
            total += pos as u64;
            self.progress.inc(pos as u64);
            if cuts.is_empty() {
                continue;
            }
            let times = self.times.clone();
            let sketcher = self.sketcher.clone();
            let index = self.index.clone();
            let rx = submit(self.pool, move || {
                let t = Instant::now();
                let mut out: Vec<Fingerprinted> = cuts
                    .into_iter()
                    .map(|r| {
                        let data = block.slice(r);
                        Fingerprinted {
                            id: ChunkId::of(&data),
                            data,
                            sfs: None,
                            indexed: Indexed::Unknown,
                        }
                    })
                    .collect();
                StageTimes::add(&times.hash, t);
                let t = Instant::now();
                for c in out.iter_mut() {
                    c.indexed = match index.container_of(&c.id) {
                        Ok(Some(container)) => Indexed::In(container),
                        Ok(None) => Indexed::No,
                        Err(_) => Indexed::Unknown,
                    };
                }
                StageTimes::add(&times.index, t);
                if let Some(sk) = sketcher {
                    let t = Instant::now();
                    for c in out.iter_mut() {
                        if !matches!(c.indexed, Indexed::In(_)) {
                            c.sfs = Some(sk.sketch(&c.data));
                        }
                    }
                    StageTimes::add(&times.sketch, t);
                }
                out
            });
            self.tx.send(Item::FileData(rx)).map_err(closed)?;
        }
        self.tx.send(Item::FileEnd).map_err(closed)?;
        Ok(total)
    }
}

/// The index as backup sees it: copies that `check` recorded as damaged count as absent, so
/// that a backup stores those chunks again instead of deduplicating against them (check also
/// takes them out of the index; this guards against an index rebuilt by an older version).
struct DedupIndex {
    reader: IndexReader,
    damage: Arc<crate::repository::damage::DamageSet>,
}

impl DedupIndex {
    /// The container of the usable indexed copy of `id`, if any.
    fn container_of(&self, id: &ChunkId) -> Result<Option<ContainerId>> {
        Ok(self
            .reader
            .get(id)?
            .map(|loc| loc.container)
            .filter(|c| self.damage.reason(c, id).is_none()))
    }
}

struct DedupOutput {
    summary: BackupSummary,
    tree: TreeRef,
    notices: Vec<String>,
}

/// Decides, in stream order, which chunks are new, and packs new chunks into regions
/// (through the delta stage when resemblance detection is on).
struct ChunkSink<'a> {
    index: DedupIndex,
    pending: HashSet<ChunkId>,
    region: RegionBuilder,
    region_size: usize,
    config: &'a RepoConfig,
    pool: &'a rayon::ThreadPool,
    tx: Sender<Receiver<CompressedRegion>>,
    summary: BackupSummary,
    delta: Option<DeltaStage<'a>>,
    times: &'a Arc<StageTimes>,
}

impl ChunkSink<'_> {
    /// One chunk of the stream; `allow_delta` is false for metadata (tree) chunks.
    fn add(
        &mut self,
        id: ChunkId,
        data: Bytes,
        sfs: Option<SuperFeatures>,
        indexed: Indexed,
        allow_delta: bool,
    ) -> Result<()> {
        self.summary.chunks += 1;
        // Some(container if durable) for a duplicate. The pool's view of the index predates
        // this backup, whose own new chunks are all in `pending`.
        let known = if self.pending.contains(&id) {
            Some(None)
        } else {
            match indexed {
                Indexed::In(c) => Some(Some(c)),
                Indexed::No => None,
                Indexed::Unknown => {
                    let t = Instant::now();
                    let found = self.index.container_of(&id)?.map(Some);
                    StageTimes::add(&self.times.index, t);
                    found
                }
            }
        };
        if let Some(container) = known {
            if let Some(d) = self.delta.as_mut() {
                d.on_duplicate(&id, container)?;
            }
            return Ok(());
        }
        self.pending.insert(id);
        self.summary.new_chunks += 1;
        self.summary.bytes_new += data.len() as u64;
        match self.delta.as_mut() {
            Some(d) if allow_delta => d.push_new(id, data, sfs),
            _ => {
                self.summary.bytes_after_delta += data.len() as u64;
                self.push(id, EntryKind::Full, &data, data.len(), Vec::new())?;
            }
        }
        Ok(())
    }

    /// Decides the chunks waiting in the delta stage and stores them.
    fn end_block(&mut self) -> Result<()> {
        let Some(d) = self.delta.as_mut() else {
            return Ok(());
        };
        if !d.has_pending() {
            return Ok(());
        }
        let decided = d.process(self.pool, &mut self.summary)?;
        for c in decided {
            match c.stored {
                Stored::Full => self.push(c.id, EntryKind::Full, &c.data, c.data.len(), c.sfs.0)?,
                Stored::Delta { base, delta } => self.push(
                    c.id,
                    EntryKind::Delta { base },
                    &delta,
                    c.data.len(),
                    c.sfs.0,
                )?,
            }
        }
        Ok(())
    }

    fn push(
        &mut self,
        id: ChunkId,
        kind: EntryKind,
        bytes: &[u8],
        original_len: usize,
        sfs: Vec<u64>,
    ) -> Result<()> {
        self.region.push(id, kind, bytes, original_len, sfs);
        if self.region.raw.len() >= self.region_size {
            self.flush_region()?;
        }
        Ok(())
    }

    fn flush_region(&mut self) -> Result<()> {
        if self.region.is_empty() {
            return Ok(());
        }
        let region = std::mem::take(&mut self.region);
        let compression = self.config.compression;
        let times = self.times.clone();
        let rx = submit(self.pool, move || {
            let t = Instant::now();
            let r = region.compress(compression);
            StageTimes::add(&times.compress, t);
            r
        });
        self.tx.send(rx).map_err(closed)
    }
}

/// Writes the tree stream through the chunk store as it grows.
struct TreeWriter<'c> {
    encoder: TreeEncoder,
    buf: Vec<u8>,
    chunks: Vec<String>,
    len: u64,
    chunker: &'c dyn Chunker,
}

impl TreeWriter<'_> {
    /// Stores complete chunks from the buffer; with `all`, the rest too.
    fn drain(&mut self, sink: &mut ChunkSink<'_>, all: bool) -> Result<()> {
        let max = self.chunker.max_size();
        let mut pos = 0;
        while pos < self.buf.len() && (all || self.buf.len() - pos >= max) {
            let end = (pos + max).min(self.buf.len());
            let n = self.chunker.next_chunk_len(&self.buf[pos..end]);
            let chunk = Bytes::copy_from_slice(&self.buf[pos..pos + n]);
            let id = ChunkId::of(&chunk);
            sink.add(id, chunk, None, Indexed::Unknown, false)?;
            self.chunks.push(id.to_hex());
            self.len += n as u64;
            pos += n;
        }
        self.buf.drain(..pos);
        Ok(())
    }

    fn maybe_drain(&mut self, sink: &mut ChunkSink<'_>) -> Result<()> {
        if self.buf.len() >= 4 * self.chunker.max_size() {
            self.drain(sink, false)?;
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn dedup_stage<'a>(
    repo: &IndexedRepository,
    config: &'a RepoConfig,
    chunker: &dyn Chunker,
    pool: &'a rayon::ThreadPool,
    items: Receiver<Item>,
    regions: Sender<Receiver<CompressedRegion>>,
    delta: Option<DeltaStage<'a>>,
    times: &'a Arc<StageTimes>,
    damage: Arc<crate::repository::damage::DamageSet>,
) -> Result<DedupOutput> {
    let mut sink = ChunkSink {
        index: DedupIndex {
            reader: repo.index().reader()?,
            damage,
        },
        pending: HashSet::new(),
        region: RegionBuilder::default(),
        region_size: config.region_size,
        config,
        pool,
        tx: regions,
        summary: BackupSummary::default(),
        delta,
        times,
    };
    let mut tree = TreeWriter {
        encoder: TreeEncoder::default(),
        buf: Vec::new(),
        chunks: Vec::new(),
        len: 0,
        chunker,
    };
    tree.encoder.begin(&mut tree.buf);
    // A file's record is encoded when it ends: its size is then the bytes actually read
    // (a file that shrinks or grows while it is read must not be recorded with its old size).
    let mut open_file: Option<(Node, Vec<ChunkRef>)> = None;
    for item in items {
        match item {
            Item::Node(n) => tree.encoder.node(&n, &mut tree.buf),
            Item::FileStart(n) => open_file = Some((n, Vec::new())),
            Item::FileData(rx) => {
                let chunks = rx.recv().map_err(closed)?;
                let Some((_, recipe)) = open_file.as_mut() else {
                    return Err(Error::Index("file data outside a file".into()));
                };
                for Fingerprinted {
                    id,
                    data,
                    sfs,
                    indexed,
                } in chunks
                {
                    let len = data.len() as u32;
                    sink.add(id, data, sfs, indexed, true)?;
                    recipe.push(ChunkRef { id, len });
                }
                sink.end_block()?;
            }
            Item::FileEnd => {
                let Some((mut node, recipe)) = open_file.take() else {
                    return Err(Error::Index("file end outside a file".into()));
                };
                node.size = recipe.iter().map(|c| u64::from(c.len)).sum();
                tree.encoder.file_start(&node, &mut tree.buf);
                for c in &recipe {
                    tree.encoder.chunk(c, &mut tree.buf);
                }
                tree.encoder.file_end(&mut tree.buf);
            }
        }
        tree.maybe_drain(&mut sink)?;
    }
    sink.end_block()?;
    let mut notices: Vec<String> = Vec::new();
    if let Some(d) = sink.delta.as_mut() {
        notices.extend(d.take_notices());
        notices.extend(d.save_local_cache());
    }
    tree.encoder.end(&mut tree.buf);
    tree.drain(&mut sink, true)?;
    sink.summary.tree_bytes = tree.len;
    sink.flush_region()?;
    Ok(DedupOutput {
        summary: sink.summary,
        tree: TreeRef {
            chunks: tree.chunks,
            len: tree.len,
        },
        notices,
    })
}

#[derive(Default)]
struct WriterStats {
    containers: u64,
    bytes_written: u64,
}

fn writer_stage(
    repo: &IndexedRepository,
    config: &RepoConfig,
    regions: Receiver<Receiver<CompressedRegion>>,
    times: &StageTimes,
) -> Result<WriterStats> {
    let mut writer = ContainerWriter::new(repo);
    debug_assert_eq!(config.container_size, repo.config().container_size);
    for rx in regions {
        let region = rx.recv().map_err(closed)?;
        let t = Instant::now();
        writer.add_region(region)?;
        StageTimes::add(&times.write, t);
    }
    let t = Instant::now();
    writer.seal()?;
    StageTimes::add(&times.write, t);
    let stats = WriterStats {
        containers: writer.written.len() as u64,
        bytes_written: writer.bytes_written,
    };
    Ok(stats)
}
