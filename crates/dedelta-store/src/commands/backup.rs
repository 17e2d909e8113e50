//! `backup`: the command's options and entry point; the pipeline is in [`crate::backup`].

pub use crate::backup::{backup, BackupOptions, BackupResult, StdinSource, MAX_THREADS};
