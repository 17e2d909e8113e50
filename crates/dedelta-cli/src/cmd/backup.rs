//! `dedelta backup`: stores files and directories (or standard input) as a new snapshot,
//! under the repository lock, with a progress bar sized by a quick walk of the sources.
//!
//! Exit codes: 0 saved; 3 saved, but some sources could not be read (each named in a
//! warning); 1 nothing saved; 10 no repository; 11 locked.

use super::{finish, host, now_rfc3339, progress_bar, DeltaArgs, IoModelArgs, RepoArg};
use crate::{render, EXIT_PARTIAL};
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::backup;
use dedelta_store::Error;
use std::path::{Path, PathBuf};

/// Arguments of `dedelta backup`.
#[derive(Args)]
pub struct BackupArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Files and directories to back up.
    paths: Vec<PathBuf>,
    /// Skip paths whose full path or name matches this glob (repeatable).
    #[arg(long)]
    exclude: Vec<String>,
    /// Tag the snapshot (repeatable).
    #[arg(long)]
    tag: Vec<String>,
    /// Back up standard input as one file.
    #[arg(long)]
    stdin: bool,
    /// File name for --stdin.
    #[arg(long, default_value = "stdin")]
    stdin_name: String,
    /// Worker threads (default: number of cores).
    #[arg(long)]
    threads: Option<usize>,
    #[command(flatten)]
    delta: DeltaArgs,
    /// Capping (rewriting for restore speed): reference at most this many old containers per
    /// segment of the stream, storing the other duplicates again (0: off, unless a `-cap`
    /// `--preset` sets it). A prune reclaims the copies they replace.
    #[arg(long, default_value_t = 0)]
    capping_level: usize,
    /// Capping's segment, in MiB of file data.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    capping_segment_mib: u64,
    /// Cache-aware filter (LoopDelta §4.4): store again a duplicate of an old delta whose
    /// base is not in the fingerprint cache, so that restore reads no extra container for it.
    /// Needs --fingerprint-index locality.
    #[arg(long)]
    cache_aware_filter: bool,
    /// Inversed delta compression (LoopDelta §4.5): a new chunk similar to a chunk in a
    /// container Capping gave up is stored in full, and the old chunk again as a delta
    /// against it; a prune reclaims the old full copy. Needs --capping-level and a
    /// repository of format version 4.
    #[arg(long)]
    inversed_delta: bool,
    /// Keep no local base cache (every base is read back from the repository).
    #[arg(long)]
    no_cache: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    io_models: IoModelArgs,
    #[command(flatten)]
    lookup: LookupArgs,
    /// Compare files with this snapshot (an id prefix or `latest`) instead of the newest
    /// snapshot of the same host and paths.
    #[arg(long, value_name = "SNAPSHOT")]
    parent: Option<String>,
    /// Read every file, even those unchanged since the parent snapshot.
    #[arg(long)]
    force: bool,
    /// A file whose inode changed but nothing else is unchanged (network and FUSE mounts).
    #[arg(long)]
    ignore_inode: bool,
    /// A file whose status change time (ctime) changed but nothing else is unchanged.
    #[arg(long)]
    ignore_ctime: bool,
    /// Do not cross into other file systems below a source (mount points are kept, empty).
    #[arg(long, short = 'x')]
    one_file_system: bool,
}

/// How a backup finds duplicates of chunks stored before (shared with `eval`).
#[derive(Args, Clone, Debug)]
pub struct LookupArgs {
    /// `exact`: look every chunk up in the on-disk index; `locality`: a cache of whole
    /// containers' metadata and a Bloom filter over every fingerprint first, the on-disk
    /// index only when both miss (one lookup per container of old data, not per chunk).
    #[arg(long, value_name = "KIND", default_value = "exact")]
    pub fingerprint_index: String,
    /// Containers of metadata the locality cache holds (LRU).
    #[arg(long, value_name = "N", default_value_t = backup::DEFAULT_CACHE_CONTAINERS)]
    pub fingerprint_cache_containers: usize,
}

