//! `dedelta key list|add|remove|passwd`: the key files of an encrypted repository, each the
//! master key sealed under one password (as restic's `key`). `list` and `add` take a shared
//! lock; `remove` and `passwd` (which removes the old key file) an exclusive one.
//!
//! Exit codes: 0 done; 1 a bad option, the repository is not encrypted, or the key to remove
//! is the one in use or the last; 11 the repository is locked; 12 wrong password.

use super::init::kdf_params;
use super::RepoArg;
use crate::render::{outln, print_json};
use anyhow::Result;
use clap::{Args, Subcommand};
use dedelta_store::crypto::KeyOrigin;
use dedelta_store::repository::lock::LockMode;
use std::path::PathBuf;

/// Arguments of `dedelta key`.
#[derive(Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    what: KeyCommand,
}

/// How the new password of `key add` and `key passwd` is given.
#[derive(Args)]
struct NewPassword {
    /// Read the new password from the first line of FILE (else it is asked twice on the
    /// terminal).
    #[arg(long, value_name = "FILE")]
    new_password_file: Option<PathBuf>,
    /// Derive with Argon2id's smallest parameters (tests only).
    #[arg(long, hide = true)]
    insecure_kdf: bool,
}

#[derive(Subcommand)]
enum KeyCommand {
    /// List the key files (`*` marks the one whose password opened the repository).
    List {
        #[command(flatten)]
        repo: RepoArg,
        /// Print `{"keys": [...]}`.
        #[arg(long)]
        json: bool,
    },
    /// Add a key file: another password for the same repository and data.
    Add {
        #[command(flatten)]
        repo: RepoArg,
        #[command(flatten)]
        new: NewPassword,
    },
    /// Remove a key file (never the one whose password is given, nor the last).
    Remove {
        #[command(flatten)]
        repo: RepoArg,
        /// The key's id, or a unique prefix of it.
        id: String,
    },
    /// Change the password: adds a key file with the new one, then removes the key in use.
    Passwd {
        #[command(flatten)]
        repo: RepoArg,
        #[command(flatten)]
        new: NewPassword,
    },
}

/// Who makes a key file: now, this host, this user.
pub fn origin() -> KeyOrigin {
    KeyOrigin {
        created: super::now_rfc3339(),
        host: super::host(),
        username: dedelta_store::repository::lock::current_user()
            .unwrap_or_else(|| "unknown".into()),
    }
}

/// Runs a `key` subcommand.
pub fn run(args: KeyArgs) -> Result<u8> {
    match args.what {
        KeyCommand::List { repo, json } => {
            let r = repo.open_unmetered()?;
            let _lock = repo.lock(&r, "key list", LockMode::Shared)?;
            let keys = r.list_keys()?;
            if json {
                print_json(&serde_json::json!({ "keys": keys }))?;
            } else {
                outln!(
                    " {:<12}  {:<20}  {:<16}  {}",
                    "ID",
                    "USER",
                    "HOST",
                    "CREATED"
                );
                for k in keys {
                    outln!(
                        "{}{:<12}  {:<20}  {:<16}  {}",
                        if k.current { "*" } else { " " },
                        &k.id[..12.min(k.id.len())],
                        k.username,
                        k.host,
                        k.created
                    );
                }
            }
        }
        KeyCommand::Add { repo, new } => {
            let r = repo.open_unmetered()?;
            // Adding a key takes nothing from anyone: beside backups and restores.
            let _lock = repo.lock(&r, "key add", LockMode::Shared)?;
            let pw =
                crate::password::new_password(new.new_password_file.as_deref(), "the new key")?;
            let id = r.add_key(&pw, kdf_params(new.insecure_kdf), &origin())?;
            outln!("added key {id}");
        }
        KeyCommand::Remove { repo, id } => {
            let r = repo.open_unmetered()?;
            // Alone, as restic does: a running command may have opened the repository with
            // the key being removed.
            let _lock = repo.lock(&r, "key remove", LockMode::Exclusive)?;
            let id = r.remove_key(&id)?;
            outln!("removed key {id}");
        }
        KeyCommand::Passwd { repo, new } => {
            let mut r = repo.open_unmetered()?;
            // It removes the old key file: alone, as `key remove`.
            let _lock = repo.lock(&r, "key passwd", LockMode::Exclusive)?;
            let pw = crate::password::new_password(
                new.new_password_file.as_deref(),
                "the new password",
            )?;
            let old = r.key_id().map(str::to_string);
            let id = r.change_password(&pw, kdf_params(new.insecure_kdf), &origin())?;
            outln!(
                "password changed: key {id} replaces {}",
                old.unwrap_or_default()
            );
        }
    }
    Ok(0)
}
