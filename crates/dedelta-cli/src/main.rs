//! The `dedelta` command: parses arguments, calls dedelta-store, renders results.
//!
//! Exit codes: 0 ok; 1 fatal; 3 backup completed but some sources were unreadable, or
//! restore completed but some files could not be restored; 10 repository does not exist;
//! 11 repository locked.

mod bench;
mod bench_delta;
mod eval_cmd;
mod progress;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use dedelta_core::chunker::{ChunkerKind, ChunkerParams};
use dedelta_core::compress::Compression;
use dedelta_core::delta::DeltaKind;
use dedelta_core::sketch::SketchKind;
use dedelta_store::commands::{
    backup, check, forget, ls, prune, repair, repair_packs, repair_snapshots, restore, stats,
};
use dedelta_store::format::config::{DeltaConfig, RepoConfig, SketchIndexKind};
use dedelta_store::format::snapshot::ratio;
use dedelta_store::repository::lock::LockInfo;
use dedelta_store::{Error, IndexedRepository, Repository};
use serde_json::json;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Writes a line to standard output. Unlike `println!` it returns an error instead of
/// panicking when the reader has gone (`dedelta snapshots | head`); `main` then exits quietly,
/// as other Unix tools do.
macro_rules! outln {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*)?
    };
}

/// Exit code: the backup finished but some sources could not be read, or the restore
/// finished but some files could not be restored.
const EXIT_PARTIAL: u8 = 3;
/// Exit code: no repository at the given path.
const EXIT_NO_REPO: u8 = 10;
/// Exit code: the repository is locked by another process.
const EXIT_LOCKED: u8 = 11;

/// A backup store with deduplication, resemblance detection and delta compression.
#[derive(Parser)]
#[command(name = "dedelta", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct RepoArg {
    /// Repository path.
    #[arg(short = 'r', long = "repo", env = "DEDELTA_REPO")]
    repo: PathBuf,
}

/// Resemblance detection and delta compression options (for `init`: the repository
/// defaults; for `backup`: overrides for this backup).
#[derive(Args, Clone, Default)]
struct DeltaArgs {
    /// Sketch method: none, ntransform, finesse or odess.
    #[arg(long)]
    sketch: Option<String>,
    /// Super-features per chunk (M).
    #[arg(long = "sf")]
    sf: Option<usize>,
    /// Features per super-feature (K).
    #[arg(long)]
    features_per_sf: Option<usize>,
    /// Delta codec: ddelta, edelta or xdelta.
    #[arg(long)]
    delta: Option<String>,
    /// Sketch index: full or stream.
    #[arg(long)]
    sketch_index: Option<String>,
    /// Duplicate-adjacency detection (DARE): on or off.
    #[arg(long)]
    dupadj: Option<String>,
    /// Base cache size in MiB.
    #[arg(long)]
    base_cache_mib: Option<usize>,
    /// Minimum saving for a delta to be kept, in percent of the chunk's compressed size.
    #[arg(long)]
    min_saving_percent: Option<f64>,
}

impl DeltaArgs {
    /// Applies the given options to `cfg`.
    fn apply(&self, cfg: &mut DeltaConfig) -> Result<()> {
        let bad = |what: &str, v: &str| Error::InvalidOption(format!("unknown {what} {v:?}"));
        if let Some(s) = &self.sketch {
            cfg.sketch = match s.as_str() {
                "none" => None,
                other => {
                    Some(SketchKind::from_name(other).ok_or_else(|| bad("sketch method", other))?)
                }
            };
        }
        if let Some(m) = self.sf {
            cfg.sketch_params.sf_count = m;
        }
        if let Some(k) = self.features_per_sf {
            cfg.sketch_params.features_per_sf = k;
        }
        if let Some(d) = &self.delta {
            cfg.codec = DeltaKind::from_name(d).ok_or_else(|| bad("delta codec", d))?;
        }
        if let Some(i) = &self.sketch_index {
            cfg.sketch_index =
                SketchIndexKind::from_name(i).ok_or_else(|| bad("sketch index", i))?;
        }
        if let Some(d) = &self.dupadj {
            cfg.dupadj = match d.as_str() {
                "on" => true,
                "off" => false,
                other => return Err(bad("--dupadj value (on|off)", other).into()),
            };
        }
        if let Some(m) = self.base_cache_mib {
            cfg.base_cache_bytes = m << 20;
        }
        if let Some(p) = self.min_saving_percent {
            cfg.min_saving = p / 100.0;
        }
        cfg.validate()?;
        Ok(())
    }
}

