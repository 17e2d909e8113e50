//! Where a repository password comes from, in restic's order: `--password-file` (or
//! `DEDELTA_PASSWORD_FILE`), `--password-command` (or `DEDELTA_PASSWORD_COMMAND`),
//! `DEDELTA_PASSWORD`, else a prompt when standard input is a terminal. A file's or a
//! command's first line is the password (its line ending is not part of it).

use anyhow::{bail, Context, Result};
use clap::Args;
use dedelta_store::Error;
use std::io::IsTerminal;
use std::path::PathBuf;
use zeroize::Zeroizing;

/// The password options every repository command takes.
#[derive(Args, Clone, Debug, Default)]
pub struct PasswordArgs {
    /// Read the repository password from the first line of FILE.
    #[arg(long, value_name = "FILE", env = "DEDELTA_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
    /// Run CMD (with `sh -c`) and take the first line it prints as the repository password.
    /// Without this or --password-file: $DEDELTA_PASSWORD, else a prompt on a terminal. A
    /// repository made with `init --insecure-no-password` needs none.
    #[arg(long, value_name = "CMD", env = "DEDELTA_PASSWORD_COMMAND")]
    pub password_command: Option<String>,
    /// The password is the source repository's of `copy` ([`FromPasswordArgs`]): taken from
    /// `DEDELTA_FROM_PASSWORD`, and the prompt says so.
    #[arg(skip)]
    pub of_source: bool,
}

/// The source repository's password options of `copy` (restic's `--from-password-*`).
#[derive(Args, Clone, Debug, Default)]
pub struct FromPasswordArgs {
    /// Read the source repository's password from the first line of FILE.
    #[arg(long, value_name = "FILE", env = "DEDELTA_FROM_PASSWORD_FILE")]
    pub from_password_file: Option<PathBuf>,
    /// Run CMD (with `sh -c`) and take the first line it prints as the source repository's
    /// password. Without this or --from-password-file: $DEDELTA_FROM_PASSWORD, else a prompt
    /// on a terminal.
    #[arg(long, value_name = "CMD", env = "DEDELTA_FROM_PASSWORD_COMMAND")]
    pub from_password_command: Option<String>,
}

impl From<FromPasswordArgs> for PasswordArgs {
    fn from(a: FromPasswordArgs) -> Self {
        PasswordArgs {
            password_file: a.from_password_file,
            password_command: a.from_password_command,
            of_source: true,
        }
    }
}

/// The first line of `bytes`, as the password.
fn first_line(bytes: Vec<u8>, what: &str) -> Result<Zeroizing<String>> {
    let bytes = Zeroizing::new(bytes);
    let s = std::str::from_utf8(&bytes).with_context(|| format!("{what} is not UTF-8"))?;
    let line = s.lines().next().unwrap_or("");
    Ok(Zeroizing::new(line.to_string()))
}

impl PasswordArgs {
    /// The password given without a terminal (file, command, environment), if any.
    fn given(&self) -> Result<Option<Zeroizing<String>>> {
        if self.password_file.is_some() && self.password_command.is_some() {
            bail!(Error::InvalidOption(
                "give either --password-file or --password-command, not both".into()
            ));
        }
        if let Some(f) = &self.password_file {
            let bytes = std::fs::read(f)
                .with_context(|| format!("reading the password file {}", f.display()))?;
            return first_line(bytes, &format!("the password file {}", f.display())).map(Some);
        }
        if let Some(cmd) = &self.password_command {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .stderr(std::process::Stdio::inherit())
                .output()
                .with_context(|| format!("running the password command {cmd:?}"))?;
            if !out.status.success() {
                bail!("the password command {cmd:?} failed ({})", out.status);
            }
            return first_line(out.stdout, "the password command's output").map(Some);
        }
        if let Ok(p) = std::env::var(self.env_var()) {
            return Ok(Some(Zeroizing::new(p)));
        }
        Ok(None)
    }

    /// The environment variable that may hold the password.
    fn env_var(&self) -> &'static str {
        if self.of_source {
            "DEDELTA_FROM_PASSWORD"
        } else {
            "DEDELTA_PASSWORD"
        }
    }

    /// Whether [`Self::password`] may wait for a user: no password is given (by file,
    /// command or environment) and standard input is a terminal. (A command is taken as not
    /// waiting, although it may ask on its own; what it gives is not known until it runs.)
    pub fn may_prompt(&self) -> bool {
        self.password_file.is_none()
            && self.password_command.is_none()
            && std::env::var_os(self.env_var()).is_none()
            && std::io::stdin().is_terminal()
    }

    /// The password of an existing repository: given, else asked on the terminal.
    pub fn password(&self) -> dedelta_store::Result<Zeroizing<String>> {
        match self.given() {
            Ok(Some(p)) => Ok(p),
            Ok(None) if std::io::stdin().is_terminal() => prompt(if self.of_source {
                "enter password for the source repository: "
            } else {
                "enter password for repository: "
            }),
            Ok(None) => Err(Error::PasswordNeeded),
            Err(e) => Err(Error::InvalidOption(format!("{e:#}"))),
        }
    }

    /// The password of a new repository or key: given, else asked twice on the terminal.
    pub fn new_password(&self, what: &str) -> Result<Zeroizing<String>> {
        if let Some(p) = self.given()? {
            return Ok(p);
        }
        prompt_twice(
            what,
            "give it with --password-file, --password-command or DEDELTA_PASSWORD",
        )
    }
}

/// A new password (`key add`, `key passwd`): the first line of `file`, else asked twice on
/// the terminal. Never the environment's, which is the current password.
pub fn new_password(file: Option<&std::path::Path>, what: &str) -> Result<Zeroizing<String>> {
    if let Some(f) = file {
        let bytes = std::fs::read(f)
            .with_context(|| format!("reading the new password file {}", f.display()))?;
        return first_line(bytes, &format!("the password file {}", f.display()));
    }
    prompt_twice(what, "give it with --new-password-file")
}

/// Asks twice on the terminal; refuses when standard input is not one.
fn prompt_twice(what: &str, how: &str) -> Result<Zeroizing<String>> {
    if !std::io::stdin().is_terminal() {
        bail!(Error::InvalidOption(format!(
            "{what} needs a password: {how} (or run on a terminal)"
        )));
    }
    let a = prompt(&format!("enter password for {what}: "))?;
    let b = prompt("enter the password again: ")?;
    if *a != *b {
        bail!(Error::InvalidOption("the passwords do not match".into()));
    }
    Ok(a)
}

/// Asks on the terminal without echo.
fn prompt(text: &str) -> dedelta_store::Result<Zeroizing<String>> {
    rpassword::prompt_password(text)
        .map(Zeroizing::new)
        .map_err(|e| Error::io("reading the password from the terminal", e))
}
