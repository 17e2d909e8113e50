//! `dedelta dump`: writes one file of a snapshot to standard output, byte for byte (for
//! pipes), or a directory as a tar stream ([`super::dump_tar`]).
//!
//! Standard output is the file's bytes only, so `--io-json` writes the I/O accounting (the
//! `io` object of `restore --json`) and the restore cache's counters and speed factor (as
//! `restore --json` reports them) to standard error.
//!
//! Exit codes: 0 written; 1 no such snapshot, the path is not a regular file of it, or a
//! chunk could not be read (the output may then be cut short); 10 no repository.

use super::{open_reader_then, IoModelArgs, RepoArg};
use anyhow::{Context, Result};
use clap::Args;
use dedelta_store::commands::ls;
use dedelta_store::read::speed_factor;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

/// Arguments of `dedelta dump`.
#[derive(Args)]
pub struct DumpArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshot id (a unique prefix) or `latest`; with `SNAPSHOT:SUBFOLDER` the path is
    /// relative to that directory of the snapshot.
    snapshot: String,
    #[command(flatten)]
    filter: super::select::SnapshotFilterArgs,
    /// Path of the file inside the snapshot (any bytes: names need not be UTF-8); a
    /// directory (`/` for the whole snapshot) is written as a tar stream.
    path: OsString,
    /// The format of a directory's stream (restic's option; tar is the one there is).
    #[arg(long, value_name = "FORMAT", default_value = "tar", value_parser = ["tar"])]
    archive: String,
    #[command(flatten)]
    cache: super::restore::CacheArgs,
    /// After the file, write `{"io": ..., "bytes_written": ..., "restore_cache": ...,
    /// "speed_factor": ...}` (requests and bytes by purpose, modelled seconds, the restore
    /// cache's container reads and the speed factor, as `restore --json` reports them) as one
    /// line to standard error.
    #[arg(long)]
    io_json: bool,
    #[command(flatten)]
    io_models: IoModelArgs,
}

/// Finds the file in the snapshot and streams its chunks to standard output.
pub fn run(args: DumpArgs) -> Result<u8> {
    args.io_models.models()?;
    // The snapshots are listed beside the index's catch-up, and the snapshot found there.
    let (r, _lock) = open_reader_then(&args.repo, "dump", |r| r.listing_snapshots_at_open())?;
    let (id, snap, subtree) =
        super::select::find_with_subtree(&r, &args.snapshot, &args.filter.filter()?)?;
    let (cache, cache_bytes) = args.cache.choice()?;
    let full = subtree.path_in_snapshot(args.path.as_bytes());
    let want = full.as_slice();
    // The tree is walked once: the node found says what to write.
    let found = if want.is_empty() {
        None
    } else {
        Some(ls::find_node(&r, &id, &snap, want)?)
    };
    let (node, chunks) = match found {
        Some((n, c)) if n.kind != dedelta_store::format::tree::NodeKind::Dir => (n, c),
        _ => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            // Entries are named below the subfolder, as `ls SNAPSHOT:SUBFOLDER` shows them.
            let rel = ls::normalize_path(args.path.as_bytes());
            super::dump_tar::write_tar(&r, &snap, &subtree, rel, &mut out)?;
            return Ok(0);
        }
    };
    // The file is written from a thread of its own in buffers of 1 MiB (see
    // `ls::dump_found`): to standard output's descriptor directly, without the line
    // buffering of `Stdout`, which split each buffer's writes at its last newline.
    let mut out = {
        use std::os::fd::AsFd;
        std::fs::File::from(
            std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .context("duplicating standard output")?,
        )
    };
    let (bytes_written, restore_cache) =
        ls::dump_found(&r, &snap, &node, chunks, cache, cache_bytes, &mut out)?;
    drop(out);
    if args.io_json {
        let io = args.io_models.report(&r)?;
        eprintln!(
            "{}",
            serde_json::json!({
                "io": io,
                "bytes_written": bytes_written,
                "restore_cache": restore_cache,
                "speed_factor": speed_factor(bytes_written, restore_cache.containers_read),
            })
        );
    }
    Ok(0)
}
