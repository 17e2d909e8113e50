//! What several modules need, written once: test data, a small repository config, locks, and
//! each command run the way the tests run it (under the exclusive lock, with fixed times).
//!
//! Data is deterministic (xorshift64 from a seed), so that a failure replays. Times are fixed
//! strings, so that a test's snapshots and containers are the same bytes on every run.

use dedelta_core::ChunkId;
use dedelta_store::backend::FileKind;
use dedelta_store::commands::backup::{self, BackupOptions, BackupResult, Workers};
use dedelta_store::commands::check::{self, CheckReport};
use dedelta_store::commands::forget::{self, KeepPolicy};
use dedelta_store::commands::{prune, restore};
use dedelta_store::format::config::{DeltaConfig, RepoConfig};
use dedelta_store::format::container::{ContainerId, EntryKind};
use dedelta_store::format::snapshot::Snapshot;
use dedelta_store::progress::NoProgress;
use dedelta_store::read::{RestoreCacheChoice, DEFAULT_ASSEMBLY_BYTES};
use dedelta_store::repository::lock::{LockInfo, RepoLock};
use dedelta_store::{Error, IndexedRepository, Repository, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------
// Data.

/// File name (relative, '/'-separated) -> content.
pub type Files = BTreeMap<String, Vec<u8>>;

/// One step of xorshift64: deterministic bits without a dependency. `x` must not be 0.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Text-like rows, different per seed, compressible; a few bytes edited (see
/// [`versioned_text`]) leave most chunks equal and the rest similar, which is what dedup and
/// delta compression are for.
pub fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        let r = xorshift(&mut x);
        out.extend_from_slice(
            format!(
                "row {} value {} flag {}\n",
                r % 1_000_000,
                (r >> 24) % 9973,
                r >> 60
            )
            .as_bytes(),
        );
    }
    out.truncate(len);
    out
}

/// Incompressible bytes, so that a new file fills containers (and zstd regions stay raw).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..len).map(|_| xorshift(&mut x) as u8).collect()
}

/// File `f` of version `v`: `text(len, f)` with `3 v` bytes overwritten by `#`, so that each
/// version is stored mostly as deltas of the one before.
pub fn versioned_text(f: u64, len: usize, v: u64) -> Vec<u8> {
    let mut d = text(len, f);
    for k in 0..v * 3 {
        let i = ((k + 1) * 7_919 * (f + 3)) as usize % d.len();
        d[i] = b'#';
    }
    d
}

/// `Files` from (name, content) pairs.
pub fn files<const N: usize>(pairs: [(&str, Vec<u8>); N]) -> Files {
    pairs.into_iter().map(|(n, d)| (n.to_string(), d)).collect()
}

/// Replaces `dir` by a directory holding exactly `files`.
pub fn write_files(dir: &Path, files: &Files) {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    for (name, data) in files {
        fs::write(dir.join(name), data).unwrap();
    }
}

/// Makes `dir` hold `files`, writing only the files whose content changed (and removing the
/// others): unchanged files keep their inode, ctime and mtime, as between real versions.
pub fn update_files(dir: &Path, files: &Files) {
    fs::create_dir_all(dir).unwrap();
    let old = read_files(dir);
    for name in old.keys().filter(|n| !files.contains_key(*n)) {
        fs::remove_file(dir.join(name)).unwrap();
    }
    for (name, data) in files {
        if old.get(name) != Some(data) {
            fs::write(dir.join(name), data).unwrap();
        }
    }
}

/// The files directly in `dir` (none if it does not exist).
pub fn read_files(dir: &Path) -> Files {
    let Ok(rd) = fs::read_dir(dir) else {
        return Files::new();
    };
    rd.map(|e| {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        (name, fs::read(e.path()).unwrap())
    })
    .collect()
}

/// Every path below `dir`, parents before children, not following symlinks.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push(p.clone());
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

/// Where `source` (an absolute path that was backed up) lands when restored into `target`.
pub fn restored_root(target: &Path, source: &Path) -> PathBuf {
    target.join(source.strip_prefix("/").unwrap())
}

// ---------------------------------------------------------------------------------------
// Repositories and locks.

