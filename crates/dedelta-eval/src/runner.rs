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

mod results;
pub use results::{ConfigResult, IoColumns, IoSummary, VersionRow};

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
    /// Every repository's container size in bytes (`None`: the default, 4 MiB, LoopDelta's).
    /// Why: the restore speed factor counts containers, and a container of the default size
    /// holds more than a whole backup adds on the eval's series, so every configuration writes
    /// one container a backup and delta compression cannot lower the count (LoopDelta §5.3:
    /// "delta compression decreases the number of written containers ... and the number of
    /// read-in containers"); its backups are about a thousand containers each.
    pub container_size: Option<usize>,
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
    if let Some(size) = opts.container_size {
        repo_config.container_size = size;
    }
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
    let mut local_dense: Option<u64> = None;
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
                whole_or_nothing: false,
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
                copy: None,
                skip_if_unchanged: false,
                host: opts.host.clone(),
                time: version_time(&opts.time, i as u64),
                delta: None,
                cache_dir: Some(cache_dir.clone()),
                lookup: opts.lookup,
                rewriting: config.capping.map(|c| Box::new(c) as Box<dyn Rewriting>),
                // The eval measures the data path: every version's files are read, and the
                // parent's tree too, as the papers' systems read the parent's recipe (not
                // from the client's tree cache, which would take that read out of the
                // delta configurations' I/O only: `dedup` reads no parent).
                sources: dedelta_store::commands::backup::SourceOptions {
                    force: true,
                    parent_tree_from_repository: true,
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
            lookup_view_rereads: m.lookups.view_rereads,
            dense_listed: m.prefetch.map_or(0, |p| p.dense_listed),
            dense_loaded: m.prefetch.map_or(0, |p| p.dense_loaded),
            dense_loaded_at_stream: m.prefetch.map_or(0, |p| p.loaded_at_stream),
            caf_old_deltas: m.rewritten.caf.old_deltas,
            caf_base_fragmented: m.rewritten.caf.base_not_cached + m.rewritten.caf.base_given_up,
            caf_bytes: m.rewritten.caf.bytes,
            containers_written: s.containers_written,
            ..VersionRow::default()
        };
        row.io.set_backup(io);
        let local = m.prefetch.map(|p| p.local_bytes);
        row.io.backup_local_dense_bytes = local;
        local_dense = local.map(|b| local_dense.unwrap_or(0) + b).or(local_dense);
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
    r.io.backup_local_dense_bytes = local_dense;
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
mod tests;
