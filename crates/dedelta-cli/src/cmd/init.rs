//! `dedelta init`: creates a repository with its chunking, compression and delta settings,
//! which every later backup reads from the repository config.
//!
//! Encrypted by default: the password comes from `--password-file`, `--password-command`,
//! `DEDELTA_PASSWORD` or a terminal (asked twice); `--insecure-no-password` makes a repository
//! without encryption.
//!
//! Exit codes: 0 created; 1 a bad option, or a repository already exists at the path.

use super::{DeltaArgs, RepoArg};
use crate::render::{outln, print_json};
use anyhow::{Context, Result};
use clap::Args;
use dedelta_core::chunker::{ChunkerKind, ChunkerParams};
use dedelta_core::compress::Compression;
use dedelta_store::format::config::{RepoConfig, DEFAULT_REGION_SIZE};
use dedelta_store::{Error, Repository};
use serde_json::json;
use std::io::Read;

/// Arguments of `dedelta init`.
#[derive(Args)]
pub struct InitArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Minimum chunk size in bytes.
    #[arg(long, default_value_t = ChunkerParams::default().min_size)]
    chunk_min: usize,
    /// Average chunk size in bytes (a power of two).
    #[arg(long, default_value_t = ChunkerParams::default().avg_size)]
    chunk_avg: usize,
    /// Maximum chunk size in bytes.
    #[arg(long, default_value_t = ChunkerParams::default().max_size)]
    chunk_max: usize,
    /// Chunking method: fastcdc, gear, rabin or fixed.
    #[arg(long, default_value = "fastcdc")]
    chunker: String,
    /// Local compression: zstd:L (one level, 1..=22), zstd:L,T (level T for regions that look
    /// compressible, such as text; L for the others) or none.
    #[arg(long, default_value = "zstd:3,6")]
    compression: String,
    /// Raw size of a compression region in bytes.
    #[arg(long, default_value_t = DEFAULT_REGION_SIZE)]
    region_size: usize,
    /// Size at which a container is sealed, in bytes (benchmarks: many containers from
    /// little data).
    #[arg(long, hide = true)]
    container_size: Option<usize>,
    #[command(flatten, next_help_heading = "Algorithm options")]
    delta: DeltaArgs,
    /// Make a repository WITHOUT encryption (anyone who can read its files reads the backed
    /// up data): for benchmarks, or storage that is encrypted and trusted otherwise.
    #[arg(long)]
    insecure_no_password: bool,
    /// Derive the key file's key with Argon2id's smallest parameters (tests only: such a
    /// password falls to guessing quickly).
    #[arg(long, hide = true)]
    insecure_kdf: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Builds the config from the arguments, creates the repository and prints its id.
pub fn run(args: InitArgs) -> Result<u8> {
    let mut cfg = RepoConfig::new(random_id()?);
    let chunker = &args.chunker;
    cfg.chunker.kind = ChunkerKind::from_name(chunker)
        .ok_or_else(|| Error::InvalidOption(format!("unknown chunker {chunker:?}")))?;
    cfg.chunker.params = ChunkerParams {
        min_size: args.chunk_min,
        avg_size: args.chunk_avg,
        max_size: args.chunk_max,
    };
    let compression = &args.compression;
    cfg.compression = Compression::parse(compression).ok_or_else(|| {
        Error::InvalidOption(format!(
            "compression must be zstd:L or zstd:L,T (levels 1..=22) or none, not {compression:?}"
        ))
    })?;
    cfg.region_size = args.region_size;
    if let Some(size) = args.container_size {
        cfg.container_size = size;
    }
    args.delta.apply(&mut cfg.delta)?;
    let path = &args.repo.path()?;
    let cache_root = args.repo.cache_root();
    let connections = args.repo.connections;
    let r = if args.insecure_no_password {
        match path.to_str() {
            Some(loc) => Repository::init_location(loc, cfg, &cache_root, connections)?,
            None => Repository::init_local_with_cache(path, cfg, &cache_root)?,
        }
    } else {
        // An existing repository is named before a password is asked for.
        if path.join("config").exists() {
            return Err(Error::RepoExists(path.clone()).into());
        }
        cfg.validate()?;
        let password = args.repo.password.new_password("the new repository")?;
        let kdf = kdf_params(args.insecure_kdf);
        let origin = super::key::origin();
        match path.to_str() {
            Some(loc) => Repository::init_location_encrypted(
                loc,
                cfg,
                &cache_root,
                connections,
                &password,
                kdf,
                &origin,
            )?,
            None => {
                Repository::init_local_encrypted(path, cfg, &cache_root, &password, kdf, &origin)?
            }
        }
    };
    let encrypted = r.config().is_encrypted();
    if args.json {
        print_json(&json!({"repository": path, "config": r.config(), "encrypted": encrypted}))?;
    } else {
        outln!(
            "created dedelta repository {} at {}",
            r.config().id,
            path.display()
        );
        if encrypted {
            outln!("encrypted: keep the password safe, the data cannot be read without it");
        } else {
            outln!("NOT encrypted (--insecure-no-password): anyone who can read its files reads the data");
        }
    }
    Ok(0)
}

/// Argon2id's parameters: the defaults, or the smallest with the hidden `--insecure-kdf`.
pub fn kdf_params(insecure: bool) -> dedelta_store::crypto::KdfParams {
    if insecure {
        dedelta_store::crypto::KdfParams::insecure_for_tests()
    } else {
        dedelta_store::crypto::KdfParams::default()
    }
}

/// A new repository id: 16 random bytes from the OS, as hex.
fn random_id() -> Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}
