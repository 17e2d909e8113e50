//! `dedelta eval`: stores a versioned dataset with every configuration and with the peers,
//! and writes report.md, results.csv, versions.csv and plots (crate dedelta-eval).

use anyhow::{Context, Result};
use clap::Args;
use dedelta_eval::configs;
use dedelta_eval::dataset::Dataset;
use dedelta_eval::EvalOptions;
use std::path::PathBuf;

/// Arguments of `dedelta eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A directory whose entries are the versions (natural order), a generated series
    /// (synthetic, synthetic-small, sqlite, sqlite-small, redis, redis-nolzf, redis-long,
    /// redis-small: the redis series need redis-server) or a directory of --data-dir (sqla, prettier:
    /// scripts/datasets.sh).
    #[arg(long)]
    dataset: String,
    /// Where report.md, results.csv, versions.csv and the plots go.
    #[arg(long)]
    out: PathBuf,
    /// Comma-separated configurations: all, quick, or names (dedup, ntransform-4f,
    /// ntransform-2f, finesse, odess, dupadj-only, recommended, stream-index,
    /// stream-nodupadj, recommended-4f, depth-1, one-level, dupadj-one-level, dare, dare-sketch-all, sidc,
    /// greedy, greedy-newest, recommended-newest, xdelta, edelta, dedup-cap, recommended-cap;
    /// NAME-capT: NAME with Capping at level T, 20 MiB segments; -cap alone is LoopDelta's 15).
    #[arg(long, default_value = "all")]
    config: String,
    /// Run every configuration once per chunker of this comma-separated list, named
    /// CONFIG@KIND-AVG (Ddelta Table 4: `--config dedup --chunker rabin,gear`). Each is
    /// KIND[:AVG] or KIND:MIN/AVG/MAX, KIND one of fastcdc, gear, rabin, fixed, sizes in bytes
    /// or with k/m; AVG alone takes min AVG/4 and max 8 x AVG (`gear:2k` is 512/2k/16k); KIND
    /// alone is 8k. Default: the repository default, FastCDC 2/8/64 KiB, names unchanged.
    #[arg(long, value_name = "LIST")]
    chunker: Option<String>,
    /// Cache of downloaded and generated datasets.
    #[arg(long, env = "DEDELTA_DATA_DIR", default_value = "data")]
    data_dir: PathBuf,
    /// Where the repositories go (kept after the run); default OUT/repos.
    #[arg(long)]
    repos_dir: Option<PathBuf>,
    /// Use only the first N versions.
    #[arg(long)]
    versions: Option<usize>,
    /// Restore only N versions per configuration (evenly spread, always the last).
    #[arg(long)]
    restore_sample: Option<usize>,
    /// Worker threads per backup (default: number of cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Do not run restic, borg, zstd or xdelta3 even when installed.
    #[arg(long)]
    no_peers: bool,
    /// Set every dedelta configuration's min_saving to P percent (0: off, every encoded
    /// delta is kept unless a re-anchoring or tree bound drops it or it is not smaller than
    /// the chunk compressed alone); default: each configuration's own (10).
    #[arg(long, value_name = "P")]
    min_saving_percent: Option<f64>,
    /// Set every dedelta configuration's delta.max_depth to D (1: the papers' one-level
    /// deltas, every base stored in full; the presets derived from recommended chain up to
    /// 8 deep, the papers' systems are 1 already); default: each configuration's own.
    #[arg(long, value_name = "D")]
    max_depth: Option<u8>,
    /// The restore cache of the restore speed factor, in containers (an LRU of whole
    /// containers; LoopDelta §5.1 uses 512).
    #[arg(long, value_name = "N", default_value_t = dedelta_store::read::PAPER_CACHE_CONTAINERS)]
    restore_cache_containers: usize,
    /// The restore cache: `lru` (of --restore-cache-containers) or `forward` (forward
    /// assembly over areas of --assembly-mib).
    #[arg(long, value_name = "CACHE", default_value = "lru", value_parser = ["lru", "forward"])]
    restore_cache: String,
    /// Forward assembly's area, in MiB of restored data.
    #[arg(long, value_name = "MIB", default_value_t = dedelta_store::read::DEFAULT_ASSEMBLY_BYTES >> 20)]
    assembly_mib: u64,
    /// The restore speed factor is the mean over the last N versions (LoopDelta §5.1: 20);
    /// they are always restored.
    #[arg(long, value_name = "N", default_value_t = dedelta_eval::runner::SPEED_FACTOR_VERSIONS)]
    speed_factor_versions: usize,
    /// Every repository's container size, in KiB (default 4096, LoopDelta's 4 MB; at least
    /// the region size, 512). Scales the container to a series whose backups are small: the
    /// restore speed factor counts containers read.
    #[arg(long, value_name = "KIB")]
    container_kib: Option<usize>,
    #[command(flatten)]
    lookup: crate::cmd::backup::LookupArgs,
    #[command(flatten)]
    io_models: crate::cmd::IoModelArgs,
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=,:".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Runs `dedelta eval`.
///
/// # Errors
/// Bad options, a dataset that cannot be built, or a failing configuration.
pub fn run(args: EvalArgs, host: String, time: String) -> Result<u8> {
    let mut configs = configs::parse(&args.config)?;
    if let Some(list) = &args.chunker {
        configs = configs::with_chunkers(&configs, &configs::parse_chunkers(list)?);
    }
    let mut dataset = Dataset::resolve(&args.dataset, &args.data_dir)
        .with_context(|| format!("preparing dataset {}", args.dataset))?;
    if let Some(n) = args.versions {
        anyhow::ensure!(n >= 1, "--versions must be at least 1");
        dataset.truncate(n);
    }
    let command_line = std::iter::once("dedelta".to_string())
        .chain(std::env::args().skip(1))
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ");
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    anyhow::ensure!(threads >= 1, "--threads must be at least 1");
    if let Some(p) = args.min_saving_percent {
        anyhow::ensure!(
            (0.0..100.0).contains(&p),
            "--min-saving-percent must be in [0, 100)"
        );
    }
    if let Some(d) = args.max_depth {
        anyhow::ensure!(
            (1..=dedelta_store::format::config::MAX_DELTA_DEPTH).contains(&d),
            "--max-depth must be in 1..={}",
            dedelta_store::format::config::MAX_DELTA_DEPTH
        );
    }
    anyhow::ensure!(args.assembly_mib >= 1, "--assembly-mib must be at least 1");
    anyhow::ensure!(
        args.restore_cache_containers >= 1,
        "--restore-cache-containers must be at least 1"
    );
    anyhow::ensure!(
        args.speed_factor_versions >= 1,
        "--speed-factor-versions must be at least 1"
    );
    if let Some(k) = args.container_kib {
        let region = dedelta_store::format::config::DEFAULT_REGION_SIZE >> 10;
        anyhow::ensure!(
            (region..=1 << 20).contains(&k),
            "--container-kib must be in {region}..={}",
            1 << 20
        );
    }
    let opts = EvalOptions {
        dataset,
        repos_dir: args.repos_dir.unwrap_or_else(|| args.out.join("repos")),
        out_dir: args.out.clone(),
        configs,
        threads,
        restore_sample: args.restore_sample,
        peers: !args.no_peers,
        command_line,
        host,
        time,
        min_saving_percent: args.min_saving_percent,
        max_depth: args.max_depth,
        cache_containers: args.restore_cache_containers,
        assembly_bytes: (args.restore_cache == "forward").then_some(args.assembly_mib << 20),
        speed_factor_versions: args.speed_factor_versions,
        lookup: args.lookup.options()?,
        io_models: args.io_models.models()?,
        container_size: args.container_kib.map(|k| k << 10),
    };
    let report = dedelta_eval::run_eval(&opts, &mut |line| eprintln!("{line}"))?;
    for n in &report.notes {
        eprintln!("note: {n}");
    }
    println!("{}", args.out.join("report.md").display());
    Ok(0)
}