/// A config whose sizes are scaled down so that a few hundred KiB fill several containers:
/// chunks of 512..8192 bytes (2048 on average), regions of 16 KiB and containers of 48 KiB,
/// each times `scale`.
pub fn config(scale: usize, delta: DeltaConfig) -> RepoConfig {
    let mut cfg = RepoConfig::new("test".into());
    cfg.chunker.params.min_size = 512 * scale;
    cfg.chunker.params.avg_size = 2048 * scale;
    cfg.chunker.params.max_size = 8192 * scale;
    cfg.region_size = 16 * 1024 * scale;
    cfg.container_size = 48 * 1024 * scale;
    cfg.delta = delta;
    cfg
}

/// LoopDelta's delta settings (eval preset `loopdelta`): N-transform 3 x 4, no DupAdj,
/// one-level, and the `prefetch` sketch index (bases only from prefetched dense containers
/// and this backup's own chunks).
pub fn loopdelta_delta() -> DeltaConfig {
    use dedelta_core::sketch::{SketchKind, SketchParams};
    use dedelta_store::format::config::SketchIndexKind;
    DeltaConfig {
        sketch: Some(SketchKind::NTransform),
        sketch_params: SketchParams {
            sf_count: 3,
            features_per_sf: 4,
        },
        dupadj: false,
        sketch_index: SketchIndexKind::Prefetch,
        reanchor: None,
        max_depth: 1,
        candidates: 1,
        candidates_enough: None,
        ..DeltaConfig::recommended()
    }
}

/// Version `v` of a tree of texts, one per `(name, length)` (text seed: its position + 1),
/// with `edits` scattered bytes changed per version: most chunks duplicates of the last
/// version's, the edited ones similar to them.
pub fn edited_texts(v: u64, edits: u64, texts: &[(&str, usize)]) -> Files {
    let mut out = Files::new();
    for (i, (name, len)) in texts.iter().enumerate() {
        let seed = i as u64 + 1;
        let mut t = text(*len, seed);
        for k in 0..edits * v {
            let pos = ((k * 7919 + seed * 104_729 + v * 31) as usize) % t.len();
            t[pos] = b'#';
        }
        out.insert((*name).to_string(), t);
    }
    out
}

/// A new local repository at `path` with `delta`, whose requests are metered (I/O accounting).
pub fn metered_repo(path: &Path, delta: DeltaConfig) -> IndexedRepository {
    Repository::init_local_with_cache(path, config(1, delta), &cache_root_for(path))
        .unwrap()
        .metered()
        .open_index()
        .unwrap()
}

/// A new repository at `path` (a local directory), opened with its index (kept under
/// [`cache_root_for`]).
pub fn init_repo(path: &Path, cfg: RepoConfig) -> IndexedRepository {
    Repository::init_local_with_cache(path, cfg, &cache_root_for(path))
        .unwrap()
        .open_index()
        .unwrap()
}

/// The client cache root the tests use for the repository at `path`: `<path>.cache` beside
/// it, so that tests never touch the user's cache and copies of a repository (same id) keep
/// separate indexes.
pub fn cache_root_for(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".cache");
    path.with_file_name(name)
}

/// Opens the repository at `path` with the tests' cache root (see [`cache_root_for`]).
pub fn open_repo(path: &Path) -> Result<Repository, dedelta_store::Error> {
    Repository::open_local_with_cache(path, &cache_root_for(path))
}

/// The host every test's locks name (a lock is stale only when its host is this one).
const LOCK_HOST: &str = "test";

/// The lock of this (live) process: a command that fails without crashing must release it.
pub fn me() -> LockInfo {
    LockInfo {
        pid: std::process::id(),
        host: LOCK_HOST.into(),
        time: "t".into(),
        command: "test".into(),
    }
}

/// The lock of a process that has exited since (a pid that cannot exist): what a crashed
/// command leaves is stale, and the next command removes it.
pub fn gone() -> LockInfo {
    LockInfo {
        pid: u32::MAX - 7,
        host: LOCK_HOST.into(),
        time: "t".into(),
        command: "crashed".into(),
    }
}

