//! The `dedelta` command: parses arguments, hands each subcommand to its module in [`cmd`]
//! (which calls dedelta-store and then [`render`]), and turns the outcome into an exit code.
//!
//! The binary stays thin on purpose: what a command does lives in dedelta-store, how its
//! result looks lives in `render`, and this file only wires the two together, so that a
//! change of output never touches the store and a store change never touches the parser.
//!
//! Exit codes: 0 ok; 1 fatal (or `check`/`repair index` found errors); 3 backup completed but
//! some sources were unreadable, or restore completed but some files could not be restored;
//! 10 repository does not exist; 11 repository locked; 12 wrong password. A closed standard output (`dedelta
//! snapshots | head`) exits 0, see [`is_broken_pipe`].

mod alloc_tuning;
mod bench;
mod bench_delta;
mod cmd;
mod eval_cmd;
mod interrupt;
mod password;
mod progress;
mod render;

use clap::{Parser, Subcommand};
use dedelta_store::Error;
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit code: a fatal error, or `check` / `repair index` found problems.
const EXIT_ERROR: u8 = 1;
/// Exit code: the backup finished but some sources could not be read, or the restore
/// finished but some files could not be restored.
const EXIT_PARTIAL: u8 = 3;
/// Exit code: no repository at the given path.
const EXIT_NO_REPO: u8 = 10;
/// Exit code: the repository is locked by another process.
const EXIT_LOCKED: u8 = 11;
/// Exit code: the password opens no key file of the repository (as restic).
const EXIT_WRONG_PASSWORD: u8 = 12;

/// A backup store with deduplication, resemblance detection and delta compression.
#[derive(Parser)]
#[command(name = "dedelta", version, about)]
struct Cli {
    #[command(flatten)]
    global: cmd::global::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands; each but `bench` and `eval` has its arguments and its `run` in
/// `cmd/<name>.rs`.
// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Create a new repository.
    Init(cmd::init::InitArgs),
    /// Back up files and directories (or standard input) as a new snapshot.
    Backup(cmd::backup::BackupArgs),
    /// List snapshots.
    Snapshots(cmd::snapshots::SnapshotsArgs),
    /// List the files of a snapshot.
    Ls(cmd::ls::LsArgs),
    /// Write a file of a snapshot to standard output (a directory as a tar stream).
    Dump(cmd::dump::DumpArgs),
    /// Restore a snapshot into a directory.
    Restore(cmd::restore::RestoreArgs),
    /// Verify the repository.
    Check(cmd::check::CheckArgs),
    /// Show repository statistics.
    Stats(cmd::stats::StatsArgs),
    /// Repair the index, damaged containers or damaged snapshots.
    Repair(cmd::repair::RepairArgs),
    /// Remove snapshots by id or by a retention policy.
    Forget(cmd::forget::ForgetArgs),
    /// Free the space of data no snapshot needs.
    Prune(cmd::prune::PruneArgs),
    /// Remove stale locks (or, with --remove-all, every lock).
    Unlock(cmd::unlock::UnlockArgs),
    /// Manage the passwords (key files) of an encrypted repository.
    Key(cmd::key::KeyArgs),
    /// Add, remove or set the tags of snapshots.
    Tag(cmd::tag::TagArgs),
    /// Remove files from existing snapshots (each is written anew without them).
    Rewrite(cmd::rewrite::RewriteArgs),
    /// Copy snapshots from another repository into this one (each stored by this one's own dedup and delta)
    Copy(cmd::copy::CopyArgs),
    /// Find files by name or path in snapshots.
    Find(cmd::find::FindArgs),
    /// Show the differences between two snapshots.
    Diff(cmd::diff::DiffArgs),
    /// Print a repository object decoded (config, snapshot, tree, container, index, chunk).
    Cat(cmd::cat::CatArgs),
    /// Mount the snapshots read-only over FUSE.
    Mount(cmd::mount::MountArgs),
    /// List the client caches; remove those of repositories gone or unused with --cleanup.
    Cache(cmd::cache::CacheArgs),
    /// Generate shell completions or man pages.
    Generate(cmd::generate::GenerateArgs),
    /// Measure the algorithms (single thread) on your files.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// Evaluate: store a versioned dataset with every configuration and the peers, and
    /// write report.md, results.csv and plots.
    Eval(eval_cmd::EvalArgs),
}

