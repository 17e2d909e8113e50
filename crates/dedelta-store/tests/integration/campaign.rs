//! The reliability campaign: a seeded random sequence of operations (mutate the source tree,
//! backup, restore, forget, prune, rewrite, copy, check, crashes and disk-fulls at random
//! writes, damage at rest and the repairs that follow it) checked against a model of what
//! must be restorable.
//!
//! Models: kopia's robustness engine (random actions against a file tree, every snapshot
//! verified against a record of what it held) and redb's `fuzz_redb` (random workloads with
//! I/O failures injected after N operations; after a failure the store is reopened and
//! compared with a reference that advances only on durable commits).
//!
//! The model is a map snapshot id -> the tree it must restore to (paths, contents, modes,
//! symlink targets), read from the source directory just before each backup. The rules:
//!
//! - Without damage at rest or lost chunks, every snapshot of the model restores bit-exact, the repository's
//!   snapshots are exactly the model's, and `check --read-data` finds nothing.
//! - After a crash at write N of a command (the process does nothing more; the repository is
//!   reopened, its index kept or rebuilt), the snapshots are the previous ones plus possibly
//!   the one being written (backup), minus possibly some of those named (forget), or
//!   unchanged (prune); then the rule above holds again.
//! - After a disk-full at write N, the command fails with that error or succeeds; the same
//!   handle goes on without a restart.
//! - While a container is damaged at rest, `check --read-data` reports a problem or has
//!   recorded the damage, and every restore is bit-exact or fails safely: a file it restores
//!   is the original, one it fails on is absent or a prefix of the original, and nothing
//!   else appears. Healing the container (putting the original bytes back, what a copy from
//!   a mirror would do) and checking again restores the first rule.
//! - With one damaged read (short or a flipped byte), a restore is exact or fails safely as
//!   above, `check --read-data` reports it, and a backup fails or makes a snapshot that
//!   restores bit-exact.
//! - `copy` into a mirror repository (see [`copy`]) never removes a mirror snapshot, every
//!   mirror snapshot restores bit-exact to what its source snapshot restored to, a copy that
//!   succeeded leaves nothing to copy again, and the mirror checks clean, crashed or not.
//! - The repair path, as a user follows it after damage at rest: `check --read-data` then a
//!   backup makes every snapshot restore bit-exact again whose damaged files (those check
//!   names) are still in the source unchanged; `repair packs` leaves no damaged container,
//!   after which each snapshot restores bit-exact or fails only on files check names; and
//!   `repair snapshots --forget` replaces each snapshot that lost chunks by one whose intact
//!   files are exact and whose `damaged_paths` files hold a subsequence of the original's
//!   chunks, after which check finds nothing and prune works.
//!
//! Step kinds are rows of [`STEPS`]: a name, a weight and a function over the [`World`]; a new
//! operation is a new row. On failure the seed, the step and the operation log are printed;
//! the same seed and step count replay the run (unless the failure depended on thread
//! timing):
//!
//! ```text
//! DEDELTA_CAMPAIGN_SEED=<seed> DEDELTA_CAMPAIGN_STEPS=<n> \
//!     cargo test -p dedelta-store --test integration -- campaign::campaign --exact --nocapture
//! ```
//!
//! `DEDELTA_CAMPAIGN_SECONDS` runs episodes (seed, seed+1, ...) until the budget is spent;
//! `DEDELTA_CAMPAIGN_LOG=1` prints the operation log of passing episodes too;
//! at every reopen the caught-up index must name the same chunks as one built afresh (see
//! `index_as_rebuilt`); `DEDELTA_CAMPAIGN_STRICT_INDEX=0` leaves that out (a rebuild per
//! reopen; on by default since 2026-11-29, seventh session).

use crate::support::{
    backup_options, backup_with, config, gone, locked, me, noise, panic_message, prune_with,
    restore_to, restored_root, run_check, text, time_of, walk,
};
use dedelta_store::backend::local::LocalBackend;
use dedelta_store::backend::memory::MemoryBackend;
use dedelta_store::backend::wrap::fault::{
    BytePosition, CrashEffect, FaultBackend, FaultPlan, InjectedFault, InjectionDetail, ReadDamage,
    ReadFault,
};
use dedelta_store::backend::{Backend, FileKind};
use dedelta_store::client::local_cache::CacheIndex;
use dedelta_store::commands::check::CheckReport;
use dedelta_store::commands::forget::{self, KeepPolicy};
use dedelta_store::commands::repair_packs;
use dedelta_store::commands::repair_snapshots::{self, RepairSnapshotsOptions};
use dedelta_store::commands::rewrite;
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::container::{ContainerId, EntryKind};
use dedelta_store::format::tree::NodeKind;
use dedelta_store::progress::NoProgress;
use dedelta_store::read::walk_tree;
use dedelta_store::repository::damage::DamageSet;
use dedelta_store::repository::lock::{remove_locks, LockInfo, RepoLock};
use dedelta_store::repository::snapshot_filter::SnapshotFilter;
use dedelta_store::repository::snapshots;
use dedelta_store::{Error, IndexedRepository, Repository};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The seed CI runs (two episodes: this seed on the in-memory backend, the next one on a
/// local directory).
const DEFAULT_SEED: u64 = 0x5EED_DE17A;
/// Steps per episode in CI: a few seconds per episode on 2 idle cores in the test profile.
const DEFAULT_STEPS: u64 = 300;
/// Largest source tree, in bytes, before mutations prefer shrinking it.
const TREE_BUDGET_BYTES: usize = 2 << 20;
/// Most snapshots kept before forget steps get more likely.
const SNAPSHOT_BUDGET: usize = 8;

// ---------------------------------------------------------------------------------------
// Known bugs the campaign steers around; each names the ignored test that reproduces it. Set
// a switch to true with the fix (and un-ignore the test).

// (None open: the last three were fixed with their tests un-ignored; see docs/reliability.md.)

// ---------------------------------------------------------------------------------------
// Randomness, trees and figures.

/// SplitMix64: tiny, seedable, good enough to drive a campaign.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }
}

/// One entry of a tree, as the file system shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    File { data: Vec<u8>, mode: u32 },
    Dir { mode: u32 },
    Symlink { target: String },
}

/// Sets the mtime of everything in `root` (and of `root`) to the backup's number, so that
/// the tree stream, and so the containers, are the same bytes on every run of a seed.
fn freeze_times(root: &Path, clock: u64) {
    let t = filetime::FileTime::from_unix_time(1_700_000_000 + clock as i64, 0);
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        if fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
        filetime::set_symlink_file_times(&p, t, t).unwrap();
    }
}

/// Relative path ('/'-separated) -> entry.
type Tree = BTreeMap<String, Entry>;

/// Reads a directory tree (without its root; empty if there is none).
fn scan(root: &Path) -> Tree {
    if !root.is_dir() {
        return Tree::new();
    }
    let mut out = Tree::new();
    for p in walk(root) {
        let name = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let md = fs::symlink_metadata(&p).unwrap();
        let mode = md.permissions().mode() & 0o7777;
        let entry = if md.file_type().is_symlink() {
            let target = fs::read_link(&p).unwrap();
            Entry::Symlink {
                target: target.to_string_lossy().into_owned(),
            }
        } else if md.is_dir() {
            Entry::Dir { mode }
        } else {
            Entry::File {
                data: fs::read(&p).unwrap(),
                mode,
            }
        };
        out.insert(name, entry);
    }
    out
}

fn tree_bytes(t: &Tree) -> usize {
    t.values()
        .map(|e| match e {
            Entry::File { data, .. } => data.len(),
            _ => 0,
        })
        .sum()
}

/// What differs between two trees, for messages.
fn diff(want: &Tree, got: &Tree) -> String {
    let names: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let mut out = Vec::new();
    for n in names {
        let (w, g) = (want.get(n), got.get(n));
        if w != g {
            let show = |e: Option<&Entry>| match e {
                None => "absent".to_string(),
                Some(Entry::File { data, mode }) => {
                    format!("file {} bytes mode {mode:o}", data.len())
                }
                Some(Entry::Dir { mode }) => format!("dir mode {mode:o}"),
                Some(Entry::Symlink { target }) => format!("symlink -> {target}"),
            };
            out.push(format!("{n}: want {}, got {}", show(w), show(g)));
        }
        if out.len() >= 8 {
            out.push("...".into());
            break;
        }
    }
    out.join("; ")
}

/// Whether `got` is `original` with some of its chunks (of lengths `lens`, in order) left out:
/// what a file `repair snapshots` cut may hold.
fn is_chunk_subsequence(original: &[u8], lens: &[usize], got: &[u8]) -> bool {
    // Positions in `got` that some choice of the chunks so far reaches.
    let mut reach: BTreeSet<usize> = BTreeSet::from([0]);
    let mut start = 0;
    for &len in lens {
        let Some(chunk) = original.get(start..start + len) else {
            return false;
        };
        start += len;
        let next: Vec<usize> = reach
            .iter()
            .filter(|&&p| got.get(p..p + len) == Some(chunk))
            .map(|p| p + len)
            .collect();
        reach.extend(next);
    }
    start == original.len() && reach.contains(&got.len())
}

