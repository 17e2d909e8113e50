//! `dedelta prune`: frees the space of data no snapshot needs, under the repository lock.
//! The store plans first (containers to delete, to rewrite, to keep, and the chunks kept as
//! delta bases); `--dry-run` prints that plan and changes nothing.
//!
//! Exit codes: 0 pruned (or planned); 1 the prune stopped; 10 no repository; 11 locked.

use super::{finish, open_locked, progress_bar, RepoArg};
use crate::render;
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::prune;
use dedelta_store::repository::lock::RepoLock;
use dedelta_store::IndexedRepository;

/// Arguments of `dedelta prune`.
#[derive(Args)]
pub struct PruneArgs {
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
}

/// Prunes with the given options and prints what was (or would be) freed.
pub fn run(args: PruneArgs) -> Result<u8> {
    let (r, lock) = open_locked(&args.repo, "prune")?;
    let opts = prune::PruneOptions {
        max_unused: args.max_unused / 100.0,
        dry_run: args.dry_run,
    };
    let st = execute(&r, &lock, &opts, args.json)?;
    finish(&r, lock)?;
    render::prune(&st, args.json)?;
    Ok(0)
}

/// Runs a prune with a progress bar (also for `forget --prune`); the caller holds `lock`
/// and renders the result.
pub fn execute(
    r: &IndexedRepository,
    lock: &RepoLock,
    opts: &prune::PruneOptions,
    json: bool,
) -> Result<prune::PruneStats> {
    let progress = progress_bar(json);
    let st = prune::prune(r, lock, opts, &progress)?;
    progress.finish();
    Ok(st)
}