/// The `bench` subcommands (implemented in `bench.rs` and `bench_delta.rs`).
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
    /// Delta codecs (xdelta, ddelta, edelta, zstd) on the similar chunks of two versions.
    Delta {
        /// The older version.
        old: PathBuf,
        /// The newer version.
        new: PathBuf,
        /// Print `{"results": [...]}`.
        #[arg(long)]
        json: bool,
        /// Also write the chunk pairs to FILE (per pair: u32 LE base length, base, u32 LE
        /// target length, target), for outside codecs (scripts/xdelta3-chunks.py).
        #[arg(long, value_name = "FILE")]
        dump_pairs: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    alloc_tuning::tune();
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Mount(_)) {
        interrupt::install();
    }
    let result = run(cli);
    if interrupt::happened() {
        // The signal's thread removes the locks and exits with the signal's code.
        loop {
            std::thread::park();
        }
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("error: {msg}");
            let code = match e.downcast_ref::<Error>() {
                Some(Error::RepoNotFound(_)) => EXIT_NO_REPO,
                Some(Error::Locked { .. }) => EXIT_LOCKED,
                Some(Error::WrongPassword) => EXIT_WRONG_PASSWORD,
                _ => EXIT_ERROR,
            };
            ExitCode::from(code)
        }
    }
}

/// Whether `e` comes from writing to a closed standard output.
///
/// Such an error exits 0 without a message, as other Unix tools do: the reader (`head`,
/// a pager) chose to stop reading, which is not a failure of the command. Output goes
/// through [`render::outln!`] or a writer whose errors reach here, never `println!`, which
/// would panic instead.
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

/// Runs the parsed command and returns its exit code.
fn run(cli: Cli) -> anyhow::Result<u8> {
    cmd::global::set(cli.global);
    match cli.command {
        Command::Init(args) => cmd::init::run(args),
        Command::Backup(args) => cmd::backup::run(args),
        Command::Snapshots(args) => cmd::snapshots::run(args),
        Command::Ls(args) => cmd::ls::run(args),
        Command::Dump(args) => cmd::dump::run(args),
        Command::Restore(args) => cmd::restore::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Stats(args) => cmd::stats::run(args),
        Command::Repair(args) => cmd::repair::run(args),
        Command::Forget(args) => cmd::forget::run(args),
        Command::Prune(args) => cmd::prune::run(args),
        Command::Unlock(args) => cmd::unlock::run(args),
        Command::Key(args) => cmd::key::run(args),
        Command::Tag(args) => cmd::tag::run(args),
        Command::Rewrite(args) => cmd::rewrite::run(args),
        Command::Copy(args) => cmd::copy::run(args),
        Command::Find(args) => cmd::find::run(args),
        Command::Diff(args) => cmd::diff::run(args),
        Command::Cat(args) => cmd::cat::run(args),
        Command::Mount(args) => cmd::mount::run(args),
        Command::Cache(args) => cmd::cache::run(args),
        Command::Generate(args) => {
            cmd::generate::run(args, <Cli as clap::CommandFactory>::command())
        }
        Command::Eval(args) => eval_cmd::run(args, cmd::host(), cmd::now_rfc3339()),
        Command::Bench { what } => {
            match what {
                BenchWhat::Chunk { files, json } => bench::bench_chunk(&files, json)?,
                BenchWhat::Sketch { files, json } => bench::bench_sketch(&files, json)?,
                BenchWhat::Delta {
                    old,
                    new,
                    json,
                    dump_pairs,
                } => bench_delta::bench_delta(&old, &new, json, dump_pairs.as_deref())?,
            }
            Ok(0)
        }
    }
}