/// Counts for the report.
#[derive(Debug, Default)]
struct Figures {
    steps: BTreeMap<&'static str, u64>,
    backups: u64,
    /// Of those, with LoopDelta's options (see [`backup_style`]).
    loopdelta_backups: u64,
    crash_points: u64,
    crash_points_by_write: BTreeMap<String, u64>,
    crashes_armed_past_the_end: u64,
    index_rebuilds: u64,
    /// Reopens as the other client, whose index may be many steps behind.
    client_switches: u64,
    no_space_injected: u64,
    corruptions_injected: u64,
    corruptions_detected: u64,
    damaged_reads_injected: u64,
    /// Snapshots `copy` steps made in the mirror.
    copies: u64,
    damaged_reads_reported_by_check: u64,
    restores_exact: u64,
    restores_failed_safely: u64,
    checks: u64,
    /// `check --read-data` then a backup of the source.
    heal_backups: u64,
    /// Snapshots check named as damaged that restored bit-exact after such a backup.
    snapshots_healed: u64,
    /// `repair packs` runs, the containers they removed, chunks salvaged and lost.
    pack_repairs: u64,
    containers_repaired: u64,
    chunks_salvaged: u64,
    chunks_lost: u64,
    /// `repair snapshots --forget` runs, and the snapshots they rewrote.
    snapshot_repairs: u64,
    snapshots_repaired: u64,
    episodes: u64,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        for (k, v) in &o.steps {
            *self.steps.entry(*k).or_default() += v;
        }
        for (k, v) in &o.crash_points_by_write {
            *self.crash_points_by_write.entry(k.clone()).or_default() += v;
        }
        self.backups += o.backups;
        self.loopdelta_backups += o.loopdelta_backups;
        self.crash_points += o.crash_points;
        self.crashes_armed_past_the_end += o.crashes_armed_past_the_end;
        self.index_rebuilds += o.index_rebuilds;
        self.client_switches += o.client_switches;
        self.no_space_injected += o.no_space_injected;
        self.corruptions_injected += o.corruptions_injected;
        self.corruptions_detected += o.corruptions_detected;
        self.damaged_reads_injected += o.damaged_reads_injected;
        self.copies += o.copies;
        self.damaged_reads_reported_by_check += o.damaged_reads_reported_by_check;
        self.restores_exact += o.restores_exact;
        self.restores_failed_safely += o.restores_failed_safely;
        self.checks += o.checks;
        self.heal_backups += o.heal_backups;
        self.snapshots_healed += o.snapshots_healed;
        self.pack_repairs += o.pack_repairs;
        self.containers_repaired += o.containers_repaired;
        self.chunks_salvaged += o.chunks_salvaged;
        self.chunks_lost += o.chunks_lost;
        self.snapshot_repairs += o.snapshot_repairs;
        self.snapshots_repaired += o.snapshots_repaired;
        self.episodes += o.episodes;
    }

    fn report(&self) -> String {
        let steps: u64 = self.steps.values().sum();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "  episodes {}, operations {steps}: {:?}",
            self.episodes, self.steps
        );
        let _ = writeln!(
            s,
            "  backups completed {} ({} with LoopDelta's options); crash points hit {} {:?} (+{} armed past the end); index rebuilds {}; client switches {}",
            self.backups,
            self.loopdelta_backups,
            self.crash_points,
            self.crash_points_by_write,
            self.crashes_armed_past_the_end,
            self.index_rebuilds,
            self.client_switches
        );
        let _ = writeln!(s, "  disk-fulls injected {}", self.no_space_injected);
        let _ = writeln!(s, "  snapshots copied into the mirror {}", self.copies);
        let _ = writeln!(
            s,
            "  corruptions injected {}, detected by check {}",
            self.corruptions_injected, self.corruptions_detected
        );
        let _ = writeln!(
            s,
            "  damaged reads injected {}, reported by check {}",
            self.damaged_reads_injected, self.damaged_reads_reported_by_check
        );
        let _ = writeln!(
            s,
            "  restores verified bit-exact {}, failed safely on damage, damaged reads or lost chunks {}; checks {}",
            self.restores_exact, self.restores_failed_safely, self.checks
        );
        let _ = write!(
            s,
            "  repairs: check + backup {} (snapshots healed {}); repair packs {} ({} containers removed, {} chunks salvaged, {} lost); repair snapshots {} ({} snapshots rewritten)",
            self.heal_backups,
            self.snapshots_healed,
            self.pack_repairs,
            self.containers_repaired,
            self.chunks_salvaged,
            self.chunks_lost,
            self.snapshot_repairs,
            self.snapshots_repaired
        );
        s
    }
}

// ---------------------------------------------------------------------------------------
// The world: the repository, the source tree and the model.

/// A snapshot the repository must hold.
#[derive(Clone, Debug)]
struct Expected {
    tree: Tree,
    /// The backup's number (its time), for retention policies.
    time: u64,
    /// Files whose lost chunks `repair snapshots` removed, with the chunk lengths of the
    /// original file: their content is the original's chunks with some left out.
    damaged: BTreeMap<String, Vec<usize>>,
    /// `repair snapshots` could read only part of the original's tree: entries may be missing.
    truncated: bool,
    /// The snapshot a `rewrite` or `repair snapshots` first made this one from (what its
    /// `original` names); such a snapshot keeps that one's time and counts as the newer.
    origin: Option<String>,
}

impl Expected {
    fn new(tree: Tree, time: u64) -> Expected {
        Expected {
            tree,
            time,
            damaged: BTreeMap::new(),
            truncated: false,
            origin: None,
        }
    }

    /// Its place among snapshots oldest first, as the repository orders them: by time, then
    /// one made from another after one that was not (then by id, `id`).
    fn order<'a>(&self, id: &'a String) -> (u64, bool, &'a String) {
        (self.time, self.origin.is_some(), id)
    }

    /// The same snapshot without `rel` and what lies below it, as `rewrite` leaves it.
    fn without(&self, rel: &str, made_from: &str) -> Expected {
        let below = format!("{rel}/");
        let gone = |p: &String| p == rel || p.starts_with(&below);
        let mut e = self.clone();
        e.tree.retain(|p, _| !gone(p));
        e.damaged.retain(|p, _| !gone(p));
        e.origin = Some(self.origin.clone().unwrap_or_else(|| made_from.to_string()));
        e
    }
}

/// What the last `check` said of one snapshot.
#[derive(Clone, Debug, Default)]
struct Named {
    /// Files (relative to the source) whose chunks it says are damaged or lost.
    files: BTreeSet<String>,
    /// It named the snapshot's tree, or the snapshot without a file.
    tree: bool,
}

/// A container damaged at rest, with its bytes from before.
struct Damage {
    name: String,
    original: Vec<u8>,
}

/// A command whose writes can be faulted.
#[derive(Clone, Debug)]
enum Command {
    /// A backup of the source, with the defaults or LoopDelta's options.
    Backup(backup_style::BackupStyle),
    /// Forget these snapshots (named, or chosen by the model from a keep-last policy).
    Forget {
        ids: Vec<String>,
        keep_last: Option<usize>,
    },
    Prune {
        max_unused: f64,
    },
    /// `rewrite` snapshot `id` without the source-relative path `path` (a file or directory
    /// of its tree), deleting the original once the new one is saved with `forget`.
    Rewrite {
        id: String,
        path: String,
        forget: bool,
    },
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Command::Backup(_) => "backup",
            Command::Forget { .. } => "forget",
            Command::Prune { .. } => "prune",
            Command::Rewrite { .. } => "rewrite",
        }
    }
}

/// An invariant that failed, with what was seen.
type Outcome = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(format!($($msg)*));
        }
    };
}

/// The `copy` step and its mirror repository.
mod backup_style;
mod copy;

struct World {
    rng: Rng,
    /// `target/tmp/campaign-<seed>`: the source path is stored in every snapshot, so a fixed
    /// path (and fixed mtimes) make a replay with the same seed write the same bytes.
    dir: PathBuf,
    src: PathBuf,
    /// The chunk index of the client running the commands.
    index: PathBuf,
    /// The other client's index: each client keeps its own, and catches up with what the
    /// other did when it opens the repository (see `step_reopen`).
    other_index: PathBuf,
    /// Client A's local caches (the base cache among them): its backups use them.
    cache: PathBuf,
    fault: Arc<FaultBackend>,
    repo: Option<IndexedRepository>,
    model: BTreeMap<String, Expected>,
    damage: Vec<Damage>,
    /// `repair packs` removed damaged containers: snapshots may need chunks that no longer
    /// exist (until a backup stores them again, or `repair snapshots` drops them). Their
    /// restores may fail on the files check names.
    lost: bool,
    /// What the last check (not one with a damaged read) named, by short snapshot id.
    named: BTreeMap<String, Named>,
    /// Reads are being damaged (a flaky-read step): restores may fail, safely.
    flaky_reads: bool,
    clock: u64,
    next_name: u64,
    /// Writes of the last unfaulted run of each command: where crash points are drawn from.
    writes_of: BTreeMap<&'static str, u64>,
    /// The repository `copy` steps copy into, made by the first.
    mirror: Option<copy::Mirror>,
    log: Vec<String>,
    figures: Figures,
}

impl World {
    fn new(seed: u64) -> World {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("campaign-{seed}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let inner: Arc<dyn Backend> = if seed.is_multiple_of(2) {
            Arc::new(MemoryBackend::default())
        } else {
            let b = LocalBackend::new(dir.join("repo"));
            b.create_layout().unwrap();
            Arc::new(b)
        };
        inner
            .put(
                FileKind::Config,
                "config",
                &config(1, DeltaConfig::recommended()).to_bytes(),
            )
            .unwrap();
        let src = dir.join("src");
        fs::create_dir_all(&src).unwrap();
        let index = dir.join("client-a").join("chunks.idx");
        let other_index = dir.join("client-b").join("chunks.idx");
        let cache = dir.join("client-a").join("cache");
        let fault = Arc::new(FaultBackend::new(inner));
        let mut w = World {
            rng: Rng(seed),
            dir,
            src,
            index,
            other_index,
            cache,
            fault,
            repo: None,
            model: BTreeMap::new(),
            damage: Vec::new(),
            lost: false,
            named: BTreeMap::new(),
            flaky_reads: false,
            clock: 0,
            next_name: 0,
            writes_of: BTreeMap::new(),
            mirror: None,
            log: Vec::new(),
            figures: Figures::default(),
        };
        w.note(format!(
            "episode seed {seed} on the {} backend",
            w.fault.inner().location()
        ));
        w.repo = Some(
            Repository::open(w.fault.clone(), w.index.clone())
                .and_then(Repository::open_index)
                .unwrap(),
        );
        for _ in 0..12 {
            mutate_once(&mut w);
        }
        w
    }

    fn note(&mut self, line: String) {
        self.log.push(line);
    }

    fn repo(&self) -> &IndexedRepository {
        // Every step that drops the repository reopens it before returning Ok.
        self.repo.as_ref().expect("repository open")
    }

    /// Snapshot ids oldest first. Random picks go through this order, not the ids' (hashes
    /// of files holding wall times), so that a seed replays.
    fn ids_by_time(&self) -> Vec<String> {
        let mut v: Vec<_> = self.model.iter().map(|(id, e)| e.order(id)).collect();
        v.sort();
        v.into_iter().map(|(_, _, id)| id.clone()).collect()
    }

    fn damaged(&self) -> bool {
        !self.damage.is_empty()
    }

