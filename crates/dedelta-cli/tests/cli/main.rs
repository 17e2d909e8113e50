//! Integration tests of the `dedelta` binary: one module per command, each test in a fresh
//! temporary directory.

mod backup_restore;
mod check;
mod crash;
mod delta;
mod errors;
mod locks;
mod metadata;
mod reliability;
mod restore_safety;
mod s3;
mod support;
