//! `dedelta backup`: stores files and directories (or standard input) as a new snapshot,
//! under the repository lock, with a progress bar sized by a quick walk of the sources.
//!
//! Exit codes: 0 saved; 3 saved, but some sources could not be read (each named in a
//! warning); 1 nothing saved; 10 no repository; 11 locked.

use super::{host, now_rfc3339, progress_stream, DeltaArgs, IoModelArgs, RepoArg};
use crate::{render, EXIT_PARTIAL};
use anyhow::{Context, Result};
use clap::Args;
use dedelta_store::commands::backup;
use dedelta_store::repository::lock::LockMode;
use dedelta_store::Error;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// Arguments of `dedelta backup`.
#[derive(Args)]
pub struct BackupArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// Files and directories to back up (with --stdin-from-command: the command and its
    /// arguments).
    paths: Vec<PathBuf>,
    /// Tag the snapshot (repeatable).
    #[arg(long)]
    tag: Vec<String>,
    /// The host name the snapshot records (and whose snapshots give the parent), instead of
    /// `$DEDELTA_HOST` or this machine's name.
    #[arg(long, short = 'H', value_name = "HOST")]
    host: Option<String>,
    /// The time the snapshot records instead of now (`2026-11-24 15:04:05` in local time, or
    /// RFC 3339): for importing older data in order, as restic's `--time`.
    #[arg(long, value_name = "TIME")]
    time: Option<String>,
    /// Show what would be backed up (with -v, each entry); read no file, write nothing.
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Print restic-style JSON lines: `status` while it runs (and `verbose_status` per file
    /// with -v) on standard output, `error` on standard error, then the `summary`.
    #[arg(long)]
    json: bool,
    /// Back up standard input as one file.
    #[arg(long, conflicts_with = "stdin_from_command")]
    stdin: bool,
    /// Back up the standard output of a command as one file: the arguments are the command
    /// and its own arguments (after `--`, run without a shell). When the command exits with
    /// an error, no snapshot is saved (a pipe into --stdin cannot tell).
    #[arg(long)]
    stdin_from_command: bool,
    /// File name for --stdin and --stdin-from-command.
    #[arg(long, alias = "stdin-filename", default_value = "stdin")]
    stdin_name: String,
    /// Compare files with this snapshot (an id prefix or `latest`) instead of the newest
    /// snapshot of the same host and paths.
    #[arg(long, value_name = "SNAPSHOT")]
    parent: Option<String>,
    /// Read every file, even those unchanged since the parent snapshot.
    #[arg(long)]
    force: bool,
    /// Save no snapshot when nothing changed since the parent snapshot (its tree would be
    /// the parent's): for frequent backups of data that rarely changes.
    #[arg(long)]
    skip_if_unchanged: bool,
    /// A file whose inode changed but nothing else is unchanged (network and FUSE mounts).
    #[arg(long)]
    ignore_inode: bool,
    /// A file whose status change time (ctime) changed but nothing else is unchanged.
    #[arg(long)]
    ignore_ctime: bool,
    /// Worker threads (default: number of cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Keep no local base cache (every base is read back from the repository).
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten, next_help_heading = "Algorithm options")]
    delta: DeltaArgs,
    /// Capping (rewriting for restore speed): reference at most this many old containers per
    /// segment of the stream, storing the other duplicates again (0: off, unless a `-cap`
    /// `--preset` sets it). A prune reclaims the copies they replace.
    #[arg(long, default_value_t = 0, help_heading = "Algorithm options")]
    capping_level: usize,
    /// Capping's segment, in MiB of file data.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_048_576), help_heading = "Algorithm options")]
    capping_segment_mib: u64,
    /// Cache-aware filter (LoopDelta §4.4): store again a duplicate of an old delta whose
    /// base is not in the fingerprint cache, so that restore reads no extra container for it.
    /// Needs --fingerprint-index locality.
    #[arg(long, help_heading = "Algorithm options")]
    cache_aware_filter: bool,
    /// Inversed delta compression (LoopDelta §4.5): a new chunk similar to a chunk in a
    /// container Capping gave up is stored in full, and the old chunk again as a delta
    /// against it; a prune reclaims the old full copy. Needs --capping-level and a
    /// repository of format version 4.
    #[arg(long, help_heading = "Algorithm options")]
    inversed_delta: bool,
    /// Keep the dense containers LoopDelta prefetches whole on this client's disk (in the
    /// cache directory) between backups, and read them from there: a dedelta deviation from
    /// LoopDelta §4.3, which reads them from the repository in every backup. Needs the
    /// `prefetch` sketch index (the loopdelta presets) and a cache directory.
    #[arg(long, help_heading = "Algorithm options")]
    keep_dense_local: bool,
    #[command(flatten, next_help_heading = "Algorithm options")]
    lookup: LookupArgs,
    #[command(flatten, next_help_heading = "I/O cost model")]
    io_models: IoModelArgs,
}