    /// The restart after a crash (or just a reopen): faults off, the index kept or deleted.
    fn restart(&mut self, rebuild: bool) -> Outcome {
        self.repo = None;
        self.fault.disarm();
        if rebuild {
            fs::remove_file(&self.index).map_err(|e| format!("removing the index: {e}"))?;
            self.figures.index_rebuilds += 1;
        }
        let repo = Repository::open(self.fault.clone(), self.index.clone())
            .and_then(Repository::open_index)
            .map_err(|e| format!("reopening (rebuild={rebuild}): {e}"))?;
        self.repo = Some(repo);
        Ok(())
    }

    fn snapshot_ids(&self) -> Result<BTreeSet<String>, String> {
        crate::support::snapshot_ids(self.repo()).map_err(|e| format!("listing snapshots: {e}"))
    }

    /// Runs `cmd` under the lock of `me`, releasing it after; the command's error first.
    fn run(&self, cmd: &Command, me: &LockInfo) -> Result<Option<String>, Error> {
        let repo = self.repo();
        let lock = repo.lock(me)?;
        let out = self.run_locked(cmd, &lock);
        let released = lock.release();
        let out = out?;
        released?;
        Ok(out)
    }

    fn run_locked(&self, cmd: &Command, lock: &RepoLock) -> Result<Option<String>, Error> {
        let repo = self.repo();
        match cmd {
            Command::Backup(style) => {
                freeze_times(&self.src, self.clock);
                let mut opts =
                    style.apply(backup_options(vec![self.src.clone()], time_of(self.clock)));
                opts.cache_dir = Some(self.cache.clone());
                let r = backup_with(repo, lock, opts)?;
                Ok(Some(r.snapshot_id.to_hex()))
            }
            Command::Forget { ids, keep_last } => {
                let policy = KeepPolicy {
                    last: keep_last.unwrap_or(0),
                    ..KeepPolicy::default()
                };
                let named: &[String] = if keep_last.is_some() { &[] } else { ids };
                forget::forget(repo, lock, named, &policy, false)?;
                Ok(None)
            }
            Command::Prune { max_unused } => {
                prune_with(repo, lock, *max_unused, false)?;
                Ok(None)
            }
            Command::Rewrite { id, path, forget } => {
                // Anchored at the snapshot's root: the source's absolute path, then `path`.
                let pattern = format!("{}/{path}", self.src.display());
                let opts = rewrite::RewriteOptions {
                    exclude: vec![pattern.into_bytes()],
                    forget: *forget,
                    ..Default::default()
                };
                let st = rewrite::rewrite(
                    repo,
                    lock,
                    std::slice::from_ref(id),
                    &SnapshotFilter::default(),
                    &opts,
                    &NoProgress,
                )?;
                Ok(st.rewritten.first().and_then(|r| r.new).map(|n| n.to_hex()))
            }
        }
    }

    /// A command as drawn by a step: backup, forget of a random snapshot or by policy, or
    /// prune with a random threshold. The model's expectation for forget is fixed here.
    fn draw_command(&mut self, kind: &str) -> Command {
        match kind {
            "backup" => Command::Backup(backup_style::BackupStyle::draw(&mut self.rng)),
            "forget" => {
                if self.rng.chance(50) && !self.model.is_empty() {
                    let ids = self.ids_by_time();
                    let id = self.rng.pick(&ids).clone();
                    Command::Forget {
                        ids: vec![id],
                        keep_last: None,
                    }
                } else {
                    let keep = 1 + self.rng.index(4);
                    // One group (same host and path): keep-last keeps the newest `keep`.
                    let by_time = self.ids_by_time();
                    let n = by_time.len().saturating_sub(keep);
                    let ids = by_time[..n].to_vec();
                    Command::Forget {
                        ids,
                        keep_last: Some(keep),
                    }
                }
            }
            "rewrite" => {
                let ids = self.ids_by_time();
                if ids.is_empty() {
                    return Command::Backup(Default::default());
                }
                let id = self.rng.pick(&ids).clone();
                let paths: Vec<String> = self.model[&id].tree.keys().cloned().collect();
                if paths.is_empty() {
                    return Command::Backup(Default::default());
                }
                let path = self.rng.pick(&paths).clone();
                Command::Rewrite {
                    id,
                    path,
                    forget: self.rng.chance(50),
                }
            }
            _ => Command::Prune {
                max_unused: *self.rng.pick(&[0.0, 0.1, 0.5, 1.0]),
            },
        }
    }

    /// After `cmd` ran (completely when `complete`, else possibly partly), the repository's
    /// snapshots must be what it may have left; the model follows them.
    fn reconcile(
        &mut self,
        cmd: &Command,
        before: &BTreeSet<String>,
        tree: &Tree,
        made: Option<&str>,
        complete: bool,
    ) -> Outcome {
        let now = self.snapshot_ids()?;
        match cmd {
            Command::Backup(_) => {
                let extra: Vec<&String> = now.difference(before).collect();
                ensure!(
                    before.is_subset(&now),
                    "backup lost snapshots: {:?}",
                    before.difference(&now).collect::<Vec<_>>()
                );
                ensure!(extra.len() <= 1, "backup made several snapshots: {extra:?}");
                if complete {
                    ensure!(
                        extra.len() == 1 && Some(extra[0].as_str()) == made,
                        "backup returned {made:?} but the new snapshots are {extra:?}"
                    );
                }
                for id in extra {
                    self.model
                        .insert(id.clone(), Expected::new(tree.clone(), self.clock));
                }
            }
            Command::Forget { ids, .. } => {
                let gone: BTreeSet<&String> = before.difference(&now).collect();
                ensure!(now.is_subset(before), "forget added snapshots");
                ensure!(
                    gone.iter().all(|id| ids.contains(id)),
                    "forget removed snapshots it should keep: {gone:?} (asked {ids:?})"
                );
                if complete {
                    ensure!(
                        gone.len() == ids.len(),
                        "forget removed {gone:?}, expected {ids:?}"
                    );
                }
                self.model.retain(|id, _| now.contains(id));
            }
            Command::Prune { .. } => {
                ensure!(now == *before, "prune changed the snapshots");
            }
            Command::Rewrite { id, path, forget } => {
                let extra: Vec<&String> = now.difference(before).collect();
                let gone: Vec<&String> = before.difference(&now).collect();
                ensure!(
                    extra.len() <= 1,
                    "rewrite made several snapshots: {extra:?}"
                );
                ensure!(
                    gone.iter().all(|g| *g == id),
                    "rewrite of {id} removed {gone:?}"
                );
                let e = self.model[id].clone();
                let rewritten = e.without(path, id);
                // The same rewrite made before (without --forget, or stopped before its
                // delete) is the same file: the replacement may be a snapshot that was there.
                let earlier: Option<String> = before
                    .iter()
                    .find(|b| {
                        *b != id
                            && self.model.get(*b).is_some_and(|m| {
                                m.tree == rewritten.tree && m.origin == rewritten.origin
                            })
                    })
                    .cloned();
                // New before old: the original goes only after its replacement is saved.
                ensure!(
                    gone.is_empty() || (*forget && (extra.len() == 1 || earlier.is_some())),
                    "rewrite removed {id} without a replacement (new: {extra:?})"
                );
                // A truncated tree (repair snapshots) may not hold the path any more.
                if complete && !e.truncated {
                    let replacement = extra.first().map(|n| n.as_str()).or(earlier.as_deref());
                    ensure!(
                        replacement.is_some() && replacement == made,
                        "rewrite returned {made:?} but the new snapshots are {extra:?} (an earlier rewrite: {earlier:?})"
                    );
                    ensure!(
                        !*forget || gone.len() == 1,
                        "rewrite --forget kept the original {id}"
                    );
                }
                for new in extra {
                    self.model.insert(new.clone(), rewritten.clone());
                    // What check named in the original holds for the rewritten snapshot: the
                    // same files, with the same chunks (a lost one is lost for both).
                    if let Some(n) = self.named.get(&id[..8]).cloned() {
                        self.named.insert(new[..8].to_string(), n);
                    }
                }
                self.model.retain(|id, _| now.contains(id));
            }
        }
        let model: BTreeSet<String> = self.model.keys().cloned().collect();
        ensure!(model == now, "model {model:?} != repository {now:?}");
        Ok(())
    }

    /// Restores `id` and compares with the model: exact, or (while damaged, reads are
    /// damaged, or chunks are lost) a safe failure.
    fn verify_restore(&mut self, id: &str) -> Outcome {
        self.judge_restore(id, true)
    }

    /// Restores `id`, which must come out exact (intact files bit-exact, repaired ones a
    /// subsequence of their chunks).
    fn verify_exact(&mut self, id: &str) -> Outcome {
        self.judge_restore(id, false)
    }

    /// The source-relative path of a stored node path (`work/.../src/d1/n2.txt`, with or
    /// without a leading `/`).
    fn relative(&self, node_path: &str) -> Option<String> {
        let root = self.src.to_string_lossy();
        let root = root.trim_start_matches('/');
        let rel = node_path.trim_start_matches('/').strip_prefix(root)?;
        Some(rel.trim_start_matches('/').to_string())
    }

