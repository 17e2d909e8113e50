//! `dedelta dump`: writes one file of a snapshot to standard output, byte for byte (for
//! pipes; `restore` is the way to get many files back).
//!
//! Exit codes: 0 written; 1 no such snapshot, the path is not a regular file of it, or a
//! chunk could not be read (the output may then be cut short); 10 no repository.

use super::{open, RepoArg};
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::ls;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

/// MiB of decompressed regions a dump's LRU holds at most, by default: one file needs less
/// than a restore, and fewer fresh buffers cost fewer page faults.
const DUMP_CACHE_MIB: usize = 32;

/// Arguments of `dedelta dump`.
#[derive(Args)]
pub struct DumpArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshot id (a unique prefix) or `latest`.
    snapshot: String,
    /// Path of the file inside the snapshot (any bytes: names need not be UTF-8).
    path: OsString,
    #[command(flatten)]
    cache: super::restore::CacheArgs,
}

/// Finds the file in the snapshot and streams its chunks to standard output.
pub fn run(args: DumpArgs) -> Result<u8> {
    let r = open(&args.repo)?;
    let (id, snap) = r.find_snapshot(&args.snapshot)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let (cache, cache_bytes) = args.cache.choice(DUMP_CACHE_MIB)?;
    ls::dump_with(
        &r,
        &id,
        &snap,
        args.path.as_bytes(),
        cache,
        cache_bytes,
        &mut out,
    )?;
    Ok(0)
}
