//! `dedelta snapshots`: lists the snapshots as a table or a JSON array, optionally only those
//! `--host`/`--tag`/`--path` select, the newest N of each host and paths (`--latest N`), and
//! in groups (`--group-by host,paths,tags`). It takes no lock and opens no index: a snapshot
//! file that cannot be read is a warning, not an error.
//!
//! Exit codes: 0 listed; 1 the snapshots could not be listed; 10 no repository.

use super::select::{parse_group_by, SnapshotFilterArgs};
use super::RepoArg;
use crate::render::{outln, print_json, print_warnings, size};
use anyhow::Result;
use clap::Args;
use dedelta_store::format::snapshot::{Snapshot, SnapshotId};
use dedelta_store::repository::snapshot_filter::{latest_per_group, GroupBy};
use serde_json::json;

/// Arguments of `dedelta snapshots`.
#[derive(Args)]
pub struct SnapshotsArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshots to list (unique id prefixes; default: all).
    ids: Vec<String>,
    #[command(flatten)]
    filter: SnapshotFilterArgs,
    /// Only the newest N snapshots of each host and paths.
    #[arg(long, value_name = "N")]
    latest: Option<usize>,
    /// List in groups of the same host, paths and/or tags (e.g. `host,paths`).
    #[arg(long, short = 'g', value_name = "FIELDS", value_parser = parse_group_by)]
    group_by: Option<GroupBy>,
    /// Print a JSON array (of `{"group_key": ..., "snapshots": [...]}` with `--group-by`).
    #[arg(long)]
    json: bool,
}

/// Lists the snapshots.
pub fn run(args: SnapshotsArgs) -> Result<u8> {
    let r = args.repo.open_repository()?;
    let filter = args.filter.filter()?;
    let listed = r.snapshots()?;
    print_warnings(&listed.warnings());
    let mut all = filter.apply(listed.snapshots);
    if !args.ids.is_empty() {
        let mut names = Vec::new();
        for spec in &args.ids {
            names.push(dedelta_store::repository::snapshots::resolve_name(
                r.backend().as_ref(),
                spec,
            )?);
        }
        all.retain(|(id, _)| names.contains(&id.to_hex()));
    }
    if let Some(n) = args.latest {
        all = latest_per_group(all, n);
    }
    let groups = args.group_by.unwrap_or_default().group(all);
    if args.json {
        if args.group_by.is_some() {
            let arr: Vec<_> = groups
                .iter()
                .map(|(key, snaps)| json!({"group_key": key, "snapshots": json_list(snaps)}))
                .collect();
            return print_json(&arr).map(|()| 0);
        }
        let all = groups.into_iter().flat_map(|(_, s)| s).collect::<Vec<_>>();
        return print_json(&json_list(&all)).map(|()| 0);
    }
    let mut total = 0;
    for (key, snaps) in &groups {
        if args.group_by.is_some() {
            let mut parts = Vec::new();
            if let Some(h) = &key.host {
                parts.push(format!("host [{h}]"));
            }
            if let Some(p) = &key.paths {
                parts.push(format!("paths [{}]", p.join(", ")));
            }
            if let Some(t) = &key.tags {
                parts.push(format!("tags [{}]", t.join(", ")));
            }
            outln!("snapshots for ({})", parts.join(", "));
        }
        table(snaps)?;
        total += snaps.len();
    }
    outln!("{total} snapshots");
    Ok(0)
}

/// The JSON objects of `snaps`.
fn json_list(snaps: &[(SnapshotId, Snapshot)]) -> Vec<serde_json::Value> {
    snaps
        .iter()
        .map(|(id, s)| {
            json!({
                "id": id.to_hex(),
                "short_id": id.short(),
                "time": s.time,
                "host": s.host,
                "paths": s.paths,
                "tags": s.tags,
                "original": s.original,
                "summary": s.summary,
            })
        })
        .collect()
}

/// The snapshots as a table.
fn table(snaps: &[(SnapshotId, Snapshot)]) -> Result<()> {
    outln!(
        "{:<10} {:<28} {:<16} {:<12} paths",
        "id",
        "time",
        "host",
        "size"
    );
    for (id, s) in snaps {
        outln!(
            "{:<10} {:<28} {:<16} {:<12} {}{}",
            id.short(),
            s.time,
            s.host,
            size(s.summary.bytes_read),
            s.paths.join(", "),
            if s.tags.is_empty() {
                String::new()
            } else {
                format!(" [{}]", s.tags.join(","))
            }
        );
    }
    Ok(())
}
