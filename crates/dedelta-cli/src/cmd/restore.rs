//! `dedelta restore`: restores a snapshot (or the paths `--include` names) into a directory.
//! A file that cannot be restored does not stop the others: each is named on stderr, and
//! the summary line, printed last, counts them.
//!
//! Exit codes: 0 everything restored; 3 restored, but some files could not be; 1 the
//! restore stopped (no such snapshot, a target that cannot be used); 10 no repository.

use super::{open, progress_bar, IoModelArgs, RepoArg};
use crate::render::{io_line, mb, outln, print_json};
use crate::EXIT_PARTIAL;
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::restore;
use serde_json::json;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Bytes of decompressed regions a restore caches.
const RESTORE_CACHE_BYTES: usize = 256 << 20;

/// Arguments of `dedelta restore`.
#[derive(Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshot id (a unique prefix) or `latest`.
    snapshot: String,
    /// Directory to restore into.
    #[arg(long, short = 't')]
    target: PathBuf,
    /// Restore only this path and what is below it (repeatable; any bytes).
    #[arg(long)]
    include: Vec<OsString>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Also count the containers the papers' restore cache, an LRU of N whole containers,
    /// would read, and report their restore speed factor (MB restored per container read;
    /// DARE §4.5, LoopDelta §5.1). Without N: 512, LoopDelta's cache.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "512")]
    cache_containers: Option<usize>,
    #[command(flatten)]
    io_models: IoModelArgs,
}

/// Restores the snapshot and prints what was restored, with the time taken.
pub fn run(args: RestoreArgs) -> Result<u8> {
    args.io_models.models()?;
    let r = open(&args.repo)?;
    let (id, snap) = r.find_snapshot(&args.snapshot)?;
    let progress = progress_bar(args.json);
    let started = std::time::Instant::now();
    let opts = restore::RestoreOptions {
        target: args.target.clone(),
        include: args.include.iter().map(|p| p.as_bytes().to_vec()).collect(),
        cache_bytes: RESTORE_CACHE_BYTES,
        cache_containers: args.cache_containers,
    };
    let st = restore::restore(&r, &snap, &opts, &progress)?;
    progress.finish();
    let secs = started.elapsed().as_secs_f64();
    let mbps = st.bytes_written as f64 / 1e6 / secs.max(1e-9);
    let io = args.io_models.report(&r)?;
    // Each file that could not be restored, then the summary: the last line says
    // what happened as a whole.
    for e in &st.errors {
        eprintln!("error: {}: {}", e.path_lossy(), e.message);
    }
    // A snapshot rewritten by `repair snapshots` lists the files whose lost chunks it removed.
    for p in &snap.damaged_paths {
        eprintln!(
            "warning: /{p}: incomplete (chunks lost to damage were removed by `repair snapshots`)"
        );
    }
    if snap.tree_truncated {
        eprintln!("warning: this snapshot's tree was only partly readable when it was repaired: files after that point are missing");
    }
    if args.json {
        let mut v = serde_json::to_value(&st)?;
        v["snapshot_id"] = json!(id.to_hex());
        v["seconds"] = json!(secs);
        v["mb_per_s"] = json!(mbps);
        if st.restore_cache.is_some() {
            v["speed_factor"] = json!(st.speed_factor());
        }
        v["io"] = serde_json::to_value(io)?;
        print_json(&v)?;
    } else {
        outln!(
            "restored snapshot {} to {}: {} files, {} dirs, {} symlinks, {} in {:.2} s ({:.1} MB/s){}",
            id.short(),
            args.target.display(),
            st.files,
            st.dirs,
            st.symlinks,
            mb(st.bytes_written),
            secs,
            mbps,
            if st.errors.is_empty() {
                String::new()
            } else {
                format!("; {} could not be restored", st.errors.len())
            }
        );
        if let Some(c) = &st.restore_cache {
            outln!(
                "restore speed factor: {} MB per container read ({} containers read through a cache of {}, {} regions)",
                st.speed_factor().map_or("–".into(), |f| format!("{f:.2}")),
                c.containers_read,
                c.cache_containers,
                c.regions_read
            );
        }
        outln!("{}", io_line(&io));
    }
    Ok(if st.errors.is_empty() {
        0
    } else {
        EXIT_PARTIAL
    })
}
