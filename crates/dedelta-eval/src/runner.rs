//! Runs the configurations: each version as one backup into a fresh repository per
//! configuration, then restores of every version (or a sample), verified against the
//! originals.
//!
//! Versions that are single files are backed up as one stream under the fixed name
//! [`STREAM_NAME`], so consecutive snapshots have the same path (DupAdj's previous recipe);
//! versions that are directories are backed up by path.

use crate::configs::EvalConfig;
use crate::dataset::{Dataset, Version};
use crate::error::{EvalError, IoContext, Result, StoreContext};
use crate::kernels::Kernels;
use dedelta_store::backend::cost::IoModels;
use dedelta_store::backend::wrap::metered::{IoCounts, Purpose};
use dedelta_store::commands::backup::rewrite::Rewriting;
use dedelta_store::commands::backup::{
    backup, BackupOptions, FingerprintIndexOptions, StdinSource,
};
use dedelta_store::commands::restore::{restore, RestoreOptions};
use dedelta_store::commands::stats::{stats, RepoStats};
use dedelta_store::format::config::RepoConfig;
use dedelta_store::progress::NoProgress;
use dedelta_store::read::RestoreCacheChoice;
use dedelta_store::repository::lock::LockInfo;
use dedelta_store::Repository;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The file name single-file versions are stored under.
pub const STREAM_NAME: &str = "data";
/// Bytes of decompressed regions the restore cache holds at most: unbounded, so that the LRU
/// is bounded in containers alone, as the papers' cache is (512 containers of 4 MB stored
/// may hold several GB of regions; the eval's datasets restore far less).
pub const RESTORE_CACHE_BYTES: usize = usize::MAX;
/// The restore speed factor is averaged over the last this many versions, as LoopDelta §5.1
/// does ("the shown speed factor is the average of the last 20 backups").
pub const SPEED_FACTOR_VERSIONS: usize = 20;

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Where the repositories go (`<repos_dir>/<config name>`); existing ones are replaced.
    pub repos_dir: PathBuf,
    /// Scratch space for restores.
    pub scratch_dir: PathBuf,
    /// Worker threads per backup.
    pub threads: usize,
    /// Restore this many versions, evenly spread and always including the last; `None`
    /// restores every version.
    pub restore_sample: Option<usize>,
    /// Host recorded in snapshots and locks.
    pub host: String,
    /// Time recorded in locks and in the first version's snapshot (RFC 3339); version `i`'s
    /// snapshot records it plus `i` seconds (see [`version_time`]).
    pub time: String,
    /// Containers the papers' restore cache holds (an LRU; see
    /// [`dedelta_store::read::ContainerLru`]): the restore speed factor is MB restored per
    /// container it reads.
    pub cache_containers: usize,
    /// Restore with forward assembly over areas of this many bytes instead of the LRU
    /// ([`dedelta_store::read::ForwardAssembly`]).
    pub assembly_bytes: Option<u64>,
    /// The restore speed factor is the mean over the last this many versions, which are
    /// always restored (besides [`Self::restore_sample`]).
    pub speed_factor_versions: usize,
    /// How backups find duplicates (`exact` or `locality` with its cache size).
    pub lookup: FingerprintIndexOptions,
    /// The disk and object-store models of the backups' and restores' modelled I/O seconds.
    pub io_models: IoModels,
}

/// A backup's or restore's metered I/O, as the eval's columns have it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IoSummary {
    /// Requests, all purposes and directions.
    pub requests: u64,
    /// Bytes they moved.
    pub bytes: u64,
    /// Container metadata requests.
    pub metadata_requests: u64,
    /// Chunk data requests.
    pub data_requests: u64,
    /// Base read requests.
    pub base_requests: u64,
    /// Prefetch requests (the locality index's container loads; LoopDelta's dense
    /// containers read whole).
    pub prefetch_requests: u64,
    /// The bytes those moved.
    pub prefetch_bytes: u64,
    /// Modelled seconds on a disk.
    pub disk_seconds: f64,
    /// Modelled seconds on an object store.
    pub object_store_seconds: f64,
}

impl IoSummary {
    /// The summary of `counts` under `models`.
    pub fn of(counts: &IoCounts, models: &IoModels) -> Self {
        let m = models.seconds(counts);
        IoSummary {
            requests: counts.total().requests,
            bytes: counts.total().bytes,
            metadata_requests: counts.purpose(Purpose::ContainerMeta).requests,
            data_requests: counts.purpose(Purpose::ChunkData).requests,
            base_requests: counts.purpose(Purpose::BaseRead).requests,
            prefetch_requests: counts.purpose(Purpose::Prefetch).requests,
            prefetch_bytes: counts.purpose(Purpose::Prefetch).bytes,
            disk_seconds: m.disk,
            object_store_seconds: m.object_store,
        }
    }

