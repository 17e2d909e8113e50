//! What a run reports: per configuration ([`ConfigResult`]), per version ([`VersionRow`]),
//! and the metered I/O in the eval's columns ([`IoSummary`], [`IoColumns`]).

use super::*;

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
    /// Stored bytes of the dense containers read from the client's disk instead of the
    /// repository (the `-local` variant; not in the requests, bytes or modelled seconds).
    pub backup_local_dense_bytes: Option<u64>,
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
    /// Of those, the cache-aware filter's view of the fingerprint cache reading again a
    /// container's metadata that the pool's cache had evicted before the stream reached it.
    pub lookup_view_rereads: u64,
    /// LoopDelta: containers on the dense list the backup started with.
    pub dense_listed: u64,
    /// LoopDelta: dense containers read whole into the potential base chunk cache.
    pub dense_loaded: u64,
    /// Of those, read whole when the stream reached them (the pool had not read them).
    pub dense_loaded_at_stream: u64,
    /// The cache-aware filter: duplicates of old deltas it judged.
    pub caf_old_deltas: u64,
    /// Of those, base-fragmented (stored again).
    pub caf_base_fragmented: u64,
    /// Their raw bytes.
    pub caf_bytes: u64,
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
