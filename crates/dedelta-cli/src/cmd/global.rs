//! The global options: `-r/--repo`, `--cache-dir`, `-q/--quiet`, `-v/--verbose`, accepted
//! before or after the subcommand (`dedelta -r REPO backup ...`, as restic users type it).
//!
//! clap's `global = true` makes an option of the top-level parser valid in every subcommand,
//! so they are defined once here, on [`crate::Cli`]. `main` stores them with [`set`] before it
//! runs a command, and a command reads them through its (argument-less) [`super::RepoArg`],
//! so a new subcommand needs nothing but `#[command(flatten)] repo: RepoArg` as before.

use anyhow::Result;
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The options every command takes, before or after its name.
#[derive(Args, Clone, Debug, Default)]
pub struct GlobalArgs {
    /// Repository: a local directory, or an S3 bucket as s3:http://HOST:PORT/BUCKET/PREFIX
    /// (or s3:https://...; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or
    /// the AWS profile files). Or set DEDELTA_REPO.
    #[arg(
        short = 'r',
        long = "repo",
        env = "DEDELTA_REPO",
        global = true,
        value_name = "REPO"
    )]
    pub repo: Option<PathBuf>,
    /// Directory of the client caches: the chunk index and the local base cache, in
    /// <DIR>/<repository id>/ (default: $DEDELTA_CACHE_DIR, else $XDG_CACHE_HOME/dedelta,
    /// else ~/.cache/dedelta).
    #[arg(long, value_name = "DIR", global = true)]
    pub cache_dir: Option<PathBuf>,
    /// Print less: no progress bar, and backup and restore print only errors and warnings.
    #[arg(short = 'q', long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Say more: each file as it is backed up or restored (repeat for more).
    #[arg(short = 'v', long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

static GLOBAL: OnceLock<GlobalArgs> = OnceLock::new();

/// Records the parsed global options (once, in `main`).
pub fn set(args: GlobalArgs) {
    // A second call (tests) keeps the first value.
    let _ = GLOBAL.set(args);
}

/// The global options (their defaults before [`set`]).
pub fn get() -> &'static GlobalArgs {
    static DEFAULT: OnceLock<GlobalArgs> = OnceLock::new();
    GLOBAL
        .get()
        .unwrap_or_else(|| DEFAULT.get_or_init(GlobalArgs::default))
}

/// `-q`.
pub fn quiet() -> bool {
    get().quiet
}

/// The `-v` count.
pub fn verbosity() -> u8 {
    get().verbose
}

/// The repository path, or an error that says how to give one.
pub fn repo_path() -> Result<PathBuf> {
    let p = get().repo.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "no repository given: use -r/--repo REPO (before or after the command) or set DEDELTA_REPO"
        )
    })?;
    if let Some(kind) = foreign_repository(&p) {
        anyhow::bail!(
            "{} is a {kind} repository, not a dedelta repository; use {kind} to read it, or \
             `dedelta init` a new repository elsewhere",
            p.display()
        );
    }
    Ok(p)
}

/// The backup tool whose repository is at `p`, if it is another tool's: restic (a `config`
/// file beside `keys/`, `data/` and `snapshots/`) or borg (a `README` that says so, and a
/// `config` with a `[repository]` section).
pub fn foreign_repository(p: &Path) -> Option<&'static str> {
    let is_dir = |d: &str| p.join(d).is_dir();
    if p.join("config").is_file() && is_dir("keys") && is_dir("data") && is_dir("snapshots") {
        return Some("restic");
    }
    let readme = std::fs::read(p.join("README")).unwrap_or_default();
    let says_borg = String::from_utf8_lossy(&readme).contains("This is a Borg Backup repository");
    if says_borg {
        let config = std::fs::read(p.join("config")).unwrap_or_default();
        if String::from_utf8_lossy(&config).contains("[repository]") {
            return Some("borg");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restic_and_borg_layouts_are_recognised() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(foreign_repository(d.path()), None);
        std::fs::write(d.path().join("config"), b"x").unwrap();
        for sub in ["keys", "data", "snapshots"] {
            std::fs::create_dir(d.path().join(sub)).unwrap();
        }
        assert_eq!(foreign_repository(d.path()), Some("restic"));

        let b = tempfile::tempdir().unwrap();
        std::fs::write(
            b.path().join("README"),
            b"This is a Borg Backup repository.\nSee https://borgbackup.readthedocs.io/\n",
        )
        .unwrap();
        std::fs::write(b.path().join("config"), b"[repository]\nversion = 1\n").unwrap();
        assert_eq!(foreign_repository(b.path()), Some("borg"));
    }
}