#[derive(Subcommand)]
enum Command {
    /// Create a new repository.
    Init {
        #[command(flatten)]
        repo: RepoArg,
        /// Minimum chunk size in bytes.
        #[arg(long, default_value_t = ChunkerParams::default().min_size)]
        chunk_min: usize,
        /// Average chunk size in bytes (a power of two).
        #[arg(long, default_value_t = ChunkerParams::default().avg_size)]
        chunk_avg: usize,
        /// Maximum chunk size in bytes.
        #[arg(long, default_value_t = ChunkerParams::default().max_size)]
        chunk_max: usize,
        /// Chunking method: fastcdc, gear, rabin or fixed.
        #[arg(long, default_value = "fastcdc")]
        chunker: String,
        /// Local compression: zstd:N (1..=22) or none.
        #[arg(long, default_value = "zstd:3")]
        compression: String,
        /// Raw size of a compression region in bytes.
        #[arg(long, default_value_t = dedelta_store::format::config::DEFAULT_REGION_SIZE)]
        region_size: usize,
        #[command(flatten)]
        delta: DeltaArgs,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Back up files and directories (or standard input) as a new snapshot.
    Backup {
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
        /// Directory of local caches (default: $DEDELTA_CACHE_DIR, else
        /// $XDG_CACHE_HOME/dedelta, else ~/.cache/dedelta).
        #[arg(long, conflicts_with = "no_cache")]
        cache_dir: Option<PathBuf>,
        /// Keep no local base cache (every base is read back from the repository).
        #[arg(long)]
        no_cache: bool,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List snapshots.
    Snapshots {
        #[command(flatten)]
        repo: RepoArg,
        /// Print a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// List the files of a snapshot.
    Ls {
        #[command(flatten)]
        repo: RepoArg,
        /// Snapshot id (a unique prefix) or `latest`.
        snapshot: String,
        /// Print one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Write one file of a snapshot to standard output.
    Dump {
        #[command(flatten)]
        repo: RepoArg,
        /// Snapshot id (a unique prefix) or `latest`.
        snapshot: String,
        /// Path of the file inside the snapshot (any bytes: names need not be UTF-8).
        path: std::ffi::OsString,
    },
    /// Restore a snapshot into a directory.
    Restore {
        #[command(flatten)]
        repo: RepoArg,
        /// Snapshot id (a unique prefix) or `latest`.
        snapshot: String,
        /// Directory to restore into.
        #[arg(long, short = 't')]
        target: PathBuf,
        /// Restore only this path and what is below it (repeatable; any bytes).
        #[arg(long)]
        include: Vec<std::ffi::OsString>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Verify the repository.
    Check {
        #[command(flatten)]
        repo: RepoArg,
        /// Also read and verify every stored chunk.
        #[arg(long)]
        read_data: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show repository statistics.
    Stats {
        #[command(flatten)]
        repo: RepoArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Repair the index, damaged containers or damaged snapshots.
    Repair {
        #[command(subcommand)]
        what: RepairWhat,
    },
    /// Remove snapshots by id or by a retention policy.
    Forget {
        #[command(flatten)]
        repo: RepoArg,
        /// Snapshots to remove (unique id prefixes).
        snapshots: Vec<String>,
        /// Keep the N newest snapshots.
        #[arg(long, default_value_t = 0)]
        keep_last: usize,
        /// Keep the newest snapshot of each of the N most recent hours.
        #[arg(long, default_value_t = 0)]
        keep_hourly: usize,
        /// ... days.
        #[arg(long, default_value_t = 0)]
        keep_daily: usize,
        /// ... weeks.
        #[arg(long, default_value_t = 0)]
        keep_weekly: usize,
        /// ... months.
        #[arg(long, default_value_t = 0)]
        keep_monthly: usize,
        /// ... years.
        #[arg(long, default_value_t = 0)]
        keep_yearly: usize,
        /// Keep snapshots with this tag (repeatable).
        #[arg(long)]
        keep_tag: Vec<String>,
        /// Keep snapshots within this duration of the newest (e.g. 1y2m3d4h).
        #[arg(long)]
        keep_within: Option<String>,
        /// Only show what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Run prune afterwards.
        #[arg(long)]
        prune: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Free the space of data no snapshot needs.
    Prune {
        #[command(flatten)]
        repo: RepoArg,
        /// Rewrite containers with more than this percentage of unused bytes.
        #[arg(long, default_value_t = 10.0)]
        max_unused: f64,
        /// Only show the plan.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure the algorithms (single thread) on your files.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// Evaluate: store a versioned dataset with every configuration and the peers, and
    /// write report.md, results.csv and plots.
    Eval(eval_cmd::EvalArgs),
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Chunker throughput (rabin, gear, fastcdc, fixed).
    Chunk {
        /// Input files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print `{"results": [...]}`.
        #[arg(long)]
        json: bool,
    },
    /// Super-feature throughput (ntransform, ntransform-2f, finesse, odess).
    Sketch {
        /// Input files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print `{"results": [...]}`.
        #[arg(long)]
        json: bool,
    },
    /// Delta codecs (xdelta, ddelta, edelta) on the similar chunks of two versions.
    Delta {
        /// The older version.
        old: PathBuf,
        /// The newer version.
        new: PathBuf,
        /// Print `{"results": [...]}`.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RepairWhat {
    /// Rebuild the chunk index from container metadata (leaving out copies `check` recorded
    /// as damaged).
    Index {
        #[command(flatten)]
        repo: RepoArg,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Salvage the readable chunks of damaged containers and remove the containers.
    Packs {
        #[command(flatten)]
        repo: RepoArg,
        /// Containers to repair (ids or unique prefixes); default: those `check` recorded as
        /// damaged.
        containers: Vec<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite snapshots that need lost chunks, keeping what is readable (marks the damaged
    /// files; tags the new snapshots `repaired`).
    Snapshots {
        #[command(flatten)]
        repo: RepoArg,
        /// Remove the original snapshots, and snapshot files that are damaged.
        #[arg(long)]
        forget: bool,
        /// Only show what would be done.
        #[arg(long)]
        dry_run: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Where local caches live unless `--cache-dir` says otherwise; `None` without a home.
fn default_cache_dir() -> Option<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("DEDELTA_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("dedelta")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("dedelta")))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("error: {msg}");
            let code = match e.downcast_ref::<Error>() {
                Some(Error::RepoNotFound(_)) => EXIT_NO_REPO,
                Some(Error::Locked { .. }) => EXIT_LOCKED,
                _ => 1,
            };
            ExitCode::from(code)
        }
    }
}

/// Whether `e` comes from writing to a closed standard output.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        let io = c
            .downcast_ref::<std::io::Error>()
            .or_else(|| match c.downcast_ref::<Error>() {
                Some(Error::Io { cause, .. }) => Some(cause),
                _ => None,
            });
        io.is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn host() -> String {
    hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

fn lock_info(command: &str) -> LockInfo {
    LockInfo {
        pid: std::process::id(),
        host: host(),
        time: now_rfc3339(),
        command: command.into(),
    }
}

/// 16 random bytes as hex, from the OS.
fn random_id() -> Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Opens the repository and its index, printing on stderr what the user should know (an index
/// that had to be rebuilt).
fn open(repo: &RepoArg) -> Result<IndexedRepository> {
    with_index(Repository::open_local(&repo.repo)?)
}

/// Opens the index of an open repository (after the lock, for commands that take it).
fn with_index(r: Repository) -> Result<IndexedRepository> {
    let r = r.open_index()?;
    print_notices(&r.take_notices());
    Ok(r)
}

fn print_notices(notices: &[String]) {
    for n in notices {
        eprintln!("note: {n}");
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Init {
            repo,
            chunk_min,
            chunk_avg,
            chunk_max,
            chunker,
            compression,
            region_size,
            delta,
            json,
        } => {
            let mut cfg = RepoConfig::new(random_id()?);
            cfg.chunker.kind = ChunkerKind::from_name(&chunker)
                .ok_or_else(|| Error::InvalidOption(format!("unknown chunker {chunker:?}")))?;
            cfg.chunker.params = ChunkerParams {
                min_size: chunk_min,
                avg_size: chunk_avg,
                max_size: chunk_max,
            };
            cfg.compression = Compression::parse(&compression).ok_or_else(|| {
                Error::InvalidOption(format!(
                    "compression must be zstd:N (1..=22) or none, not {compression:?}"
                ))
            })?;
            cfg.region_size = region_size;
            delta.apply(&mut cfg.delta)?;
            let r = Repository::init_local(&repo.repo, cfg)?;
            if json {
                outln!(
                    "{}",
                    serde_json::to_string(&json!({"repository": repo.repo, "config": r.config()}))?
                );
            } else {
                outln!(
                    "created dedelta repository {} at {}",
                    r.config().id,
                    repo.repo.display()
                );
            }
            Ok(0)
        }
        Command::Backup {
            repo,
            paths,
            exclude,
            tag,
            stdin,
            stdin_name,
            threads,
            delta,
            cache_dir,
            no_cache,
            json,
        } => {
            let r = open(&repo)?;
            let mut delta_cfg = r.config().delta.clone();
            delta.apply(&mut delta_cfg)?;
            let lock = r.lock(&lock_info("backup"))?;
            let progress = progress::Bar::new(std::io::stderr().is_terminal() && !json);
            let stdin_src = stdin.then(|| backup::StdinSource {
                reader: Box::new(std::io::stdin()),
                name: stdin_name,
                mtime_secs: chrono::Utc::now().timestamp(),
            });
            if stdin_src.is_some() && !paths.is_empty() {
                return Err(Error::InvalidOption("--stdin takes no paths".into()).into());
            }
            let total: u64 = if stdin {
                0
            } else {
                paths.iter().map(|p| du(p)).sum()
            };
            dedelta_store::progress::Progress::set_total(&progress, total);
            let opts = backup::BackupOptions {
                paths,
                excludes: exclude,
                tags: tag,
                stdin: stdin_src,
                host: host(),
                time: now_rfc3339(),
                threads: threads.unwrap_or_else(|| {
                    std::thread::available_parallelism()
                        .map(|n| n.get())
                        .unwrap_or(2)
                }),
                delta: Some(delta_cfg),
                cache_dir: if no_cache {
                    None
                } else {
                    cache_dir.or_else(default_cache_dir)
                },
            };
            let res = backup::backup(&r, &lock, opts, &progress)?;
            progress.finish();
            lock.release()?;
            let s = &res.summary;
            let mbps = s.bytes_read as f64 / 1e6 / s.seconds.max(1e-9);
            if json {
                let mut v = serde_json::to_value(s)?;
                v["snapshot_id"] = json!(res.snapshot_id.to_hex());
                v["dedup_factor"] = json!(s.dedup_factor());
                v["dcr"] = json!(s.dcr());
                v["dce"] = json!(s.dce());
                v["mb_per_s"] = json!(mbps);
                v["warning_messages"] = json!(res.warnings);
                v["notices"] = json!(res.notices);
                outln!("{}", serde_json::to_string(&v)?);
            } else {
                for w in &res.warnings {
                    eprintln!("warning: {w}");
                }
                for n in &res.notices {
                    eprintln!("note: {n}");
                }
                outln!("snapshot {} saved", res.snapshot_id.short());
                outln!(
                    "files: {}, dirs: {}, symlinks: {}",
                    s.files,
                    s.dirs,
                    s.symlinks
                );
                outln!(
                    "read {}, new {} ({} chunks of {}), added {} to the repository",
                    mb(s.bytes_read),
                    mb(s.bytes_new),
                    s.new_chunks,
                    s.chunks,
                    mb(s.bytes_added)
                );
                if s.delta_chunks > 0 {
                    outln!(
                        "delta: {} chunks as deltas ({} by DupAdj, {} by sketch), {} after delta, DCR {:.2}, DCE {:.2}",
                        s.delta_chunks,
                        s.dupadj_deltas,
                        s.sketch_deltas,
                        mb(s.bytes_after_delta),
                        s.dcr(),
                        s.dce()
                    );
                }
                if s.base_cache_hits + s.base_cache_local_hits + s.base_cache_misses > 0 {
                    outln!(
                        "bases: {} from memory, {} from the local cache, {} read back",
                        s.base_cache_hits,
                        s.base_cache_local_hits,
                        s.base_cache_misses
                    );
                }
                outln!(
                    "dedup factor {:.2}, total factor {:.2}, {:.2} s, {:.1} MB/s",
                    s.dedup_factor(),
                    ratio(s.bytes_read, s.bytes_added),
                    s.seconds,
                    mbps
                );
            }
            Ok(if res.warnings.is_empty() {
                0
            } else {
                EXIT_PARTIAL
            })
        }
        Command::Snapshots { repo, json } => {
            let r = Repository::open_local(&repo.repo)?;
            let listed = r.snapshots()?;
            for w in listed.warnings() {
                eprintln!("warning: {w}");
            }
            let all = listed.snapshots;
            if json {
                let arr: Vec<_> = all
                    .iter()
                    .map(|(id, s)| {
                        json!({
                            "id": id.to_hex(),
                            "short_id": id.short(),
                            "time": s.time,
                            "host": s.host,
                            "paths": s.paths,
                            "tags": s.tags,
                            "summary": s.summary,
                        })
                    })
                    .collect();
                outln!("{}", serde_json::to_string(&arr)?);
            } else {
                outln!(
                    "{:<10} {:<28} {:<16} {:<12} paths",
                    "id",
                    "time",
                    "host",
                    "size"
                );
                for (id, s) in &all {
                    outln!(
                        "{:<10} {:<28} {:<16} {:<12} {}{}",
                        id.short(),
                        s.time,
                        s.host,
                        mb(s.summary.bytes_read),
                        s.paths.join(", "),
                        if s.tags.is_empty() {
                            String::new()
                        } else {
                            format!(" [{}]", s.tags.join(","))
                        }
                    );
                }
                outln!("{} snapshots", all.len());
            }
            Ok(0)
        }
        Command::Ls {
            repo,
            snapshot,
            json,
        } => {
            let r = open(&repo)?;
            let (_, snap) = r.find_snapshot(&snapshot)?;
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            ls::walk_tree(&r, &snap, |n, _| {
                let line = if json {
                    json!({
                        "path": format!("/{}", n.path_lossy()),
                        "type": n.kind,
                        "mode": n.mode,
                        "size": n.size,
                        "mtime": n.mtime_secs,
                        "target": if n.target.is_empty() { None } else { Some(String::from_utf8_lossy(&n.target)) },
                    })
                    .to_string()
                } else {
                    let t = match n.kind {
                        dedelta_store::format::tree::NodeKind::Dir => 'd',
                        dedelta_store::format::tree::NodeKind::File => '-',
                        dedelta_store::format::tree::NodeKind::Symlink => 'l',
                    };
                    let mut l = format!(
                        "{t}{:04o} {:>12} /{}",
                        n.mode & 0o7777,
                        n.size,
                        n.path_lossy()
                    );
                    if !n.target.is_empty() {
                        l.push_str(&format!(" -> {}", String::from_utf8_lossy(&n.target)));
                    }
                    l
                };
                writeln!(out, "{line}").map_err(|e| Error::io("writing to standard output", e))
            })?;
            out.flush()?;
            Ok(0)
        }
        Command::Dump {
            repo,
            snapshot,
            path,
        } => {
            use std::os::unix::ffi::OsStrExt;
            let r = open(&repo)?;
            let (id, snap) = r.find_snapshot(&snapshot)?;
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            ls::dump(&r, &id, &snap, path.as_bytes(), &mut out)?;
            Ok(0)
        }
        Command::Restore {
            repo,
            snapshot,
            target,
            include,
            json,
        } => {
            let r = open(&repo)?;
            let (id, snap) = r.find_snapshot(&snapshot)?;
            let progress = progress::Bar::new(std::io::stderr().is_terminal() && !json);
            let started = std::time::Instant::now();
            let opts = restore::RestoreOptions {
                target: target.clone(),
                include: include
                    .iter()
                    .map(|p| std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()).to_vec())
                    .collect(),
                cache_bytes: 256 << 20,
            };
            let st = restore::restore(&r, &snap, &opts, &progress)?;
            progress.finish();
            let secs = started.elapsed().as_secs_f64();
            let mbps = st.bytes_written as f64 / 1e6 / secs.max(1e-9);
            // Each file that could not be restored, then the summary: the last line says
            // what happened as a whole.
            for e in &st.errors {
                eprintln!("error: {}: {}", e.path_lossy(), e.message);
            }
            if json {
                let mut v = serde_json::to_value(&st)?;
                v["snapshot_id"] = json!(id.to_hex());
                v["seconds"] = json!(secs);
                v["mb_per_s"] = json!(mbps);
                outln!("{}", serde_json::to_string(&v)?);
            } else {
                outln!(
                    "restored snapshot {} to {}: {} files, {} dirs, {} symlinks, {} in {:.2} s ({:.1} MB/s){}",
                    id.short(),
                    target.display(),
                    st.files,
                    st.dirs,
                    st.symlinks,
                    mb(st.bytes_written),
                    secs,
                    mbps,
                    if st.errors.is_empty() {
                        String::new()
                    } else {
                        format!("; {} could not be restored", st.errors.len())
                    }
                );
            }
            Ok(if st.errors.is_empty() {
                0
            } else {
                EXIT_PARTIAL
            })
        }
        Command::Check {
            repo,
            read_data,
            json,
        } => {
            let r = Repository::open_local(&repo.repo)?;
            let lock = r.lock(&lock_info("check"))?;
            let r = with_index(r)?;
            let progress = progress::Bar::new(std::io::stderr().is_terminal() && !json);
            let report = check::check(&r, &lock, read_data, &now_rfc3339(), &progress)?;
            progress.finish();
            lock.release()?;
            print_notices(&report.notices);
            if json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                for p in &report.problems {
                    let mut where_ = String::new();
                    if let Some(s) = &p.snapshot {
                        where_.push_str(&format!("snapshot {s}: "));
                    }
                    if let Some(f) = &p.path {
                        where_.push_str(&format!("file /{f}: "));
                    }
                    outln!("error: {where_}{}", p.message);
                }
                outln!(
                    "checked {} snapshots, {} containers, {} references{}: {}",
                    report.snapshots,
                    report.containers,
                    report.references,
                    if read_data {
                        format!(", {} chunks read", report.chunks_read)
                    } else {
                        String::new()
                    },
                    if report.problems.is_empty() {
                        "no errors".to_string()
                    } else {
                        format!("{} errors", report.problems.len())
                    }
                );
            }
            Ok(if report.problems.is_empty() { 0 } else { 1 })
        }
        Command::Stats { repo, json } => {
            let r = open(&repo)?;
            let s = stats::stats(&r)?;
            for w in &s.warnings {
                eprintln!("warning: {w}");
            }
            if json {
                outln!("{}", serde_json::to_string(&s)?);
            } else {
                outln!("snapshots:          {}", s.snapshots);
                outln!(
                    "logical bytes:      {} ({})",
                    s.logical_bytes,
                    mb(s.logical_bytes)
                );
                outln!(
                    "unique bytes:       {} ({})",
                    s.unique_bytes,
                    mb(s.unique_bytes)
                );
                outln!(
                    "after delta:        {} ({})",
                    s.after_delta_bytes,
                    mb(s.after_delta_bytes)
                );
                outln!(
                    "stored bytes:       {} ({})",
                    s.stored_bytes,
                    mb(s.stored_bytes)
                );
                outln!(
                    "chunks:             {} ({} full, {} delta)",
                    s.chunks,
                    s.full_chunks,
                    s.delta_chunks
                );
                outln!("containers:         {}", s.containers);
                outln!("dedup factor:       {:.2}", s.dedup_factor);
                outln!("delta factor (DCR): {:.2}", s.delta_factor);
                outln!("DCE:                {:.2}", s.dce);
                outln!("compression factor: {:.2}", s.compression_factor);
                outln!("total factor:       {:.2}", s.total_factor);
            }
            Ok(0)
        }
        Command::Forget {
            repo,
            snapshots,
            keep_last,
            keep_hourly,
            keep_daily,
            keep_weekly,
            keep_monthly,
            keep_yearly,
            keep_tag,
            keep_within,
            dry_run,
            prune: then_prune,
            json,
        } => {
            let policy = forget::KeepPolicy {
                last: keep_last,
                hourly: keep_hourly,
                daily: keep_daily,
                weekly: keep_weekly,
                monthly: keep_monthly,
                yearly: keep_yearly,
                tags: keep_tag,
                within_secs: keep_within
                    .as_deref()
                    .map(forget::parse_duration)
                    .transpose()?,
            };
            if policy.is_empty() && snapshots.is_empty() {
                return Err(Error::InvalidOption(
                    "nothing to forget: name snapshots or give a --keep-* policy".into(),
                )
                .into());
            }
            let r = Repository::open_local(&repo.repo)?;
            let lock = r.lock(&lock_info("forget"))?;
            let decisions = forget::forget(&r, &lock, &snapshots, &policy, dry_run)?;
            let removed = decisions.iter().filter(|d| !d.keep).count();
            if json {
                outln!(
                    "{}",
                    serde_json::to_string(&json!({"dry_run": dry_run, "snapshots": decisions}))?
                );
            } else {
                for d in &decisions {
                    outln!(
                        "{} {} {} {}",
                        if d.keep {
                            "keep  "
                        } else if dry_run {
                            "would remove"
                        } else {
                            "remove"
                        },
                        d.id.get(..8).unwrap_or(&d.id),
                        d.time,
                        d.reasons.join(",")
                    );
                }
                outln!(
                    "{removed} snapshots {}",
                    if dry_run {
                        "would be removed"
                    } else {
                        "removed"
                    }
                );
            }
            if then_prune && !dry_run {
                let r = with_index(r)?;
                let progress = progress::Bar::new(std::io::stderr().is_terminal() && !json);
                let st = prune::prune(&r, &lock, &prune::PruneOptions::default(), &progress)?;
                progress.finish();
                print_prune(&st, json)?;
            }
            lock.release()?;
            Ok(0)
        }
        Command::Prune {
            repo,
            max_unused,
            dry_run,
            json,
        } => {
            let r = Repository::open_local(&repo.repo)?;
            let lock = r.lock(&lock_info("prune"))?;
            let r = with_index(r)?;
            let progress = progress::Bar::new(std::io::stderr().is_terminal() && !json);
            let opts = prune::PruneOptions {
                max_unused: max_unused / 100.0,
                dry_run,
            };
            let st = prune::prune(&r, &lock, &opts, &progress)?;
            progress.finish();
            lock.release()?;
            print_prune(&st, json)?;
            Ok(0)
        }
        Command::Eval(args) => eval_cmd::run(args, host(), now_rfc3339()),
        Command::Bench { what } => {
            match what {
                BenchWhat::Chunk { files, json } => bench::bench_chunk(&files, json)?,
                BenchWhat::Sketch { files, json } => bench::bench_sketch(&files, json)?,
                BenchWhat::Delta { old, new, json } => bench_delta::bench_delta(&old, &new, json)?,
            }
            Ok(0)
        }
        Command::Repair { what } => repair_cmd(what),
    }
}

fn repair_cmd(what: RepairWhat) -> Result<u8> {
    match what {
        RepairWhat::Index { repo, json } => {
            let r = Repository::open_local(&repo.repo)?;
            let lock = r.lock(&lock_info("repair index"))?;
            let r = with_index(r)?;
            let st = repair::rebuild_index(&r, &mut |w| eprintln!("warning: {w}"))?;
            lock.release()?;
            if json {
                outln!("{}", serde_json::to_string(&st)?);
            } else {
                outln!(
                    "index rebuilt: {} chunks in {} containers ({} damaged copies left out)",
                    st.chunks,
                    st.containers,
                    st.damaged_skipped
                );
            }
            Ok(if st.problems.is_empty() { 0 } else { 1 })
        }
        RepairWhat::Packs {
            repo,
            containers,
            json,
        } => {
            let r = Repository::open_local(&repo.repo)?;
            let lock = r.lock(&lock_info("repair packs"))?;
            let r = with_index(r)?;
            let progress = progress::Bar::new(std::io::stderr().is_terminal() && !json);
            let st = repair_packs::repair_packs(&r, &lock, &containers, &now_rfc3339(), &progress)?;
            progress.finish();
            lock.release()?;
            if json {
                outln!("{}", serde_json::to_string(&st)?);
            } else {
                for c in &st.containers {
                    outln!("repaired container {c}");
                }
                for c in &st.chunks_lost {
                    outln!("lost chunk {c}");
                }
                outln!(
                    "{} containers repaired: {} chunks salvaged into {} new containers, {} chunks lost, {} deltas lost with their base",
                    st.containers.len(),
                    st.chunks_salvaged,
                    st.containers_written,
                    st.chunks_lost.len(),
                    st.deltas_lost
                );
                if !st.chunks_lost.is_empty() || st.deltas_lost > 0 {
                    outln!("back up the affected files again, or run `dedelta repair snapshots`; `dedelta check` lists them");
                }
            }
            Ok(0)
        }
        RepairWhat::Snapshots {
            repo,
            forget,
            dry_run,
            json,
        } => {
            let r = Repository::open_local(&repo.repo)?;
            let lock = r.lock(&lock_info("repair snapshots"))?;
            let r = with_index(r)?;
            let progress = progress::Bar::new(std::io::stderr().is_terminal() && !json);
            let opts = repair_snapshots::RepairSnapshotsOptions { forget, dry_run };
            let st = repair_snapshots::repair_snapshots(&r, &lock, &opts, &progress)?;
            progress.finish();
            lock.release()?;
            if json {
                outln!("{}", serde_json::to_string(&st)?);
            } else {
                let verb = if dry_run { "would repair" } else { "repaired" };
                for rs in &st.repaired {
                    outln!(
                        "{verb} snapshot {}{}{}",
                        &rs.original[..8],
                        rs.new
                            .as_ref()
                            .map(|n| format!(" as {}", &n[..8]))
                            .unwrap_or_default(),
                        if rs.tree_truncated {
                            " (tree read only in part)"
                        } else {
                            ""
                        }
                    );
                    for f in &rs.damaged_files {
                        outln!("  damaged file /{f}: lost chunks removed");
                    }
                }
                for n in &st.removed_unreadable {
                    outln!(
                        "{} damaged snapshot file {n}",
                        if dry_run { "would remove" } else { "removed" }
                    );
                }
                for n in &st.left_unreadable {
                    outln!("left alone: {n}");
                }
                outln!(
                    "{} snapshots {verb}, {} intact{}",
                    st.repaired.len(),
                    st.intact,
                    if forget || st.repaired.is_empty() {
                        String::new()
                    } else {
                        "; originals kept (remove them with --forget)".into()
                    }
                );
            }
            Ok(0)
        }
    }
}

fn print_prune(st: &prune::PruneStats, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string(st)?);
        return Ok(());
    }
    let p = &st.plan;
    if st.containers_written == 0
        && st.bytes_freed == 0
        && (!p.delete.is_empty() || !p.rewrite.is_empty())
    {
        outln!("dry run: nothing was changed");
        for c in &p.delete {
            outln!("would delete container {c}");
        }
        for c in &p.rewrite {
            outln!("would rewrite container {c}");
        }
    }
    outln!(
        "{} chunks referenced, {} kept as delta bases, {} dead",
        p.referenced_chunks,
        p.bases_kept,
        p.dead_chunks
    );
    outln!(
        "containers: {} deleted, {} rewritten ({} new), {} kept",
        p.delete.len(),
        p.rewrite.len(),
        st.containers_written,
        p.keep
    );
    outln!(
        "{} {} in {:.2} s",
        if st.seconds > 0.0
            && st.containers_written == 0
            && p.delete.is_empty()
            && p.rewrite.is_empty()
        {
            "nothing to free,"
        } else {
            "freed"
        },
        mb(st.bytes_freed.max(0) as u64),
        st.seconds
    );
    Ok(())
}

/// Total size of regular files under `p` (for the progress bar; errors count as 0).
fn du(p: &Path) -> u64 {
    walkdir_size(p)
}

fn walkdir_size(p: &Path) -> u64 {
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
        .map(|rd| rd.flatten().map(|e| walkdir_size(&e.path())).sum())
        .unwrap_or(0)
}
