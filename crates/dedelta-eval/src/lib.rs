//! dedelta-eval: the evaluation harness behind `dedelta eval`.
//!
//! One command stores a versioned dataset with every configuration of dedelta and with the
//! tools people use (restic, rustic, borg, zstd, xdelta3), restores and verifies it, and writes
//! `report.md`, `results.csv`, `versions.csv` and PNG plots.
//!
//! - [`dataset`]: versioned datasets (a directory of versions, or a generated series).
//! - [`synthetic`], [`sqlite`], [`redis`]: the generators (DARE §4.1 file-tree mutations;
//!   database snapshots of SQLite and of a Redis server).
//! - [`configs`]: the configurations compared.
//! - [`runner`]: backup, restore and verification per configuration.
//! - [`kernels`]: single-thread sketch and delta codec speeds on a sample.
//! - [`peers`]: the outside tools.
//! - [`report`], [`plot`]: the outputs.
//!
//! Choice: the harness calls the store library directly (one process, exact numbers from
//! `BackupSummary`, `ReadStats` and `stats`) rather than driving the CLI binary; the peers
//! are driven as processes because they are only available that way.

pub mod configs;
pub mod dataset;
pub mod error;
pub mod kernels;
pub mod peers;
pub mod plot;
pub mod redis;
pub mod report;
pub mod rng;
pub mod runner;
pub mod sqlite;
pub mod synthetic;

pub use error::{EvalError, Result};

use configs::EvalConfig;
use dataset::Dataset;
use error::IoContext;
use runner::{ConfigResult, RunOptions, VersionRow};
use std::path::PathBuf;

/// Everything one evaluation needs.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// The dataset.
    pub dataset: Dataset,
    /// Where report.md, results.csv, versions.csv and the plots go.
    pub out_dir: PathBuf,
    /// Where the repositories go (kept after the run, so their numbers can be checked).
    pub repos_dir: PathBuf,
    /// The configurations.
    pub configs: Vec<EvalConfig>,
    /// Worker threads per backup.
    pub threads: usize,
    /// Restore this many versions per configuration (`None`: all).
    pub restore_sample: Option<usize>,
    /// Run the installed peers.
    pub peers: bool,
    /// The command line, recorded in the report.
    pub command_line: String,
    /// Host recorded in snapshots.
    pub host: String,
    /// Start time (RFC 3339), recorded in snapshots and the report.
    pub time: String,
    /// Sets every configuration's `min_saving` (percent; 0: every encoded delta is kept
    /// unless a bound drops it or it is not smaller than the chunk compressed alone); `None`
    /// keeps each configuration's own.
    pub min_saving_percent: Option<f64>,
    /// Sets every configuration's `max_depth` (1: the papers' one-level deltas, bases stored
    /// in full); `None` keeps each configuration's own.
    pub max_depth: Option<u8>,
    /// The papers' restore cache, in containers (see [`RunOptions::cache_containers`]).
    pub cache_containers: usize,
    /// Forward assembly's area instead of the LRU (see [`RunOptions::assembly_bytes`]).
    pub assembly_bytes: Option<u64>,
    /// Versions the restore speed factor averages (the last ones).
    pub speed_factor_versions: usize,
    /// How backups find duplicates (see [`RunOptions::lookup`]).
    pub lookup: dedelta_store::commands::backup::FingerprintIndexOptions,
    /// The models of the modelled I/O seconds (see [`RunOptions::io_models`]).
    pub io_models: dedelta_store::backend::cost::IoModels,
    /// Every repository's container size (see [`RunOptions::container_size`]).
    pub container_size: Option<usize>,
}

/// What an evaluation produced.
#[derive(Clone, Debug, Default)]
pub struct EvalReport {
    /// One summary per configuration, then per peer.
    pub results: Vec<ConfigResult>,
    /// Per-version rows.
    pub rows: Vec<VersionRow>,
    /// Notes (skipped peers, plots not drawn).
    pub notes: Vec<String>,
    /// Similar chunk pairs in the kernel sample (0 when not measured).
    pub kernel_pairs: usize,
}

