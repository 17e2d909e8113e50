//! report.md, results.csv and versions.csv.
//!
//! results.csv has one row per configuration and peer with the columns of [`RESULT_COLUMNS`]
//! (the field names of [`ConfigResult`]); empty cells are values that do not apply.

use crate::error::{IoContext, Result};
use crate::runner::{ratio, ConfigResult, VersionRow};
use crate::{EvalOptions, EvalReport};
use std::fmt::Write as _;

/// Columns of results.csv, in order.
pub const RESULT_COLUMNS: &[&str] = &[
    "name",
    "kind",
    "versions",
    "logical_bytes",
    "stored_bytes",
    "repo_bytes",
    "total_factor",
    "chunker",
    "unique_chunks",
    "mean_chunk_bytes",
    "dedup_factor",
    "delta_factor",
    "compression_factor",
    "dcr",
    "dce",
    "delta_ratio",
    "delta_chunks",
    "delta_detected",
    "delta_rejected_min_saving",
    "delta_rejected_reanchor",
    "delta_rejected_tree_bound",
    "detected_dce",
    "min_saving_percent",
    "max_depth",
    "sf_mb_s",
    "delta_encode_mb_s",
    "delta_decode_mb_s",
    "pipeline_sketch_mb_s",
    "sketched_chunks",
    "pipeline_delta_mb_s",
    "backup_seconds",
    "backup_mb_s",
    "versions_restored",
    "restore_bytes",
    "restore_seconds",
    "restore_mb_s",
    "restore_speed_factor",
    "restore_speed_factor_by_size",
    "restore_containers_read",
    "restore_regions_read",
    "restore_cache_containers",
    "capping_level",
    "rewritten_chunks",
    "rewritten_bytes",
    "speed_factor_versions",
    "restore_read_amplification",
    "full_chunk_bytes",
    "delta_bytes",
    "tree_bytes",
    "container_metadata_bytes",
    "snapshot_other_bytes",
    "index_bytes",
    "base_cache_bytes",
    "base_cache_hit_rate",
    "peak_rss_bytes",
    "backup_io_requests",
    "backup_io_bytes",
    "backup_io_metadata_requests",
    "backup_io_data_requests",
    "backup_io_base_requests",
    "backup_io_prefetch_requests",
    "backup_io_prefetch_bytes",
    "backup_local_dense_bytes",
    "backup_modelled_disk_seconds",
    "backup_modelled_object_store_seconds",
    "restore_io_requests",
    "restore_io_bytes",
    "restore_io_metadata_requests",
    "restore_io_data_requests",
    "restore_io_base_requests",
    "restore_modelled_disk_seconds",
    "restore_modelled_object_store_seconds",
    "description",
    "note",
];

/// Columns of versions.csv, in order.
pub const VERSION_COLUMNS: &[&str] = &[
    "config",
    "version",
    "version_name",
    "logical_bytes",
    "cumulative_stored_bytes",
    "backup_seconds",
    "lookup_cache_hits",
    "lookup_filter_negatives",
    "lookup_filter_false_positives",
    "lookup_index_lookups",
    "lookup_bucket_reads",
    "lookup_prefetches",
    "lookup_view_rereads",
    "dense_listed",
    "dense_loaded",
    "dense_loaded_at_stream",
    "caf_old_deltas",
    "caf_base_fragmented",
    "caf_bytes",
    "containers_written",
    "restore_seconds",
    "restore_read_bytes",
    "restore_containers_read",
    "restore_regions_read",
    "restore_container_bytes_read",
    "restore_speed_factor",
    "restore_speed_factor_by_size",
    "backup_io_requests",
    "backup_io_bytes",
    "backup_io_metadata_requests",
    "backup_io_data_requests",
    "backup_io_base_requests",
    "backup_io_prefetch_requests",
    "backup_io_prefetch_bytes",
    "backup_local_dense_bytes",
    "backup_modelled_disk_seconds",
    "backup_modelled_object_store_seconds",
    "restore_io_requests",
    "restore_io_bytes",
    "restore_io_metadata_requests",
    "restore_io_data_requests",
    "restore_io_base_requests",
    "restore_modelled_disk_seconds",
    "restore_modelled_object_store_seconds",
];

fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.clone()
            }
        }
        other => other.to_string(),
    }
}

