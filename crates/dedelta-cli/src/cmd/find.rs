//! `dedelta find`: the files of snapshots whose name or path matches glob patterns, newest
//! snapshot last (restic's `find`; the rules are dedelta_store::commands::find's).
//!
//! Exit codes: 0 searched (whether or not anything matched); 1 a bad pattern or time, or a
//! tree could not be read; 10 no repository.

use super::select::SnapshotFilterArgs;
use super::{open_reader, RepoArg};
use crate::render::{outln, print_json, shown_name};
use anyhow::Result;
use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, TimeZone, Utc};
use clap::Args;
use dedelta_store::commands::find::{find, FindOptions, NodeMatcher};
use dedelta_store::format::tree::Node;
use dedelta_store::Error;
use serde_json::json;

/// Arguments of `dedelta find`.
#[derive(Args)]
pub struct FindArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Glob patterns: without `/` on names (`*.rs`), with `/` on paths (`/src/*.rs` from the
    /// root, `src/*.rs` at any depth); `**` crosses directories.
    #[arg(required = true, value_name = "PATTERN")]
    patterns: Vec<String>,
    /// Search only this snapshot (id prefix or `latest`; repeatable; default: all).
    #[arg(long = "snapshot", short = 's', value_name = "ID")]
    snapshots: Vec<String>,
    #[command(flatten)]
    filter: SnapshotFilterArgs,
    /// Only files modified at or after this time (`2026-11-24`, `2026-11-24 15:04[:05]`,
    /// local time, or RFC 3339).
    #[arg(long, short = 'O', value_name = "TIME")]
    oldest: Option<String>,
    /// Only files modified at or before this time (same forms as `--oldest`).
    #[arg(long, short = 'N', value_name = "TIME")]
    newest: Option<String>,
    /// Match the patterns case-insensitively.
    #[arg(long, short = 'i')]
    ignore_case: bool,
    /// Print a JSON array: per snapshot with matches, `{"snapshot", "hits", "matches"}`.
    #[arg(long)]
    json: bool,
}

/// Parses `--oldest`/`--newest`; `end` makes a bare date mean its last second.
pub fn parse_time(s: &str, end: bool) -> Result<i64> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp());
    }
    let naive = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
        .or_else(|| {
            NaiveDate::parse_from_str(s, "%Y-%m-%d").ok().and_then(|d| {
                if end {
                    d.and_hms_opt(23, 59, 59)
                } else {
                    d.and_hms_opt(0, 0, 0)
                }
            })
        });
    naive
        .and_then(|n| Local.from_local_datetime(&n).earliest())
        .map(|t| t.timestamp())
        .ok_or_else(|| {
            Error::InvalidOption(format!(
                "bad time {s:?} (use 2026-11-24, 2026-11-24 15:04[:05] or RFC 3339)"
            ))
            .into()
        })
}

/// RFC 3339 (UTC) of seconds since the epoch.
fn rfc3339(secs: i64, nanos: u32) -> String {
    DateTime::<Utc>::from_timestamp(secs, nanos)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// `ls -l`'s type letter and permission string, e.g. `-rw-r--r--`, with the set-user-id,
/// set-group-id and sticky bits in the execute places as `ls` shows them (`s`/`S`, `t`/`T`).
pub fn permissions(n: &Node) -> String {
    let mut s = String::from(super::ls::kind_char(n.kind));
    // (shift of the rwx triple, its special bit, the letter with and without execute)
    for (shift, special, letters) in [
        (6, 0o4000, ('s', 'S')),
        (3, 0o2000, ('s', 'S')),
        (0, 0o1000, ('t', 'T')),
    ] {
        let bits = (n.mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, n.mode & special != 0) {
            (true, false) => 'x',
            (false, false) => '-',
            (true, true) => letters.0,
            (false, true) => letters.1,
        });
    }
    s
}

