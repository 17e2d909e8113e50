//! `dedelta restore`: restores a snapshot (or the paths `--include` names) into a directory.
//! A file that cannot be restored does not stop the others: each is named on stderr, and
//! the summary line, printed last, counts them.
//!
//! Exit codes: 0 everything restored; 3 restored, but some files could not be; 1 the
//! restore stopped (no such snapshot, a target that cannot be used); 10 no repository.

use super::{open_reader, progress_bar, IoModelArgs, RepoArg};
use crate::render::{io_line, mb, outln, print_json};
use crate::EXIT_PARTIAL;
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::restore;
use dedelta_store::read::{RestoreCacheChoice, DEFAULT_ASSEMBLY_BYTES, PAPER_CACHE_CONTAINERS};
use serde_json::json;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// MiB of decompressed regions a restore's LRU holds at most, by default.
const RESTORE_CACHE_MIB: usize = 256;

/// Arguments of `dedelta restore`.
#[derive(Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshot id (a unique prefix) or `latest`.
    snapshot: String,
    /// Directory to restore into.
    #[arg(long, short = 't')]
    target: PathBuf,
    /// Restore only this path and what is below it (repeatable; any bytes).
    #[arg(long)]
    include: Vec<OsString>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    io_models: IoModelArgs,
}

/// The restore cache, for `restore` and `dump`.
#[derive(Args)]
pub struct CacheArgs {
    /// Restore cache: `lru`, an LRU of containers (the papers' restore cache), or `forward`,
    /// forward assembly (Lillibridge et al., FAST'13: look ahead over an area of the recipe
    /// and read each container it needs once). Restore reports the containers read and the
    /// restore speed factor, MB restored per container read (DARE §4.5, LoopDelta §5.1).
    #[arg(long, value_enum, default_value = "lru")]
    cache: CacheKind,
    /// The LRU's size in containers (LoopDelta's 512 by default); its regions are also
    /// bounded by --cache-mib.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "512")]
    cache_containers: Option<usize>,
    /// MiB of decompressed regions the LRU holds at most (restore: 256, dump: 32).
    #[arg(long, value_name = "MIB")]
    cache_mib: Option<usize>,
    /// Forward assembly's area, in MiB of restored data (at least one chunk).
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_ASSEMBLY_BYTES >> 20)]
    assembly_mib: u64,
}

/// `--cache`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum CacheKind {
    /// An LRU of containers.
    Lru,
    /// Forward assembly.
    Forward,
}

impl CacheArgs {
    /// The cache chosen, and the LRU's bound in bytes (`default_mib` without --cache-mib).
    pub fn choice(&self, default_mib: usize) -> Result<(RestoreCacheChoice, usize)> {
        let containers = self.cache_containers.unwrap_or(PAPER_CACHE_CONTAINERS);
        anyhow::ensure!(containers >= 1, "--cache-containers must be at least 1");
        anyhow::ensure!(self.assembly_mib >= 1, "--assembly-mib must be at least 1");
        let choice = match self.cache {
            CacheKind::Lru => RestoreCacheChoice::Lru { containers },
            CacheKind::Forward => RestoreCacheChoice::Forward {
                area_bytes: self.assembly_mib << 20,
            },
        };
        let mib = self.cache_mib.unwrap_or(default_mib);
        Ok((choice, mib.saturating_mul(1 << 20)))
    }
}

/// Restores the snapshot and prints what was restored, with the time taken.
pub fn run(args: RestoreArgs) -> Result<u8> {
    args.io_models.models()?;
    let (r, _lock) = open_reader(&args.repo, "restore")?;
    let (id, snap) = r.find_snapshot(&args.snapshot)?;
    let progress = progress_bar(args.json);
    let (cache, cache_bytes) = args.cache.choice(RESTORE_CACHE_MIB)?;
    let started = std::time::Instant::now();
    let opts = restore::RestoreOptions {
        target: args.target.clone(),
        include: args.include.iter().map(|p| p.as_bytes().to_vec()).collect(),
        cache_bytes,
        cache,
    };
    let st = restore::restore(&r, &snap, &opts, &progress)?;
    progress.finish();
    let secs = started.elapsed().as_secs_f64();
    let mbps = st.bytes_written as f64 / 1e6 / secs.max(1e-9);
    let io = args.io_models.report(&r)?;
    // Each file that could not be restored, then the summary: the last line says
    // what happened as a whole.
    for e in &st.errors {
        eprintln!("error: {}: {}", e.path_lossy(), e.message);
    }
    // A snapshot rewritten by `repair snapshots` lists the files whose lost chunks it removed.
    for p in &snap.damaged_paths {
        eprintln!(
            "warning: /{p}: incomplete (chunks lost to damage were removed by `repair snapshots`)"
        );
    }
    // Metadata the target refused (owners when not root): the content is restored.
    for w in &st.warnings {
        eprintln!("warning: {w}");
    }
    if snap.tree_truncated {
        eprintln!("warning: this snapshot's tree was only partly readable when it was repaired: files after that point are missing");
    }
    if args.json {
        let mut v = serde_json::to_value(&st)?;
        v["snapshot_id"] = json!(id.to_hex());
        v["seconds"] = json!(secs);
        v["mb_per_s"] = json!(mbps);
        v["speed_factor"] = json!(st.speed_factor());
        v["io"] = serde_json::to_value(io)?;
        print_json(&v)?;
    } else {
        outln!(
            "restored snapshot {} to {}: {} files ({} hard links), {} dirs, {} symlinks, {} special, {} in {:.2} s ({:.1} MB/s){}",
            id.short(),
            args.target.display(),
            st.files + st.hard_links,
            st.hard_links,
            st.dirs,
            st.symlinks,
            st.special_files,
            mb(st.bytes_written),
            secs,
            mbps,
            if st.errors.is_empty() {
                String::new()
            } else {
                format!("; {} could not be restored", st.errors.len())
            }
        );
        let c = &st.restore_cache;
        let through = match cache {
            RestoreCacheChoice::Lru { containers } => {
                format!("an LRU of {containers} containers")
            }
            RestoreCacheChoice::Forward { area_bytes } => {
                format!("forward assembly, {} areas of {}", c.areas, mb(area_bytes))
            }
        };
        outln!(
            "restore speed factor: {} MB per container read ({} containers read through {through}, {} regions)",
            st.speed_factor().map_or("–".into(), |f| format!("{f:.2}")),
            c.containers_read,
            c.regions_read
        );
        outln!("{}", io_line(&io));
    }
    Ok(if st.errors.is_empty() {
        0
    } else {
        EXIT_PARTIAL
    })
}