    /// The sum of two summaries.
    pub fn plus(self, o: IoSummary) -> IoSummary {
        IoSummary {
            requests: self.requests + o.requests,
            bytes: self.bytes + o.bytes,
            metadata_requests: self.metadata_requests + o.metadata_requests,
            data_requests: self.data_requests + o.data_requests,
            base_requests: self.base_requests + o.base_requests,
            prefetch_requests: self.prefetch_requests + o.prefetch_requests,
            prefetch_bytes: self.prefetch_bytes + o.prefetch_bytes,
            disk_seconds: self.disk_seconds + o.disk_seconds,
            object_store_seconds: self.object_store_seconds + o.object_store_seconds,
        }
    }
}

/// The I/O columns of versions.csv and results.csv (flattened into [`VersionRow`], for one
/// backup and its restore, and [`ConfigResult`], for all of them): requests and bytes as
/// [`IoSummary`] has them; `None` where not measured (peers, versions not restored).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IoColumns {
    /// Requests the backup made to the repository (metered: reads, writes and queries; its
    /// lock included; the index is opened once per configuration, before the first backup).
    pub backup_io_requests: Option<u64>,
    /// Bytes they moved.
    pub backup_io_bytes: Option<u64>,
    /// Of the requests, those for container metadata (footer, metadata section, size).
    pub backup_io_metadata_requests: Option<u64>,
    /// Of the requests, those for chunk data (regions read, containers written).
    pub backup_io_data_requests: Option<u64>,
    /// Of the requests, regions read back as delta bases.
    pub backup_io_base_requests: Option<u64>,
    /// Of the requests, prefetches: containers the locality index loaded (metadata, or
    /// LoopDelta's dense containers whole).
    pub backup_io_prefetch_requests: Option<u64>,
    /// The bytes those read.
    pub backup_io_prefetch_bytes: Option<u64>,
    /// The requests' modelled seconds on a disk ([`RunOptions::io_models`]).
    pub backup_modelled_disk_seconds: Option<f64>,
    /// The requests' modelled seconds on an object store ([`RunOptions::io_models`]).
    pub backup_modelled_object_store_seconds: Option<f64>,
    /// Requests its restore made to the repository, when restored (metered; finding the
    /// snapshot not included).
    pub restore_io_requests: Option<u64>,
    /// Bytes they moved.
    pub restore_io_bytes: Option<u64>,
    /// Of the requests, those for container metadata (footer, metadata section, size).
    pub restore_io_metadata_requests: Option<u64>,
    /// Of the requests, those for chunk data (regions read, containers written).
    pub restore_io_data_requests: Option<u64>,
    /// Of the requests, regions read back as delta bases.
    pub restore_io_base_requests: Option<u64>,
    /// The requests' modelled seconds on a disk ([`RunOptions::io_models`]).
    pub restore_modelled_disk_seconds: Option<f64>,
    /// The requests' modelled seconds on an object store ([`RunOptions::io_models`]).
    pub restore_modelled_object_store_seconds: Option<f64>,
}

impl IoColumns {
    /// Sets the backup columns.
    pub fn set_backup(&mut self, io: IoSummary) {
        self.backup_io_requests = Some(io.requests);
        self.backup_io_bytes = Some(io.bytes);
        self.backup_io_metadata_requests = Some(io.metadata_requests);
        self.backup_io_data_requests = Some(io.data_requests);
        self.backup_io_base_requests = Some(io.base_requests);
        self.backup_io_prefetch_requests = Some(io.prefetch_requests);
        self.backup_io_prefetch_bytes = Some(io.prefetch_bytes);
        self.backup_modelled_disk_seconds = Some(io.disk_seconds);
        self.backup_modelled_object_store_seconds = Some(io.object_store_seconds);
    }

    /// Sets the restore columns.
    pub fn set_restore(&mut self, io: IoSummary) {
        self.restore_io_requests = Some(io.requests);
        self.restore_io_bytes = Some(io.bytes);
        self.restore_io_metadata_requests = Some(io.metadata_requests);
        self.restore_io_data_requests = Some(io.data_requests);
        self.restore_io_base_requests = Some(io.base_requests);
        self.restore_modelled_disk_seconds = Some(io.disk_seconds);
        self.restore_modelled_object_store_seconds = Some(io.object_store_seconds);
    }
}