/// What to back up and what to leave out (restic's names and behaviour).
#[derive(Args)]
#[command(next_help_heading = "Selection")]
pub struct SelectArgs {
    /// Skip entries whose full path or name matches this glob (repeatable).
    #[arg(long, short = 'e', value_name = "PATTERN")]
    exclude: Vec<String>,
    /// As --exclude, ignoring case.
    #[arg(long, value_name = "PATTERN")]
    iexclude: Vec<String>,
    /// Read --exclude patterns from FILE, one a line (`#` starts a comment).
    #[arg(long, value_name = "FILE")]
    exclude_file: Vec<PathBuf>,
    /// Read --iexclude patterns from FILE, one a line.
    #[arg(long, value_name = "FILE")]
    iexclude_file: Vec<PathBuf>,
    /// Back up the paths listed in FILE, one a line (`#` starts a comment, empty lines are
    /// skipped; `-` is standard input).
    #[arg(long, value_name = "FILE")]
    files_from: Vec<PathBuf>,
    /// As --files-from, taking every line as a path (no comments).
    #[arg(long, value_name = "FILE")]
    files_from_verbatim: Vec<PathBuf>,
    /// As --files-from, paths separated by NUL bytes (`find -print0`).
    #[arg(long, value_name = "FILE")]
    files_from_raw: Vec<PathBuf>,
    /// Skip directories that hold a CACHEDIR.TAG with the cache directory signature.
    #[arg(long)]
    exclude_caches: bool,
    /// Skip directories that hold a file of this name (NAME:HEADER: only if the file starts
    /// with HEADER).
    #[arg(long, value_name = "NAME[:HEADER]")]
    exclude_if_present: Vec<String>,
    /// Skip files larger than SIZE (bytes, or with k, m, g, t: powers of 1024).
    #[arg(long, value_name = "SIZE")]
    exclude_larger_than: Option<String>,
    /// Do not cross into other file systems below a source (mount points are kept, empty).
    #[arg(long, short = 'x')]
    one_file_system: bool,
}

impl SelectArgs {
    /// The selection options, with the pattern files read.
    fn options(&self) -> Result<backup::SelectOptions> {
        let mut excludes = self.exclude.clone();
        for f in &self.exclude_file {
            excludes.extend(patterns_of(f)?);
        }
        let mut iexcludes = self.iexclude.clone();
        for f in &self.iexclude_file {
            iexcludes.extend(patterns_of(f)?);
        }
        Ok(backup::SelectOptions {
            excludes,
            iexcludes,
            exclude_caches: self.exclude_caches,
            exclude_if_present: self.exclude_if_present.clone(),
            exclude_larger_than: self
                .exclude_larger_than
                .as_deref()
                .map(|s| {
                    backup::parse_size(s)
                        .map_err(|e| Error::InvalidOption(format!("--exclude-larger-than: {e}")))
                })
                .transpose()?,
        })
    }