    /// Restores `id` and compares what it wrote with the model. Never silently wrong: every
    /// restored entry is the model's (a repaired file: a subsequence of the original's
    /// chunks), a file restore failed on is absent or a prefix of the original, nothing else
    /// appears, and no entry is missing unless restore said so (or the repaired tree is
    /// truncated). A failure is allowed only with `allow_failure`, and then only while
    /// damaged, while reads are damaged, or, with chunks lost, on what the last check named.
    fn judge_restore(&mut self, id: &str, allow_failure: bool) -> Outcome {
        let target = self.dir.join("restore");
        let _ = fs::remove_dir_all(&target);
        let repo = self.repo();
        let result = snapshots::load(repo.backend().as_ref(), id)
            .and_then(|(_, snap)| restore_to(repo, &snap, &target));
        let got = scan(&restored_root(&target, &self.src));
        let want = &self.model[id];
        let (failed, fatal): (BTreeSet<String>, Option<String>) = match &result {
            Ok(st) => (
                st.errors
                    .iter()
                    .map(|e| self.relative(&e.path_lossy()).unwrap_or(e.path_lossy()))
                    .collect(),
                None,
            ),
            Err(e) => (BTreeSet::new(), Some(e.to_string())),
        };
        let what = match (&fatal, failed.is_empty()) {
            (Some(e), _) => format!("failed restore of {id} ({e})"),
            (None, false) => format!("restore of {id} (failed on {failed:?})"),
            (None, true) => format!("restore of {id}"),
        };
        if let Some(e) = &fatal {
            ensure!(!e.contains("panicked"), "{what} panicked");
        }
        for (path, entry) in &got {
            let ok = match (entry, want.tree.get(path)) {
                (Entry::File { data, mode }, Some(Entry::File { data: w, mode: wm })) => {
                    if failed.contains(path) {
                        w.starts_with(data)
                    } else if let Some(lens) = want.damaged.get(path) {
                        mode == wm && is_chunk_subsequence(w, lens, data)
                    } else {
                        mode == wm && data == w
                    }
                }
                (Entry::Dir { mode }, Some(Entry::Dir { mode: wm })) => {
                    mode == wm || fatal.is_some()
                }
                (Entry::Symlink { target }, Some(Entry::Symlink { target: t })) => target == t,
                _ => false,
            };
            ensure!(
                ok,
                "{what} left wrong content at {path}: {}",
                diff(&want.tree, &got)
            );
        }
        for path in want.tree.keys() {
            ensure!(
                got.contains_key(path)
                    || failed.contains(path)
                    || fatal.is_some()
                    || want.truncated,
                "{what} left out {path} without an error: {}",
                diff(&want.tree, &got)
            );
        }
        if fatal.is_none() && failed.is_empty() {
            self.figures.restores_exact += 1;
            return Ok(());
        }
        let messages: Vec<&str> = match &result {
            Ok(st) => st.errors.iter().map(|e| e.message.as_str()).collect(),
            Err(_) => Vec::new(),
        };
        ensure!(
            allow_failure,
            "{what}: it must be exact; errors: {messages:?}"
        );
        if !(self.damaged() || self.flaky_reads) {
            let named = self.named.get(&id[..8]).cloned().unwrap_or_default();
            ensure!(
                self.lost && (named.tree || (fatal.is_none() && failed.is_subset(&named.files))),
                "{what}: nothing is damaged, and check named only {named:?}"
            );
        }
        self.figures.restores_failed_safely += 1;
        Ok(())
    }

    /// The containers damaged at rest that still hold the damage (not deleted, not healed),
    /// each once.
    fn damaged_now(&self) -> Vec<String> {
        let inner = self.fault.inner();
        let mut names: Vec<String> = Vec::new();
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for d in &self.damage {
            // Against the bytes from before the first damage: a container damaged twice has
            // the once-damaged bytes as its second damage's original, and one written whole
            // again since (a writer storing the same chunks in the same order writes the very
            // original under its name) differs from those.
            if !seen.insert(&d.name) {
                continue;
            }
            let still = inner
                .get(FileKind::Container, &d.name)
                .is_ok_and(|now| now != d.original);
            if still {
                names.push(d.name.clone());
            }
        }
        names
    }

    /// For a failure's message: where the chunks `report` names as missing from the index
    /// are stored (every copy in a listed container: entry kind, base and whether the index
    /// names that base), which containers the index has taken in, and the damage records.
    /// Seed 696826238 failed so at step 239 after a client switch (and at step 235 in one of
    /// 40 replays); without this the log did not say why (`clients::an_index_takes_in_dead_
    /// chunks_another_client_made_live_again` has the cause).
    fn whereabouts(&self, report: &CheckReport) -> String {
        let missing: BTreeSet<String> = report
            .problems
            .iter()
            .filter_map(|p| {
                let hex = p.message.strip_prefix("chunk ")?.split(':').next()?;
                p.message
                    .contains("missing from the index")
                    .then(|| hex.to_string())
            })
            .collect();
        self.whereabouts_of(&missing)
    }