/// One version of one configuration or peer.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VersionRow {
    /// Configuration or peer name.
    pub config: String,
    /// Version number (0-based).
    pub version: usize,
    /// Version name.
    pub version_name: String,
    /// Bytes of the version.
    pub logical_bytes: u64,
    /// Bytes stored after this version (cumulative).
    pub cumulative_stored_bytes: u64,
    /// Seconds the backup of this version took.
    pub backup_seconds: f64,
    /// Its duplicate lookups (the backup's `lookups` metrics): chunks found in the locality
    /// cache.
    pub lookup_cache_hits: u64,
    /// Chunks the global filter turned away.
    pub lookup_filter_negatives: u64,
    /// Chunks the global filter let through that the index did not hold.
    pub lookup_filter_false_positives: u64,
    /// Lookups that went to the on-disk index.
    pub lookup_index_lookups: u64,
    /// Run buckets they read (random reads).
    pub lookup_bucket_reads: u64,
    /// Container metadata sections prefetched (random reads).
    pub lookup_prefetches: u64,
    /// Containers the backup wrote (its new data, in containers).
    pub containers_written: u64,
    /// Seconds its restore took (when restored).
    pub restore_seconds: Option<f64>,
    /// Stored bytes read by the restore.
    pub restore_read_bytes: Option<u64>,
    /// Containers the restore cache read for this restore (an LRU of
    /// [`RunOptions::cache_containers`] containers, or forward assembly).
    pub restore_containers_read: Option<u64>,
    /// Regions it decompressed from them.
    pub restore_regions_read: Option<u64>,
    /// Stored bytes of the containers it read.
    pub restore_container_bytes_read: Option<u64>,
    /// MB restored per container read (DARE §4.5, LoopDelta §5.1: the restore speed factor).
    pub restore_speed_factor: Option<f64>,
    /// MB restored per full container's worth of stored bytes read (container bytes read /
    /// the configured container size): the speed factor with partly filled containers
    /// counted by their size.
    pub restore_speed_factor_by_size: Option<f64>,
    /// The backup's and the restore's metered I/O.
    #[serde(flatten)]
    pub io: IoColumns,
}

/// The summary of one configuration or peer.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ConfigResult {
    /// Configuration or peer name.
    pub name: String,
    /// `dedelta` or `peer`.
    pub kind: String,
    /// What it is.
    pub description: String,
    /// Versions stored.
    pub versions: usize,
    /// Bytes of all versions.
    pub logical_bytes: u64,
    /// Bytes stored: for dedelta the containers (`stats` `stored_bytes`), for peers the
    /// repository directory or output files.
    pub stored_bytes: u64,
    /// Bytes of the whole repository directory (containers, snapshots, locks; the chunk
    /// index is a client cache, in `index_bytes`).
    pub repo_bytes: u64,
    /// logical / stored.
    pub total_factor: f64,
    /// The chunker (`fastcdc-8k`: [`crate::configs::chunker_label`]); empty for peers.
    pub chunker: String,
    /// Distinct chunks stored, tree chunks included (`stats` `chunks`).
    pub unique_chunks: Option<u64>,
    /// Raw bytes of the distinct chunks / their number: the real average chunk size after
    /// deduplication (Ddelta Table 4's "average chunk size"), tree chunks included.
    pub mean_chunk_bytes: Option<f64>,
    /// Deduplication factor (`stats`).
    pub dedup_factor: Option<f64>,
    /// Delta factor (`stats`).
    pub delta_factor: Option<f64>,
    /// Local compression factor (`stats`).
    pub compression_factor: Option<f64>,
    /// Delta compression ratio (`stats`).
    pub dcr: Option<f64>,
    /// Delta compression efficiency (`stats`): `1 - delta / original bytes` of the delta
    /// chunks (LoopDelta §3.1.4).
    pub dce: Option<f64>,
    /// Original / delta bytes of the delta chunks (`stats` `delta_ratio`).
    pub delta_ratio: Option<f64>,
    /// Chunks stored as deltas.
    pub delta_chunks: Option<u64>,
    /// The capping level of the backups (`None`: no rewriting).
    pub capping_level: Option<usize>,
    /// Duplicate chunks the backups rewrote (Capping), over all versions.
    pub rewritten_chunks: Option<u64>,
    /// Their raw bytes.
    pub rewritten_bytes: Option<u64>,
    /// Detected pairs over all backups: chunks a delta was encoded for, kept or not.
    pub delta_detected: Option<u64>,
    /// Detected pairs dropped by `min_saving`.
    pub delta_rejected_min_saving: Option<u64>,
    /// Detected pairs dropped by the re-anchoring bound.
    pub delta_rejected_reanchor: Option<u64>,
    /// Detected pairs (tree chunks) dropped by the tree bound.
    pub delta_rejected_tree_bound: Option<u64>,
    /// DCE over the detected pairs, each with its smallest delta (`1 - delta / original`).
    pub detected_dce: Option<f64>,
    /// The configuration's `min_saving` in percent (as `--min-saving-percent` sets it).
    pub min_saving_percent: Option<f64>,
    /// The configuration's `max_depth` (as `--max-depth` sets it; 1: one-level deltas).
    pub max_depth: Option<u8>,
    /// Super-feature computing speed, MB/s, single thread on the kernel sample.
    pub sf_mb_s: Option<f64>,
    /// Delta encode speed, MB/s, single thread on the kernel sample.
    pub delta_encode_mb_s: Option<f64>,
    /// Delta decode speed, MB/s, single thread on the kernel sample.
    pub delta_decode_mb_s: Option<f64>,
    /// Sketch stage in the backups: new bytes / summed sketch seconds (all threads).
    pub pipeline_sketch_mb_s: Option<f64>,
    /// Chunks the backups sketched (all new chunks, or DupAdj's misses with
    /// `delta.sketch_dupadj_misses`; tree chunks included).
    pub sketched_chunks: Option<u64>,
    /// Delta stage in the backups: bytes delta-encoded / summed delta seconds.
    pub pipeline_delta_mb_s: Option<f64>,
    /// Seconds of all backups.
    pub backup_seconds: f64,
    /// logical MB / backup seconds.
    pub backup_mb_s: f64,
    /// Versions restored (and verified).
    pub versions_restored: usize,
    /// Bytes restored.
    pub restore_bytes: u64,
    /// Seconds of all restores.
    pub restore_seconds: Option<f64>,
    /// restored MB / restore seconds.
    pub restore_mb_s: Option<f64>,
    /// The restore speed factor (DARE §4.5, LoopDelta §5.1): MB restored per container read
    /// through the restore cache (an LRU of [`Self::restore_cache_containers`] containers, or
    /// forward assembly),
    /// the mean of the last [`Self::speed_factor_versions`] versions' factors.
    pub restore_speed_factor: Option<f64>,
    /// The same with each container read counted by its stored bytes over the configured
    /// container size (a backup's last container is sealed partly filled).
    pub restore_speed_factor_by_size: Option<f64>,
    /// Containers read over those versions' restores.
    pub restore_containers_read: Option<u64>,
    /// Regions decompressed from them.
    pub restore_regions_read: Option<u64>,
    /// The restore cache, in containers.
    pub restore_cache_containers: Option<usize>,
    /// Versions the speed factor averages.
    pub speed_factor_versions: Option<usize>,
    /// Stored bytes read / bytes restored.
    pub restore_read_amplification: Option<f64>,
    /// Where the repository's bytes go (`stats` breakdown): full chunks of file data.
    pub full_chunk_bytes: Option<u64>,
    /// Delta payloads of file data.
    pub delta_bytes: Option<u64>,
    /// Tree streams (directory entries and file recipes), their deltas and bases included.
    pub tree_bytes: Option<u64>,
    /// Container headers, metadata sections and footers.
    pub container_metadata_bytes: Option<u64>,
    /// Snapshot files, the config, locks and damage records.
    pub snapshot_other_bytes: Option<u64>,
    /// Bytes of the client's chunk index files (in its cache, not in the repository).
    pub index_bytes: Option<u64>,
    /// Configured base cache of the backup (bytes).
    pub base_cache_bytes: Option<u64>,
    /// Base cache hit rate during the backups.
    pub base_cache_hit_rate: Option<f64>,
    /// Peak resident set of the process during this configuration (VmHWM after a reset).
    pub peak_rss_bytes: Option<u64>,
    /// All backups' and all restores' metered I/O (the sums of the versions' rows).
    #[serde(flatten)]
    pub io: IoColumns,

    /// Anything notable (skips, approximations).
    pub note: String,
}

