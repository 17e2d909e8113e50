//! `dedelta forget`: removes snapshots named by id or not kept by a retention policy (restic's
//! `--keep-*` rules, decided in dedelta-store), under the repository lock; with `--prune` it
//! then frees their space under the same lock.
//!
//! Exit codes: 0 done (or, with `--dry-run`, decided); 1 no snapshot and no policy given, or
//! the removal stopped; 10 no repository; 11 locked.

use super::{with_index, RepoArg};
use crate::render::{self, outln, print_json};
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::{forget, prune};
use dedelta_store::repository::lock::LockMode;
use dedelta_store::Error;
use serde_json::json;

/// Arguments of `dedelta forget`.
#[derive(Args)]
pub struct ForgetArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshots to remove (unique id prefixes).
    snapshots: Vec<String>,
    #[command(flatten)]
    filter: super::select::SnapshotFilterArgs,
    /// Apply the policy per group of the same host, paths and/or tags.
    #[arg(long, short = 'g', value_name = "FIELDS", default_value = "host,paths",
          value_parser = super::select::parse_group_by)]
    group_by: dedelta_store::repository::snapshot_filter::GroupBy,
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
}

/// Decides which snapshots go, removes them (unless `--dry-run`), prints each decision, and
/// prunes if asked.
pub fn run(args: ForgetArgs) -> Result<u8> {
    let policy = forget::KeepPolicy {
        last: args.keep_last,
        hourly: args.keep_hourly,
        daily: args.keep_daily,
        weekly: args.keep_weekly,
        monthly: args.keep_monthly,
        yearly: args.keep_yearly,
        tags: args.keep_tag,
        within_secs: args
            .keep_within
            .as_deref()
            .map(forget::parse_duration)
            .transpose()?,
    };
    if policy.is_empty() && args.snapshots.is_empty() {
        return Err(Error::InvalidOption(
            "nothing to forget: name snapshots or give a --keep-* policy".into(),
        )
        .into());
    }
    let filter = args.filter.filter()?;
    let r = args.repo.open_repository()?;
    let lock = args.repo.lock(&r, "forget", LockMode::Exclusive)?;
    let selection = (&filter, args.group_by);
    let decisions =
        forget::forget_selected(&r, &lock, &args.snapshots, &policy, selection, args.dry_run)?;
    print_decisions(&decisions, args.dry_run, args.json)?;
    if args.prune && !args.dry_run {
        let r = with_index(r)?;
        let opts = prune::PruneOptions::default();
        let st = super::prune::execute(&r, &lock, &opts, args.json)?;
        render::prune(&st, args.json)?;
        return super::finish(&r, lock).map(|()| 0);
    }
    lock.release()?;
    Ok(0)
}

/// Each snapshot kept or removed with the rules that decided it, then how many go.
fn print_decisions(decisions: &[forget::ForgetDecision], dry_run: bool, json: bool) -> Result<()> {
    if json {
        return print_json(&json!({"dry_run": dry_run, "snapshots": decisions}));
    }
    for d in decisions {
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
    let removed = decisions.iter().filter(|d| !d.keep).count();
    outln!(
        "{removed} snapshots {}",
        if dry_run {
            "would be removed"
        } else {
            "removed"
        }
    );
    Ok(())
}