fn csv<T: serde::Serialize>(columns: &[&str], rows: &[T]) -> String {
    let mut out = columns.join(",");
    out.push('\n');
    for r in rows {
        // Serializing plain structs of numbers and strings cannot fail.
        let v = serde_json::to_value(r).unwrap_or_default();
        let cells: Vec<String> = columns
            .iter()
            .map(|c| cell(v.get(*c).unwrap_or(&serde_json::Value::Null)))
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// results.csv.
pub fn results_csv(results: &[ConfigResult]) -> String {
    csv(RESULT_COLUMNS, results)
}

/// versions.csv.
pub fn versions_csv(rows: &[VersionRow]) -> String {
    csv(VERSION_COLUMNS, rows)
}

fn f(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "–".into(),
    }
}

fn mb(b: u64) -> String {
    format!("{:.2}", b as f64 / 1e6)
}

fn mib(b: Option<u64>) -> String {
    b.map_or("–".into(), |b| {
        format!("{:.1}", b as f64 / (1024.0 * 1024.0))
    })
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{cores} cores ({cpu})")
}

/// The markdown report.
pub fn markdown(opts: &EvalOptions, report: &EvalReport) -> String {
    let d = &opts.dataset;
    let mut s = String::new();
    let _ = writeln!(s, "# dedelta eval: {}\n", d.name);
    let _ = writeln!(s, "Produced by:\n\n```sh\n{}\n```\n", opts.command_line);
    let first = d.versions.first().map_or("", |v| v.name.as_str());
    let last = d.versions.last().map_or("", |v| v.name.as_str());
    // A generated series' directory name holds its parameters (seed, sizes, rates).
    let dir_name = d
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| *n != d.name)
        .map_or(String::new(), |n| format!(" (`{n}`)"));
    let _ = writeln!(
        s,
        "- Dataset: `{}`{dir_name}, {} versions ({first} .. {last}), {} MB in all.\n- Started {}; \
         machine: {}; {} backup threads. Timings are wall clock on a machine shared with \
         other work: compare them within this run only.\n- Each version is one backup into a \
         fresh repository per configuration; {} of {} versions restored per configuration \
         (a sample and the last ones, whose restore speed factor is averaged) and compared \
         byte for byte with the originals.\n",
        d.name,
        d.versions.len(),
        mb(d.total_bytes()),
        opts.time,
        machine(),
        opts.threads,
        crate::runner::restore_picks_with_last(
            d.versions.len(),
            opts.restore_sample,
            opts.speed_factor_versions
        )
        .len(),
        d.versions.len()
    );
    let _ = writeln!(s, "## Storage\n");
    let _ = writeln!(
        s,
        "| configuration | repository MB | containers MB | total factor | dedup | delta | compression | DCR | DCE | delta chunks | detected (kept) | DCE detected | distinct chunks (mean KiB) |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &report.results {
        let _ = writeln!(
            s,
            "| {}{} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            if r.kind == "peer" { "peer: " } else { "" },
            r.name,
            mb(r.repo_bytes),
            if r.kind == "peer" {
                "–".into()
            } else {
                mb(r.stored_bytes)
            },
            ratio(r.logical_bytes, r.repo_bytes),
            f(r.dedup_factor, 2),
            f(r.delta_factor, 2),
            f(r.compression_factor, 2),
            f(r.dcr, 2),
            f(r.dce, 3),
            r.delta_chunks.map_or("–".into(), |v| v.to_string()),
            detected_cell(r),
            f(r.detected_dce, 3),
            chunks_cell(r)
        );
    }
    if let Some(line) = smallest_line(&report.results) {
        let _ = writeln!(s, "\n{line}");
    }
    s.push_str(&detection_table(&report.results));
    s.push_str(&bytes_table(&report.results));
    let _ = writeln!(s, "\n## Speed\n");
    let _ = writeln!(
        s,
        "| configuration | backup MB/s | restore MB/s | SF MB/s | delta encode MB/s | delta decode MB/s | sketch stage MB/s | delta stage MB/s | restore speed factor | speed factor by size | containers read | regions read | read amplification |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &report.results {
        let _ = writeln!(
            s,
            "| {}{} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            if r.kind == "peer" { "peer: " } else { "" },
            r.name,
            r.backup_mb_s,
            f(r.restore_mb_s, 1),
            f(r.sf_mb_s, 0),
            f(r.delta_encode_mb_s, 0),
            f(r.delta_decode_mb_s, 0),
            f(r.pipeline_sketch_mb_s, 0),
            f(r.pipeline_delta_mb_s, 0),
            f(r.restore_speed_factor, 2),
            f(r.restore_speed_factor_by_size, 2),
            r.restore_containers_read
                .map_or("–".into(), |v| v.to_string()),
            r.restore_regions_read.map_or("–".into(), |v| v.to_string()),
            f(r.restore_read_amplification, 2)
        );
    }
    s.push_str(&io_table(&report.results));
    let _ = writeln!(s, "\n## Memory\n");
    let _ = writeln!(
        s,
        "| configuration | index file MiB | base cache MiB (configured) | base cache hit rate | peak RSS MiB |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for r in report.results.iter().filter(|r| r.kind == "dedelta") {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.name,
            mib(r.index_bytes),
            mib(r.base_cache_bytes),
            f(r.base_cache_hit_rate, 3),
            mib(r.peak_rss_bytes)
        );
    }
    let _ = writeln!(s, "\n## Plots\n");
    for (png, what) in [
        ("stored.png", "Stored size per configuration and peer"),
        ("cumulative.png", "Cumulative stored size over versions"),
        ("throughput.png", "Backup and restore throughput"),
        (
            "restore_speed_factor.png",
            "Restore speed factor over versions",
        ),
    ] {
        if opts.out_dir.join(png).exists() {
            let _ = writeln!(s, "![{what}]({png})\n");
        }
    }
    let _ = writeln!(s, "## Configurations\n");
    for r in &report.results {
        let note = if r.note.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.note)
        };
        let _ = writeln!(s, "- `{}`: {}{note}", r.name, r.description);
    }
    let _ = writeln!(s, "\n## Notes\n");
    for n in &report.notes {
        let _ = writeln!(s, "- {n}");
    }
    let _ = writeln!(
        s,
        "- What is measured. *repository MB*: everything under the repository path \
         (`du -sb`: containers, snapshots, config, locks), the same measure for dedelta, \
         restic, rustic and borg; for zstd and xdelta3 the output files. The client's chunk index \
         is a cache outside the repository (`index_bytes` in results.csv, and the Memory \
         table). *containers MB*: dedelta's containers alone (`stats` `stored_bytes`). \
         *Total factor*: logical bytes / repository bytes. *Dedup, delta, compression \
         factors, DCR, DCE*: from \
         `dedelta stats` of each repository; DCR is the new bytes before / after delta \
         compression (Finesse §5.1), DCE the fraction of the delta chunks' bytes that delta \
         encoding saved, `1 - delta / original` (LoopDelta §3.1.4; `delta_ratio` in \
         results.csv is original / delta). *Distinct chunks (mean KiB)*: chunks stored \
         after deduplication, tree chunks included, and their mean raw size (`chunker` in \
         results.csv names the chunker, `@KIND-AVG` in a name one of `--chunker`). *SF, \
         delta encode/decode MB/s*: single thread, \
         fastest of 3 runs, on the non-duplicate chunks (SF) and the {} Finesse-similar \
         chunk pairs (codecs) of the first 16 MiB of the last two versions. *Sketch / \
         delta stage MB/s*: in the backups, new bytes (resp. bytes delta-encoded) per \
         second summed over worker threads. *Backup MB/s*: logical bytes over the wall time \
         of all backups. *Restore MB/s*: bytes restored over wall time (written to disk, \
         every chunk verified). *Restore speed factor* (DARE §4.5, LoopDelta §5.1): MB \
         restored per container read by restore's own cache, {} (an LRU of containers is \
         the papers' cache, LoopDelta's 512 by default), deltas' bases read through it \
         unless restore's cache of rebuilt bases holds them, \
         the mean over the last {} versions (LoopDelta: the last 20); *containers read* and \
         *regions read* (regions read and decompressed into the cache) are summed over \
         those restores. *Speed factor by size*: the same with each container read counted \
         as its stored bytes over the configured container size (4 MiB): every backup seals \
         its last container partly filled, and where a version's new data fill one \
         container or less, every configuration reads about one container per version it \
         depends on, however much it stores; by size, a configuration that stores less \
         reads less. The tree stream (the papers' recipes) is not counted. *Read \
         amplification*: stored bytes read per byte restored (restore's real reads, \
         through that cache). *Index file*: size of the \
         client's chunk index (manifest and runs); *base cache*: the configured delta base cache of the backup; \
         *peak RSS*: VmHWM of the eval process, reset before each configuration (the whole \
         process: backup pipeline, caches, restore).",
        report.kernel_pairs,
        match opts.assembly_bytes {
            Some(area) => format!("forward assembly over areas of {} MiB", area >> 20),
            None => format!("an LRU of {} containers", opts.cache_containers),
        },
        opts.speed_factor_versions
    );
    let _ = writeln!(
        s,
        "- Detection and acceptance. *Detected*: chunks for which a candidate base was found \
         and a delta encoded, over all backups; *kept*: those stored as deltas; the rest \
         were dropped by `min_saving` (the delta saves less than that fraction of the \
         chunk's zstd-1 size), by the re-anchoring bound (a data chunk's delta above \
         `delta.reanchor` of the chunk) or by the tree bound (a tree chunk's delta above \
         half of it), in the table \"Detection and acceptance\". *DCE detected*: DCE over every \
         detected pair with its smallest delta, kept or not (Finesse's DCE measures \
         detection); DCE and DCR measure what was kept. `--min-saving-percent 0` turns \
         `min_saving` off for every configuration: a delta is then dropped under \
         `min_saving` only when it is not smaller than the chunk compressed alone (zstd \
         level 1), where keeping it would save nothing."
    );
    let _ = writeln!(
        s,
        "- Files: results.csv (one row per configuration and peer), versions.csv (one row \
         per version: cumulative stored bytes, backup and restore time, restore speed \
         factor)."
    );
    s
}

