//! `dedelta diff A B`: the nodes added, removed and changed from snapshot A to snapshot B,
//! and what each added to the repository (restic's `diff`; the rules are
//! dedelta_store::commands::diff's).
//!
//! Exit codes: 0 compared; 1 no such snapshot or a tree could not be read; 10 no repository.

use super::select::SnapshotFilterArgs;
use super::{open_reader_then, RepoArg};
use crate::render::{outln, print_json, shown_name, size};
use anyhow::Result;
use clap::Args;
use dedelta_store::commands::diff::{diff, Modifier, SideCounts};
use dedelta_store::read::Subtree;
use serde_json::json;

/// Arguments of `dedelta diff`.
#[derive(Args)]
pub struct DiffArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// The first snapshot (id prefix or `latest`); `SNAPSHOT:SUBFOLDER` compares what that
    /// directory holds (give the second one too).
    a: String,
    /// The second snapshot (id prefix or `latest`, or `SNAPSHOT:SUBFOLDER`).
    b: String,
    #[command(flatten)]
    filter: SnapshotFilterArgs,
    /// Also list nodes whose metadata alone changed (`U`).
    #[arg(long)]
    metadata: bool,
    /// Print one JSON object per line: `{"message_type": "change", "path", "modifier"}` per
    /// change, then one `{"message_type": "statistics", ...}`.
    #[arg(long)]
    json: bool,
}

/// Compares the snapshots and prints the changes and the statistics.
pub fn run(args: DiffArgs) -> Result<u8> {
    let filter = args.filter.filter()?;
    // The snapshots are listed beside the index's catch-up, and the snapshot found there.
    let (r, _lock) = open_reader_then(&args.repo, "diff", |r| r.listing_snapshots_at_open())?;
    let (a_id, a_snap, a_sub) = super::select::find_with_subtree(&r, &args.a, &filter)?;
    let (b_id, b_snap, b_sub) = super::select::find_with_subtree(&r, &args.b, &filter)?;
    let (a, b) = ((a_id, a_snap), (b_id, b_snap));
    let rep = diff(&r, &a, &b, (&a_sub, &b_sub))?;
    let shown = rep
        .changes
        .iter()
        .filter(|c| args.metadata || c.modifier != Modifier::Metadata);
    if args.json {
        for c in shown {
            print_json(&json!({"message_type": "change", "path": c.path, "modifier": c.modifier}))?;
        }
        return print_json(&json!({
            "message_type": "statistics",
            "source_snapshot": a.0.to_hex(),
            "target_snapshot": b.0.to_hex(),
            "changed_files": rep.changed_files,
            "metadata_changed": rep.metadata_changed,
            "added": rep.added,
            "removed": rep.removed,
            "repository": {"source": rep.source, "target": rep.target},
        }))
        .map(|()| 0);
    }
    let named = |id: &dedelta_store::format::snapshot::SnapshotId, sub: &Subtree| {
        if sub.is_whole() {
            id.short()
        } else {
            format!("{}:/{}", id.short(), String::from_utf8_lossy(sub.prefix()))
        }
    };
    outln!(
        "comparing snapshot {} to {}:",
        named(&a.0, &a_sub),
        named(&b.0, &b_sub)
    );
    outln!();
    for c in shown {
        outln!("{}    {}", c.modifier.code(), shown_name(&c.path));
    }
    outln!();
    let side = |s: &SideCounts| {
        format!(
            "{} files ({}), {} dirs, {} others; {} chunks ({})",
            s.files,
            size(s.file_bytes),
            s.dirs,
            s.others,
            s.chunks,
            size(s.chunk_bytes)
        )
    };
    outln!("added:    {}", side(&rep.added));
    outln!("removed:  {}", side(&rep.removed));
    outln!(
        "changed:  {} files in content, {} nodes in metadata only",
        rep.changed_files,
        rep.metadata_changed
    );
    for (name, s) in [("source", &rep.source), ("target", &rep.target)] {
        outln!(
            "{name} {} added to the repository when written: {} ({} new chunks, {} as deltas); \
             {} containers only it references ({})",
            &s.snapshot[..8],
            size(s.bytes_added),
            s.new_chunks,
            s.delta_chunks,
            s.containers_only_here,
            size(s.container_bytes_only_here)
        );
    }
    Ok(0)
}