/// The versions to restore: `n` evenly spread, always the last.
pub fn restore_picks(versions: usize, sample: Option<usize>) -> Vec<usize> {
    let n = sample.unwrap_or(versions).clamp(1, versions.max(1));
    if versions == 0 {
        return Vec::new();
    }
    let mut picks: Vec<usize> = (0..n)
        .map(|i| {
            if n == 1 {
                versions - 1
            } else {
                i * (versions - 1) / (n - 1)
            }
        })
        .collect();
    picks.dedup();
    picks
}

/// Resets the peak resident set (Linux `clear_refs` 5); false where unsupported.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", b"5").is_ok()
}

/// Peak resident set in bytes (`VmHWM` of /proc/self/status).
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Bytes of files under `path` (0 if missing).
pub fn du(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|rd| rd.flatten().map(|e| du(&e.path())).sum())
        .unwrap_or(0)
}

/// Runs one configuration; returns its summary and per-version rows.
///
/// # Errors
/// A backup or restore fails, or a restored version differs from its original.
pub fn run_config(
    dataset: &Dataset,
    config: &EvalConfig,
    opts: &RunOptions,
    kernels: Option<&mut Kernels>,
) -> Result<(ConfigResult, Vec<VersionRow>)> {
    let repo_dir = opts.repos_dir.join(&config.name);
    // The client's local cache, as a user's backups would have it, fresh for every run.
    let cache_dir = opts.repos_dir.join(format!("{}.cache", config.name));
    for dir in [&repo_dir, &cache_dir] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).ctx(|| format!("clearing {}", dir.display()))?;
        }
    }
    std::fs::create_dir_all(&opts.repos_dir)
        .ctx(|| format!("creating {}", opts.repos_dir.display()))?;
    let rss_reset = reset_peak_rss();
    let ctx = |what: &str| format!("{} ({what})", config.name);
    let mut repo_config = RepoConfig::new(format!("{:032x}", hash_name(&config.name)));
    repo_config.delta = config.delta.clone();
    repo_config.chunker = config.chunker;
    let repo = Repository::init_local_with_cache(&repo_dir, repo_config, &cache_dir)
        .store_ctx(|| ctx("init"))?
        .metered()
        .open_index()
        .store_ctx(|| ctx("opening the index"))?;
    let me = LockInfo {
        pid: std::process::id(),
        host: opts.host.clone(),
        time: opts.time.clone(),
        command: "eval".into(),
    };
    let workers = dedelta_store::backup::Workers::new(opts.threads.max(1))
        .store_ctx(|| ctx("starting threads"))?;
    let mut rows = Vec::new();
    let mut snapshots = Vec::new();
    let mut cumulative = 0u64;
    let mut backup_seconds = 0.0;
    let (mut new_bytes, mut sketch_s, mut delta_src, mut delta_s) = (0u64, 0.0, 0u64, 0.0);
    let mut sketched = 0u64;
    // Duplicates rewritten by Capping: chunks, bytes.
    let mut rewritten = (0u64, 0u64);
    let (mut hits, mut misses) = (0u64, 0u64);
    let mut detection = dedelta_store::format::snapshot::BackupSummary::default();
    let io_now = |repo: &dedelta_store::IndexedRepository| repo.io_counts().unwrap_or_default();
    let (mut backup_io, mut restore_io) = (IoSummary::default(), IoSummary::default());
    for (i, v) in dataset.versions.iter().enumerate() {
        let io_before = io_now(&repo);
        let lock = repo.lock(&me).store_ctx(|| ctx("lock"))?;
        let stdin = if v.is_dir {
            None
        } else {
            let f = std::fs::File::open(&v.path).ctx(|| format!("opening {}", v.path.display()))?;
            Some(StdinSource {
                reader: Box::new(std::io::BufReader::with_capacity(1 << 20, f)),
                name: STREAM_NAME.into(),
                mtime_secs: 1_700_000_000,
            })
        };
        let started = Instant::now();
        let result = backup(
            &repo,
            &lock,
            BackupOptions {
                paths: if v.is_dir {
                    vec![v.path.clone()]
                } else {
                    vec![]
                },
                excludes: vec![],
                tags: vec![format!("v{i}")],
                stdin,
                host: opts.host.clone(),
                time: version_time(&opts.time, i as u64),
                delta: None,
                cache_dir: Some(cache_dir.clone()),
                lookup: opts.lookup,
                rewriting: config.capping.map(|c| Box::new(c) as Box<dyn Rewriting>),
                // The eval measures the data path: every version's files are read.
                sources: dedelta_store::commands::backup::SourceOptions {
                    force: true,
                    ..Default::default()
                },
                loopdelta: config.loopdelta,
            },
            &workers,
            &NoProgress,
        )
        .store_ctx(|| ctx(&format!("backup of {}", v.name)))?;
        let secs = started.elapsed().as_secs_f64();
        drop(lock);
        let io = IoSummary::of(&io_now(&repo).since(&io_before), &opts.io_models);
        backup_io = backup_io.plus(io);
        let s = &result.summary;
        cumulative += s.bytes_added;
        backup_seconds += secs;
        new_bytes += s.bytes_new;
        let m = &result.metrics;
        sketch_s += m.stage_seconds.get("sketch").copied().unwrap_or(0.0);
        sketched += m.sketched_chunks;
        delta_src += s.delta_source_bytes;
        detection.delta_detected += s.delta_detected;
        detection.delta_rejected_min_saving += s.delta_rejected_min_saving;
        detection.delta_rejected_reanchor += s.delta_rejected_reanchor;
        detection.delta_rejected_tree_bound += s.delta_rejected_tree_bound;
        detection.detected_source_bytes += s.detected_source_bytes;
        detection.detected_delta_bytes += s.detected_delta_bytes;
        delta_s += m.stage_seconds.get("delta").copied().unwrap_or(0.0);
        rewritten.0 += m.rewritten.chunks;
        rewritten.1 += m.rewritten.bytes;
        hits += m.bases.memory;
        misses += m.bases.read_back;
        snapshots.push(result.snapshot_id);
        let mut row = VersionRow {
            config: config.name.clone(),
            version: i,
            version_name: v.name.clone(),
            logical_bytes: v.len_bytes,
            cumulative_stored_bytes: cumulative,
            backup_seconds: secs,
            lookup_cache_hits: m.lookups.cache_hits,
            lookup_filter_negatives: m.lookups.filter_negatives,
            lookup_filter_false_positives: m.lookups.filter_false_positives,
            lookup_index_lookups: m.lookups.index_lookups,
            lookup_bucket_reads: m.lookups.bucket_reads,
            lookup_prefetches: m.lookups.prefetches,
            containers_written: s.containers_written,
            ..VersionRow::default()
        };
        row.io.set_backup(io);
        rows.push(row);
    }
    // Restores, verified.
    let (mut restore_s, mut restored, mut read_bytes) = (0.0, 0u64, 0u64);
    let picks = restore_picks_with_last(
        dataset.versions.len(),
        opts.restore_sample,
        opts.speed_factor_versions,
    );
    let container_size = repo.config().container_size;
    for &i in &picks {
        let v = &dataset.versions[i];
        let (_, snap) = repo
            .find_snapshot(&snapshots[i].to_hex())
            .store_ctx(|| ctx("finding a snapshot"))?;
        let target = opts.scratch_dir.join(format!("restore-{}", config.name));
        if target.exists() {
            std::fs::remove_dir_all(&target).ctx(|| format!("clearing {}", target.display()))?;
        }
        let io_before = io_now(&repo);
        let started = Instant::now();
        let st = restore(
            &repo,
            &snap,
            &RestoreOptions {
                target: target.clone(),
                include: vec![],
                cache_bytes: RESTORE_CACHE_BYTES,
                cache: match opts.assembly_bytes {
                    Some(area_bytes) => RestoreCacheChoice::Forward { area_bytes },
                    None => RestoreCacheChoice::Lru {
                        containers: opts.cache_containers,
                    },
                },
                ..Default::default()
            },
            &NoProgress,
        )
        .store_ctx(|| ctx(&format!("restore of {}", v.name)))?;
        let secs = started.elapsed().as_secs_f64();
        let io = IoSummary::of(&io_now(&repo).since(&io_before), &opts.io_models);
        restore_io = restore_io.plus(io);
        verify(config, v, &target)?;
        std::fs::remove_dir_all(&target).ctx(|| format!("clearing {}", target.display()))?;
        restore_s += secs;
        restored += st.bytes_written;
        read_bytes += st.reads.bytes_read;
        let row = &mut rows[i];
        row.restore_seconds = Some(secs);
        row.restore_read_bytes = Some(st.reads.bytes_read);
        row.io.set_restore(io);
        let c = st.restore_cache;
        row.restore_containers_read = Some(c.containers_read);
        row.restore_regions_read = Some(c.regions_read);
        row.restore_container_bytes_read = Some(c.container_bytes_read);
        row.restore_speed_factor = st.speed_factor();
        row.restore_speed_factor_by_size =
            speed_factor_by_size(st.bytes_written, c.container_bytes_read, container_size);
    }
    let last = dataset
        .versions
        .len()
        .saturating_sub(opts.speed_factor_versions);
    let averaged = &rows[last..];
    let sum = |f: fn(&VersionRow) -> Option<u64>| averaged.iter().filter_map(f).sum::<u64>();
    let peak = if rss_reset { peak_rss_bytes() } else { None };
    let st: RepoStats = stats(&repo).store_ctx(|| ctx("stats"))?;
    let logical = dataset.total_bytes();
    let mut r = ConfigResult {
        name: config.name.clone(),
        kind: "dedelta".into(),
        description: config.description.clone(),
        versions: dataset.versions.len(),
        logical_bytes: logical,
        stored_bytes: st.stored_bytes,
        repo_bytes: du(&repo_dir),
        total_factor: ratio(logical, st.stored_bytes),
        chunker: crate::configs::chunker_label(&config.chunker),
        unique_chunks: Some(st.chunks),
        mean_chunk_bytes: (st.chunks > 0).then(|| st.unique_bytes as f64 / st.chunks as f64),
        dedup_factor: Some(st.dedup_factor),
        delta_factor: Some(st.delta_factor),
        compression_factor: Some(st.compression_factor),
        dcr: Some(st.dcr),
        dce: Some(st.dce),
        delta_ratio: Some(st.delta_ratio),
        delta_chunks: Some(st.delta_chunks),
        capping_level: config.capping.map(|c| c.level),
        rewritten_chunks: Some(rewritten.0),
        rewritten_bytes: Some(rewritten.1),
        delta_detected: Some(detection.delta_detected),
        delta_rejected_min_saving: Some(detection.delta_rejected_min_saving),
        delta_rejected_reanchor: Some(detection.delta_rejected_reanchor),
        delta_rejected_tree_bound: Some(detection.delta_rejected_tree_bound),
        detected_dce: Some(detection.detected_dce()),
        min_saving_percent: Some(config.delta.min_saving * 100.0),
        max_depth: Some(config.delta.max_depth),
        full_chunk_bytes: Some(st.breakdown.full_chunks),
        delta_bytes: Some(st.breakdown.deltas),
        tree_bytes: Some(st.breakdown.trees),
        container_metadata_bytes: Some(st.breakdown.container_metadata),
        snapshot_other_bytes: Some(st.breakdown.snapshots + st.breakdown.other),
        pipeline_sketch_mb_s: (sketch_s > 0.0).then(|| new_bytes as f64 / 1e6 / sketch_s),
        sketched_chunks: config.delta.sketch.map(|_| sketched),
        pipeline_delta_mb_s: (delta_s > 0.0).then(|| delta_src as f64 / 1e6 / delta_s),
        backup_seconds,
        backup_mb_s: logical as f64 / 1e6 / backup_seconds.max(1e-9),
        versions_restored: picks.len(),
        restore_bytes: restored,
        restore_seconds: Some(restore_s),
        restore_mb_s: Some(restored as f64 / 1e6 / f64::max(restore_s, 1e-9)),
        restore_speed_factor: mean(averaged.iter().map(|r| r.restore_speed_factor)),
        restore_speed_factor_by_size: mean(averaged.iter().map(|r| r.restore_speed_factor_by_size)),
        restore_containers_read: Some(sum(|r| r.restore_containers_read)),
        restore_regions_read: Some(sum(|r| r.restore_regions_read)),
        restore_cache_containers: Some(opts.cache_containers),
        speed_factor_versions: Some(averaged.len()),
        restore_read_amplification: Some(read_bytes as f64 / restored.max(1) as f64),
        index_bytes: {
            // As the CLI leaves it after a command (small indexes merged into one run).
            let _ = repo.index().compact_if_worthwhile();
            Some(dedelta_store::client::index::files_bytes(repo.index_path()))
        },
        base_cache_bytes: config
            .delta
            .enabled()
            .then_some(config.delta.base_cache_bytes as u64),
        base_cache_hit_rate: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
        peak_rss_bytes: peak,
        note: String::new(),
        ..ConfigResult::default()
    };
    r.io.set_backup(backup_io);
    r.io.set_restore(restore_io);
    if let Some(k) = kernels {
        if let Some(kind) = config.delta.sketch {
            r.sf_mb_s = Some(k.sketch_mb_s(kind, config.delta.sketch_params)?);
        }
        if config.delta.enabled() {
            let c = k.codec(config.delta.codec)?;
            r.delta_encode_mb_s = Some(c.encode_mb_s);
            r.delta_decode_mb_s = Some(c.decode_mb_s);
        }
    }
    Ok((r, rows))
}

