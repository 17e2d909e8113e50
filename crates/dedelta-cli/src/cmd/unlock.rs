//! `dedelta unlock`: removes stale locks (of processes that no longer run on this host, or
//! not refreshed for their timeout, or unreadable), or with `--remove-all` every lock.
//!
//! Exit codes: 0 done (also when there was nothing to remove); 10 no repository.

use super::{host, RepoArg};
use crate::render::{outln, print_json};
use anyhow::Result;
use clap::Args;
use dedelta_store::repository::lock;
use serde_json::json;

/// Arguments of `dedelta unlock`.
#[derive(Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Remove every lock, live ones too: only when no other process uses the repository
    /// (a live holder stops writing at its next refresh, but may have written meanwhile).
    #[arg(long)]
    remove_all: bool,
    /// Print `{"removed": [...]}`.
    #[arg(long)]
    json: bool,
}

/// Removes the locks and says how many.
pub fn run(args: UnlockArgs) -> Result<u8> {
    let r = args.repo.open_repository()?;
    let removed = lock::remove_locks(r.backend().as_ref(), args.remove_all, &host())?;
    if args.json {
        print_json(&json!({ "removed": removed }))?;
    } else {
        outln!(
            "removed {} {}lock{}",
            removed.len(),
            if args.remove_all { "" } else { "stale " },
            if removed.len() == 1 { "" } else { "s" }
        );
    }
    Ok(0)
}