    /// The paths the --files-from options list.
    fn listed_paths(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for (files, format) in [
            (&self.files_from, ListFormat::Commented),
            (&self.files_from_verbatim, ListFormat::Lines),
            (&self.files_from_raw, ListFormat::Nul),
        ] {
            for f in files {
                out.extend(
                    lines_of(f, format)?
                        .into_iter()
                        .map(|b| PathBuf::from(std::ffi::OsString::from_vec(b))),
                );
            }
        }
        Ok(out)
    }
}

/// How a list file separates its entries.
#[derive(Clone, Copy, PartialEq)]
enum ListFormat {
    /// Lines; empty lines and lines starting with `#` are skipped, blanks trimmed.
    Commented,
    /// Lines, each taken whole (empty lines skipped).
    Lines,
    /// NUL-separated entries, each taken whole.
    Nul,
}

/// The entries of a list file (`-`: standard input), as bytes (paths need not be UTF-8).
fn lines_of(path: &Path, format: ListFormat) -> Result<Vec<Vec<u8>>> {
    let data = if path == Path::new("-") {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
            .map_err(|e| Error::io("reading standard input", e))?;
        b
    } else {
        std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?
    };
    let sep = if format == ListFormat::Nul {
        b'\0'
    } else {
        b'\n'
    };
    Ok(data
        .split(|&b| b == sep)
        .filter_map(|l| {
            let l = if format == ListFormat::Nul {
                l
            } else {
                l.strip_suffix(b"\r").unwrap_or(l)
            };
            let l = if format == ListFormat::Commented {
                l.trim_ascii()
            } else {
                l
            };
            let skip = l.is_empty() || (format == ListFormat::Commented && l.starts_with(b"#"));
            (!skip).then(|| l.to_vec())
        })
        .collect())
}

/// The patterns of an exclude file: its lines, comments skipped, `$NAME` and `${NAME}`
/// replaced by the environment's values (as restic does; an unset variable is empty).
pub(super) fn patterns_of(path: &Path) -> Result<Vec<String>> {
    Ok(lines_of(path, ListFormat::Commented)?
        .into_iter()
        .map(|b| expand_env(&String::from_utf8_lossy(&b), |k| std::env::var(k).ok()))
        .collect())
}

/// `s` with `$NAME` and `${NAME}` replaced by `var(NAME)` (empty when unset); a `$` not
/// followed by a name stays.
fn expand_env(s: &str, var: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => ("", after),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            out.push('$');
            rest = after;
        } else {
            out.push_str(&var(name).unwrap_or_default());
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::expand_env;

    #[test]
    fn exclude_files_expand_variables_as_restic() {
        let var = |k: &str| (k == "HOME").then(|| "/home/me".to_string());
        assert_eq!(expand_env("$HOME/.cache", var), "/home/me/.cache");
        assert_eq!(expand_env("${HOME}x/*.o", var), "/home/mex/*.o");
        assert_eq!(expand_env("$UNSET/a", var), "/a");
        assert_eq!(expand_env("a$", var), "a$");
        assert_eq!(expand_env("*.tmp", var), "*.tmp");
    }
}

/// How a backup finds duplicates of chunks stored before (shared with `eval`).
#[derive(Args, Clone, Debug)]
pub struct LookupArgs {
    /// `exact`: look every chunk up in the on-disk index; `locality`: a cache of whole
    /// containers' metadata and a Bloom filter over every fingerprint first, the on-disk
    /// index only when both miss (one lookup per container of old data, not per chunk).
    #[arg(long, value_name = "KIND", default_value = "exact")]
    pub fingerprint_index: String,
    /// Containers of metadata the locality cache holds (LRU).
    #[arg(long, value_name = "N", default_value_t = backup::DEFAULT_CACHE_CONTAINERS)]
    pub fingerprint_cache_containers: usize,
    /// MiB the full sketch index's per-run super-feature filters may hold in memory (a
    /// bounded cache); past it, lookups read the runs' buckets instead (same answers, more
    /// random reads).
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_SKETCH_FILTER_MIB)]
    pub sketch_filter_cache_mib: u64,
}

