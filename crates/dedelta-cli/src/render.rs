//! Output: how results look on the terminal, as text or as JSON.
//!
//! Each function here takes a dedelta-store result and `json`, and writes either the human
//! text or one JSON object per line to standard output; notices and warnings go to standard
//! error. Only results whose rendering is long live here; a command whose output is a line or
//! a small table renders it in its own `cmd/` file. Nothing here decides an exit code.
//!
//! All standard output goes through [`outln!`], which returns the write error instead of
//! panicking, so that a closed pipe ends the command quietly (see [`crate::is_broken_pipe`]).

use anyhow::Result;
use dedelta_store::backend::wrap::metered::Purpose;
use dedelta_store::commands::{
    backup, check, prune, repair, repair_packs, repair_snapshots, stats,
};
use dedelta_store::format::snapshot::ratio;
use dedelta_store::io_report::IoReport;
use serde::Serialize;
use serde_json::json;

/// Writes a line to standard output. Unlike `println!` it returns an error instead of
/// panicking when the reader has gone (`dedelta snapshots | head`); `main` then exits quietly,
/// as other Unix tools do. Use it in a function returning `anyhow::Result`.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}
pub(crate) use outln;

/// A stored name (a path or a link target) as `ls`, `find` and `diff` print it: on a terminal
/// its control characters (a newline, an escape sequence a hostile file name could hold) as
/// `?`, as GNU `ls` shows them; into a pipe or a file as it is, for scripts.
pub fn shown_name(name: &str) -> std::borrow::Cow<'_, str> {
    use std::sync::OnceLock;
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    let terminal = *TERMINAL.get_or_init(|| std::io::IsTerminal::is_terminal(&std::io::stdout()));
    name_for(name, terminal)
}

/// [`shown_name`] with the terminal question answered.
fn name_for(name: &str, terminal: bool) -> std::borrow::Cow<'_, str> {
    if terminal && name.chars().any(char::is_control) {
        name.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect::<String>()
            .into()
    } else {
        name.into()
    }
}

/// `bytes` in the largest binary unit that leaves at least 1 of it, as restic shows sizes:
/// `512 B`, `3.4 KiB`, `12.5 MiB`, `1.25 GiB`, `2.00 TiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        if bytes >> shift == 0 {
            continue;
        }
        let n = bytes as f64 / (1u64 << shift) as f64;
        return match shift {
            30.. => format!("{n:.2} {unit}"),
            _ => format!("{n:.1} {unit}"),
        };
    }
    format!("{bytes} B")
}

/// Prints each notice (something the user should know that did not stop the command) on
/// standard error as `note: …`.
pub fn print_notices(notices: &[String]) {
    for n in notices {
        eprintln!("note: {n}");
    }
}

/// Prints each warning (something that was skipped or could not be read) on standard error
/// as `warning: …`.
pub fn print_warnings<S: AsRef<str>>(warnings: &[S]) {
    for w in warnings {
        eprintln!("warning: {}", w.as_ref());
    }
}

