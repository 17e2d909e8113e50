//! `dedelta rewrite`: removes files from existing snapshots (restic's `rewrite --exclude`),
//! under the exclusive lock. Each snapshot with something to remove is written anew (see
//! `dedelta_store::commands::rewrite`); with `--forget` the originals go. `prune` then frees
//! what no snapshot needs any more.
//!
//! Exit codes: 0 done (or nothing matched); 1 no pattern, a bad pattern, or a snapshot that
//! could not be rewritten; 10 no repository; 11 locked.

use super::select::SnapshotFilterArgs;
use super::{finish, open_locked, progress_bar, RepoArg};
use crate::render::{outln, print_json, size};
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::rewrite;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Arguments of `dedelta rewrite`.
#[derive(Args)]
pub struct RewriteArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshots to rewrite (unique id prefixes, or `latest`; default: every snapshot the
    /// filter selects).
    snapshots: Vec<String>,
    #[command(flatten)]
    filter: SnapshotFilterArgs,
    /// Remove what this glob matches, and what is below it (repeatable); one starting with
    /// `/` is anchored at the snapshot's root (as `ls` shows paths), any other matches at
    /// any depth.
    #[arg(long, short = 'e', value_name = "PATTERN")]
    exclude: Vec<OsString>,
    /// As --exclude, ignoring case.
    #[arg(long, value_name = "PATTERN")]
    iexclude: Vec<OsString>,
    /// Read --exclude patterns from FILE, one a line, as backup's --exclude-file (`#` starts a
    /// comment; `$NAME` is expanded).
    #[arg(long, value_name = "FILE")]
    exclude_file: Vec<PathBuf>,
    /// Delete each original snapshot once its rewritten one is saved.
    #[arg(long)]
    forget: bool,
    /// Show what would be removed (with -v, each path); write nothing.
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Print `{"rewritten": [{"original", "new", "removed", "removed_bytes"}], "unchanged",
    /// "would_be_empty"}`.
    #[arg(long)]
    json: bool,
}

/// Rewrites the snapshots and prints what each lost.
pub fn run(args: RewriteArgs) -> Result<u8> {
    let mut exclude: Vec<Vec<u8>> = args.exclude.iter().map(|p| p.as_bytes().to_vec()).collect();
    // Read as backup's --exclude-file: comments skipped, `$NAME` expanded (restic's rules).
    for f in &args.exclude_file {
        exclude.extend(
            super::backup::patterns_of(f)?
                .into_iter()
                .map(String::into_bytes),
        );
    }
    let opts = rewrite::RewriteOptions {
        exclude,
        iexclude: args
            .iexclude
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect(),
        forget: args.forget,
        dry_run: args.dry_run,
    };
    let filter = args.filter.filter()?;
    let (r, lock) = open_locked(&args.repo, "rewrite")?;
    let progress = progress_bar(args.json);
    let st = rewrite::rewrite(&r, &lock, &args.snapshots, &filter, &opts, &progress)?;
    progress.finish();
    finish(&r, lock)?;
    if args.json {
        print_json(&serde_json::to_value(&st)?)?;
        return Ok(0);
    }
    let verbose = super::global::verbosity() > 0;
    for s in &st.rewritten {
        let what = format!("{} nodes ({})", s.removed.len(), size(s.removed_bytes));
        match &s.new {
            Some(new) => outln!(
                "{} -> {}: removed {what}{}",
                s.original.short(),
                new.short(),
                if opts.forget {
                    "; the original is forgotten"
                } else {
                    ""
                }
            ),
            None => outln!("{}: would remove {what}", s.original.short()),
        }
        if verbose || opts.dry_run {
            for p in &s.removed {
                outln!("  - {p}");
            }
        }
    }
    for id in &st.would_be_empty {
        outln!(
            "{}: every file matches the patterns; left as it is (`dedelta forget {}` removes it)",
            id.short(),
            id.short()
        );
    }
    outln!(
        "{} snapshots {}, {} unchanged{}",
        st.rewritten.len(),
        if opts.dry_run {
            "would be rewritten"
        } else {
            "rewritten"
        },
        st.unchanged,
        if opts.dry_run || st.rewritten.is_empty() {
            ""
        } else {
            "; run `dedelta prune` to free what the removed files alone used"
        }
    );
    Ok(0)
}