/// `--sketch-filter-cache-mib`'s default.
const DEFAULT_SKETCH_FILTER_MIB: u64 =
    dedelta_store::client::index::DEFAULT_SKETCH_FILTER_BYTES >> 20;

impl LookupArgs {
    /// The validated options.
    pub fn options(&self) -> Result<backup::FingerprintIndexOptions> {
        let kind =
            backup::FingerprintIndexKind::parse(&self.fingerprint_index).ok_or_else(|| {
                Error::InvalidOption(format!(
                    "--fingerprint-index {}: expected exact or locality",
                    self.fingerprint_index
                ))
            })?;
        if self.fingerprint_cache_containers == 0 {
            return Err(Error::InvalidOption(
                "--fingerprint-cache-containers must be at least 1".into(),
            )
            .into());
        }
        Ok(backup::FingerprintIndexOptions {
            kind,
            cache_containers: self.fingerprint_cache_containers,
            sketch_filter_bytes: self.sketch_filter_cache_mib.saturating_mul(1 << 20),
        })
    }
}

/// Runs the backup pipeline with the repository's delta settings overridden by the
/// arguments, then prints the summary.
pub fn run(mut args: BackupArgs) -> Result<u8> {
    // Bad model flags are refused before anything is locked or read, not after the backup.
    args.io_models.models()?;
    let select = args.select.options()?;
    args.paths.extend(args.select.listed_paths()?);
    let from_stdin = args.stdin || args.stdin_from_command;
    if args.stdin && !args.paths.is_empty() {
        return Err(Error::InvalidOption("--stdin takes no paths".into()).into());
    }
    if args.stdin_from_command && args.paths.is_empty() {
        return Err(Error::InvalidOption(
            "--stdin-from-command needs the command to run, e.g. `-- pg_dump mydb`".into(),
        )
        .into());
    }
    if args.dry_run {
        return dry_run(&args, select);
    }
    // Lock first, then the index: every writer takes them in this order.
    let lookup = args.lookup.options()?;
    // The snapshots (for the parent) are listed beside the index's catch-up.
    let (r, lock) = super::open_then(&args.repo, "backup", LockMode::Shared, |r| {
        r.listing_snapshots_at_open()
    })?;
    let mut delta_cfg = r.config().default_delta();
    args.delta.apply(&mut delta_cfg)?;
    let progress = progress_stream(args.json, "archival");
    // The command starts once the repository is open and locked, as restic's does: a
    // locked or missing repository runs no dump.
    let reader: Option<Box<dyn std::io::Read + Send>> = if args.stdin_from_command {
        let argv: Vec<std::ffi::OsString> = std::mem::take(&mut args.paths)
            .into_iter()
            .map(PathBuf::into_os_string)
            .collect();
        Some(Box::new(super::stdin_command::CommandOutput::spawn(&argv)?))
    } else if args.stdin {
        Some(Box::new(std::io::stdin()))
    } else {
        None
    };
    let stdin_src = reader.map(|reader| backup::StdinSource {
        reader,
        name: args.stdin_name,
        mtime_secs: chrono::Utc::now().timestamp(),
        whole_or_nothing: args.stdin_from_command,
    });
    // The total only sizes the bar: no walk of the sources when there is none to show.
    let bar_shown = !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let total: u64 = if from_stdin || !(bar_shown || args.json) {
        0
    } else {
        args.paths.iter().map(|p| du(p)).sum()
    };
    dedelta_store::progress::Progress::set_total(&progress, total);
    let preset = args.delta.preset()?;
    let time = match &args.time {
        Some(t) => chrono::DateTime::from_timestamp(super::find::parse_time(t, false)?, 0)
            .context("--time is out of range")?
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        None => now_rfc3339(),
    };
    let opts = backup::BackupOptions {
        paths: args.paths,
        excludes: Vec::new(),
        tags: args.tag,
        stdin: stdin_src,
        copy: None,
        skip_if_unchanged: args.skip_if_unchanged,
        host: args.host.clone().unwrap_or_else(host),
        time,
        delta: Some(delta_cfg),
        cache_dir: if args.no_cache {
            None
        } else {
            Some(args.repo.cache_root())
        },
        lookup,
        rewriting: capping(
            match (args.capping_level, preset.as_ref().and_then(|p| p.capping)) {
                (0, Some(preset)) => preset.level,
                (level, _) => level,
            },
            args.capping_segment_mib,
        ),
        sources: backup::SourceOptions {
            parent: args.parent,
            force: args.force,
            ignore_inode: args.ignore_inode,
            ignore_ctime: args.ignore_ctime,
            one_file_system: args.select.one_file_system,
            select,
            ..Default::default()
        },
        // The flags add to what the preset turns on.
        loopdelta: backup::caf::LoopDeltaOptions {
            cache_aware_filter: args.cache_aware_filter
                || preset
                    .as_ref()
                    .is_some_and(|p| p.loopdelta.cache_aware_filter),
            inversed_delta: args.inversed_delta
                || preset.as_ref().is_some_and(|p| p.loopdelta.inversed_delta),
            keep_dense_local: args.keep_dense_local
                || preset
                    .as_ref()
                    .is_some_and(|p| p.loopdelta.keep_dense_local),
        },
    };
    let workers = super::workers(args.threads)?;
    // The lock goes as soon as the snapshot is saved (see backup_then_release).
    let (res, released) = backup::backup_then_release(&r, lock, opts, &workers, &progress)?;
    progress.finish();
    super::compact_index(&r);
    released?;
    let io = args.io_models.report(&r)?;
    render::backup(&res, &io, args.json)?;
    Ok(if res.warnings.is_empty() {
        0
    } else {
        EXIT_PARTIAL
    })
}

