//! `dedelta ls`: lists the files of a snapshot, one line per node (`ls -l`-like text, or one
//! JSON object per line), written as the tree is walked rather than collected first.
//!
//! Exit codes: 0 listed; 1 no such snapshot or a tree could not be read; 10 no repository.

use super::{open_reader, RepoArg};
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
    /// Snapshot id (a unique prefix) or `latest`.
    snapshot: String,
    /// Print one JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Walks the snapshot's tree and prints each node.
pub fn run(args: LsArgs) -> Result<u8> {
    let (r, _lock) = open_reader(&args.repo, "ls")?;
    let (_, snap) = r.find_snapshot(&args.snapshot)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    dedelta_store::read::walk_tree(&r, &snap, |n, _| {
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

/// A node as one JSON object (paths and targets lossily as UTF-8).
fn json_line(n: &Node) -> String {
    json!({
        "path": format!("/{}", n.path_lossy()),
        "type": n.kind,
        "mode": n.mode,
        "size": n.size,
        "mtime": n.mtime_secs,
        "target": if n.target.is_empty() { None } else { Some(String::from_utf8_lossy(&n.target)) },
        "uid": n.meta.uid,
        "gid": n.meta.gid,
        "user": n.meta.user,
        "group": n.meta.group,
        "atime": n.meta.atime.secs,
        "ctime": n.meta.ctime.secs,
        "inode": n.meta.ino,
        "links": n.meta.nlink,
        "device": n.meta.dev,
        "rdev": n.meta.rdev,
        "xattrs": n.meta.xattrs.len(),
    })
    .to_string()
}

/// A node as `-0644         1234 /path` (`d` directory, `-` file, `l` symlink with
/// ` -> target`, `p` FIFO, `s` socket, `c` and `b` devices).
fn text_line(n: &Node) -> String {
    let t = match n.kind {
        NodeKind::Dir => 'd',
        NodeKind::File => '-',
        NodeKind::Symlink => 'l',
        NodeKind::Fifo => 'p',
        NodeKind::Socket => 's',
        NodeKind::CharDevice => 'c',
        NodeKind::BlockDevice => 'b',
    };
    let mut l = format!(
        "{t}{:04o} {:>12} /{}",
        n.mode & 0o7777,
        n.size,
        n.path_lossy()
    );
    if !n.target.is_empty() {
        l.push_str(&format!(" -> {}", String::from_utf8_lossy(&n.target)));
    }
    l
}
