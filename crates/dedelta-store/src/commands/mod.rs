//! One file per operation, each with its options and statistics.

pub mod backup;
pub mod check;
pub mod copy;
pub mod diff;
pub mod find;
pub mod forget;
pub mod ls;
pub mod mount;
pub mod prune;
pub mod repair;
pub mod repair_packs;
pub mod repair_snapshots;
pub mod restore;
pub mod rewrite;
pub mod stats;
pub mod tag;