    /// Where the chunks `missing` (hex ids) are stored, whether the index took their
    /// containers in and names their bases, and the damage records.
    fn whereabouts_of(&self, missing: &BTreeSet<String>) -> String {
        if missing.is_empty() {
            return String::new();
        }
        let repo = self.repo();
        let index = repo.index();
        let known = index.known_containers().unwrap_or_default();
        let mut out = String::from("\nwhere the missing chunks are stored:");
        let Ok(listed) = repo.backend().list(FileKind::Container) else {
            return out + " (containers not listable)";
        };
        for (name, _) in &listed {
            let meta =
                match dedelta_store::repository::read_container_meta(repo.backend().as_ref(), name)
                {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = write!(
                            out,
                            "\n  container {}: metadata unreadable ({e})",
                            &name[..8]
                        );
                        continue;
                    }
                };
            let taken_in = ContainerId::from_hex(name).is_some_and(|c| known.contains(&c));
            for (i, e) in meta.entries.iter().enumerate() {
                if !missing.contains(&e.id.to_hex()) {
                    continue;
                }
                let kind = match e.kind {
                    EntryKind::Full => "full".to_string(),
                    EntryKind::Delta { base, .. } => format!(
                        "delta on {} (indexed: {:?})",
                        &base.to_hex()[..8],
                        index
                            .get(&base)
                            .ok()
                            .flatten()
                            .map(|l| l.container.to_hex()[..8].to_string())
                    ),
                };
                let _ = write!(
                    out,
                    "\n  {} in container {} entry {i}: {kind}; container taken in by the index: {taken_in}",
                    &e.id.to_hex()[..8],
                    &name[..8]
                );
            }
        }
        let (damage, _) = DamageSet::load(repo.backend().as_ref()).unwrap_or_default();
        let _ = write!(
            out,
            "\n  damage records: {:?}; index's damage digest {:?}, records' {}",
            damage
                .containers()
                .iter()
                .map(|c| c.to_hex()[..8].to_string())
                .collect::<Vec<_>>(),
            index.damage_digest().ok(),
            damage.digest()
        );
        out
    }

    /// How many containers are damaged at rest now.
    fn live_damage(&self) -> usize {
        self.damaged_now().len()
    }

    /// Runs check and remembers what it named per snapshot.
    fn check(&mut self, read_data: bool) -> Result<CheckReport, String> {
        let report =
            run_check(self.repo(), read_data).map_err(|e| format!("check failed to run: {e}"))?;
        self.figures.checks += 1;
        let mut named: BTreeMap<String, Named> = BTreeMap::new();
        for p in &report.problems {
            let Some(snapshot) = &p.snapshot else {
                continue;
            };
            let entry = named.entry(snapshot.clone()).or_default();
            match p.path.as_deref().and_then(|path| self.relative(path)) {
                Some(rel) => {
                    entry.files.insert(rel);
                }
                None => entry.tree = true,
            }
        }
        self.named = named;
        Ok(report)
    }

    /// Check, and what it must find: nothing without damage or lost chunks; while damaged
    /// (with read_data), every damaged container reported or recorded; with chunks lost and
    /// nothing damaged, only snapshots' files or trees (never a container).
    fn verify_check(&mut self, read_data: bool) -> Outcome {
        let report = self.check(read_data)?;
        if self.damaged() {
            if read_data && self.live_damage() > 0 {
                // Detected means reported as a problem, or recorded (by this check or an
                // earlier one: recorded copies left the index, and a later backup may have
                // healed every snapshot, so that nothing is a problem any more).
                let unrecorded = self.unrecorded_damage()?;
                ensure!(
                    !report.problems.is_empty() || unrecorded.is_empty(),
                    "check --read-data missed damage in {unrecorded:?}"
                );
            }
        } else if self.lost {
            let repository_level: Vec<_> = report
                .problems
                .iter()
                .filter(|p| p.snapshot.is_none())
                .collect();
            ensure!(
                repository_level.is_empty(),
                "check (read_data={read_data}) found damage after repair packs: {repository_level:?}"
            );
            if report.problems.is_empty() {
                self.note("  check: no snapshot needs a lost chunk any more".into());
                self.lost = false;
            }
        } else {
            ensure!(
                report.problems.is_empty(),
                "check (read_data={read_data}) found {:?}{}",
                report.problems,
                self.whereabouts(&report)
            );
        }
        Ok(())
    }

    /// Containers still damaged at rest that no damage record names.
    fn unrecorded_damage(&self) -> Result<Vec<String>, String> {
        let (recorded, _) = DamageSet::load(self.repo().backend().as_ref())
            .map_err(|e| format!("damage records unreadable: {e}"))?;
        let recorded: BTreeSet<String> = recorded.containers().iter().map(|c| c.to_hex()).collect();
        let mut names = self.damaged_now();
        names.retain(|n| !recorded.contains(n));
        Ok(names)
    }

    /// `repair packs` of `ids` (none: every container with recorded damage); returns the
    /// number of containers it removed, and those it left in place (their metadata could not
    /// be read, so nothing in them could be located).
    fn repair_packs(&mut self, ids: &[String]) -> Result<(u64, Vec<String>), String> {
        let repo = self.repo();
        let st = locked(repo, &me(), |lock| {
            repair_packs::repair_packs(repo, lock, ids, "2026-01-01T00:00:00Z", &NoProgress)
        })
        .map_err(|e| format!("repair packs {ids:?} failed: {e}"))?;
        let kept: Vec<String> = st.left_in_place.iter().map(|c| c.to_hex()).collect();
        let removed = (st.containers.len() - kept.len()) as u64;
        self.figures.pack_repairs += 1;
        self.figures.containers_repaired += removed;
        self.figures.chunks_salvaged += st.chunks_salvaged;
        self.figures.chunks_lost += st.chunks_lost.len() as u64 + st.deltas_lost;
        self.note(format!(
            "  repair packs {}: {removed} containers removed, {} left in place, {} chunks salvaged, {} lost, {} deltas lost with their base",
            if ids.is_empty() { "(recorded)".to_string() } else { format!("{} named", ids.len()) },
            kept.len(),
            st.chunks_salvaged,
            st.chunks_lost.len(),
            st.deltas_lost
        ));
        Ok((removed, kept))
    }

    /// For every snapshot of the model, the chunk lengths of each file it lists (as far as its
    /// tree can be read): what a file `repair snapshots` cuts may keep.
    fn recipes(&self) -> BTreeMap<String, BTreeMap<String, Vec<usize>>> {
        let repo = self.repo();
        let mut out = BTreeMap::new();
        for id in self.model.keys() {
            let mut files = BTreeMap::new();
            if let Ok((_, snap)) = snapshots::load(repo.backend().as_ref(), id) {
                let _ = walk_tree(repo, &snap, |node, chunks| {
                    if let (NodeKind::File, Some(rel)) =
                        (node.kind, self.relative(&node.path_lossy()))
                    {
                        files.insert(rel, chunks.iter().map(|c| c.len as usize).collect());
                    }
                    Ok(())
                });
            }
            out.insert(id.clone(), files);
        }
        out
    }

    /// Check with read_data, the snapshot set, and every snapshot restored.
    fn verify_all(&mut self) -> Outcome {
        self.verify_check(true)?;
        let now = self.snapshot_ids()?;
        let model: BTreeSet<String> = self.model.keys().cloned().collect();
        ensure!(model == now, "model {model:?} != repository {now:?}");
        for id in model {
            self.verify_restore(&id)?;
        }
        Ok(())
    }

    /// Runs `cmd` with `plan` armed (or none), then applies the expectations: a crash is
    /// followed by a restart; any failure that is not injected is allowed only on damage.
    fn run_faulted(&mut self, cmd: Command, plan: FaultPlan, me: &LockInfo) -> Outcome {
        let before = self.snapshot_ids()?;
        let tree = scan(&self.src);
        let faulted = plan.crash_at.is_some() || plan.no_space_at.is_some();
        let reads_faulted = !plan.read_faults.is_empty();
        self.fault.arm(plan);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run(&cmd, me)))
            .map_err(|p| format!("{} panicked: {}", cmd.name(), panic_message(&*p)))?;
        let injections = self.fault.injection_log();
        let writes = self.fault.counts().total_writes();
        let crashed = self.fault.crashed();
        let made = result.as_ref().ok().cloned().flatten();
        let mut line = match cmd {
            Command::Backup(style) => format!(
                "  backup{} of {} entries, {} bytes -> ",
                if style.is_default() {
                    String::new()
                } else {
                    format!(" ({style})")
                },
                tree.len(),
                tree_bytes(&tree)
            ),
            _ => format!("  {} -> ", cmd.name()),
        };
        match &result {
            Ok(Some(id)) => line += &format!("snapshot {}", &id[..8]),
            Ok(None) => line += "ok",
            Err(e) => line += &format!("error: {e}"),
        }
        let _ = write!(line, " ({writes} writes; injected {injections:?})");
        self.note(line);
        if !faulted && !reads_faulted && result.is_ok() {
            self.writes_of.insert(cmd.name(), writes);
        }
        if let Err(e) = &result {
            match e.io_cause().and_then(FaultBackend::injected) {
                Some(InjectedFault::Crash { .. }) => {
                    ensure!(crashed, "crash error without a crash")
                }
                Some(InjectedFault::NoSpace { .. }) => {}
                // Only damage, at rest or in reads, may make a command fail by itself; and prune
                // refuses while snapshots need lost chunks.
                // A rewrite reads its snapshot's tree, which a lost chunk may be part of.
                _ => ensure!(
                    self.damaged()
                        || reads_faulted
                        || (self.lost
                            && matches!(cmd, Command::Prune { .. } | Command::Rewrite { .. })),
                    "{} failed: {e}",
                    cmd.name()
                ),
            }
        }
        for inj in &injections {
            match inj.detail {
                InjectionDetail::Crash(effect) => {
                    self.figures.crash_points += 1;
                    *self
                        .figures
                        .crash_points_by_write
                        .entry(format!("{} {:?}", inj.kind.noun(), effect))
                        .or_default() += 1;
                }
                InjectionDetail::Short { .. } | InjectionDetail::Flip { .. } => {
                    self.figures.damaged_reads_injected += 1;
                }
                InjectionDetail::NoSpace => {
                    self.figures.no_space_injected += 1;
                    // A failed release leaves this live process's lock: say so and remove it,
                    // as its user would after reading the error.
                    if inj.kind == FileKind::Lock && inj.index > 0 {
                        self.note("  the lock's release failed: removing the lock".into());
                        remove_locks(self.fault.inner().as_ref(), true, "")
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
        }
        if faulted && injections.is_empty() {
            self.figures.crashes_armed_past_the_end += 1;
        }
        if crashed {
            let rebuild = self.rng.chance(30);
            self.note(format!("  restart (rebuild the index: {rebuild})"));
            self.restart(rebuild)?;
        } else {
            self.fault.disarm();
        }
        if let (Ok(_), Command::Backup(style)) = (&result, &cmd) {
            self.figures.backups += 1;
            if !style.is_default() {
                self.figures.loopdelta_backups += 1;
            }
        }
        self.reconcile(&cmd, &before, &tree, made.as_deref(), result.is_ok())?;
        if matches!(cmd, Command::Backup(_)) {
            self.clock += 1;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Steps: add a function and a row of STEPS to add an operation.

/// One kind of step.
struct Step {
    name: &'static str,
    /// Relative frequency.
    weight: u64,
    run: fn(&mut World) -> Outcome,
}

const STEPS: &[Step] = &[
    Step {
        name: "mutate",
        weight: 8,
        run: step_mutate,
    },
    Step {
        name: "backup",
        weight: 6,
        run: step_backup,
    },
    Step {
        name: "restore",
        weight: 3,
        run: step_restore,
    },
    Step {
        name: "forget",
        weight: 2,
        run: step_forget,
    },
    Step {
        name: "prune",
        weight: 2,
        run: step_prune,
    },
    Step {
        name: "rewrite",
        weight: 1,
        run: step_rewrite,
    },
    Step {
        name: "copy",
        weight: 2,
        run: copy::step_copy,
    },
    Step {
        name: "check",
        weight: 1,
        run: step_check,
    },
    Step {
        name: "crash",
        weight: 4,
        run: step_crash,
    },
    Step {
        name: "no-space",
        weight: 2,
        run: step_no_space,
    },
    Step {
        name: "flaky-read",
        weight: 2,
        run: step_flaky_read,
    },
    Step {
        name: "corrupt",
        weight: 2,
        run: step_corrupt,
    },
    Step {
        name: "heal",
        weight: 2,
        run: step_heal,
    },
    Step {
        name: "reopen",
        weight: 1,
        run: step_reopen,
    },
    Step {
        name: "check-backup",
        weight: 2,
        run: step_check_then_backup,
    },
    Step {
        name: "repair-packs",
        weight: 1,
        run: step_repair_packs,
    },
    Step {
        name: "repair-snapshots",
        weight: 1,
        run: step_repair_snapshots,
    },
];

/// One random change of the source tree.
fn mutate_once(w: &mut World) {
    let tree = scan(&w.src);
    let files: Vec<String> = tree
        .iter()
        .filter(|(_, e)| matches!(e, Entry::File { .. }))
        .map(|(p, _)| p.clone())
        .collect();
    let dirs: Vec<String> = tree
        .iter()
        .filter(|(_, e)| matches!(e, Entry::Dir { .. }))
        .map(|(p, _)| p.clone())
        .collect();
    let big = tree_bytes(&tree) > TREE_BUDGET_BYTES;
    let roll = w.rng.below(100);
    let rng = &mut w.rng;
    let path = |p: &str| w.src.join(p);
    let new_name = |w_next: &mut u64, rng: &mut Rng, dirs: &[String], ext: &str| {
        *w_next += 1;
        let name = format!("n{}{ext}", *w_next);
        if dirs.is_empty() || rng.chance(50) {
            name
        } else {
            format!("{}/{name}", rng.pick(dirs))
        }
    };
    let small = tree_bytes(&tree) < TREE_BUDGET_BYTES / 4;
    let what = if files.is_empty() || (!big && roll < 35) || (small && roll < 55) {
        // A new file: fresh text, noise, or (delta material) a near copy of another.
        let name = new_name(&mut w.next_name, rng, &dirs, ".txt");
        if !files.is_empty() && rng.chance(50) {
            let from = rng.pick(&files).clone();
            let mut d = fs::read(path(&from)).unwrap();
            edit(rng, &mut d);
            fs::write(path(&name), &d).unwrap();
            format!("add {name} ({} bytes, similar to {from})", d.len())
        } else if rng.chance(25) {
            let len = rng.index(80_000);
            let d = noise(len, rng.next());
            fs::write(path(&name), &d).unwrap();
            format!("add {name} ({} bytes of noise)", d.len())
        } else {
            let len = if rng.chance(20) {
                rng.index(300_000)
            } else {
                rng.index(80_000)
            };
            let d = text(len, rng.next());
            fs::write(path(&name), &d).unwrap();
            format!("add {name} ({} bytes of text)", d.len())
        }
    } else if roll < 60 && !big {
        let f = rng.pick(&files).clone();
        let mut d = fs::read(path(&f)).unwrap();
        let n = edit(rng, &mut d);
        fs::write(path(&f), &d).unwrap();
        format!("edit {f} ({n} small edits, now {} bytes)", d.len())
    } else if roll < 68 && !big {
        let f = rng.pick(&files).clone();
        let mut d = fs::read(path(&f)).unwrap();
        let len = rng.index(40_000);
        let more = text(len, rng.next());
        d.extend_from_slice(&more);
        fs::write(path(&f), &d).unwrap();
        format!("append {} bytes to {f}", more.len())
    } else if roll < 74 {
        let f = rng.pick(&files).clone();
        let d = fs::read(path(&f)).unwrap();
        let keep = if rng.chance(20) {
            0
        } else {
            rng.index(d.len() + 1)
        };
        fs::write(path(&f), &d[..keep]).unwrap();
        format!("truncate {f} to {keep} bytes")
    } else if roll < 82 {
        let f = rng.pick(&files).clone();
        fs::remove_file(path(&f)).unwrap();
        format!("delete {f}")
    } else if roll < 88 {
        let f = rng.pick(&files).clone();
        let mode = *rng.pick(&[0o644, 0o600, 0o755, 0o640, 0o444]);
        fs::set_permissions(path(&f), fs::Permissions::from_mode(mode)).unwrap();
        format!("chmod {f} {mode:o}")
    } else if roll < 93 && dirs.len() < 4 {
        w.next_name += 1;
        let d = format!("d{}", w.next_name);
        fs::create_dir(path(&d)).unwrap();
        if rng.chance(30) {
            fs::set_permissions(path(&d), fs::Permissions::from_mode(0o750)).unwrap();
        }
        format!("mkdir {d}")
    } else if roll < 97 {
        let name = new_name(&mut w.next_name, rng, &dirs, ".lnk");
        let target = format!("../target/{}", rng.below(1000));
        std::os::unix::fs::symlink(&target, path(&name)).unwrap();
        format!("symlink {name} -> {target}")
    } else if !dirs.is_empty() && rng.chance(50) {
        let d = rng.pick(&dirs).clone();
        fs::remove_dir_all(path(&d)).unwrap();
        format!("rmdir -r {d}")
    } else {
        "nothing".to_string()
    };
    w.note(format!("  {what}"));
}

/// A few small edits (overwrite, insert, delete a short span): what delta compression is for.
fn edit(rng: &mut Rng, d: &mut Vec<u8>) -> u64 {
    let n = 1 + rng.below(4);
    for _ in 0..n {
        let at = rng.index(d.len() + 1);
        match rng.below(3) {
            0 => {
                for b in d.iter_mut().skip(at).take(1 + rng.index(16)) {
                    *b = b'A' + (*b % 26);
                }
            }
            1 => {
                let len = 1 + rng.index(200);
                let ins = text(len, rng.next());
                d.splice(at..at, ins);
            }
            _ => {
                let end = (at + 1 + rng.index(200)).min(d.len());
                d.drain(at..end);
            }
        }
    }
    n
}

fn step_mutate(w: &mut World) -> Outcome {
    for _ in 0..1 + w.rng.below(4) {
        mutate_once(w);
    }
    Ok(())
}

fn step_backup(w: &mut World) -> Outcome {
    let style = backup_style::BackupStyle::draw(&mut w.rng);
    w.run_faulted(Command::Backup(style), FaultPlan::none(), &me())?;
    // The new snapshot restores (exactly, unless damage got in the way).
    if let Some((id, _)) = w.model.iter().max_by_key(|(_, e)| e.time) {
        let id = id.clone();
        w.verify_restore(&id)?;
    }
    Ok(())
}

fn step_restore(w: &mut World) -> Outcome {
    if w.model.is_empty() {
        w.note("  no snapshot".into());
        return Ok(());
    }
    let ids = w.ids_by_time();
    let id = w.rng.pick(&ids).clone();
    w.note(format!("  restore {}", &id[..8]));
    w.verify_restore(&id)
}

fn step_forget(w: &mut World) -> Outcome {
    let cmd = w.draw_command("forget");
    w.note(format!("  {cmd:?}"));
    w.run_faulted(cmd, FaultPlan::none(), &me())
}

/// A rewrite removing one file or directory from a snapshot; its restore must come out as the
/// original's without it.
fn step_rewrite(w: &mut World) -> Outcome {
    let cmd = w.draw_command("rewrite");
    w.note(format!("  {cmd:?}"));
    let before = w.snapshot_ids()?;
    w.run_faulted(cmd, FaultPlan::none(), &me())?;
    let new: Vec<String> = w.snapshot_ids()?.difference(&before).cloned().collect();
    for id in new {
        w.verify_restore(&id)?;
    }
    Ok(())
}

fn step_prune(w: &mut World) -> Outcome {
    let cmd = w.draw_command("prune");
    w.note(format!("  {cmd:?}"));
    w.run_faulted(cmd, FaultPlan::none(), &me())?;
    if !w.damaged() {
        w.verify_check(false)?;
    }
    Ok(())
}

fn step_check(w: &mut World) -> Outcome {
    let read_data = w.rng.chance(60);
    w.note(format!("  check read_data={read_data}"));
    w.verify_check(read_data)
}

/// Draws a command and a write index from the last unfaulted run of that command (one past
/// its end too, so that "no crash" stays in the mix).
fn draw_faulted(w: &mut World) -> (Command, u64) {
    let kind = *w
        .rng
        .pick(&["backup", "backup", "prune", "forget", "rewrite"]);
    if kind == "backup" && w.rng.chance(70) {
        mutate_once(w);
    }
    let cmd = w.draw_command(kind);
    let writes = w.writes_of.get(cmd.name()).copied().unwrap_or(6);
    // Mostly between the lock's writes (the first and the last), where the data is.
    let n = if writes > 2 && w.rng.chance(75) {
        1 + w.rng.below(writes - 2)
    } else {
        w.rng.below(writes + 1)
    };
    (cmd, n)
}

fn step_crash(w: &mut World) -> Outcome {
    let (cmd, n) = draw_faulted(w);
    let effect = *w
        .rng
        .pick(&[CrashEffect::Lost, CrashEffect::Durable, CrashEffect::Torn]);
    w.note(format!("  {cmd:?} crashing at write {n} ({effect:?})"));
    w.run_faulted(cmd, FaultPlan::crash(n, effect), &gone())?;
    w.verify_all()
}

fn step_no_space(w: &mut World) -> Outcome {
    let (cmd, n) = draw_faulted(w);
    w.note(format!("  {cmd:?} with no space at write {n}"));
    w.run_faulted(cmd, FaultPlan::no_space(n), &me())?;
    if w.rng.chance(50) {
        w.verify_all()?;
    }
    Ok(())
}

/// A restore, check or backup with one damaged read (short, or a flipped byte) of a
/// container or snapshot: restore is exact or fails safely, check reports it, backup fails
/// or makes a snapshot that restores bit-exact.
fn step_flaky_read(w: &mut World) -> Outcome {
    let kind = if w.rng.chance(85) {
        FileKind::Container
    } else {
        FileKind::Snapshot
    };
    let nth = w.rng.below(24);
    let damage = match w.rng.below(3) {
        0 => ReadDamage::Short { missing_bytes: 1 },
        1 => ReadDamage::Short {
            missing_bytes: usize::MAX / 2,
        },
        _ => ReadDamage::Flip {
            position: BytePosition::Seeded(w.rng.next()),
            mask: 1 << w.rng.below(8),
        },
    };
    let plan = FaultPlan::none().with_read_fault(ReadFault {
        kind,
        nth: Some(nth),
        damage,
    });
    let op = *w.rng.pick(&["restore", "check", "backup"]);
    w.note(format!(
        "  {op} with {} read {nth} damaged: {damage:?}",
        kind.noun()
    ));
    match op {
        "restore" => {
            if w.model.is_empty() {
                return Ok(());
            }
            let ids = w.ids_by_time();
            let id = w.rng.pick(&ids).clone();
            w.fault.arm(plan);
            w.flaky_reads = true;
            let outcome = w.verify_restore(&id);
            w.flaky_reads = false;
            let log = w.fault.injection_log();
            w.figures.damaged_reads_injected += log.len() as u64;
            w.fault.disarm();
            w.note(format!("  restore {}: injected {log:?}", &id[..8]));
            outcome
        }
        "check" => {
            w.fault.arm(plan);
            let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_check(w.repo(), true)
            }))
            .map_err(|p| format!("check panicked: {}", panic_message(&*p)))?;
            let log = w.fault.injection_log();
            w.fault.disarm();
            w.figures.checks += 1;
            w.figures.damaged_reads_injected += log.len() as u64;
            let report = report.map_err(|e| format!("check failed instead of reporting: {e}"))?;
            w.note(format!(
                "  check: {} problems; injected {log:?}",
                report.problems.len()
            ));
            // A damaged read of a container damaged at rest already is that damage again:
            // check reports it, or recorded it earlier (then nothing is new).
            let at_rest = w.damaged_now();
            let new_damage = log
                .iter()
                .any(|i| i.kind != FileKind::Container || !at_rest.contains(&i.name));
            if new_damage {
                ensure!(
                    !report.problems.is_empty(),
                    "check did not report the damaged read {log:?}"
                );
                w.figures.damaged_reads_reported_by_check += 1;
            } else if !log.is_empty() {
                w.note("  (the damaged read was of a container damaged at rest)".into());
            } else if !w.damaged() && !w.lost {
                ensure!(
                    report.problems.is_empty(),
                    "check found {:?}",
                    report.problems
                );
            }
            Ok(())
        }
        _ => {
            if w.rng.chance(70) {
                mutate_once(w);
            }
            let before = w.snapshot_ids()?;
            let style = backup_style::BackupStyle::draw(&mut w.rng);
            w.run_faulted(Command::Backup(style), plan, &me())?;
            let new: Vec<String> = w.snapshot_ids()?.difference(&before).cloned().collect();
            for id in new {
                w.verify_restore(&id)?;
            }
            Ok(())
        }
    }
}

/// Flips a bit of a random container at rest (at most two damaged at a time); returns its
/// name, or none when there is nothing to damage.
fn damage_a_container(w: &mut World) -> Result<Option<String>, String> {
    let containers = w
        .fault
        .inner()
        .list(FileKind::Container)
        .map_err(|e| e.to_string())?;
    if containers.is_empty() || w.damage.len() >= 2 {
        w.note("  nothing to damage".into());
        return Ok(None);
    }
    let (name, size) = w.rng.pick(&containers).clone();
    let offset = w.rng.below(size);
    let mask = 1u8 << w.rng.below(8);
    let original = w
        .fault
        .damage(FileKind::Container, &name, offset, mask)
        .map_err(|e| e.to_string())?;
    w.note(format!(
        "  damage container {} at {offset} of {size} (xor {mask:#04x})",
        &name[..8]
    ));
    w.damage.push(Damage {
        name: name.clone(),
        original,
    });
    w.figures.corruptions_injected += 1;
    Ok(Some(name))
}

/// Damages a container at rest: `check --read-data` must report or record it, and a restore
/// is exact or fails safely.
fn step_corrupt(w: &mut World) -> Outcome {
    let Some(name) = damage_a_container(w)? else {
        return Ok(());
    };
    let report = w.check(true)?;
    // Detected: reported, or recorded (this container's damage may be recorded already, by an
    // earlier check, and every snapshot that needed it healed since).
    let unrecorded = w.unrecorded_damage()?;
    ensure!(
        !report.problems.is_empty() || !unrecorded.contains(&name),
        "check --read-data did not report the damage"
    );
    w.figures.corruptions_detected += 1;
    w.note(format!(
        "  check reports {} problems",
        report.problems.len()
    ));
    if !w.model.is_empty() {
        let ids = w.ids_by_time();
        let id = w.rng.pick(&ids).clone();
        w.verify_restore(&id)?;
    }
    Ok(())
}

/// Puts the original bytes of damaged containers back (what a copy from a mirror would do),
/// then verifies everything: check finds the copies it recorded whole again and clears them.
fn step_heal(w: &mut World) -> Outcome {
    if !w.damaged() {
        w.note("  nothing to heal".into());
        return Ok(());
    }
    let inner = w.fault.inner().clone();
    // Newest first: a container damaged twice gets the bytes from before the first damage.
    for d in std::mem::take(&mut w.damage).into_iter().rev() {
        if inner
            .exists(FileKind::Container, &d.name)
            .map_err(|e| e.to_string())?
        {
            inner
                .put(FileKind::Container, &d.name, &d.original)
                .map_err(|e| e.to_string())?;
            w.note(format!("  heal container {}", &d.name[..8]));
        } else {
            w.note(format!("  container {} was deleted by prune", &d.name[..8]));
        }
    }
    w.verify_all()
}

/// The repair steps start from damage at rest: when there is none, a container is damaged
/// first (as `corrupt` does), and the check that follows must detect it.
fn damage_unless_damaged(w: &mut World) -> Outcome {
    let injected = w.live_damage() == 0 && damage_a_container(w)?.is_some();
    w.verify_check(true)?;
    if injected {
        w.figures.corruptions_detected += 1;
    }
    Ok(())
}

/// `check --read-data`, then a backup of the source as it is: the first answer to damage.
/// Check records the damaged copies, so the backup stores their chunks again: every snapshot
/// whose tree check did not name, and whose files it named are all in the source unchanged,
/// restores bit-exact afterwards (one check named nothing of must be exact already).
fn step_check_then_backup(w: &mut World) -> Outcome {
    damage_unless_damaged(w)?;
    let named = w.named.clone();
    let source = scan(&w.src);
    let before = w.snapshot_ids()?;
    w.figures.heal_backups += 1;
    let style = backup_style::BackupStyle::draw(&mut w.rng);
    w.run_faulted(Command::Backup(style), FaultPlan::none(), &me())?;
    let new: Vec<String> = w.snapshot_ids()?.difference(&before).cloned().collect();
    ensure!(
        new.len() == 1,
        "the backup after check made {} snapshots",
        new.len()
    );
    w.verify_exact(&new[0])?;
    for id in w.ids_by_time() {
        if id == new[0] {
            continue;
        }
        let Some(n) = named.get(&id[..8]) else {
            w.verify_exact(&id)?;
            continue;
        };
        let tree = &w.model[&id].tree;
        let unchanged = |f: &String| match (tree.get(f), source.get(f)) {
            (Some(Entry::File { data: a, .. }), Some(Entry::File { data: b, .. })) => a == b,
            _ => false,
        };
        if !n.tree && n.files.iter().all(unchanged) {
            w.note(format!("  {} healed: {:?}", &id[..8], n.files));
            w.verify_exact(&id)?;
            w.figures.snapshots_healed += 1;
        } else {
            w.verify_restore(&id)?;
        }
    }
    Ok(())
}

/// `check --read-data` (which records damage), then `repair packs`: it salvages what verifies
/// out of every container with recorded damage and removes them. Containers still damaged
/// (check reported them without recording anything: only unused copies were hit) are named
/// to a second `repair packs`, as check's message says. Then check names no container, and
/// every snapshot restores bit-exact or fails only on files check names.
fn step_repair_packs(w: &mut World) -> Outcome {
    damage_unless_damaged(w)?;
    let (mut removed, mut kept) = w.repair_packs(&[])?;
    let left: Vec<String> = w
        .damaged_now()
        .into_iter()
        .filter(|n| !kept.contains(n))
        .collect();
    if !left.is_empty() {
        let (more, also_kept) = w.repair_packs(&left)?;
        removed += more;
        kept.extend(also_kept);
    }
    // Every damaged container is gone, but those whose metadata could not be read: repair
    // packs keeps them (still recorded) rather than delete what it cannot locate anything in.
    let still = w.damaged_now();
    ensure!(
        still.iter().all(|n| kept.contains(n)),
        "damage at rest left after repair packs: {still:?} (kept {kept:?})"
    );
    w.damage.retain(|d| kept.contains(&d.name));
    if removed > 0 {
        w.lost = true;
    }
    w.verify_all()
}

/// `repair snapshots --forget`, for what cannot heal (after `repair packs` while damage is at
/// rest, as a user would): each snapshot that needs a lost chunk is replaced by one whose
/// intact files are exact and whose `damaged_paths` files hold a subsequence of the
/// original's chunks. Then check finds nothing, prune works, and everything verifies.
fn step_repair_snapshots(w: &mut World) -> Outcome {
    if w.lost {
        w.verify_check(true)?;
    } else {
        damage_unless_damaged(w)?;
    }
    if w.damaged() {
        step_repair_packs(w)?;
    }
    let recipes = w.recipes();
    let repo = w.repo();
    let opts = RepairSnapshotsOptions {
        forget: true,
        dry_run: false,
    };
    let st = locked(repo, &me(), |lock| {
        repair_snapshots::repair_snapshots(repo, lock, &opts, &NoProgress)
    })
    .map_err(|e| format!("repair snapshots failed: {e}"))?;
    ensure!(
        st.removed_unreadable.is_empty() && st.left_unreadable.is_empty(),
        "repair snapshots found unreadable snapshot files: {st:?}"
    );
    w.figures.snapshot_repairs += 1;
    w.figures.snapshots_repaired += st.repaired.len() as u64;
    for r in &st.repaired {
        let old = r.original.to_hex();
        let new = r
            .new
            .ok_or_else(|| format!("no snapshot written for {old}"))?
            .to_hex();
        let mut e = w
            .model
            .remove(&old)
            .ok_or_else(|| format!("repair snapshots rewrote {old}, not in the model"))?;
        for f in &r.damaged_files {
            let rel = w
                .relative(f)
                .ok_or_else(|| format!("{f} is not below the source"))?;
            ensure!(
                matches!(e.tree.get(&rel), Some(Entry::File { .. })),
                "repair snapshots names {rel}, not a file of {old}"
            );
            // A file damaged before keeps the chunk lengths of its first original.
            if let std::collections::btree_map::Entry::Vacant(slot) = e.damaged.entry(rel) {
                let lens = recipes
                    .get(&old)
                    .and_then(|files| files.get(slot.key()))
                    .ok_or_else(|| {
                        format!("the recipe of {} in {old} was unreadable", slot.key())
                    })?;
                slot.insert(lens.clone());
            }
        }
        e.truncated |= r.tree_truncated;
        e.origin = Some(e.origin.clone().unwrap_or_else(|| old.clone()));
        let (_, snap) = snapshots::load(w.repo().backend().as_ref(), &new)
            .map_err(|e| format!("the repaired snapshot {new}: {e}"))?;
        let listed: BTreeSet<String> = snap
            .damaged_paths
            .iter()
            .filter_map(|p| w.relative(p))
            .collect();
        let damaged: BTreeSet<String> = e.damaged.keys().cloned().collect();
        ensure!(
            listed == damaged
                && snap.original == e.origin
                && snap.tags.iter().any(|t| t == repair_snapshots::REPAIRED_TAG)
                && snap.tree_truncated == e.truncated,
            "the repaired snapshot {new} says damaged {listed:?}, original {:?}, tags {:?}, truncated {}; the model: damaged {damaged:?}, original {:?}, truncated {}",
            snap.original,
            snap.tags,
            snap.tree_truncated,
            e.origin,
            e.truncated
        );
        w.note(format!(
            "  {} -> {}: damaged {damaged:?}{}",
            &old[..8],
            &new[..8],
            if e.truncated { ", tree truncated" } else { "" }
        ));
        w.model.insert(new, e);
    }
    // Nothing needs a lost chunk any more: check finds nothing, and prune works.
    w.lost = false;
    w.verify_check(true)?;
    let prune = w.draw_command("prune");
    w.note(format!("  {prune:?}"));
    w.run_faulted(prune, FaultPlan::none(), &me())?;
    w.verify_all()
}

/// Reopens the repository, half the time as the other client, whose index has not seen
/// anything since it last ran (backups, prunes, damage records of this client).
fn step_reopen(w: &mut World) -> Outcome {
    let rebuild = w.rng.chance(50);
    let switch = w.rng.chance(50);
    w.note(format!(
        "  reopen (rebuild index: {rebuild}, as the other client: {switch})"
    ));
    if switch {
        std::mem::swap(&mut w.index, &mut w.other_index);
        w.figures.client_switches += 1;
    }
    // A fresh client has no index yet.
    let rebuild = rebuild && w.index.exists();
    w.restart(rebuild)?;
    // Before any check (which would rebuild an index that does not match): the index the
    // open caught up names only containers that exist, and no copy recorded as damaged.
    index_caught_up(w.repo())?;
    if std::env::var_os("DEDELTA_CAMPAIGN_STRICT_INDEX").is_none_or(|v| v != "0") {
        index_as_rebuilt(w)?;
    }
    w.verify_check(false)
}

/// Every indexed copy is in a listed container and not recorded as damaged.
fn index_caught_up(repo: &IndexedRepository) -> Outcome {
    let listed: BTreeSet<String> = repo
        .backend()
        .list(FileKind::Container)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let (damage, _) = dedelta_store::repository::damage::DamageSet::load(repo.backend().as_ref())
        .map_err(|e| e.to_string())?;
    let mut wrong = Vec::new();
    repo.index()
        .for_each(|id, loc| {
            let name = loc.container.to_hex();
            if !listed.contains(&name) {
                wrong.push(format!(
                    "chunk {id} indexed in deleted container {}",
                    &name[..8]
                ));
            } else if let Some(why) = damage.reason(&loc.container, &id) {
                wrong.push(format!(
                    "chunk {id} indexed although recorded as damaged: {why}"
                ));
            }
        })
        .map_err(|e| e.to_string())?;
    match wrong.first() {
        None => Ok(()),
        Some(first) => Err(format!(
            "the index did not catch up ({} wrong entries), first: {first}",
            wrong.len()
        )),
    }
}

/// The delta depths the local base cache recorded are true while the index keeps the layout
/// they were recorded under (`LayoutMark`; a backup then uses them in place of walking the
/// index): each chunk given one is indexed, and the copies the index names down its chain are
/// that many deltas deep. A chain through a container that cannot be read now (damage) is
/// not judged.
fn local_cache_depths_true(w: &World) -> Outcome {
    let repo = w.repo();
    let path = w.cache.join(&repo.config().id).join("bases.idx");
    let Ok(bytes) = fs::read(&path) else {
        return Ok(());
    };
    let cache = CacheIndex::decode(&bytes).map_err(|e| format!("local base cache: {e}"))?;
    if !repo.index().layout_kept_since(&cache.mark) {
        return Ok(());
    }
    for (id, x) in &cache.entries {
        let Some(recorded) = x.depth else {
            continue;
        };
        let truth = crate::support::indexed_depth(repo, *id).map_err(|e| {
            format!("local base cache: chunk {id} has depth {recorded} recorded: {e}")
        })?;
        if let Some(truth) = truth {
            ensure!(
                truth == recorded,
                "local base cache: chunk {id} has depth {recorded} recorded, its chain is {truth} deep"
            );
        }
    }
    Ok(())
}

/// The index names the same chunks as one built afresh from the containers (a client
/// opening the repository for the first time): an index that names fewer cannot restore
/// what another client's backup deduplicated against (seed 696826238, fixed in prune).
/// Off with `DEDELTA_CAMPAIGN_STRICT_INDEX=0` (it costs a rebuild at every reopen). It found
/// check's removal of damaged copies (seed 25482355068, step 24: a fresh index named another
/// copy of a chunk whose indexed copy check recorded as damaged), a prune killed between its
/// index removal and its deletions (seed 3997919634) and a dead chunk with a copy in a
/// container kept (seed 199436801), all fixed since.
fn index_as_rebuilt(w: &World) -> Outcome {
    let ids = |repo: &IndexedRepository| -> Result<BTreeSet<String>, String> {
        let mut ids = BTreeSet::new();
        repo.index()
            .for_each(|id, _| {
                ids.insert(id.to_hex());
            })
            .map_err(|e| e.to_string())?;
        Ok(ids)
    };
    let fresh_path = w.dir.join(format!("fresh-{}", w.clock)).join("chunks.idx");
    let fresh = Repository::open(w.fault.clone(), fresh_path.clone())
        .and_then(Repository::open_index)
        .map_err(|e| format!("a fresh index: {e}"))?;
    let (have, want) = (ids(w.repo())?, ids(&fresh)?);
    drop(fresh);
    let _ = fs::remove_dir_all(fresh_path.parent().unwrap());
    let missing: BTreeSet<String> = want.difference(&have).cloned().collect();
    let extra: Vec<&String> = have.difference(&want).collect();
    ensure!(
        missing.is_empty() && extra.is_empty(),
        "the caught-up index differs from a fresh one: {} missing (first {:?}), {} extra (first {:?}){}",
        missing.len(),
        missing.first(),
        extra.len(),
        extra.first(),
        w.whereabouts_of(&missing)
    );
    Ok(())
}

/// Draws a step kind by weight; nudges toward forget when snapshots pile up.
fn draw_step(w: &mut World) -> &'static Step {
    if w.model.len() > SNAPSHOT_BUDGET && w.rng.chance(50) {
        if let Some(forget) = STEPS.iter().find(|s| s.name == "forget") {
            return forget;
        }
    }
    let total: u64 = STEPS.iter().map(|s| s.weight).sum();
    let mut r = w.rng.below(total);
    for s in STEPS {
        if r < s.weight {
            return s;
        }
        r -= s.weight;
    }
    &STEPS[0]
}

