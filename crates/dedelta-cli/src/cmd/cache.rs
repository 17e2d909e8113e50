//! `dedelta cache`: lists the client caches (one directory per repository under the cache
//! root) and, with `--cleanup`, removes those of repositories that are gone and those unused
//! for more than `--max-age` days (restic's `cache --cleanup`, whose "old" rule this keeps;
//! dedelta also records each cache's local repository, so a deleted repository's cache goes
//! at once). Nothing in a cache is needed: it is rebuilt from the repository.
//!
//! Exit codes: 0 listed (or cleaned); 1 the cache root could not be listed or a cache not
//! removed.

use crate::render::{outln, print_json, size};
use anyhow::Result;
use clap::Args;
use dedelta_store::client::cache::{list_caches, remove_cache, CacheState};
use std::path::PathBuf;

/// Arguments of `dedelta cache`.
#[derive(Args)]
pub struct CacheArgs {
    /// The cache root (default: $DEDELTA_CACHE_DIR, else $XDG_CACHE_HOME/dedelta, else
    /// ~/.cache/dedelta).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Remove the caches of repositories that are gone and those older than --max-age.
    #[arg(long)]
    cleanup: bool,
    /// Caches unused for more than this many days are old.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    max_age: u64,
    /// Print `{"caches": [...], "removed": [ids]}`.
    #[arg(long)]
    json: bool,
}

/// Lists the caches, removing the unwanted ones with `--cleanup`.
pub fn run(args: CacheArgs) -> Result<u8> {
    let root = args
        .cache_dir
        .clone()
        .unwrap_or_else(dedelta_store::client::cache::root_or_temp);
    let caches = list_caches(&root, args.max_age.saturating_mul(86_400))?;
    let mut removed = Vec::new();
    if args.cleanup {
        for c in caches.iter().filter(|c| c.state != CacheState::Current) {
            remove_cache(c)?;
            removed.push(c.id.clone());
        }
    }
    if args.json {
        return print_json(
            &serde_json::json!({"root": root, "caches": caches, "removed": removed}),
        )
        .map(|()| 0);
    }
    outln!(
        "{:<34} {:>10} {:>8} {:<8} repository",
        "id",
        "size",
        "age",
        "state"
    );
    for c in &caches {
        outln!(
            "{:<34} {:>10} {:>7}d {:<8} {}{}",
            c.id,
            size(c.bytes),
            c.age_secs / 86_400,
            match c.state {
                CacheState::Current => "current",
                CacheState::Old => "old",
                CacheState::Gone => "gone",
            },
            c.location
                .as_ref()
                .map_or("-".into(), |l| l.display().to_string()),
            if removed.contains(&c.id) {
                " (removed)"
            } else {
                ""
            }
        );
    }
    let unwanted = caches
        .iter()
        .filter(|c| c.state != CacheState::Current)
        .count();
    if args.cleanup {
        outln!(
            "{} caches in {}, {} removed",
            caches.len(),
            root.display(),
            removed.len()
        );
    } else {
        outln!(
            "{} caches in {}, {unwanted} old or gone (remove them with --cleanup)",
            caches.len(),
            root.display()
        );
    }
    Ok(0)
}