/// `time` (RFC 3339, `YYYY-MM-DDTHH:MM:SS` then fraction and offset) plus `secs` seconds;
/// `time` unchanged if it does not start so.
///
/// Why: a backup takes the latest snapshot of its paths as its parent (DupAdj's recipe, the
/// tree chunks' bases), ordered by time, then by id. Versions backed up within one second, all
/// under the eval's start time, would tie, and each backup would take a random earlier
/// version as its parent (on 10 Redis dumps that stored 100.3 MB instead of 92.4).
pub fn version_time(time: &str, secs: u64) -> String {
    fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
        // H. Hinnant's algorithm, proleptic Gregorian calendar.
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
        era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
    }
    fn civil_from_days(z: i64) -> (i64, i64, i64) {
        let z = z + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        (yoe + era * 400 + i64::from(m <= 2), m, d)
    }
    let b = time.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = time.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let shape = b.len() >= 19
        && [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')]
            .iter()
            .all(|&(i, c)| b[i] == c);
    let parsed = shape.then(|| {
        Some((
            num(0..4)?,
            num(5..7)?,
            num(8..10)?,
            num(11..13)?,
            num(14..16)?,
            num(17..19)?,
        ))
    });
    let Some(Some((y, mo, d, h, mi, s))) = parsed else {
        return time.to_string();
    };
    let Ok(secs) = i64::try_from(secs) else {
        return time.to_string();
    };
    let t = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s + secs;
    let (y, mo, d) = civil_from_days(t.div_euclid(86_400));
    let r = t.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}{}",
        r / 3600,
        r / 60 % 60,
        r % 60,
        &time[19..]
    )
}

