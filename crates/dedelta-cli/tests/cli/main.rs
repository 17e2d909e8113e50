//! Integration tests of the `dedelta` binary: one module per command, each test in a fresh
//! temporary directory.

mod backup_restore;
mod check;
mod conventions;
mod copy;
mod crash;
mod debug;
mod delta;
mod encryption;
mod errors;
mod find_diff;
mod garage;
mod locks;
mod metadata;
mod mount;
mod reliability;
mod restore_options;
mod restore_safety;
mod rewrite;
mod s3;
mod select;
mod selection;
mod subfolder;
mod support;
