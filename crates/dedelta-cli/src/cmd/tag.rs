//! `dedelta tag`: adds, removes or sets the tags of snapshots (named, or all that
//! `--host`/`--tag`/`--path` select), under the repository lock. Each changed snapshot is
//! written anew and the old one removed (see `dedelta_store::commands::tag`), so its id
//! changes.
//!
//! Exit codes: 0 done; 1 nothing to do or a snapshot could not be rewritten; 10 no
//! repository; 11 locked.

use super::select::SnapshotFilterArgs;
use super::RepoArg;
use crate::render::{outln, print_json};
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::tag;
use dedelta_store::repository::lock::LockMode;

/// Arguments of `dedelta tag`.
#[derive(Args)]
pub struct TagArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshots to change (unique id prefixes; default: every snapshot the filter selects).
    snapshots: Vec<String>,
    #[command(flatten)]
    filter: SnapshotFilterArgs,
    /// Add this tag (repeatable; `a,b` adds both).
    #[arg(long, value_name = "TAG")]
    add: Vec<String>,
    /// Remove this tag (repeatable; `a,b` removes both).
    #[arg(long, value_name = "TAG")]
    remove: Vec<String>,
    /// Replace the tags with these (repeatable; `a,b` sets both; `--set ""` removes all).
    #[arg(long, value_name = "TAG")]
    set: Vec<String>,
    /// Print `{"changed": [{"old_id", "new_id", "tags"}]}`.
    #[arg(long)]
    json: bool,
}

/// Splits `a,b` values into tags (an empty value gives none).
fn split(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// Changes the tags and prints each changed snapshot.
pub fn run(args: TagArgs) -> Result<u8> {
    let change = tag::TagChange {
        set: (!args.set.is_empty()).then(|| split(&args.set)),
        add: split(&args.add),
        remove: split(&args.remove),
    };
    change.validate()?;
    let filter = args.filter.filter()?;
    let r = args.repo.open_repository()?;
    let lock = args.repo.lock(&r, "tag", LockMode::Exclusive)?;
    let changed = tag::tag(&r, &lock, &args.snapshots, &filter, &change)?;
    lock.release()?;
    if args.json {
        print_json(&serde_json::json!({ "changed": changed }))?;
        return Ok(0);
    }
    for c in &changed {
        outln!(
            "{} -> {} [{}]",
            &c.old_id[..8],
            &c.new_id[..8],
            c.tags.join(",")
        );
    }
    outln!("{} snapshots changed", changed.len());
    Ok(0)
}