/// `kept / detected`, or – where not measured.
/// `12,193 (6.9)`: distinct chunks and their mean raw size in KiB.
fn chunks_cell(r: &ConfigResult) -> String {
    match (r.unique_chunks, r.mean_chunk_bytes) {
        (Some(n), Some(m)) => format!("{n} ({:.1})", m / 1024.0),
        _ => "–".into(),
    }
}

fn detected_cell(r: &ConfigResult) -> String {
    match (r.delta_detected, r.delta_chunks) {
        (Some(d), Some(_)) if d > 0 => {
            let rejected = r.delta_rejected_min_saving.unwrap_or(0)
                + r.delta_rejected_reanchor.unwrap_or(0)
                + r.delta_rejected_tree_bound.unwrap_or(0);
            format!("{d} ({})", d - rejected)
        }
        (Some(_), Some(_)) => "0".into(),
        _ => "–".into(),
    }
}

/// The "Detection and acceptance" section: per dedelta configuration, the pairs detected,
/// kept and dropped by each test.
fn detection_table(results: &[ConfigResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Detection and acceptance\n");
    let _ = writeln!(
        s,
        "Pairs over all backups: a chunk is detected when a delta was encoded for it, then \
         kept or dropped by the first test it fails (the bound is tested before `min_saving`).\n"
    );
    let _ = writeln!(
        s,
        "| configuration | min_saving % | detected | kept | dropped: min_saving | dropped: re-anchoring bound | dropped: tree bound | DCE kept | DCE detected |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results.iter().filter(|r| r.kind == "dedelta") {
        let o = |v: Option<u64>| v.map_or("–".into(), |v| v.to_string());
        let kept = r.delta_detected.map(|d| {
            d - r.delta_rejected_min_saving.unwrap_or(0)
                - r.delta_rejected_reanchor.unwrap_or(0)
                - r.delta_rejected_tree_bound.unwrap_or(0)
        });
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            f(r.min_saving_percent, 0),
            o(r.delta_detected),
            o(kept),
            o(r.delta_rejected_min_saving),
            o(r.delta_rejected_reanchor),
            o(r.delta_rejected_tree_bound),
            f(r.dce, 3),
            f(r.detected_dce, 3)
        );
    }
    s
}

