//! `dedelta restore`: restores a snapshot (or the paths `--include` names) into a directory.
//! A file that cannot be restored does not stop the others: each is named on stderr, and
//! the summary line, printed last, counts them.
//!
//! Exit codes: 0 everything restored; 3 restored, but some files could not be; 1 the
//! restore stopped (no such snapshot, a target that cannot be used); 10 no repository.

use super::{open_reader_then, progress_stream, IoModelArgs, RepoArg};
use crate::render::{io_line, outln, print_json, size};
use crate::EXIT_PARTIAL;
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::restore;
use dedelta_store::read::{RestoreCacheChoice, DEFAULT_ASSEMBLY_BYTES, PAPER_CACHE_CONTAINERS};
use serde_json::json;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// MiB of decompressed regions a restore's or a dump's LRU holds at most, by default. The
/// LRU's bound starts at 32 MiB and grows to this one only when regions it let go of are read
/// again (`ContainerLru::growing`), so a small file costs no more; a large one whose
/// bases span more than the cache reads (and decrypts and decompresses) the same regions again
/// and again: with 32 MiB a 1.24 GB dump of 20 concatenated SQLAlchemy tars read 258 MB of
/// regions (12x the repository) and took twice the CPU.
pub const RESTORE_CACHE_MIB: usize = 256;

/// Arguments of `dedelta restore`.
#[derive(Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshot id (a unique prefix) or `latest`; `SNAPSHOT:SUBFOLDER` restores what that
    /// directory of the snapshot holds straight into the target (patterns are then relative
    /// to it).
    snapshot: String,
    #[command(flatten)]
    filter: super::select::SnapshotFilterArgs,
    /// Directory to restore into.
    #[arg(long, short = 't')]
    target: PathBuf,
    /// Restore only what this glob matches, and what is below it (repeatable). A pattern
    /// starting with `/` is anchored at the snapshot's root, any other matches at any depth
    /// (`*.txt`). A pattern that matches nothing is an error.
    #[arg(long, short = 'i', value_name = "PATTERN")]
    include: Vec<OsString>,
    /// Do not restore what this glob matches, nor what is below it (repeatable).
    #[arg(long, short = 'e', value_name = "PATTERN")]
    exclude: Vec<OsString>,
    /// As --include, ignoring case.
    #[arg(long, value_name = "PATTERN")]
    iinclude: Vec<OsString>,
    /// As --exclude, ignoring case.
    #[arg(long, value_name = "PATTERN")]
    iexclude: Vec<OsString>,
    /// What to do with files the target already holds: always (replace), if-changed
    /// (replace if size or modification time differ), if-newer, never.
    #[arg(long, value_name = "WHEN", default_value = "always", value_parser = ["always", "if-changed", "if-newer", "never"])]
    overwrite: String,
    /// Remove what the target holds (within --include/--exclude) that the snapshot does not.
    #[arg(long)]
    delete: bool,
    /// Read every restored file back and compare it with the snapshot.
    #[arg(long)]
    verify: bool,
    /// Show what would be restored (with -v, each entry); write nothing.
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Print restic-style JSON lines: `status` while it runs (and `verbose_status` per file
    /// with -v), `error` lines on standard error, then the `summary`.
    #[arg(long)]
    json: bool,
    #[command(flatten, next_help_heading = "Restore cache")]
    cache: CacheArgs,
    #[command(flatten, next_help_heading = "I/O cost model")]
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
    /// MiB of decompressed regions the LRU holds at most (256 by default; it starts at 32
    /// and grows when regions it let go of are read again).
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
    /// The cache chosen, and the LRU's bound in bytes.
    pub fn choice(&self) -> Result<(RestoreCacheChoice, usize)> {
        let containers = self.cache_containers.unwrap_or(PAPER_CACHE_CONTAINERS);
        anyhow::ensure!(containers >= 1, "--cache-containers must be at least 1");
        anyhow::ensure!(self.assembly_mib >= 1, "--assembly-mib must be at least 1");
        let choice = match self.cache {
            CacheKind::Lru => RestoreCacheChoice::Lru { containers },
            CacheKind::Forward => RestoreCacheChoice::Forward {
                area_bytes: self.assembly_mib << 20,
            },
        };
        let mib = self.cache_mib.unwrap_or(RESTORE_CACHE_MIB);
        Ok((choice, mib.saturating_mul(1 << 20)))
    }
}

