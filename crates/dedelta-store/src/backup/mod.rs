//! Backup: walk the sources, chunk, fingerprint, deduplicate, detect resemblance, delta-encode,
//! compress, write containers, index them, and finally write the snapshot.
//!
//! One module per stage; each says at its top which thread it runs on. Three threads and a
//! worker pool, connected by bounded channels:
//!
//! ```text
//! caller's thread  walk.rs, chunk.rs     walk sources, read 1 MiB blocks, cut chunks
//!                  small_files.rs        small files read whole into one block, sent as a
//!                                          run with the nodes around them
//!                                          |  one job per block (or run: the pool cuts it)
//!                                          v
//! worker pool      fingerprint.rs        BLAKE3, index lookup (fingerprint_index/),
//!                                          super-features (with sketch_dupadj_misses off;
//!                                          by default the delta stage sketches what
//!                                          DupAdj leaves)
//!                                          |  results in stream order (one-shot receivers)
//!                                          v
//! dedup thread     lookahead.rs          LoopDelta: duplicates reached a window ahead;
//!                  base_ahead.rs           on an object store, DupAdj's bases predicted
//!                                          there and read in the background
//!                  dedup.rs              duplicate or new, in order
//!                  rewrite.rs            Capping: duplicates stored again (segments of 20 MiB)
//!                  caf.rs                cache-aware filter: base-fragmented duplicates again
//!                  inverse.rs            inversed deltas: old chunks re-stored behind new ones
//!                  resemble/, bases.rs,  candidates (DupAdj, sketch index), bases, deltas
//!                  delta.rs                (encoding shared with the pool's free threads,
//!                                           ../share.rs; a pool of its own with 4+
//!                                           threads; bases read ahead a round at a time
//!                                           on threads of their own, several requests
//!                                           in flight, ../request_threads.rs)
//!                  tree_writer.rs        the tree stream, stored as chunks
//!                  pack.rs               raw regions  --> worker pool: zstd
//!                                          |  regions in stream order
//!                                          v
//! writer thread    store.rs              append regions, seal containers, put, index
//! ```
//!
//! Setup, on the caller's thread before the pipeline starts (a fixed cost of every backup,
//! issue 20): the snapshots come listed from the open (beside the index's catch-up, see
//! [`crate::repository`]), the damage records as the open read them; the parent's tree is
//! read through the reader that then reads the delta bases (parent.rs, bases.rs): the new
//! tree's bases are the parent tree's chunks, and one reader reads each container's
//! metadata once (in one suffix read) where two readers read it twice or three times. A
//! tree this client wrote comes from its local tree cache instead (no read; its chunks are
//! then held as the new tree's bases). The delta and dedup stages are made from the options in
//! stages.rs, the indexes they look in in indexes.rs.
//!
//! Order is kept by sending, for each job, the receiving end of a one-shot channel that the
//! pool fills: consumers wait for the results in submission order while the pool works on
//! several at once. Memory is bounded by the channel capacities (blocks and regions in
//! flight, a few per worker thread), never by file size.
//!
//! Crash safety: a container is durable (`Backend::put`) before its chunks are indexed, and
//! every container is durable, and in an index file on an object store, before the snapshot
//! is written; the last batch enters the client's index (a cache) beside the snapshot's
//! write. A backup killed anywhere leaves at worst unreferenced containers, which `check`
//! accepts and a later prune removes, or containers the next open takes into the index.

mod base_ahead;
mod base_cache;
pub mod bases;
mod cache_save;
pub mod caf;
mod chunk;
pub mod dedup;
pub mod delta;
pub mod dense;
mod fingerprint;
pub mod fingerprint_index;
mod indexes;
pub mod inverse;
pub mod lookahead;
mod meta;
pub mod metrics;
mod options;
mod pack;
mod parent;
pub mod prefetch;
mod recent_containers;
pub mod resemble;
pub mod rewrite;
mod saving;
pub mod select;
mod small_files;
mod stages;
mod store;
mod tree_writer;
pub mod unchanged;
mod walk;

