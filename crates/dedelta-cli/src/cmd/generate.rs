//! `dedelta generate`: shell completions (`--completions bash|zsh|fish`, to standard output)
//! and man pages (`--man DIR`: `dedelta.1` and one `dedelta-COMMAND.1` per subcommand),
//! both generated from the clap definition, so they never fall behind the options (restic's
//! `generate --bash-completion FILE`, `--man DIR`; dedelta prints completions to standard
//! output, the usual form for `dedelta generate --completions bash > ...`).
//!
//! Exit codes: 0 written; 1 neither option given, or the directory could not be written.

use crate::render::outln;
use anyhow::{Context, Result};
use clap::Args;
use clap_complete::Shell;
use dedelta_store::Error;
use std::path::PathBuf;

/// Arguments of `dedelta generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// Print the completion script for this shell (bash, zsh, fish, elvish, powershell).
    #[arg(long, value_name = "SHELL")]
    completions: Option<Shell>,
    /// Write man pages into this directory (created if absent).
    #[arg(long, value_name = "DIR")]
    man: Option<PathBuf>,
}

/// Writes what was asked for; `cli` is the whole command definition.
pub fn run(args: GenerateArgs, mut cli: clap::Command) -> Result<u8> {
    if args.completions.is_none() && args.man.is_none() {
        return Err(Error::InvalidOption("give --completions SHELL or --man DIR".into()).into());
    }
    if let Some(dir) = &args.man {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        clap_mangen::generate_to(cli.clone(), dir)
            .with_context(|| format!("writing man pages to {}", dir.display()))?;
        if args.completions.is_none() {
            outln!("wrote man pages to {}", dir.display());
        }
    }
    if let Some(shell) = args.completions {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cli, "dedelta", &mut out);
        use std::io::Write as _;
        std::io::stdout().lock().write_all(&out)?;
    }
    Ok(0)
}