// ---------------------------------------------------------------------------------------
// The driver.

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

/// Runs one episode; on a broken invariant prints the replay recipe and the log, and panics.
fn episode(seed: u64, steps: u64) -> Figures {
    let started = Instant::now();
    let mut w = World::new(seed);
    for step in 0..steps {
        let kind = draw_step(&mut w);
        w.note(format!("{step}: {}", kind.name));
        *w.figures.steps.entry(kind.name).or_default() += 1;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (kind.run)(&mut w)))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))))
            .and_then(|_| local_cache_depths_true(&w));
        if let Err(msg) = outcome {
            fail(&w, seed, step, &msg);
        }
    }
    // Finally: no damage left, nothing lost, everything exact.
    let outcome = step_heal(&mut w)
        .and_then(|_| {
            if w.lost {
                w.note("end: repair snapshots for what was lost".into());
                step_repair_snapshots(&mut w)
            } else {
                Ok(())
            }
        })
        .and_then(|_| w.verify_all());
    if let Err(msg) = outcome {
        fail(&w, seed, steps, &msg);
    }
    w.figures.episodes = 1;
    let _ = fs::remove_dir_all(&w.dir);
    if std::env::var_os("DEDELTA_CAMPAIGN_LOG").is_some() {
        println!("operation log:\n{}", w.log.join("\n"));
    }
    println!(
        "episode seed {seed} ({}): {steps} steps in {:.1} s, {} snapshots at the end",
        w.fault.inner().location(),
        started.elapsed().as_secs_f64(),
        w.model.len()
    );
    w.figures
}