use crate::error::{Error, Result};
use crate::format::container::{CompressedRegion, ContainerId};
use crate::format::snapshot::Snapshot;
use crate::format::tree::Node;
use crate::progress::Progress;
use crate::repository::lock::RepoLock;
use crate::repository::IndexedRepository;
use crossbeam_channel::{bounded, Receiver};
use crossbeam_utils::sync::WaitGroup;
use dedelta_core::chunker::new_chunker;
use dedelta_core::sketch::Sketcher;
use dedup::{DedupIndex, DedupStage};
use delta::DeltaStage;
use fingerprint::{FingerprintJob, Fingerprinted};
use fingerprint_index::{ExactIndex, FingerprintIndexKind};
use metrics::{BackupMetrics, StageTimes};
pub use options::{
    BackupOptions, BackupResult, CopySource, NodeSink, NodeSource, StdinSource, Workers,
    MAX_THREADS,
};
use std::sync::Arc;
use std::time::Instant;

/// Blocks in flight between the walker and the dedup thread, per worker thread (each holds
/// about 1.1 MiB of data until the dedup thread is done with it): enough to keep the pool
/// fingerprinting while the dedup thread works through a block. A fixed 16 held 21 MB on 2
/// cores, a fifth of a backup's live heap, for no speed.
const BLOCKS_PER_THREAD: usize = 2;
/// Where reads are round trips, how far (bytes of file data) chunks enter the look-ahead
/// window before the delta stage decides them, so that the bases predicted for them are read
/// meanwhile (see [`base_ahead`]): some tens of milliseconds of the dedup thread's work, more
/// than a round trip to a Garage cluster that stalls (45 ms).
const BASE_READ_AHEAD_BYTES: u64 = 16 << 20;
/// Blocks in flight at least.
const MIN_BLOCKS_IN_FLIGHT: usize = 8;
/// Regions in flight between the dedup and writer threads, per worker thread (each up to a
/// region, 256 KiB by default, compressed). A fixed 48 held 13 MB on 2 cores.
const REGIONS_PER_THREAD: usize = 4;
/// Regions in flight at least: a container (4 MiB) and more, so that the writer's fsyncs do
/// not stall the dedup thread.
const MIN_REGIONS_IN_FLIGHT: usize = 24;
/// Messages from the walker to the dedup thread, in stream order.
enum Item {
    /// A directory or symlink.
    Node(Node),
    /// Start of a regular file.
    FileStart(Node),
    /// A regular file stored with its parent's recipe, unread: its chunks and their
    /// containers.
    Unchanged(
        Node,
        Vec<(
            crate::format::tree::ChunkRef,
            crate::format::container::ContainerId,
        )>,
    ),
    /// The next chunks of the current file, fingerprinted by the pool.
    FileData(Receiver<Vec<Fingerprinted>>),
    /// End of the current file.
    FileEnd,
    /// Nodes, unchanged files and small files read whole, in stream order, with one job's
    /// receiver for the small files' chunks (see [`small_files`]).
    Packed(small_files::PackedRun),
}

/// The error of a stage whose neighbour closed its channel: secondary to the neighbour's own.
fn closed<T>(_: T) -> Error {
    Error::PipelineStopped
}

/// Sets the index's [`SketchKeep`](dedelta_core::sketch::SketchKeep) back to the config's
/// when a backup that overrode it ends, however it ends.
struct RestoreSketchKeep<'a>(
    &'a crate::client::index::ChunkIndex,
    dedelta_core::sketch::SketchKeep,
);

impl Drop for RestoreSketchKeep<'_> {
    fn drop(&mut self) {
        self.0.set_sketch_keep(self.1);
    }
}

/// Backs up `opts` into the repository with `workers`' threads; the caller holds a lock on
/// it (shared or exclusive).
pub fn backup(
    repo: &IndexedRepository,
    _lock: &RepoLock,
    opts: BackupOptions,
    workers: &Workers,
    progress: &dyn Progress,
) -> Result<BackupResult> {
    run(repo, None, opts, workers, progress).map(|(result, _)| result)
}

/// [`backup`], releasing `lock` as soon as the repository holds everything the backup
/// writes (its snapshot last), beside the client's own work that ends it (the local base
/// cache's save): on an object store the release is a round trip, which no longer comes
/// after that work. The release's outcome comes beside the result; if the backup fails, the
/// lock is released (dropped) before its error is returned.
pub fn backup_then_release(
    repo: &IndexedRepository,
    lock: RepoLock,
    opts: BackupOptions,
    workers: &Workers,
    progress: &dyn Progress,
) -> Result<(BackupResult, Result<()>)> {
    run(repo, Some(lock), opts, workers, progress)
}