/// A found node as restic's `find --json` match.
fn match_json(n: &Node) -> serde_json::Value {
    json!({
        "path": format!("/{}", n.path_lossy()),
        "permissions": permissions(n),
        "type": n.kind,
        "mode": format!("{:04o}", n.mode & 0o7777),
        "mtime": rfc3339(n.mtime_secs, n.mtime_nanos),
        "atime": rfc3339(n.meta.atime.secs, n.meta.atime.nanos),
        "ctime": rfc3339(n.meta.ctime.secs, n.meta.ctime.nanos),
        "uid": n.meta.uid,
        "gid": n.meta.gid,
        "user": n.meta.user,
        "group": n.meta.group,
        "device_id": n.meta.dev,
        "size": n.size,
        "links": n.meta.nlink,
        "link_target": (!n.target.is_empty()).then(|| String::from_utf8_lossy(&n.target)),
    })
}

/// Searches the snapshots and prints the matches.
pub fn run(args: FindArgs) -> Result<u8> {
    let opts = FindOptions {
        patterns: args.patterns.clone(),
        ignore_case: args.ignore_case,
        oldest: args
            .oldest
            .as_deref()
            .map(|s| parse_time(s, false))
            .transpose()?,
        newest: args
            .newest
            .as_deref()
            .map(|s| parse_time(s, true))
            .transpose()?,
    };
    let matcher = NodeMatcher::new(&opts)?;
    let filter = args.filter.filter()?;
    let (r, _lock) = open_reader(&args.repo, "find")?;
    let snapshots = if args.snapshots.is_empty() {
        let listed = r.snapshots()?;
        crate::render::print_warnings(&listed.warnings());
        filter.apply(listed.snapshots)
    } else {
        let mut v = Vec::new();
        for spec in &args.snapshots {
            v.push(r.find_snapshot_filtered(spec, &filter)?);
        }
        v
    };
    let found = find(&r, &snapshots, &matcher)?;
    if args.json {
        let arr: Vec<_> = found
            .iter()
            .map(|(id, nodes)| {
                json!({
                    "snapshot": id.to_hex(),
                    "hits": nodes.len(),
                    "matches": nodes.iter().map(match_json).collect::<Vec<_>>(),
                })
            })
            .collect();
        return print_json(&arr).map(|()| 0);
    }
    for (id, nodes) in &found {
        let time = snapshots
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, s)| s.time.as_str())
            .unwrap_or("");
        outln!(
            "Found matching entries in snapshot {} from {time}",
            id.short()
        );
        for n in nodes {
            let mut line = format!(
                "{} {:>12} {} /{}",
                permissions(n),
                n.size,
                rfc3339(n.mtime_secs, 0),
                shown_name(&n.path_lossy())
            );
            if !n.target.is_empty() {
                line.push_str(&format!(
                    " -> {}",
                    shown_name(&String::from_utf8_lossy(&n.target))
                ));
            }
            outln!("{line}");
        }
        outln!();
    }
    if found.is_empty() && !args.json {
        eprintln!("no matches in {} snapshots", snapshots.len());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dedelta_store::format::tree::NodeKind;

    #[test]
    fn times_parse_in_restic_forms() {
        assert_eq!(
            parse_time("2026-11-24T00:00:00Z", false).unwrap(),
            1_795_478_400
        );
        let start = parse_time("2026-11-24", false).unwrap();
        assert_eq!(parse_time("2026-11-24", true).unwrap() - start, 86_399);
        assert_eq!(parse_time("2026-11-24 00:01", false).unwrap() - start, 60);
        assert!(parse_time("24.11.2026", false).is_err());
    }

    /// Found as a set-user-id file showing `-rwxr-xr-x`, which hid the bit.
    #[test]
    fn permissions_show_the_special_bits_as_ls_does() {
        let node = |kind, mode| Node {
            path: b"f".to_vec(),
            kind,
            mode,
            mtime_secs: 0,
            mtime_nanos: 0,
            size: 0,
            target: Vec::new(),
            meta: Default::default(),
        };
        for (kind, mode, want) in [
            (NodeKind::File, 0o100644, "-rw-r--r--"),
            (NodeKind::File, 0o104755, "-rwsr-xr-x"),
            (NodeKind::File, 0o102644, "-rw-r-Sr--"),
            (NodeKind::Dir, 0o41777, "drwxrwxrwt"),
            (NodeKind::Dir, 0o41776, "drwxrwxrwT"),
            (NodeKind::File, 0o106711, "-rws--s--x"),
        ] {
            assert_eq!(permissions(&node(kind, mode)), want, "{mode:o}");
        }
    }
}