/// `--dry-run`: walks the sources with the selection, reports what a backup would store
/// (each entry with -v), and touches no repository file.
fn dry_run(args: &BackupArgs, select: backup::SelectOptions) -> Result<u8> {
    if args.stdin || args.stdin_from_command {
        return Err(Error::InvalidOption(
            "--dry-run does not apply to --stdin or --stdin-from-command".into(),
        )
        .into());
    }
    // The repository must exist (as for a real backup), but nothing in it is read.
    args.repo.open_repository()?;
    let sources = backup::SourceOptions {
        one_file_system: args.select.one_file_system,
        select,
        ..Default::default()
    };
    let verbose = super::global::verbosity() > 0;
    let mut listing = Vec::new();
    let found = backup::dry_run(&args.paths, &sources, &mut |p, md| {
        if verbose {
            listing.push((p.to_path_buf(), md.len(), md.is_dir()));
        }
    })?;
    render::backup_dry_run(&found, &listing, args.json)?;
    Ok(if found.warnings.is_empty() {
        0
    } else {
        EXIT_PARTIAL
    })
}

/// The rewriting strategy `--capping-level` and `--capping-segment-mib` ask for.
fn capping(level: usize, segment_mib: u64) -> Option<Box<dyn backup::rewrite::Rewriting>> {
    (level > 0).then(|| {
        Box::new(backup::rewrite::Capping {
            segment_bytes: segment_mib << 20,
            level,
        }) as Box<dyn backup::rewrite::Rewriting>
    })
}

/// Total size of the regular files under `p`, without following symlinks (only for the
/// progress bar, so an entry that cannot be read counts as 0).
fn du(p: &Path) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if md.is_file() {
        return md.len();
    }
    if !md.is_dir() {
        return 0;
    }
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| du(&e.path())).sum())
        .unwrap_or(0)
}