/// Runs an evaluation and writes its outputs; `log` receives one line per step.
///
/// # Errors
/// A configuration fails (backup, restore, verification), or an output cannot be written.
/// Peers that fail are noted in the report instead.
pub fn run_eval(opts: &EvalOptions, log: &mut dyn FnMut(&str)) -> Result<EvalReport> {
    std::fs::create_dir_all(&opts.out_dir)
        .ctx(|| format!("creating {}", opts.out_dir.display()))?;
    let scratch = opts.repos_dir.join(".scratch");
    std::fs::create_dir_all(&scratch).ctx(|| format!("creating {}", scratch.display()))?;
    let run_opts = RunOptions {
        repos_dir: opts.repos_dir.clone(),
        scratch_dir: scratch.clone(),
        threads: opts.threads,
        restore_sample: opts.restore_sample,
        host: opts.host.clone(),
        time: opts.time.clone(),
        cache_containers: opts.cache_containers,
        assembly_bytes: opts.assembly_bytes,
        speed_factor_versions: opts.speed_factor_versions,
        lookup: opts.lookup,
        io_models: opts.io_models,
        container_size: opts.container_size,
    };
    let mut report = EvalReport::default();
    log("reading every version once (page cache)");
    let warmed = opts.dataset.warm_page_cache()?;
    report.notes.push(format!(
        "page cache: every version ({:.2} MB) was read once before the first configuration, \
         so that no configuration runs from a colder cache than the others",
        warmed as f64 / 1e6
    ));
    log("measuring kernels (sketch, delta codecs) on a sample");
    let mut kernels = kernels::Kernels::prepare(&opts.dataset)?;
    if kernels.is_none() {
        report
            .notes
            .push("kernel speeds not measured: fewer than two file versions".into());
    }
    if let Some(p) = opts.min_saving_percent {
        report.notes.push(format!(
            "min_saving: {p} % for every configuration (--min-saving-percent; the default is \
             10 %){}",
            if p == 0.0 {
                ": every encoded delta is kept unless a re-anchoring or tree bound drops it \
                 or it is not smaller than the chunk compressed alone (zstd level 1)"
            } else {
                ""
            }
        ));
    }
    if let Some(d) = opts.max_depth {
        report.notes.push(format!(
            "max_depth: {d} for every configuration (--max-depth; the presets' own: 1 for \
             the papers' systems, 4 for recommended and the presets derived from it)"
        ));
    }
    if let Some(size) = opts.container_size {
        report.notes.push(format!(
            "container size: {} KiB for every configuration (--container-kib; the default, \
             LoopDelta's, is {} KiB)",
            size >> 10,
            dedelta_store::format::config::DEFAULT_CONTAINER_SIZE >> 10
        ));
    }
    for c in &opts.configs {
        log(&format!("configuration {}: {}", c.name, c.description));
        let mut c = c.clone();
        if let Some(p) = opts.min_saving_percent {
            c.delta.min_saving = p / 100.0;
        }
        if let Some(d) = opts.max_depth {
            c.delta.max_depth = d;
        }
        let c = &c;
        let (r, rows) = runner::run_config(&opts.dataset, c, &run_opts, kernels.as_mut())?;
        log(&format!(
            "  stored {:.2} MB, factor {:.2}, backup {:.1} MB/s, restore {:.1} MB/s",
            r.stored_bytes as f64 / 1e6,
            r.total_factor,
            r.backup_mb_s,
            r.restore_mb_s.unwrap_or(0.0)
        ));
        report.results.push(r);
        report.rows.extend(rows);
    }
    report.kernel_pairs = kernels.as_ref().map_or(0, kernels::Kernels::pairs);
    if opts.peers {
        log("running peers");
        let p = peers::run_peers(&opts.dataset, &scratch.join("peers"), opts.threads)?;
        for r in &p.results {
            log(&format!(
                "  {}: stored {:.2} MB, factor {:.2}",
                r.name,
                r.stored_bytes as f64 / 1e6,
                r.total_factor
            ));
        }
        report.results.extend(p.results);
        report.rows.extend(p.rows);
        report.notes.extend(p.notes);
    } else {
        report.notes.push("peers: skipped (--no-peers)".into());
    }
    let _ = std::fs::remove_dir_all(&scratch);
    log("writing report and plots");
    report.notes.extend(plot::draw_all(&opts.out_dir, &report));
    report::write_all(opts, &report)?;
    Ok(report)
}