fn fail(w: &World, seed: u64, step: u64, msg: &str) -> ! {
    let log = w.log.join("\n");
    eprintln!("operation log:\n{log}");
    eprintln!("campaign figures so far:\n{}", w.figures.report());
    panic!(
        "campaign failed at step {step} (seed {seed}): {msg}\nreplay: DEDELTA_CAMPAIGN_SEED={seed} DEDELTA_CAMPAIGN_STEPS={} cargo test -p dedelta-store --test integration -- campaign::campaign --exact --nocapture",
        step + 1
    );
}

#[test]
fn campaign() {
    let seed = env_u64("DEDELTA_CAMPAIGN_SEED").unwrap_or(DEFAULT_SEED);
    let steps = env_u64("DEDELTA_CAMPAIGN_STEPS").unwrap_or(DEFAULT_STEPS);
    let budget = env_u64("DEDELTA_CAMPAIGN_SECONDS").map(Duration::from_secs);
    let started = Instant::now();
    let mut total = Figures::default();
    let mut episode_seed = seed;
    loop {
        total.add(&episode(episode_seed, steps));
        episode_seed = episode_seed.wrapping_add(1);
        let more = match budget {
            Some(b) => started.elapsed() < b,
            // CI: two episodes, one per backend.
            None => total.episodes < 2 && env_u64("DEDELTA_CAMPAIGN_SEED").is_none(),
        };
        if !more {
            break;
        }
    }
    println!(
        "campaign: seeds {seed}..{episode_seed} in {:.1} s\n{}",
        started.elapsed().as_secs_f64(),
        total.report()
    );
    assert!(total.restores_exact > 0);
}

