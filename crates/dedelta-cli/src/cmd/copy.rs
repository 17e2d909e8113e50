//! `dedelta copy --from-repo SRC [SNAPSHOT...]`: snapshots of another repository stored in
//! this one (restic's `copy`), each read from the source and backed up here by this
//! repository's own pipeline (see `dedelta_store::commands::copy`). Shared locks on both.
//!
//! Exit codes: 0 done (or everything copied before); 1 a snapshot that could not be read
//! whole from the source, or the same repository on both sides; 10 no repository; 11 locked.

use super::select::SnapshotFilterArgs;
use super::{finish, open_reader, open_then, progress_bar, RepoArg};
use crate::password::FromPasswordArgs;
use crate::render::{outln, print_json, size};
use anyhow::{bail, Result};
use clap::Args;
use dedelta_store::commands::copy;
use dedelta_store::repository::lock::LockMode;
use dedelta_store::Error;
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `dedelta copy`.
#[derive(Args)]
pub struct CopyArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// The repository to copy from: a local directory or `s3:...`, as `-r`.
    #[arg(long, value_name = "REPO", env = "DEDELTA_FROM_REPO")]
    from_repo: PathBuf,
    #[command(flatten)]
    from_password: FromPasswordArgs,
    /// Snapshots of the source to copy (unique id prefixes, or `latest`; default: every
    /// snapshot the filter selects).
    snapshots: Vec<String>,
    #[command(flatten)]
    filter: SnapshotFilterArgs,
    /// Show which snapshots would be copied; write nothing.
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Worker threads (default: number of cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print `{"copied": [{"source", "new", "summary"}], "already_copied"}`.
    #[arg(long)]
    json: bool,
}

/// Copies the snapshots and prints what each became.
pub fn run(args: CopyArgs) -> Result<u8> {
    let filter = args.filter.filter()?;
    let source = RepoArg {
        connections: args.repo.connections,
        retry_lock: args.repo.retry_lock.clone(),
        password: args.from_password.clone().into(),
        location: Some(args.from_repo.clone()),
    };
    let (src, src_lock) = open_reader(&source, "copy").map_err(|e| {
        if matches!(e.downcast_ref::<Error>(), Some(Error::PasswordNeeded)) {
            anyhow::anyhow!(
                "the source repository is encrypted: give its password with --from-password-file, --from-password-command or DEDELTA_FROM_PASSWORD, or on a terminal"
            )
        } else {
            e.context(format!("the source repository {}", args.from_repo.display()))
        }
    })?;
    let (dst, lock) = open_then(&args.repo, "copy", LockMode::Shared, |r| r)?;
    if src.config().id == dst.config().id {
        bail!(Error::InvalidOption(
            "--from-repo is this repository: nothing to copy".into()
        ));
    }
    let src = Arc::new(src);
    let workers = super::workers(args.threads)?;
    let progress = progress_bar(args.json);
    let opts = copy::CopyOptions {
        cache_dir: Some(args.repo.cache_root()),
        dry_run: args.dry_run,
    };
    let st = copy::copy(
        &src,
        &dst,
        &lock,
        &args.snapshots,
        &filter,
        &opts,
        &workers,
        &progress,
    )?;
    progress.finish();
    finish(&dst, lock)?;
    if let Some(l) = src_lock {
        l.release()?;
    }
    if args.json {
        print_json(&serde_json::to_value(&st)?)?;
        return Ok(0);
    }
    for c in &st.copied {
        match (&c.new, &c.summary) {
            (Some(new), Some(s)) => outln!(
                "{} -> {}: {} files, {} read, {} added",
                c.source.short(),
                new.short(),
                s.files,
                size(s.bytes_read),
                size(s.bytes_added)
            ),
            _ => outln!("{}: would be copied", c.source.short()),
        }
    }
    for id in &st.already_copied {
        if super::global::verbosity() > 0 {
            outln!("{}: copied before", id.short());
        }
    }
    outln!(
        "{} snapshots {}, {} copied before",
        st.copied.len(),
        if args.dry_run {
            "would be copied"
        } else {
            "copied"
        },
        st.already_copied.len()
    );
    Ok(0)
}