/// The backup of [`backup`] and [`backup_then_release`]: with `release`, that lock is
/// released once the repository holds everything the backup writes.
fn run(
    repo: &IndexedRepository,
    release: Option<RepoLock>,
    mut opts: BackupOptions,
    workers: &Workers,
    progress: &dyn Progress,
) -> Result<(BackupResult, Result<()>)> {
    let started = Instant::now();
    let config = repo.config().clone();
    let chunker: Arc<dyn dedelta_core::chunker::Chunker> =
        new_chunker(config.chunker.kind, config.chunker.params)
            .map_err(|e| Error::InvalidOption(e.to_string()))?
            .into();
    let selection = select::Selection::new(&select::SelectOptions {
        excludes: [opts.excludes.as_slice(), &opts.sources.select.excludes].concat(),
        ..opts.sources.select.clone()
    })?;
    let sources = walk::resolve_sources(&opts.paths)?;
    if sources.is_empty() && opts.stdin.is_none() && opts.copy.is_none() {
        return Err(Error::InvalidOption(
            "nothing to back up: give a path or --stdin".into(),
        ));
    }
    let mut notices = Vec::new();
    if let Some(n) = workers.capped_from {
        notices.push(format!("--threads {n} capped at {MAX_THREADS}"));
    }
    let delta_cfg = opts.delta.take().unwrap_or_else(|| config.default_delta());
    config.check_depth(&delta_cfg)?;
    let dense_threshold = delta_cfg.dense_threshold;
    caf::check_options(&config, &delta_cfg, &opts)?;
    // What the writer records in the index, and what the full sketch index finds, follow this
    // backup's choice; the config's is set back when it ends.
    repo.index().set_sketch_keep(delta_cfg.sketch_keep);
    let _restore_keep = RestoreSketchKeep(repo.index(), config.delta.sketch_keep);
    let times = Arc::new(StageTimes::default());
    let snapshot_paths: Vec<String> = match (&opts.stdin, &opts.copy) {
        (Some(src), _) => vec![src.name.clone()],
        (None, Some(copy)) => copy.nodes.paths(),
        (None, None) => sources
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
    };
    let sketcher: Option<Arc<dyn Sketcher>> = match delta_cfg.sketch {
        Some(kind) => Some(Arc::from(
            dedelta_core::sketch::new_sketcher(kind, delta_cfg.sketch_params)
                .map_err(|e| Error::InvalidOption(e.to_string()))?,
        )),
        None => None,
    };
    // LoopDelta (§4.2-§4.3): the lineage's dense containers, loaded whole when prefetched.
    // The snapshots are listed once, for the parent and the dense list: each listing reads
    // every snapshot file (a request each).
    let want_files = !opts.sources.force && opts.stdin.is_none() && opts.copy.is_none();
    // Listed beside the index's catch-up when the open was asked to
    // (Repository::listing_snapshots_at_open).
    let listed_at_open = repo.snapshots_listed_at_open();
    let listed = if delta_cfg.enabled() || want_files {
        match listed_at_open.unwrap_or_else(|| repo.snapshots()) {
            Ok(l) => {
                notices.extend(l.warnings());
                Some(l)
            }
            Err(e) => {
                notices.push(format!("no parent snapshot: {e}"));
                None
            }
        }
    } else {
        None
    };
    let lookahead_bytes = delta_cfg.prefetch_lookahead_bytes;
    let prefetched = prefetch::for_backup(
        repo.backend().as_ref(),
        &delta_cfg,
        opts.rewriting.is_some(),
        (&opts.host, &snapshot_paths),
        listed.as_ref(),
        (
            opts.cache_dir.as_deref().map(|d| (d, config.id.as_str())),
            opts.loopdelta.keep_dense_local,
        ),
        &mut notices,
    );
    // The locality index's loader for LoopDelta, which also reads the parent's tree when a
    // dense container holds it (see DensePrefetcher::preload).
    let dense_loader = prefetched
        .as_ref()
        .map(|(p, _)| Arc::new(prefetch::DensePrefetcher { bases: p.clone() }));
    let prefetch_backend = repo.backend_for(crate::backend::wrap::metered::Purpose::Prefetch);
    // The trees this client wrote last (the parent's, most often): no read of the parent's
    // tree, see crate::client::tree_cache.
    let tree_cache = opts
        .cache_dir
        .as_deref()
        .filter(|_| !opts.sources.parent_tree_from_repository)
        .and_then(|root| {
            let dir = crate::client::cache::repo_dir(root, &config.id).ok()?;
            Some(crate::client::tree_cache::TreeCache::new(&dir))
        });
    let tree_chunks = |ids: &[dedelta_core::ChunkId]| {
        let loader = dense_loader.as_ref()?;
        loader.tree_chunks(repo, prefetch_backend.as_ref(), ids)
    };
    let sketches_misses_only = delta_cfg.sketch_dupadj_misses && delta_cfg.dupadj;
    let mut parent = if delta_cfg.enabled() || want_files || opts.skip_if_unchanged {
        let want = parent::ParentWants {
            recipe: delta_cfg.enabled() && delta_cfg.dupadj,
            files: want_files.then_some(&opts.sources),
            tree_cache: tree_cache.as_ref(),
        };
        parent::find(
            repo,
            listed.as_ref(),
            &snapshot_paths,
            &opts,
            want,
            dense_loader
                .is_some()
                .then_some(&tree_chunks as &parent::TreeChunks<'_>),
            &mut notices,
        )?
    } else {
        None
    };
    let continued = parent.as_ref().and_then(|p| p.continued.clone());
    // Without a parent (or an unreadable one) every file is new.
    let parent_files = parent
        .as_mut()
        .and_then(|p| p.files.take())
        .or_else(|| want_files.then(|| unchanged::ParentFiles::new(&opts.sources)));
    let (delta_stage, parent_tree) = stages::delta_stage(
        repo,
        delta_cfg,
        parent,
        prefetched.as_ref(),
        &opts,
        workers,
        sketcher.as_ref().filter(|_| sketches_misses_only),
        &times,
        &mut notices,
    )?;
    let predicting_bases = delta_stage
        .as_ref()
        .is_some_and(|d: &DeltaStage<'_>| d.predicts_bases());
    // Listed and read once, by the open's catch-up (records it skipped were noticed then).
    let damage = repo.damage_records()?;
    // One read view for the pool and the dedup thread, taken before anything of this backup
    // is indexed (the filter too: what this backup indexes goes into it as well, harmlessly).
    // Base prefetching piggybacks on the locality index's metadata prefetches.
    let lookup_kind = match prefetched {
        Some(_) => FingerprintIndexKind::Locality,
        None => opts.lookup.kind,
    };
    repo.index()
        .set_sketch_filter_budget(opts.lookup.sketch_filter_bytes);
    let lookup = indexes::fingerprint_index(
        repo,
        lookup_kind,
        &opts,
        &damage,
        dense_loader.as_ref(),
        &mut notices,
    )?;
    let dedup_index = DedupIndex { lookup };
    let job = FingerprintJob {
        index: Arc::new(dedup_index.clone()),
        // Sketching only DupAdj's misses, the delta stage sketches file data.
        sketcher: sketcher.clone().filter(|_| !sketches_misses_only),
        times: times.clone(),
        hasher: repo.chunk_hasher(),
    };
    let threads = workers.pool.current_num_threads();
    let (item_tx, item_rx) =
        bounded::<Item>((BLOCKS_PER_THREAD * threads).max(MIN_BLOCKS_IN_FLIGHT));
    let (region_tx, region_rx) = bounded::<Receiver<CompressedRegion>>(
        (REGIONS_PER_THREAD * threads).max(MIN_REGIONS_IN_FLIGHT),
    );
    let mut warnings = Vec::new();
    let mut walked = walk::WalkStats::default();
    let jobs_in_flight = WaitGroup::new();

    // Region buffers go round between the dedup thread, the pool and the writer.
    let region_buffers = crate::buffers::BufferPool::default();
    let (dedup_result, writer_result) = std::thread::scope(|s| {
        let spawn = |name: &str| std::thread::Builder::new().name(format!("dedelta-{name}"));
        let dedup = DedupStage::new(
            dedup_index.clone(),
            pack::RegionPacker::new(
                config.region_size,
                config.compression,
                &workers.pool,
                region_tx,
                times.clone(),
                region_buffers.clone(),
            ),
            delta_stage,
            sketcher,
            times.clone(),
        );
        let dedup = stages::dedup_options(
            dedup,
            &mut opts,
            prefetched.as_ref(),
            lookahead_bytes,
            predicting_bases,
        );
        let mut tree = tree_writer::TreeWriter::new(chunker.as_ref(), parent_tree)
            .hashing_with(repo.chunk_hasher());
        if tree_cache.is_some() {
            tree = tree.keeping_chunks();
        }
        let dedup = spawn("dedup")
            .spawn_scoped(s, move || dedup.run(item_rx, tree))
            .map_err(|e| Error::io("starting a thread", e))?;
        let writer = spawn("writer")
            .spawn_scoped(s, || {
                store::run(
                    repo,
                    region_rx,
                    &times,
                    region_buffers.clone(),
                    damage.containers(),
                )
            })
            .map_err(|e| Error::io("starting a thread", e))?;
        let block_pool = chunk::BlockPool::default();
        let mut walker = walk::Walker {
            chunker: chunker.clone(),
            pool: &workers.pool,
            tx: item_tx,
            selection: &selection,
            progress,
            warnings: &mut warnings,
            stats: &mut walked,
            job,
            jobs_in_flight: jobs_in_flight.clone(),
            blocks: block_pool.clone(),
            meta: meta::MetaReader::default(),
            parent: parent_files,
            presence: Arc::new(ExactIndex::new(repo.index().reader()?, damage.clone())),
            one_file_system: opts.sources.one_file_system,
            run: (!opts.sources.one_job_per_file).then(|| {
                small_files::RunBuilder::new(block_pool, chunk::BLOCK_SIZE + chunker.max_size())
            }),
        };
        let walk_result = match (opts.stdin.take(), &opts.copy) {
            (Some(src), _) => walker.stdin(src),
            (None, Some(copy)) => walker.nodes(copy.nodes.as_ref()),
            (None, None) => sources.iter().try_for_each(|src| walker.walk(src)),
        }
        .and_then(|()| walker.finish());
        drop(walker); // closes the item channel: the dedup thread drains and finishes
        let dedup_result = dedup
            .join()
            .unwrap_or_else(|_| Err(Error::ThreadPanicked("dedup".into())));
        let writer_result = writer
            .join()
            .unwrap_or_else(|_| Err(Error::ThreadPanicked("writer".into())));
        // A walker error caused by a closed channel is secondary to the stage's own error.
        Ok::<_, Error>(match walk_result {
            Err(e) if !matches!(e, Error::PipelineStopped) => (Err(e), writer_result),
            _ => (dedup_result, writer_result),
        })
    })?;
    // Jobs still queued when a stage failed hold the index's read view: the repository must be
    // quiet again when this returns, whatever the result.
    jobs_in_flight.wait();
    let mut writer_stats = writer_result?;
    let dedup_out = dedup_result?;
    let unindexed = std::mem::take(&mut writer_stats.unindexed);
    let hints = (lookup_kind == FingerprintIndexKind::Locality).then(|| {
        recent_containers::hints_for_next(
            &writer_stats.containers,
            &dedup_index.lookup.used_containers(),
        )
    });

    notices.extend(dedup_out.notices);
    let mut cache_save = dedup_out.cache_save;
    let mut summary = dedup_out.summary;
    summary.files = walked.files;
    summary.dirs = walked.dirs;
    summary.symlinks = walked.symlinks;
    summary.special_files = walked.special;
    summary.bytes_read = walked.bytes_read;
    summary.files_new = walked.files_new;
    summary.files_changed = walked.files_changed;
    summary.files_unmodified = walked.files_unmodified;
    summary.bytes_unmodified = walked.bytes_unmodified;
    summary.bytes_added = writer_stats.bytes_written;
    summary.containers_written = writer_stats.containers.len() as u64;
    summary.warnings = warnings.len() as u64;
    summary.seconds = started.elapsed().as_secs_f64();

    let snapshot = Snapshot {
        time: opts.time,
        host: opts.host,
        paths: snapshot_paths,
        tags: opts.tags,
        tree: dedup_out.tree,
        summary: summary.clone(),
        containers: {
            let mut c: Vec<ContainerId> = dedup_out.referenced.iter().copied().collect();
            c.extend(&writer_stats.containers);
            c.sort_unstable();
            c.dedup();
            c
        },
        original: opts.copy.as_ref().map(|c| c.original.clone()),
        damaged_paths: opts
            .copy
            .as_ref()
            .map(|c| c.damaged_paths.clone())
            .unwrap_or_default(),
        tree_truncated: opts.copy.as_ref().is_some_and(|c| c.tree_truncated),
    };
    // Nothing changed since the snapshot this backup continues: with --skip-if-unchanged no
    // snapshot is saved (what the backup stored, if anything, is indexed as usual).
    let skipped_for = continued
        .filter(|(_, tree)| opts.skip_if_unchanged && *tree == snapshot.tree && warnings.is_empty())
        .map(|(id, _)| id);
    // The client's index work runs beside the snapshot's write (a round trip on an object
    // store; both wait on fsyncs on a disk): the last batch of containers taken in, the
    // filter and hints saved, then the index's compaction (a merge of its runs, which the
    // command's end would do after the snapshot). The snapshot needs the containers durable
    // and listed in index files, which they are; the client's index is a cache of those,
    // which the next open catches up with if a crash comes first.
    let (saved, client_index) = std::thread::scope(|s| {
        let client_index = s.spawn(|| {
            let notices = indexes::update_client_index(repo, unindexed, hints.as_deref());
            // The next backup's parent tree (best effort, a cache keyed by the tree itself).
            if let (Some(cache), Some(chunks)) = (&tree_cache, &dedup_out.tree_chunks) {
                cache.put(&snapshot.tree.chunks, chunks);
            }
            notices
        });
        let saved = match skipped_for {
            Some(parent) => Ok(parent),
            None => repo.save_snapshot(&snapshot),
        };
        (saved, client_index.join())
    });
    match client_index {
        Ok(n) => notices.extend(n),
        Err(_) => notices.push("the chunk index's update panicked".into()),
    }
    let snapshot_id = saved?;
    // The local base cache may now record the delta depths of this backup's chunks.
    cache_save.committed();
    let mut metrics = BackupMetrics {
        stage_seconds: times.seconds(),
        bases: dedup_out.base_counts,
        sketched_chunks: times
            .sketched_chunks
            .load(std::sync::atomic::Ordering::Relaxed),
        lookups: fingerprint_index::LookupCounters {
            index_memory_bytes: repo
                .index()
                .memory_bytes()
                .saturating_sub(repo.index().filter_memory_bytes())
                as u64,
            index_chunks: repo.index().runs().iter().map(|r| r.1).sum(),
            ..dedup_index.lookup.counters()
        },
        rewritten: dedup_out.rewritten,
        prefetch: prefetched.as_ref().map(|(p, _)| p.counts()),
        saving_test_compressions: dedup_out.saving_test_compressions,
    };
    // The dense list goes after its snapshot: it is a hint for the next backup, and a backup
    // killed before it leaves a snapshot without one (see crate::format::dense).
    if let (Some(m), Some(p), None) = (&dedup_out.monitor, metrics.prefetch.as_mut(), skipped_for) {
        let list = crate::format::dense::DenseList {
            snapshot: snapshot_id,
            threshold: dense_threshold,
            containers: m.dense(dense_threshold, &writer_stats.containers),
        };
        p.dense_written = list.containers.len() as u64;
        if let Err(e) = m.save(repo.backend().as_ref(), &list) {
            notices.push(format!(
                "dense container list not saved ({e}); the next backup prefetches no bases"
            ));
        }
    }
    // Nothing more goes to the repository: its lock can go beside the client's own work.
    let released = match release {
        Some(lock) => std::thread::scope(|s| {
            let release = s.spawn(move || lock.release());
            notices.extend(cache_save.wait());
            release
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        }),
        None => {
            notices.extend(cache_save.wait());
            Ok(())
        }
    };
    let result = BackupResult {
        snapshot_id,
        skipped: skipped_for.is_some(),
        summary,
        warnings,
        notices,
        metrics,
    };
    Ok((result, released))
}