/// Writes `value` as one line of compact JSON to standard output.
pub fn print_json(value: &impl Serialize) -> Result<()> {
    outln!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// Writes `prefix` and the item, one line per item (a list of ids, names or paths).
fn lines(prefix: &str, items: &[impl std::fmt::Display]) -> Result<()> {
    for item in items {
        outln!("{prefix}{item}");
    }
    Ok(())
}

/// The result of `backup`: the summary with the derived factors (as JSON, with the
/// warnings and notices inside), or warnings and notices on stderr and a few lines of text.
pub fn backup(res: &backup::BackupResult, io: &IoReport, json: bool) -> Result<()> {
    let s = &res.summary;
    let mbps = s.bytes_read as f64 / 1e6 / s.seconds.max(1e-9);
    if json {
        let mut v = serde_json::to_value(s)?;
        // restic's summary message, under its names, then ours.
        v["message_type"] = json!("summary");
        v["dry_run"] = json!(false);
        v["total_files_processed"] = json!(s.files);
        v["total_bytes_processed"] = json!(s.bytes_read);
        v["data_added"] = json!(s.bytes_added);
        v["total_duration"] = json!(s.seconds);
        // Skipped: no snapshot saved; `parent_snapshot_id` names the one that holds the same.
        if res.skipped {
            v["snapshot_id"] = json!(null);
            v["parent_snapshot_id"] = json!(res.snapshot_id.to_hex());
        } else {
            v["snapshot_id"] = json!(res.snapshot_id.to_hex());
        }
        v["skipped"] = json!(res.skipped);
        v["dedup_factor"] = json!(s.dedup_factor());
        v["dcr"] = json!(s.dcr());
        v["dce"] = json!(s.dce());
        v["delta_ratio"] = json!(s.delta_ratio());
        v["detected_dce"] = json!(s.detected_dce());
        v["delta_rejected"] = json!(s.delta_rejected());
        v["mb_per_s"] = json!(mbps);
        v["warning_messages"] = json!(res.warnings);
        v["notices"] = json!(res.notices);
        // Runtime measurements, not stored in the snapshot, under the keys scripts know.
        let m = &res.metrics;
        v["base_cache_hits"] = json!(m.bases.memory);
        v["base_cache_local_hits"] = json!(m.bases.local);
        v["base_cache_misses"] = json!(m.bases.read_back);
        v["base_requests_ahead"] = json!(m.bases.requests_ahead);
        v["base_cache_local_current"] = json!(m.bases.local_current);
        v["stage_seconds"] = json!(m.stage_seconds);
        v["sketched_chunks"] = json!(m.sketched_chunks);
        v["saving_test_compressions"] = json!(m.saving_test_compressions);
        v["lookups"] = json!(m.lookups);
        v["lookups"]["random_reads"] = json!(m.lookups.random_reads());
        v["lookups"]["filter_fp_rate"] = json!(m.lookups.filter_fp_rate());
        let gb = s.bytes_read as f64 / 1e9;
        v["lookups"]["index_lookups_per_gb"] =
            json!((gb > 0.0).then(|| m.lookups.index_lookups as f64 / gb));
        v["lookups"]["index_lookups_per_new_container"] = json!((s.containers_written > 0)
            .then(|| m.lookups.index_lookups as f64 / s.containers_written as f64));
        v["rewritten_chunks"] = json!(m.rewritten.chunks);
        v["rewritten_bytes"] = json!(m.rewritten.bytes);
        v["capping_segments"] = json!(m.rewritten.segments);
        v["base_prefetched_hits"] = json!(m.bases.prefetched);
        v["base_not_cached"] = json!(m.bases.not_cached);
        if let Some(p) = &m.prefetch {
            v["prefetch"] = json!(p);
        }
        v["cache_aware_filter"] = json!(m.rewritten.caf);
        v["inversed_chunks"] = json!(m.rewritten.inversed_chunks);
        v["inversed_bytes"] = json!(m.rewritten.inversed_bytes);
        v["io"] = serde_json::to_value(io)?;
        return print_json(&v);
    }
    print_warnings(&res.warnings);
    print_notices(&res.notices);
    if crate::cmd::global::quiet() {
        return Ok(());
    }
    if res.skipped {
        outln!(
            "nothing changed since snapshot {}: no snapshot saved (--skip-if-unchanged)",
            res.snapshot_id.short()
        );
    } else {
        outln!("snapshot {} saved", res.snapshot_id.short());
    }
    outln!(
        "files: {} ({} new, {} changed, {} unmodified, not read), dirs: {}, symlinks: {}, special: {}",
        s.files,
        s.files_new,
        s.files_changed,
        s.files_unmodified,
        s.dirs,
        s.symlinks,
        s.special_files
    );
    outln!(
        "read {}, new {} ({} chunks of {}), added {} to the repository",
        size(s.bytes_read),
        size(s.bytes_new),
        s.new_chunks,
        s.chunks,
        size(s.bytes_added)
    );
    if res.metrics.rewritten.chunks > 0 {
        outln!(
            "capping: {} duplicate chunks ({}) stored again over {} segments, for restore speed",
            res.metrics.rewritten.chunks,
            size(res.metrics.rewritten.bytes),
            res.metrics.rewritten.segments
        );
    }
    if let Some(p) = &res.metrics.prefetch {
        outln!(
            "prefetch: {} of {} dense containers loaded whole ({} full chunks, {}), {} bases \
             served; {} containers on this backup's dense list",
            p.dense_loaded,
            p.dense_listed,
            p.chunks_loaded,
            size(p.bytes_loaded),
            p.bases_served,
            p.dense_written
        );
    }
    let caf = res.metrics.rewritten.caf;
    if caf.base_not_cached + caf.base_given_up > 0 {
        outln!(
            "cache-aware filter: {} base-fragmented duplicates ({}) stored again, of {} old deltas met",
            caf.base_not_cached + caf.base_given_up,
            size(caf.bytes),
            caf.old_deltas
        );
    }
    if res.metrics.rewritten.inversed_chunks > 0 {
        outln!(
            "inversed delta: {} old chunks stored again as deltas ({}) against new ones; a prune reclaims their full copies",
            res.metrics.rewritten.inversed_chunks,
            size(res.metrics.rewritten.inversed_bytes)
        );
    }
    if s.delta_chunks > 0 {
        outln!(
            "delta: {} chunks as deltas ({} by DupAdj, {} by sketch), {} after delta, DCR {:.2} (new bytes / after delta), DCE {:.3} (fraction saved on the delta chunks)",
            s.delta_chunks,
            s.dupadj_deltas,
            s.sketch_deltas,
            size(s.bytes_after_delta),
            s.dcr(),
            s.dce()
        );
    }
    if s.delta_detected > 0 {
        outln!(
            "detected: {} chunks got a delta, {} kept; dropped by min_saving {}, by the re-anchoring bound {}, by the tree bound {}; DCE over detected {:.3}",
            s.delta_detected,
            s.delta_chunks,
            s.delta_rejected_min_saving,
            s.delta_rejected_reanchor,
            s.delta_rejected_tree_bound,
            s.detected_dce()
        );
    }
    let b = &res.metrics.bases;
    if b.memory + b.local + b.read_back > 0 {
        outln!(
            "bases: {} from memory, {} from the local cache, {} read back",
            b.memory,
            b.local,
            b.read_back
        );
    }
    outln!(
        "dedup factor {:.2}, total factor {:.2}, {:.2} s, {:.1} MB/s",
        s.dedup_factor(),
        ratio(s.bytes_read, s.bytes_added),
        s.seconds,
        mbps
    );
    outln!("{}", io_line(io));
    Ok(())
}

/// The result of `backup --dry-run`: what a backup would store (with `listing`, each entry),
/// as restic's `verbose_status` and `summary` messages with `json`.
pub fn backup_dry_run(
    found: &backup::DryRun,
    listing: &[(std::path::PathBuf, u64, bool)],
    json: bool,
) -> Result<()> {
    if json {
        for (p, size, is_dir) in listing {
            print_json(&json!({
                "message_type": "verbose_status",
                "action": "scan",
                "item": p,
                "data_size": if *is_dir { 0 } else { *size },
            }))?;
        }
        for w in &found.warnings {
            crate::progress::json_error("archival", None, w);
        }
        let mut v = serde_json::to_value(found)?;
        v["message_type"] = json!("summary");
        v["dry_run"] = json!(true);
        v["total_files_processed"] = json!(found.files);
        v["total_bytes_processed"] = json!(found.bytes);
        v["data_added"] = json!(0);
        return print_json(&v);
    }
    for (p, _, _) in listing {
        outln!("would back up {}", p.display());
    }
    print_warnings(&found.warnings);
    outln!(
        "dry run: would back up {} files ({}), {} dirs, {} symlinks, {} special; nothing was written",
        found.files,
        size(found.bytes),
        found.dirs,
        found.symlinks,
        found.special_files
    );
    Ok(())
}

/// The one line of a command's I/O: requests and bytes, the three purposes that matter most
/// to reads, and the modelled seconds.
pub fn io_line(io: &IoReport) -> String {
    let c = &io.counts;
    let t = c.total();
    let req = |p: Purpose| c.purpose(p).requests;
    format!(
        "I/O: {} requests, {} (metadata {}, data {}, bases {} requests); modelled {:.2} s on disk, {:.2} s on an object store",
        t.requests,
        size(t.bytes),
        req(Purpose::ContainerMeta),
        req(Purpose::ChunkData),
        req(Purpose::BaseRead),
        io.modelled.disk,
        io.modelled.object_store
    )
}

/// The report of `check`: each problem with where it was found, then a summary line (which
/// counts chunks read only if `read_data`).
pub fn check(report: &check::CheckReport, read_data: bool, json: bool) -> Result<()> {
    if json {
        // Each problem as restic's `error` message on stderr, then the summary.
        for p in &report.problems {
            let item = p.path.as_ref().map(|f| format!("/{f}"));
            crate::progress::json_error("check", item.as_deref(), &p.message);
        }
        let mut v = serde_json::to_value(report)?;
        v["message_type"] = json!("summary");
        v["num_errors"] = json!(report.problems.len());
        return print_json(&v);
    }
    for p in &report.problems {
        let mut where_ = String::new();
        if let Some(s) = &p.snapshot {
            where_.push_str(&format!("snapshot {s}: "));
        }
        if let Some(f) = &p.path {
            where_.push_str(&format!("file /{f}: "));
        }
        outln!("error: {where_}{}", p.message);
    }
    outln!(
        "checked {} snapshots, {} containers, {} references{}: {}",
        report.snapshots,
        report.containers,
        report.references,
        if read_data {
            format!(", {} chunks read", report.chunks_read)
        } else {
            String::new()
        },
        if report.problems.is_empty() {
            "no errors".to_string()
        } else {
            format!("{} errors", report.problems.len())
        }
    );
    Ok(())
}

/// The repository statistics of `stats`: one aligned `name: value` line each.
pub fn stats(s: &stats::RepoStats, json: bool) -> Result<()> {
    if json {
        return print_json(s);
    }
    let bytes = |n: u64| format!("{n} ({})", size(n));
    outln!("snapshots:          {}", s.snapshots);
    outln!("logical bytes:      {}", bytes(s.logical_bytes));
    outln!("unique bytes:       {}", bytes(s.unique_bytes));
    outln!("after delta:        {}", bytes(s.after_delta_bytes));
    outln!("stored bytes:       {}", bytes(s.stored_bytes));
    outln!(
        "chunks:             {} ({} full, {} delta)",
        s.chunks,
        s.full_chunks,
        s.delta_chunks
    );
    outln!("containers:         {}", s.containers);
    outln!("repository bytes:   {}", bytes(s.repository_bytes));
    let b = &s.breakdown;
    outln!(
        "  full chunks {}, deltas {}, trees {}, container metadata {}, snapshots {}, other {}",
        size(b.full_chunks),
        size(b.deltas),
        size(b.trees),
        size(b.container_metadata),
        size(b.snapshots),
        size(b.other)
    );
    outln!(
        "client cache bytes: {} (index {})",
        bytes(s.cache_bytes),
        size(s.index_bytes)
    );
    outln!("dedup factor:       {:.2}", s.dedup_factor);
    outln!(
        "delta factor (DCR): {:.2} (new bytes before / after delta compression)",
        s.delta_factor
    );
    outln!(
        "DCE:                {:.3} (fraction of the delta chunks' bytes saved by delta encoding)",
        s.dce
    );
    outln!(
        "delta ratio:        {:.2} (original / delta bytes of the delta chunks)",
        s.delta_ratio
    );
    if s.delta_detected > 0 {
        outln!(
            "detected pairs:     {} ({} kept as deltas by their backups; dropped by min_saving {}, by the re-anchoring bound {}, by the tree bound {}), DCE over detected {:.3}",
            s.delta_detected,
            s.delta_detected
                - s.delta_rejected_min_saving
                - s.delta_rejected_reanchor
                - s.delta_rejected_tree_bound,
            s.delta_rejected_min_saving,
            s.delta_rejected_reanchor,
            s.delta_rejected_tree_bound,
            s.detected_dce
        );
    }
    outln!("compression factor: {:.2}", s.compression_factor);
    outln!("total factor:       {:.2}", s.total_factor);
    Ok(())
}

/// The result of `prune` (also run by `forget --prune`): on a dry run the containers it
/// would delete or rewrite, then the plan's counts and the space freed.
pub fn prune(st: &prune::PruneStats, json: bool) -> Result<()> {
    if json {
        return print_json(st);
    }
    let p = &st.plan;
    let planned_nothing = p.delete.is_empty() && p.rewrite.is_empty();
    // A plan with work in it but nothing written or freed: a dry run.
    if st.containers_written == 0 && st.bytes_freed == 0 && !planned_nothing {
        outln!("dry run: nothing was changed");
        lines("would delete container ", &p.delete)?;
        lines("would rewrite container ", &p.rewrite)?;
    }
    outln!(
        "{} chunks referenced, {} kept as delta bases, {} dead",
        p.referenced_chunks,
        p.bases_kept,
        p.dead_chunks
    );
    if p.inversed_promoted > 0 {
        outln!(
            "{} inversed deltas now stand for their chunks (their full copies are garbage)",
            p.inversed_promoted
        );
    }
    outln!(
        "containers: {} deleted, {} rewritten ({} new), {} kept",
        p.delete.len(),
        p.rewrite.len(),
        st.containers_written,
        p.keep
    );
    let freed = if st.seconds > 0.0 && st.containers_written == 0 && planned_nothing {
        "nothing to free,"
    } else {
        "freed"
    };
    let bytes_freed = size(st.bytes_freed.max(0) as u64);
    outln!("{freed} {bytes_freed} in {:.2} s", st.seconds);
    Ok(())
}

/// The result of `repair index`: one line with what the rebuilt index holds.
pub fn repair_index(st: &repair::RepairStats, json: bool) -> Result<()> {
    if json {
        return print_json(st);
    }
    outln!(
        "index rebuilt: {} chunks in {} containers ({} damaged copies left out)",
        st.chunks,
        st.containers,
        st.damaged_skipped
    );
    Ok(())
}

/// The result of `repair packs`: the containers repaired, the chunks lost, a summary, and
/// what to do next if anything was lost.
pub fn repair_packs(st: &repair_packs::RepairPacksStats, json: bool) -> Result<()> {
    if json {
        return print_json(st);
    }
    lines("repaired container ", &st.containers)?;
    lines("lost chunk ", &st.chunks_lost)?;
    lines(
        "left in place (its metadata cannot be read; nothing could be salvaged): container ",
        &st.left_in_place,
    )?;
    outln!(
        "{} containers repaired: {} chunks salvaged into {} new containers, {} chunks lost, {} deltas lost with their base",
        st.containers.len(),
        st.chunks_salvaged,
        st.containers_written,
        st.chunks_lost.len(),
        st.deltas_lost
    );
    if !st.chunks_lost.is_empty() || st.deltas_lost > 0 {
        outln!("back up the affected files again, or run `dedelta repair snapshots`; `dedelta check` lists them");
    }
    Ok(())
}

/// The result of `repair snapshots` with the options it ran with: each snapshot rewritten
/// (or, on a dry run, to be rewritten) with its damaged files, the snapshot files removed or
/// left alone, and a summary.
pub fn repair_snapshots(
    st: &repair_snapshots::RepairSnapshotsStats,
    opts: &repair_snapshots::RepairSnapshotsOptions,
    json: bool,
) -> Result<()> {
    if json {
        return print_json(st);
    }
    let (verb, removed) = if opts.dry_run {
        ("would repair", "would remove")
    } else {
        ("repaired", "removed")
    };
    for rs in &st.repaired {
        outln!(
            "{verb} snapshot {}{}{}",
            rs.original.short(),
            rs.new
                .map(|n| format!(" as {}", n.short()))
                .unwrap_or_default(),
            if rs.tree_truncated {
                " (tree read only in part)"
            } else {
                ""
            }
        );
        for f in &rs.damaged_files {
            outln!("  damaged file /{f}: lost chunks removed");
        }
    }
    lines(
        &format!("{removed} damaged snapshot file "),
        &st.removed_unreadable,
    )?;
    lines("left alone: ", &st.left_unreadable)?;
    outln!(
        "{} snapshots {verb}, {} intact{}",
        st.repaired.len(),
        st.intact,
        if opts.forget || st.repaired.is_empty() {
            String::new()
        } else {
            "; originals kept (remove them with --forget)".into()
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{name_for, size};

    #[test]
    fn control_characters_of_names_are_question_marks_on_a_terminal_only() {
        assert_eq!(name_for("a\nb\x1b[31mc\u{7f}", true), "a?b?[31mc?");
        assert_eq!(name_for("a\nb", false), "a\nb");
        assert_eq!(name_for("plain é", true), "plain é");
    }

    #[test]
    fn sizes_are_shown_in_the_largest_unit_that_fits() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1.0 KiB");
        assert_eq!(size(3500), "3.4 KiB");
        assert_eq!(size(12 << 20 | 512 << 10), "12.5 MiB");
        assert_eq!(size(5 << 29), "2.50 GiB");
        assert_eq!(size(2 << 40), "2.00 TiB");
        assert_eq!(size(u64::MAX), "16777216.00 TiB");
    }
}