/// The "I/O" section: each dedelta configuration's metered requests over all backups and
/// all restores, and their modelled seconds.
fn io_table(results: &[ConfigResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## I/O\n");
    let _ = writeln!(
        s,
        "Requests to the repository over all backups and all restores (metered by purpose: \
         container metadata, chunk data, delta bases read back by the backup, prefetches: the \
         locality index's container loads, LoopDelta's dense containers read whole), and the \
         seconds they would take, one after the other, on a disk and on an object store \
         (docs/benchmarks.md, \"I/O accounting\"). Wall times above ran on this machine's \
         disk and page cache; these show what a slower store would add.\n"
    );
    let _ = writeln!(
        s,
        "| configuration | backup requests | backup MB | metadata | bases | prefetches | prefetch MB | disk s | object store s | restore requests | restore MB | metadata | data | disk s | object store s |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let o = |v: Option<u64>| v.map_or("–".into(), |v| v.to_string());
    let m = |v: Option<u64>| v.map_or("–".into(), mb);
    for r in results.iter().filter(|r| r.kind == "dedelta") {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            o(r.io.backup_io_requests),
            m(r.io.backup_io_bytes),
            o(r.io.backup_io_metadata_requests),
            o(r.io.backup_io_base_requests),
            o(r.io.backup_io_prefetch_requests),
            m(r.io.backup_io_prefetch_bytes),
            f(r.io.backup_modelled_disk_seconds, 2),
            f(r.io.backup_modelled_object_store_seconds, 2),
            o(r.io.restore_io_requests),
            m(r.io.restore_io_bytes),
            o(r.io.restore_io_metadata_requests),
            o(r.io.restore_io_data_requests),
            f(r.io.restore_modelled_disk_seconds, 2),
            f(r.io.restore_modelled_object_store_seconds, 2)
        );
    }
    s
}

/// The "Where the bytes go" section: each dedelta configuration's stored bytes by kind.
fn bytes_table(results: &[ConfigResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Where the bytes go\n");
    let _ = writeln!(
        s,
        "Stored MB by kind (`dedelta stats` breakdown; a region's compressed bytes are shared \
         among its entries by raw length). The parts add up to the repository's files; the \
         client index is outside the repository.\n"
    );
    let _ = writeln!(
        s,
        "| configuration | full chunks | deltas | trees | container metadata | snapshots, config | client index |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
    for r in results.iter().filter(|r| r.kind == "dedelta") {
        let o = |v: Option<u64>| v.map_or("–".into(), mb);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            o(r.full_chunk_bytes),
            o(r.delta_bytes),
            o(r.tree_bytes),
            o(r.container_metadata_bytes),
            o(r.snapshot_other_bytes),
            o(r.index_bytes)
        );
    }
    s
}

/// The report's sentence naming what stores least: the smallest result of all, and dedelta's
/// smallest configuration as a ratio to it.
fn smallest_line(results: &[ConfigResult]) -> Option<String> {
    let least = results.iter().min_by_key(|r| r.repo_bytes)?;
    let ours = results
        .iter()
        .filter(|r| r.kind == "dedelta")
        .min_by_key(|r| r.repo_bytes)?;
    let who = |r: &ConfigResult| {
        if r.kind == "peer" {
            format!("peer {}", r.name)
        } else {
            format!("dedelta `{}`", r.name)
        }
    };
    Some(if std::ptr::eq(least, ours) {
        format!(
            "Stores least: {} ({} MB on disk).",
            who(least),
            mb(least.repo_bytes)
        )
    } else {
        format!(
            "Stores least: {} ({} MB on disk); dedelta's smallest, `{}`, is {} MB, {:.2}x that.",
            who(least),
            mb(least.repo_bytes),
            ours.name,
            mb(ours.repo_bytes),
            ours.repo_bytes as f64 / least.repo_bytes.max(1) as f64
        )
    })
}

/// Writes report.md, results.csv and versions.csv into the output directory.
///
/// # Errors
/// A file cannot be written.
pub fn write_all(opts: &EvalOptions, report: &EvalReport) -> Result<()> {
    let out = &opts.out_dir;
    for (name, text) in [
        ("results.csv", results_csv(&report.results)),
        ("versions.csv", versions_csv(&report.rows)),
        ("report.md", markdown(opts, report)),
    ] {
        let p = out.join(name);
        std::fs::write(&p, text).ctx(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
