//! The snapshot selection options every command that takes snapshots shares (`--host`,
//! `--tag`, `--path`), turned into dedelta-store's one [`SnapshotFilter`]; and the
//! `SNAPSHOT[:SUBFOLDER]` argument of `restore`, `ls`, `dump` and `diff`.

use anyhow::Result;
use clap::Args;
use dedelta_store::format::snapshot::{Snapshot, SnapshotId};
use dedelta_store::read::Subtree;
use dedelta_store::repository::snapshot_filter::{GroupBy, SnapshotFilter};
use dedelta_store::IndexedRepository;

/// The `--help` heading of the selection options.
const HEADING: &str = "Snapshot selection";

/// `--host`, `--tag`, `--path`: which snapshots a command considers (restic's names and
/// rules: hosts any, tag lists any, paths all).
#[derive(Args, Clone, Default, Debug)]
pub struct SnapshotFilterArgs {
    /// Only snapshots of this host (repeatable: any of them).
    #[arg(long = "host", short = 'H', value_name = "HOST", help_heading = HEADING)]
    pub hosts: Vec<String>,
    /// Only snapshots with these tags (`a,b`: all of them; repeatable: any of the lists;
    /// `""`: snapshots without tags).
    #[arg(long = "tag", value_name = "TAG[,TAG...]", help_heading = HEADING)]
    pub tags: Vec<String>,
    /// Only snapshots that hold this path (repeatable: all of them).
    #[arg(long = "path", value_name = "PATH", help_heading = HEADING)]
    pub paths: Vec<String>,
}

impl SnapshotFilterArgs {
    /// The filter these options describe.
    ///
    /// # Errors
    /// An empty tag inside a list (`--tag a,,b`).
    pub fn filter(&self) -> Result<SnapshotFilter> {
        Ok(SnapshotFilter {
            hosts: self.hosts.clone(),
            tags: SnapshotFilter::parse_tag_lists(&self.tags)?,
            paths: self.paths.clone(),
            ..SnapshotFilter::default()
        })
    }
}

/// Parses `--group-by` for clap.
pub fn parse_group_by(s: &str) -> Result<GroupBy, String> {
    GroupBy::parse(s).map_err(|e| e.to_string())
}

/// The snapshot a `SNAPSHOT[:SUBFOLDER]` argument names (an id prefix or `latest`, among
/// those `filter` selects), and the part of it the command sees: the whole tree, or the
/// directory after the `:` (restic's syntax), checked to be one.
///
/// # Errors
/// No such snapshot; no such directory in it.
pub fn find_with_subtree(
    r: &IndexedRepository,
    spec: &str,
    filter: &SnapshotFilter,
) -> Result<(SnapshotId, Snapshot, Subtree)> {
    let (snapshot, sub) = Subtree::split_spec(spec);
    let (id, snap) = r.find_snapshot_filtered(snapshot, filter)?;
    let subtree = match sub {
        Some(path) => Subtree::find(r, &id, &snap, path.as_bytes())?,
        None => Subtree::whole(),
    };
    Ok((id, snap, subtree))
}