/// Runs `f` under the exclusive lock taken as `who`, then releases it; the command's error
/// comes first.
pub fn locked<T>(
    repo: &IndexedRepository,
    who: &LockInfo,
    f: impl FnOnce(&RepoLock) -> Result<T>,
) -> Result<T> {
    let lock = repo.lock(who)?;
    let out = f(&lock);
    let released = lock.release();
    let out = out?;
    released?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Commands.

/// The snapshot time of backup number `n` (one a second from 2026-01-01T00:00:00Z): fixed,
/// so that the same backups write the same bytes.
pub fn time_of(n: u64) -> String {
    format!(
        "2026-01-{:02}T{:02}:{:02}:{:02}Z",
        1 + n / 86_400,
        n / 3600 % 24,
        n / 60 % 60,
        n % 60
    )
}

/// A backup of `paths` (host `test`, nothing excluded, no tags, the repository's delta
/// settings, no local cache) stamped `time`.
pub fn backup_options(paths: Vec<PathBuf>, time: String) -> BackupOptions {
    BackupOptions {
        paths,
        excludes: vec![],
        tags: vec![],
        stdin: None,
        copy: None,
        skip_if_unchanged: false,
        host: "test".into(),
        time,
        delta: None,
        cache_dir: None,
        lookup: Default::default(),
        rewriting: None,
        sources: Default::default(),
        loopdelta: Default::default(),
    }
}

/// Runs a backup with two worker threads under `lock`.
pub fn backup_with(
    repo: &IndexedRepository,
    lock: &RepoLock,
    opts: BackupOptions,
) -> Result<BackupResult> {
    backup::backup(repo, lock, opts, &Workers::new(2)?, &NoProgress)
}

/// Backs up `src` as backup number `n`, under the lock taken as `who`.
pub fn backup_dir(
    repo: &IndexedRepository,
    src: &Path,
    n: u64,
    who: &LockInfo,
) -> Result<BackupResult> {
    locked(repo, who, |lock| {
        backup_with(
            repo,
            lock,
            backup_options(vec![src.to_path_buf()], time_of(n)),
        )
    })
}

/// Writes `files` to `src` and backs it up as backup number `n`.
pub fn backup_files(
    repo: &IndexedRepository,
    src: &Path,
    files: &Files,
    n: u64,
    who: &LockInfo,
) -> Result<BackupResult> {
    write_files(src, files);
    backup_dir(repo, src, n, who)
}

/// [`backup_files`] finding duplicates with `lookup`.
pub fn backup_files_with(
    repo: &IndexedRepository,
    src: &Path,
    files: &Files,
    n: u64,
    who: &LockInfo,
    lookup: dedelta_store::commands::backup::FingerprintIndexOptions,
) -> Result<BackupResult> {
    write_files(src, files);
    locked(repo, who, |lock| {
        let mut opts = backup_options(vec![src.to_path_buf()], time_of(n));
        opts.lookup = lookup;
        backup_with(repo, lock, opts)
    })
}

/// `forget` of the snapshots named (full hex ids), nothing kept by policy.
pub fn forget_ids(repo: &IndexedRepository, lock: &RepoLock, ids: &[String]) -> Result<()> {
    forget::forget(repo, lock, ids, &KeepPolicy::default(), false).map(|_| ())
}

/// `prune` with `max_unused` (0 rewrites every partly-dead container, 1 keeps them all).
pub fn prune_with(
    repo: &IndexedRepository,
    lock: &RepoLock,
    max_unused: f64,
    dry_run: bool,
) -> Result<prune::PruneStats> {
    let opts = prune::PruneOptions {
        max_unused,
        dry_run,
    };
    prune::prune(repo, lock, &opts, &NoProgress)
}

/// `check`, under the exclusive lock it needs (it records damage).
pub fn run_check(
    repo: &IndexedRepository,
    read_data: impl Into<check::ReadData>,
) -> Result<CheckReport> {
    let lock = repo.lock(&me())?;
    check::check(
        repo,
        Some(&lock),
        read_data,
        "2026-01-01T00:00:00Z",
        &NoProgress,
    )
}

/// Every restore cache, in sizes that stress it: the default LRU (512 containers), an LRU of
/// one container, forward assembly with its default area, and with 8 KiB areas (a few
/// chunks: files span many areas, and a delta's base often lies in another area).
pub fn every_restore_cache() -> Vec<RestoreCacheChoice> {
    vec![
        RestoreCacheChoice::default(),
        RestoreCacheChoice::Lru { containers: 1 },
        RestoreCacheChoice::Forward {
            area_bytes: DEFAULT_ASSEMBLY_BYTES,
        },
        RestoreCacheChoice::Forward { area_bytes: 8192 },
    ]
}

/// Restores all of `snap` into `target` (created if missing) with a 1 MiB region cache.
pub fn restore_to(
    repo: &IndexedRepository,
    snap: &Snapshot,
    target: &Path,
) -> Result<restore::RestoreStats> {
    let opts = restore::RestoreOptions {
        target: target.to_path_buf(),
        include: vec![],
        cache_bytes: 1 << 20,
        cache: Default::default(),
        ..Default::default()
    };
    restore::restore(repo, snap, &opts, &NoProgress)
}

/// A restore that skipped damaged files, as an error naming each of them (restore goes on
/// past damage and lists it; these tests judge what it left like a failed restore).
pub fn files_restored(st: restore::RestoreStats) -> Result<restore::RestoreStats> {
    if st.errors.is_empty() {
        return Ok(st);
    }
    let named: Vec<String> = st
        .errors
        .iter()
        .map(|e| format!("{}: {}", e.path_lossy(), e.message))
        .collect();
    Err(Error::corrupt("restore", named.join("; ")))
}

/// The snapshot ids (full hex) the repository lists.
pub fn snapshot_ids(repo: &IndexedRepository) -> Result<BTreeSet<String>> {
    Ok(repo
        .snapshots()?
        .snapshots
        .into_iter()
        .map(|(id, _)| id.to_hex())
        .collect())
}

/// The bytes of every container: what the repository stores.
pub fn stored_bytes(repo: &IndexedRepository) -> u64 {
    let containers = repo.backend().list(FileKind::Container).unwrap();
    containers.iter().map(|(_, size)| size).sum()
}

/// The container the index names for the first chunk of the first file of `snap` whose path
/// ends with `suffix`.
pub fn container_of_first_chunk(
    repo: &IndexedRepository,
    snap: &Snapshot,
    suffix: &str,
) -> ContainerId {
    let mut first = None;
    dedelta_store::read::walk_tree(repo, snap, |node, chunks| {
        if first.is_none() && node.path.ends_with(suffix.as_bytes()) {
            first = chunks.first().map(|c| c.id);
        }
        Ok(())
    })
    .unwrap();
    let chunk = first.unwrap_or_else(|| panic!("no file ending with {suffix:?}"));
    repo.index().get(&chunk).unwrap().unwrap().container
}

/// The message of a caught panic.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "?".into())
}