impl LookupArgs {
    /// The validated options.
    pub fn options(&self) -> Result<backup::FingerprintIndexOptions> {
        let kind =
            backup::FingerprintIndexKind::parse(&self.fingerprint_index).ok_or_else(|| {
                Error::InvalidOption(format!(
                    "--fingerprint-index {}: expected exact or locality",
                    self.fingerprint_index
                ))
            })?;
        if self.fingerprint_cache_containers == 0 {
            return Err(Error::InvalidOption(
                "--fingerprint-cache-containers must be at least 1".into(),
            )
            .into());
        }
        Ok(backup::FingerprintIndexOptions {
            kind,
            cache_containers: self.fingerprint_cache_containers,
        })
    }
}

/// Runs the backup pipeline with the repository's delta settings overridden by the
/// arguments, then prints the summary.
pub fn run(args: BackupArgs) -> Result<u8> {
    // Bad model flags are refused before anything is locked or read, not after the backup.
    args.io_models.models()?;
    // Lock first, then the index: every writer takes them in this order.
    let lookup = args.lookup.options()?;
    let (r, lock) = super::open_shared(&args.repo, "backup")?;
    let mut delta_cfg = r.config().default_delta();
    args.delta.apply(&mut delta_cfg)?;
    let progress = progress_bar(args.json);
    let stdin_src = args.stdin.then(|| backup::StdinSource {
        reader: Box::new(std::io::stdin()),
        name: args.stdin_name,
        mtime_secs: chrono::Utc::now().timestamp(),
    });
    if stdin_src.is_some() && !args.paths.is_empty() {
        return Err(Error::InvalidOption("--stdin takes no paths".into()).into());
    }
    // The total only sizes the bar: no walk of the sources when there is none to show.
    let bar_shown = !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let total: u64 = if args.stdin || !bar_shown {
        0
    } else {
        args.paths.iter().map(|p| du(p)).sum()
    };
    dedelta_store::progress::Progress::set_total(&progress, total);
    let preset = args.delta.preset()?;
    let opts = backup::BackupOptions {
        paths: args.paths,
        excludes: args.exclude,
        tags: args.tag,
        stdin: stdin_src,
        host: host(),
        time: now_rfc3339(),
        delta: Some(delta_cfg),
        cache_dir: if args.no_cache {
            None
        } else {
            Some(args.repo.cache_root())
        },
        lookup,
        rewriting: capping(
            match (args.capping_level, preset.as_ref().and_then(|p| p.capping)) {
                (0, Some(preset)) => preset.level,
                (level, _) => level,
            },
            args.capping_segment_mib,
        ),
        sources: backup::SourceOptions {
            parent: args.parent,
            force: args.force,
            ignore_inode: args.ignore_inode,
            ignore_ctime: args.ignore_ctime,
            one_file_system: args.one_file_system,
        },
        // The flags add to what the preset turns on.
        loopdelta: backup::caf::LoopDeltaOptions {
            cache_aware_filter: args.cache_aware_filter
                || preset
                    .as_ref()
                    .is_some_and(|p| p.loopdelta.cache_aware_filter),
            inversed_delta: args.inversed_delta
                || preset.as_ref().is_some_and(|p| p.loopdelta.inversed_delta),
        },
    };
    let workers = backup::Workers::new(args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    }))?;
    let res = backup::backup(&r, &lock, opts, &workers, &progress)?;
    progress.finish();
    finish(&r, lock)?;
    let io = args.io_models.report(&r)?;
    render::backup(&res, &io, args.json)?;
    Ok(if res.warnings.is_empty() {
        0
    } else {
        EXIT_PARTIAL
    })
}

/// The rewriting strategy `--capping-level` and `--capping-segment-mib` ask for.
fn capping(level: usize, segment_mib: u64) -> Option<Box<dyn backup::rewrite::Rewriting>> {
    (level > 0).then(|| {
        Box::new(backup::rewrite::Capping {
            segment_bytes: segment_mib << 20,
            level,
        }) as Box<dyn backup::rewrite::Rewriting>
    })
}

/// Total size of the regular files under `p`, without following symlinks (only for the
/// progress bar, so an entry that cannot be read counts as 0).
fn du(p: &Path) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if md.is_file() {
        return md.len();
    }
    if !md.is_dir() {
        return 0;
    }
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| du(&e.path())).sum())
        .unwrap_or(0)
}
