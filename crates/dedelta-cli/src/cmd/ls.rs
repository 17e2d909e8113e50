//! `dedelta ls`: lists the files of a snapshot, one line per node (`ls -l`-like text, or one
//! JSON object per line), written as the tree is walked rather than collected first.
//!
//! Exit codes: 0 listed; 1 no such snapshot or a tree could not be read; 10 no repository.

use super::{open_reader_then, RepoArg};
use crate::render::shown_name;
use anyhow::Result;
use clap::Args;
use dedelta_store::format::tree::{Node, NodeKind};
use dedelta_store::Error;
use serde_json::json;
use std::io::Write;

/// Arguments of `dedelta ls`.
#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Snapshot id (a unique prefix) or `latest`; `SNAPSHOT:SUBFOLDER` lists what that
    /// directory holds, with paths below it.
    snapshot: String,
    #[command(flatten)]
    filter: super::select::SnapshotFilterArgs,
    /// Print one JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Walks the snapshot's tree and prints each node (with `--json`, after a line describing the
/// snapshot, as restic's `ls --json`).
pub fn run(args: LsArgs) -> Result<u8> {
    // The snapshots are listed beside the index's catch-up, and the snapshot found there.
    let (r, _lock) = open_reader_then(&args.repo, "ls", |r| r.listing_snapshots_at_open())?;
    let (id, snap, subtree) =
        super::select::find_with_subtree(&r, &args.snapshot, &args.filter.filter()?)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        let line = json!({
            "struct_type": "snapshot",
            "message_type": "snapshot",
            "id": id.to_hex(),
            "short_id": id.short(),
            "time": snap.time,
            "hostname": snap.host,
            "paths": snap.paths,
            "tags": snap.tags,
        });
        writeln!(out, "{line}").map_err(|e| Error::io("writing to standard output", e))?;
    }
    dedelta_store::read::walk_tree(&r, &snap, |n, _| {
        let Some(n) = subtree.view(n) else {
            return Ok(());
        };
        let line = if args.json {
            json_line(&n)
        } else {
            text_line(&n)
        };
        writeln!(out, "{line}").map_err(|e| Error::io("writing to standard output", e))
    })?;
    out.flush()?;
    Ok(0)
}

/// A node as one JSON object, restic's `node` message: `struct_type`, the path with a
/// leading `/` (as `snapshots` gives the sources and `find` the matches), RFC 3339 times and
/// the mode in octal (paths and targets lossily as UTF-8).
fn json_line(n: &Node) -> String {
    let path = format!("/{}", n.path_lossy());
    let name = path.rsplit('/').next().unwrap_or("").to_string();
    json!({
        "struct_type": "node",
        "message_type": "node",
        "name": name,
        "path": path,
        "type": n.kind,
        "mode": format!("{:04o}", n.mode & 0o7777),
        "permissions": super::find::permissions(n),
        "size": n.size,
        "mtime": rfc3339(n.mtime_secs, n.mtime_nanos),
        "atime": rfc3339(n.meta.atime.secs, n.meta.atime.nanos),
        "ctime": rfc3339(n.meta.ctime.secs, n.meta.ctime.nanos),
        "target": if n.target.is_empty() { None } else { Some(String::from_utf8_lossy(&n.target)) },
        "uid": n.meta.uid,
        "gid": n.meta.gid,
        "user": n.meta.user,
        "group": n.meta.group,
        "inode": n.meta.ino,
        "links": n.meta.nlink,
        "device": n.meta.dev,
        "rdev": n.meta.rdev,
        "xattrs": n.meta.xattrs.len(),
    })
    .to_string()
}

/// A time as RFC 3339 in UTC with nanoseconds (`null` if out of range).
fn rfc3339(secs: i64, nanos: u32) -> Option<String> {
    chrono::DateTime::from_timestamp(secs, nanos)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

/// The `ls -l` letter of a node's kind.
pub(crate) fn kind_char(k: NodeKind) -> char {
    match k {
        NodeKind::Dir => 'd',
        NodeKind::File => '-',
        NodeKind::Symlink => 'l',
        NodeKind::Fifo => 'p',
        NodeKind::Socket => 's',
        NodeKind::CharDevice => 'c',
        NodeKind::BlockDevice => 'b',
    }
}

/// A node as `-0644         1234 /path` (`d` directory, `-` file, `l` symlink with
/// ` -> target`, `p` FIFO, `s` socket, `c` and `b` devices).
fn text_line(n: &Node) -> String {
    let t = kind_char(n.kind);
    let mut l = format!(
        "{t}{:04o} {:>12} /{}",
        n.mode & 0o7777,
        n.size,
        shown_name(&n.path_lossy())
    );
    if !n.target.is_empty() {
        l.push_str(&format!(
            " -> {}",
            shown_name(&String::from_utf8_lossy(&n.target))
        ));
    }
    l
}
