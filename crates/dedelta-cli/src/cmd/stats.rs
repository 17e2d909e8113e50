//! `dedelta stats`: sizes and reduction factors of the whole repository (logical, unique,
//! after delta, stored), computed from container metadata and snapshot summaries, without
//! a lock.
//!
//! Exit codes: 0 printed; 1 the statistics could not be gathered; 10 no repository.

use super::{open_reader, RepoArg};
use crate::render::{self, print_warnings};
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::stats;

/// Arguments of `dedelta stats`.
#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Gathers the statistics and prints them; what could not be counted is a warning.
pub fn run(args: StatsArgs) -> Result<u8> {
    let (r, _lock) = open_reader(&args.repo, "stats")?;
    let s = stats::stats(&r)?;
    print_warnings(&s.warnings);
    render::stats(&s, args.json)?;
    Ok(0)
}