/// Restores the snapshot and prints what was restored, with the time taken.
pub fn run(args: RestoreArgs) -> Result<u8> {
    args.io_models.models()?;
    // The snapshots are listed beside the index's catch-up, and the snapshot found there.
    let (r, _lock) = open_reader_then(&args.repo, "restore", |r| r.listing_snapshots_at_open())?;
    let (id, snap, subtree) =
        super::select::find_with_subtree(&r, &args.snapshot, &args.filter.filter()?)?;
    let progress = progress_stream(args.json, "restore");
    let (cache, cache_bytes) = args.cache.choice()?;
    let started = std::time::Instant::now();
    let opts = restore::RestoreOptions {
        subtree,
        target: args.target.clone(),
        include: bytes_of(&args.include),
        exclude: bytes_of(&args.exclude),
        iinclude: bytes_of(&args.iinclude),
        iexclude: bytes_of(&args.iexclude),
        overwrite: restore::select::Overwrite::parse(&args.overwrite).unwrap_or_default(),
        dry_run: args.dry_run,
        verify: args.verify,
        delete: args.delete,
        cache_bytes,
        cache,
    };
    let st = restore::restore(&r, &snap, &opts, &progress)?;
    progress.finish();
    let secs = started.elapsed().as_secs_f64();
    let mibps = st.bytes_written as f64 / (1024.0 * 1024.0) / secs.max(1e-9);
    let io = args.io_models.report(&r)?;
    // Each file that could not be restored, then the summary: the last line says
    // what happened as a whole.
    for e in &st.errors {
        if args.json {
            crate::progress::json_error("restore", Some(&e.path_lossy()), &e.message);
        } else {
            eprintln!("error: {}: {}", e.path_lossy(), e.message);
        }
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
        // restic's summary message, under its names, then ours.
        v["message_type"] = json!("summary");
        v["files_restored"] = json!(st.files + st.hard_links);
        v["files_skipped"] = json!(st.files_unchanged);
        v["files_deleted"] = json!(st.deleted);
        v["bytes_restored"] = json!(st.bytes_written);
        v["total_errors"] = json!(st.errors.len());
        v["snapshot_id"] = json!(id.to_hex());
        v["seconds"] = json!(secs);
        v["mb_per_s"] = json!(st.bytes_written as f64 / 1e6 / secs.max(1e-9));
        v["speed_factor"] = json!(st.speed_factor());
        v["io"] = serde_json::to_value(io)?;
        print_json(&v)?;
    } else if st.dry_run {
        outln!(
            "dry run: would restore snapshot {} to {}: {} files ({}), {} dirs, {} symlinks, {} special; {} files left as they are (--overwrite {}); nothing was written",
            id.short(),
            args.target.display(),
            st.files,
            size(st.bytes_written),
            st.dirs,
            st.symlinks,
            st.special_files,
            st.files_unchanged,
            args.overwrite
        );
    } else if !super::global::quiet() {
        outln!(
            "restored snapshot {} to {}: {} files ({} hard links), {} dirs, {} symlinks, {} special, {} in {:.2} s ({:.1} MiB/s){}",
            id.short(),
            args.target.display(),
            st.files + st.hard_links,
            st.hard_links,
            st.dirs,
            st.symlinks,
            st.special_files,
            size(st.bytes_written),
            secs,
            mibps,
            if st.errors.is_empty() {
                String::new()
            } else {
                format!("; {} could not be restored", st.errors.len())
            }
        );
        if st.files_unchanged > 0 {
            outln!(
                "{} files left as they are (--overwrite {})",
                st.files_unchanged,
                args.overwrite
            );
        }
        if args.delete {
            outln!("deleted {} entries not in the snapshot", st.deleted);
        }
        if let Some(n) = st.files_verified {
            outln!("verified {n} files against the snapshot");
        }
        let c = &st.restore_cache;
        let through = match cache {
            RestoreCacheChoice::Lru { containers } => {
                format!("an LRU of {containers} containers")
            }
            RestoreCacheChoice::Forward { area_bytes } => {
                format!(
                    "forward assembly, {} areas of {}",
                    c.areas,
                    size(area_bytes)
                )
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

/// Patterns as the raw bytes the store matches.
fn bytes_of(patterns: &[OsString]) -> Vec<Vec<u8>> {
    patterns.iter().map(|p| p.as_bytes().to_vec()).collect()
}