/// The names of the objects of `kind` in `backend`, sorted (equal container lists are equal
/// stored bytes: containers are named by their content).
pub fn sorted_names(backend: &dyn dedelta_store::backend::Backend, kind: FileKind) -> Vec<String> {
    let mut names: Vec<String> = backend
        .list(kind)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    names.sort();
    names
}

/// The delta depth of the copy of `id` the index names, down the copies it names (0: stored
/// in full). `Ok(None)` if a container on the way cannot be read (damage); an error if a chunk
/// on the way is not indexed, or the chain is longer than readers follow.
pub fn indexed_depth(repo: &IndexedRepository, id: ChunkId) -> Result<Option<u8>, String> {
    let (mut at, mut depth) = (id, 0u8);
    loop {
        let Some(loc) = repo.index().get(&at).map_err(|e| e.to_string())? else {
            return Err(format!("{at} down the chain of {id} is not indexed"));
        };
        let Ok(meta) = dedelta_store::repository::read_container_meta(
            repo.backend().as_ref(),
            &loc.container.to_hex(),
        ) else {
            return Ok(None);
        };
        match meta.entries.get(loc.entry as usize).map(|e| e.kind) {
            Some(EntryKind::Full) => return Ok(Some(depth)),
            Some(EntryKind::Delta { base, .. })
                if depth < dedelta_store::format::config::MAX_DELTA_DEPTH =>
            {
                (at, depth) = (base, depth + 1);
            }
            other => return Err(format!("the chain of {id}: {other:?} at {at}")),
        }
    }
}
