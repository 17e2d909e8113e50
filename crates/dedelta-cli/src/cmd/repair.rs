//! `dedelta repair index|packs|snapshots`: the three repairs, each under the repository lock
//! and guided by the damage `check` recorded.
//!
//! - `index` rebuilds the chunk index from container metadata, leaving out damaged copies.
//! - `packs` salvages the readable chunks of damaged containers, then removes them.
//! - `snapshots` rewrites the snapshots that need lost chunks, keeping what is readable.
//!
//! Exit codes: 0 repaired (or nothing to repair); 1 `repair index` met problems it names,
//! or a repair stopped; 10 no repository; 11 locked.

use super::{finish, now_rfc3339, open_locked, progress_bar, RepoArg};
use crate::render::{self, print_warnings};
use crate::EXIT_ERROR;
use anyhow::Result;
use clap::{Args, Subcommand};
use dedelta_store::commands::{repair, repair_packs, repair_snapshots};

/// Arguments of `dedelta repair`: which repair.
#[derive(Args)]
pub struct RepairArgs {
    #[command(subcommand)]
    what: RepairWhat,
}

/// The repairs.
#[derive(Subcommand)]
enum RepairWhat {
    /// Rebuild the chunk index from container metadata (leaving out copies `check` recorded
    /// as damaged).
    Index(IndexArgs),
    /// Salvage the readable chunks of damaged containers and remove the containers.
    Packs(PacksArgs),
    /// Rewrite snapshots that need lost chunks, keeping what is readable (marks the damaged
    /// files; tags the new snapshots `repaired`).
    Snapshots(SnapshotsArgs),
}

/// Arguments of `dedelta repair index`.
#[derive(Args)]
struct IndexArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `dedelta repair packs`.
#[derive(Args)]
struct PacksArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Containers to repair (ids or unique prefixes); default: those `check` recorded as
    /// damaged.
    containers: Vec<String>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `dedelta repair snapshots`.
#[derive(Args)]
struct SnapshotsArgs {
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
}

/// Runs the chosen repair.
pub fn run(args: RepairArgs) -> Result<u8> {
    match args.what {
        RepairWhat::Index(a) => index(a),
        RepairWhat::Packs(a) => packs(a),
        RepairWhat::Snapshots(a) => snapshots(a),
    }
}

/// `repair index`: warnings as the rebuild meets them, then the result.
fn index(args: IndexArgs) -> Result<u8> {
    let (r, lock) = open_locked(&args.repo, "repair index")?;
    let st = repair::rebuild_index(&r, &mut |w| print_warnings(&[w]))?;
    // The index files too: damaged or stale ones are replaced by ones that match the
    // containers (docs/format.md, "Index files").
    let files = dedelta_store::repository::index_files::consolidate(&r)?;
    print_warnings(&files.notices);
    finish(&r, lock)?;
    render::repair_index(&st, args.json)?;
    Ok(if st.problems.is_empty() {
        0
    } else {
        EXIT_ERROR
    })
}

/// `repair packs`: the named containers, or those `check` recorded as damaged.
fn packs(args: PacksArgs) -> Result<u8> {
    let (r, lock) = open_locked(&args.repo, "repair packs")?;
    let progress = progress_bar(args.json);
    let st = repair_packs::repair_packs(&r, &lock, &args.containers, &now_rfc3339(), &progress)?;
    progress.finish();
    finish(&r, lock)?;
    render::repair_packs(&st, args.json)?;
    Ok(0)
}

/// `repair snapshots`: the snapshots that need lost chunks.
fn snapshots(args: SnapshotsArgs) -> Result<u8> {
    let (r, lock) = open_locked(&args.repo, "repair snapshots")?;
    let progress = progress_bar(args.json);
    let opts = repair_snapshots::RepairSnapshotsOptions {
        forget: args.forget,
        dry_run: args.dry_run,
    };
    let st = repair_snapshots::repair_snapshots(&r, &lock, &opts, &progress)?;
    progress.finish();
    finish(&r, lock)?;
    render::repair_snapshots(&st, &opts, args.json)?;
    Ok(0)
}