/// Seeds that failed (after every step the campaign checks the local base cache's recorded
/// depths) when the cache first recorded depths under the index's layout mark, before the
/// mark held the index's epoch: `check` recorded damage and rebuilt the index without the
/// damaged copies, numbering the containers as before and setting no flag, so the mark was
/// kept; the next backup took chunks no longer indexed, or indexed again at other copies, at
/// the depths recorded before (seed 642337792 at step 1: a depth of 1 for a chain 2 deep; the
/// others: depths for chunks the index no longer named, and seed 1996113548 a snapshot that
/// could not be restored, its delta on such a chunk). Each failed in every replay with the
/// epoch left out of the mark.
#[test]
fn depths_recorded_before_checks_rebuild_are_not_used_after_it() {
    for (seed, steps) in [
        (642_337_792, 2),
        (2_119_210_275, 3),
        (2_970_916_923, 3),
        (197_961_817, 11),
    ] {
        assert_eq!(episode(seed, steps).episodes, 1);
    }
}

/// Seeds that failed when restore first read own copies stored as deltas (issue 17): seed
/// 1000 at steps 182 and 269, 7002 at step 155, each a snapshot healed by `check` then a
/// backup whose restore found "its delta chain is longer than 16 (or loops)". A base was
/// resolved like a chunk asked for, so it could take its own delta copy (or, once its own
/// full copy failed, an index copy stored as a delta on the chunk above it), and the chain
/// came back to where it started; see `ChunkLocator::decodable`. The episodes depend a little
/// on thread timing, so a replay does not always meet the same state; these failed 3 of 4
/// runs before the fix (`own_copies` has the scenario by hand).
#[test]
fn own_delta_copies_through_heals() {
    for seed in [1000, 7002] {
        let figures = episode(seed, 300);
        assert!(figures.restores_exact > 0);
    }
}

/// A world after one backup, and the name of its first container.
fn world_after_a_backup(seed: u64) -> (World, String) {
    let mut w = World::new(seed);
    w.run_faulted(
        Command::Backup(Default::default()),
        FaultPlan::none(),
        &me(),
    )
    .unwrap();
    let (name, _) = w.fault.inner().list(FileKind::Container).unwrap()[0].clone();
    (w, name)
}

/// A container damaged twice, then written whole again, is damaged no more. Seed 1271070462
/// failed at step 126 with "check --read-data missed damage": its container of one truncated
/// tree (88 bytes), damaged twice, had been written whole again (most likely by `repair
/// snapshots` storing the same tree again: names are content hashes), and its record was
/// gone; check rightly found nothing, but the model compared the whole bytes with the second
/// damage's original, the once-damaged ones.
#[test]
fn a_container_damaged_twice_then_written_whole_is_not_damaged() {
    let (mut w, name) = world_after_a_backup(2);
    let inner = w.fault.inner().clone();
    let whole = inner.get(FileKind::Container, &name).unwrap();
    for offset in [whole.len() as u64 - 20, 15] {
        let original = w
            .fault
            .damage(FileKind::Container, &name, offset, 0x40)
            .unwrap();
        w.damage.push(Damage {
            name: name.clone(),
            original,
        });
    }
    assert_eq!(w.damaged_now(), vec![name.clone()]);
    inner.put(FileKind::Container, &name, &whole).unwrap();
    assert!(w.damaged_now().is_empty());
}

/// A failure naming chunks missing from the index says where they are stored.
#[test]
fn a_failure_with_chunks_missing_from_the_index_says_where_they_are() {
    let (w, name) = world_after_a_backup(4);
    let inner = w.fault.inner().clone();
    let meta = dedelta_store::repository::read_container_meta(inner.as_ref(), &name).unwrap();
    let id = meta.entries[0].id.to_hex();
    let report = CheckReport {
        problems: vec![dedelta_store::commands::check::Problem {
            snapshot: None,
            path: None,
            message: format!("chunk {id}: missing from the index"),
        }],
        ..Default::default()
    };
    let said = w.whereabouts(&report);
    assert!(
        said.contains(&format!("{} in container {} entry 0", &id[..8], &name[..8]))
            && said.contains("taken in by the index: true"),
        "{said}"
    );
}
