//! `dedelta snapshots`: lists the snapshots as a table or a JSON array. It
//! takes no lock and opens no index: a snapshot file that cannot be read is a warning, not an
//! error.
//!
//! Exit codes: 0 listed; 1 the snapshots could not be listed; 10 no repository.

use super::RepoArg;
use crate::render::{mb, outln, print_json, print_warnings};
use anyhow::Result;
use clap::Args;
use serde_json::json;

/// Arguments of `dedelta snapshots`.
#[derive(Args)]
pub struct SnapshotsArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Print a JSON array.
    #[arg(long)]
    json: bool,
}

/// Lists the snapshots.
pub fn run(args: SnapshotsArgs) -> Result<u8> {
    let r = args.repo.open_repository()?;
    let listed = r.snapshots()?;
    print_warnings(&listed.warnings());
    let all = listed.snapshots;
    if args.json {
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
        print_json(&arr)?;
        return Ok(0);
    }
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
    Ok(0)
}
