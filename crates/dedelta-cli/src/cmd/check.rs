//! `dedelta check`: verifies the repository under its lock (snapshots, trees, index and
//! containers; with `--read-data` every stored chunk) and records the damage it finds, which
//! `repair` and later commands then use.
//!
//! Exit codes: 0 no errors; 1 errors found (each printed), or the check could not run;
//! 10 no repository; 11 locked.

use super::{finish, now_rfc3339, progress_stream, RepoArg};
use crate::render::{self, print_notices};
use crate::EXIT_ERROR;
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::check;

/// Arguments of `dedelta check`.
#[derive(Args)]
pub struct CheckArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Also read and verify every stored chunk.
    #[arg(long, conflicts_with = "read_data_subset")]
    read_data: bool,
    /// Read and verify the chunks of some containers only (restic's forms): `n/t`, part n of
    /// t (by container id: the parts 1/t to t/t cover every container once), `x%` of the
    /// containers at random, or a size (`500M`, `2G`) of them at random.
    #[arg(long, value_name = "SUBSET", value_parser = parse_subset)]
    read_data_subset: Option<check::DataSubset>,
    /// Print restic-style JSON lines: `status` while it runs, an `error` line per problem on
    /// standard error, then the `summary` (the report).
    #[arg(long)]
    json: bool,
}

/// Runs the check and prints its report.
pub fn run(args: CheckArgs) -> Result<u8> {
    // A repository this process cannot write (read-only media) is checked without a lock,
    // and the damage found is reported but not recorded.
    let (r, lock) = super::open_reader(&args.repo, "check")?;
    let progress = progress_stream(args.json, "check");
    let read = match args.read_data_subset {
        Some(subset) => check::ReadData::Subset(subset),
        None => args.read_data.into(),
    };
    let report = check::check(&r, lock.as_ref(), read, &now_rfc3339(), &progress)?;
    progress.finish();
    if let Some(lock) = lock {
        finish(&r, lock)?;
    }
    print_notices(&report.notices);
    render::check(&report, read != check::ReadData::Metadata, args.json)?;
    Ok(if report.problems.is_empty() {
        0
    } else {
        EXIT_ERROR
    })
}

/// Parses `--read-data-subset` for clap.
fn parse_subset(s: &str) -> Result<check::DataSubset, String> {
    s.parse().map_err(|e: dedelta_store::Error| e.to_string())
}