/// MB restored per full container's worth of stored bytes read: `restored_bytes` over
/// `container_bytes_read / container_size` containers; `None` when nothing was read.
pub fn speed_factor_by_size(
    restored_bytes: u64,
    container_bytes_read: u64,
    container_size: usize,
) -> Option<f64> {
    (container_bytes_read > 0).then(|| {
        restored_bytes as f64 / 1e6 / (container_bytes_read as f64 / container_size as f64)
    })
}

/// The mean of the values present; `None` if there are none.
pub fn mean(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let (sum, n) = values
        .flatten()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// [`restore_picks`], and the last `last` versions (the ones the restore speed factor
/// averages), in order.
pub fn restore_picks_with_last(versions: usize, sample: Option<usize>, last: usize) -> Vec<usize> {
    let mut picks = restore_picks(versions, sample);
    picks.extend(versions.saturating_sub(last)..versions);
    picks.sort_unstable();
    picks.dedup();
    picks
}

/// a / b, 0 when b is 0.
pub fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn hash_name(name: &str) -> u128 {
    // FNV-1a: a stable repository id per configuration name.
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in name.bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    h
}

/// Compares a restored version with its original.
fn verify(config: &EvalConfig, v: &Version, target: &Path) -> Result<()> {
    let mismatch = |path: &Path| EvalError::Mismatch {
        config: config.name.clone(),
        version: v.name.clone(),
        path: path.to_path_buf(),
    };
    if !v.is_dir {
        return if same_file(&v.path, &target.join(STREAM_NAME))? {
            Ok(())
        } else {
            Err(mismatch(&v.path))
        };
    }
    let abs = std::path::absolute(&v.path).ctx(|| format!("resolving {}", v.path.display()))?;
    let mut stack = vec![abs];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ctx(|| format!("reading {}", d.display()))? {
            let e = e.ctx(|| format!("reading {}", d.display()))?;
            let p = e.path();
            let ft = e.file_type().ctx(|| format!("reading {}", p.display()))?;
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                let rel = p.strip_prefix("/").unwrap_or(&p);
                if !same_file(&p, &target.join(rel))? {
                    return Err(mismatch(&p));
                }
            }
        }
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> Result<bool> {
    let open = |p: &Path| std::fs::File::open(p).ctx(|| format!("opening {}", p.display()));
    let (mut fa, mut fb) = match (open(a)?, open(b)) {
        (fa, Ok(fb)) => (fa, fb),
        (_, Err(_)) => return Ok(false),
    };
    let mut ba = vec![0u8; 1 << 20];
    let mut bb = vec![0u8; 1 << 20];
    loop {
        let na = read_full(&mut fa, &mut ba).ctx(|| format!("reading {}", a.display()))?;
        let nb = read_full(&mut fb, &mut bb).ctx(|| format!("reading {}", b.display()))?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let k = f.read(&mut buf[n..])?;
        if k == 0 {
            break;
        }
        n += k;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_times_count_up_across_days_months_and_years() {
        for (t, secs, want) in [
            (
                "2026-11-24T05:51:47.123456Z",
                0,
                "2026-11-24T05:51:47.123456Z",
            ),
            (
                "2026-11-24T05:51:47.123456Z",
                9,
                "2026-11-24T05:51:56.123456Z",
            ),
            ("2026-11-24T23:59:59.5Z", 1, "2026-11-25T00:00:00.5Z"),
            ("2024-02-28T23:59:59Z", 1, "2024-02-29T00:00:00Z"),
            ("2023-02-28T23:59:59+01:00", 1, "2023-03-01T00:00:00+01:00"),
            ("2026-12-31T23:59:30Z", 3600, "2027-01-01T00:59:30Z"),
            ("not a time", 5, "not a time"),
            ("2026-1x-24T05:51:47Z", 5, "2026-1x-24T05:51:47Z"),
            ("2026-11-24T05:51", 5, "2026-11-24T05:51"),
        ] {
            assert_eq!(version_time(t, secs), want, "{t} + {secs}");
        }
        // Later versions sort after earlier ones, as the store orders snapshots.
        let times: Vec<String> = (0..100)
            .map(|i| version_time("2026-11-24T23:58:30.000001Z", i))
            .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    }

    #[test]
    fn speed_factor_is_averaged_over_the_last_versions() {
        // 10 versions, a sample of 3 (0, 4, 9), and the last 4 for the speed factor.
        assert_eq!(
            restore_picks_with_last(10, Some(3), 4),
            vec![0, 4, 6, 7, 8, 9]
        );
        assert_eq!(restore_picks_with_last(3, Some(1), 20), vec![0, 1, 2]);
        // By hand: versions restoring 12 MB from 3 containers (4.0) and 10 MB from 4 (2.5).
        assert_eq!(mean([Some(4.0), None, Some(2.5)].into_iter()), Some(3.25));
        assert_eq!(mean([None].into_iter()), None);
        // 12 MB restored from 6 MiB of containers of 4 MiB: 1.5 containers' worth, 8 MB each.
        assert_eq!(
            speed_factor_by_size(12_000_000, 6 << 20, 4 << 20),
            Some(8.0)
        );
        assert_eq!(speed_factor_by_size(12_000_000, 0, 4 << 20), None);
    }

    #[test]
    fn picks_spread_and_include_last() {
        assert_eq!(restore_picks(10, None), (0..10).collect::<Vec<_>>());
        assert_eq!(restore_picks(10, Some(3)), vec![0, 4, 9]);
        assert_eq!(restore_picks(10, Some(1)), vec![9]);
        assert_eq!(restore_picks(2, Some(5)), vec![0, 1]);
    }
}
