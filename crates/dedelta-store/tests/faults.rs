//! Fault tests: backup and prune stopped at every write, a disk-full at every write, and short
//! or flipped reads, all injected by `backend::fault::FaultBackend`.
//!
//! Guards the crash-safety argument of docs/format.md and docs/reliability.md: a container is
//! durable before it is indexed, the index before the snapshot; prune's copies are indexed
//! before dead chunks leave the index, and that before any container is deleted. Instead of
//! killing a process after a sleep (the CLI tests in crates/dedelta-cli/tests/cli/crash.rs,
//! which stay), each command runs once to count its writes, then once per write index N with
//! a crash there, so every crash point is reached. After each crash the repository is
//! reopened, its redb index kept or deleted (forcing a rebuild), and must pass
//! `check --read-data`, restore every earlier snapshot bit-exact, and take and restore a new
//! backup.
//!
//! Tests marked `#[ignore = "reason: ..."]` reproduce known bugs; they are run with
//! `cargo test -p dedelta-store --test faults -- --ignored` and un-ignored with the fix.

use dedelta_store::backend::local::LocalBackend;
use dedelta_store::backend::memory::MemoryBackend;
use dedelta_store::backend::wrap::fault::{
    BytePosition, CrashEffect, FaultBackend, FaultPlan, InjectedFault, ReadDamage, ReadFault,
    ALL_KINDS,
};
use dedelta_store::backend::{Backend, FileKind};
use dedelta_store::commands::forget::{self, KeepPolicy};
use dedelta_store::commands::{backup, check, prune, restore};
use dedelta_store::format::config::{DeltaConfig, RepoConfig};
use dedelta_store::format::container::HEADER_LEN;
use dedelta_store::format::snapshot::SnapshotId;
use dedelta_store::progress::NoProgress;
use dedelta_store::repository::lock::{LockInfo, RepoLock};
use dedelta_store::repository::snapshots;
use dedelta_store::{Error, IndexedRepository, Repository, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File name -> content.
type Files = BTreeMap<String, Vec<u8>>;
/// Snapshot id (hex) -> the files it must restore to.
type Model = BTreeMap<String, Files>;

fn config() -> RepoConfig {
    let mut cfg = RepoConfig::new("faults".into());
    cfg.chunker.params.min_size = 512;
    cfg.chunker.params.avg_size = 2048;
    cfg.chunker.params.max_size = 8192;
    cfg.region_size = 16 * 1024;
    cfg.container_size = 48 * 1024;
    cfg.delta = DeltaConfig::recommended();
    cfg
}

/// xorshift64: deterministic bytes without a dependency.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Text-like rows: compressible, and similar between seeds' edits.
fn text(len: usize, seed: u64) -> Vec<u8> {
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

/// Incompressible bytes, so that a new file fills several containers.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..len).map(|_| xorshift(&mut x) as u8).collect()
}

/// Version `v` of a small tree: three files edited a little per version (stored as deltas),
/// and one new incompressible file (new containers).
fn tree(v: u64) -> Files {
    let mut m = Files::new();
    for f in 0..3u64 {
        let mut d = text(40_000 + f as usize * 15_000, f);
        for k in 0..v * 3 {
            let i = ((k + 1) * 7_919 * (f + 3)) as usize % d.len();
            d[i] = b'#';
        }
        m.insert(format!("f{f}.txt"), d);
    }
    m.insert(format!("new{v}.bin"), noise(100_000, 100 + v));
    m
}

/// The lock of a process that has exited since (a pid that cannot exist): what a crashed
/// command leaves is stale, and the next command removes it.
fn gone() -> LockInfo {
    LockInfo {
        pid: u32::MAX - 7,
        host: "faults".into(),
        time: "t".into(),
        command: "crashing command".into(),
    }
}

/// The lock of this (live) process: a command that failed without crashing must release it.
fn alive() -> LockInfo {
    LockInfo {
        pid: std::process::id(),
        host: "faults".into(),
        time: "t".into(),
        command: "test".into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Store {
    Memory,
    Local,
}

/// A repository for one trial: a backend behind a [`FaultBackend`], and its index path.
struct Trial {
    dir: tempfile::TempDir,
    fault: Arc<FaultBackend>,
    index: PathBuf,
}

impl Trial {
    /// A repository holding `objects` (all kinds) and, if given, a copy of a redb index file.
    fn new(store: Store, objects: Option<&dyn Backend>, index: Option<&[u8]>) -> Trial {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Backend> = match store {
            Store::Memory => Arc::new(MemoryBackend::default()),
            Store::Local => {
                let b = LocalBackend::new(dir.path().join("repo"));
                b.create_layout().unwrap();
                Arc::new(b)
            }
        };
        match objects {
            Some(from) => copy_objects(from, inner.as_ref()),
            None => inner
                .put(FileKind::Config, "config", &config().to_bytes())
                .unwrap(),
        }
        let index_path = dir.path().join("index").join("chunks.redb");
        if let Some(bytes) = index {
            fs::create_dir_all(index_path.parent().unwrap()).unwrap();
            fs::write(&index_path, bytes).unwrap();
        }
        Trial {
            dir,
            fault: Arc::new(FaultBackend::new(inner)),
            index: index_path,
        }
    }

    /// A copy of `base`.
    fn of(base: &Base, store: Store) -> Trial {
        Trial::new(
            store,
            Some(base.trial.fault.inner().as_ref()),
            Some(&base.index),
        )
    }

    fn open(&self) -> Result<IndexedRepository> {
        Repository::open(self.fault.clone(), self.index.clone())?.open_index()
    }

    /// The restart after a crash: faults off, and with `rebuild` the index deleted.
    fn reopen(&self, rebuild: bool) -> IndexedRepository {
        self.fault.disarm();
        if rebuild {
            fs::remove_file(&self.index).unwrap();
        }
        self.open().expect("reopening after a fault")
    }

    fn src(&self) -> PathBuf {
        self.dir.path().join("src")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn copy_objects(from: &dyn Backend, to: &dyn Backend) {
    for kind in ALL_KINDS {
        for (name, _) in from.list(kind).unwrap() {
            to.put(kind, &name, &from.get(kind, &name).unwrap())
                .unwrap();
        }
    }
    // The config is not listed (it is one object, not a folder).
    to.put(
        FileKind::Config,
        "config",
        &from.get(FileKind::Config, "config").unwrap(),
    )
    .unwrap();
}

/// A prepared repository to copy into each trial.
struct Base {
    trial: Trial,
    index: Vec<u8>,
    model: Model,
}

/// Backs up `versions`, then forgets the first `forget` of them.
fn base(versions: std::ops::Range<u64>, forget: usize) -> Base {
    let trial = Trial::new(Store::Memory, None, None);
    let mut model = Model::new();
    let mut ids = Vec::new();
    {
        let repo = trial.open().unwrap();
        for v in versions {
            let files = tree(v);
            let id = backup_files(&repo, &trial.src(), &files, v as usize, &alive()).unwrap();
            ids.push(id.to_hex());
            model.insert(id.to_hex(), files);
        }
        let lock = repo.lock(&alive()).unwrap();
        forget::forget(&repo, &lock, &ids[..forget], &KeepPolicy::default(), false).unwrap();
        lock.release().unwrap();
        for id in &ids[..forget] {
            model.remove(id);
        }
    }
    let index = fs::read(&trial.index).unwrap();
    Base {
        trial,
        index,
        model,
    }
}

fn write_tree(src: &Path, files: &Files) {
    let _ = fs::remove_dir_all(src);
    fs::create_dir_all(src).unwrap();
    for (name, data) in files {
        fs::write(src.join(name), data).unwrap();
    }
}

/// Runs `f` under the exclusive lock taken as `me`, then releases it; the command's error
/// comes first.
fn locked<T>(
    repo: &IndexedRepository,
    me: &LockInfo,
    f: impl FnOnce(&RepoLock) -> Result<T>,
) -> Result<T> {
    let lock = repo.lock(me)?;
    let out = f(&lock);
    let released = lock.release();
    let out = out?;
    released?;
    Ok(out)
}

/// Backs up `files` (written to `src`) with snapshot time number `n`.
fn backup_files(
    repo: &IndexedRepository,
    src: &Path,
    files: &Files,
    n: usize,
    me: &LockInfo,
) -> Result<SnapshotId> {
    write_tree(src, files);
    locked(repo, me, |lock| {
        let opts = backup::BackupOptions {
            paths: vec![src.to_path_buf()],
            excludes: vec![],
            tags: vec![],
            stdin: None,
            host: "faults".into(),
            time: format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
            delta: None,
            cache_dir: None,
        };
        backup::backup(
            repo,
            lock,
            opts,
            &backup::Workers::new(2).unwrap(),
            &NoProgress,
        )
        .map(|r| r.snapshot_id)
    })
}

fn prune_all(repo: &IndexedRepository, me: &LockInfo, dry_run: bool) -> Result<prune::PruneStats> {
    locked(repo, me, |lock| {
        let opts = prune::PruneOptions {
            max_unused: 0.0,
            dry_run,
        };
        prune::prune(repo, lock, &opts, &NoProgress)
    })
}

/// Restores snapshot `id` into a fresh `target` and reads back the files under the path it
/// backed up.
fn restore_files(
    repo: &IndexedRepository,
    id: &str,
    target: &Path,
) -> (Result<restore::RestoreStats>, Files) {
    let _ = fs::remove_dir_all(target);
    let mut root = None;
    let result = snapshots::load(repo.backend().as_ref(), id).and_then(|(_, snap)| {
        root = snap
            .paths
            .first()
            .map(|p| target.join(p.trim_start_matches('/')));
        let opts = restore::RestoreOptions {
            target: target.to_path_buf(),
            include: vec![],
            cache_bytes: 1 << 20,
        };
        restore::restore(repo, &snap, &opts, &NoProgress).and_then(files_restored)
    });
    let mut got = Files::new();
    if let Some(Ok(rd)) = root.map(fs::read_dir) {
        for e in rd {
            let e = e.unwrap();
            got.insert(
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            );
        }
    }
    (result, got)
}

/// What a restore of possibly damaged data did.
#[derive(Debug)]
enum Restored {
    Exact,
    Failed(Error),
}

/// Restores `id`: either bit-exact, or an error that names the damage; in neither case may a
/// restored file hold a byte that differs from the original (a file cut short by the error is
/// a prefix of it, or named in the error).
fn restore_exact_or_error(
    repo: &IndexedRepository,
    id: &str,
    expected: &Files,
    target: &Path,
) -> Restored {
    let (result, got) = restore_files(repo, id, target);
    match result {
        Ok(_) => {
            assert!(
                got == *expected,
                "restore of {id} succeeded with wrong content: {:?}",
                diff(expected, &got)
            );
            Restored::Exact
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains("panicked"), "restore of {id} panicked: {msg}");
            for (name, data) in &got {
                let ok = expected
                    .get(name)
                    .is_some_and(|want| want.starts_with(data))
                    || msg.contains(name.as_str());
                assert!(
                    ok,
                    "failed restore of {id} ({msg}) wrote wrong bytes into {name}"
                );
            }
            Restored::Failed(e)
        }
    }
}

fn diff(want: &Files, got: &Files) -> Vec<String> {
    let names: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    names
        .into_iter()
        .filter(|n| want.get(*n) != got.get(*n))
        .map(|n| {
            format!(
                "{n}: want {:?} bytes, got {:?}",
                want.get(n).map(Vec::len),
                got.get(n).map(Vec::len)
            )
        })
        .collect()
}

fn assert_restores_exact(repo: &IndexedRepository, id: &str, expected: &Files, trial: &Trial) {
    let (result, got) = restore_files(repo, id, &trial.path("out"));
    if let Err(e) = result {
        panic!("restore of {id} failed: {e}");
    }
    assert!(
        got == *expected,
        "snapshot {id} differs: {:?}",
        diff(expected, &got)
    );
}

fn snapshot_ids(repo: &IndexedRepository) -> BTreeSet<String> {
    repo.snapshots()
        .map(|l| l.snapshots)
        .expect("snapshots readable")
        .into_iter()
        .map(|(id, _)| id.to_hex())
        .collect()
}

/// `check --read-data` finds nothing, the snapshots are exactly the model's, and each
/// restores bit-exact.
fn assert_consistent(repo: &IndexedRepository, model: &Model, trial: &Trial, when: &str) {
    let report = run_check(repo, true).expect("check runs");
    assert!(
        report.problems.is_empty(),
        "{when}: check found {:?}",
        report.problems
    );
    let ids = snapshot_ids(repo);
    assert_eq!(
        ids,
        model.keys().cloned().collect::<BTreeSet<_>>(),
        "{when}: snapshots"
    );
    for (id, files) in model {
        assert_restores_exact(repo, id, files, trial);
    }
}

/// After a fault: a new backup works and restores, and check still passes.
fn assert_takes_new_backups(repo: &IndexedRepository, trial: &Trial, n: usize, when: &str) {
    let files = tree(n as u64);
    let id = backup_files(repo, &trial.src(), &files, n, &alive())
        .unwrap_or_else(|e| panic!("{when}: backup after the fault failed: {e}"));
    assert_restores_exact(repo, &id.to_hex(), &files, trial);
    let report = run_check(repo, false).unwrap();
    assert!(report.problems.is_empty(), "{when}: {:?}", report.problems);
}

fn kinds(log: &[(FileKind, String)]) -> Vec<&'static str> {
    log.iter().map(|(k, _)| k.noun()).collect()
}

/// Backup crashed at every write, with the write lost or durable, on both backends.
fn backup_crash_at_every_write(store: Store) {
    let base = base(0..2, 0);
    let next = tree(2);
    // Dry run: the writes a backup makes.
    let log = {
        let t = Trial::of(&base, store);
        let repo = t.open().unwrap();
        t.fault.arm(FaultPlan::none());
        backup_files(&repo, &t.src(), &next, 2, &gone()).unwrap();
        t.fault.write_log()
    };
    println!("backup writes: {:?}", kinds(&log));
    assert!(
        log.iter()
            .filter(|(k, _)| *k == FileKind::Container)
            .count()
            >= 2
    );
    let snapshot_write = log
        .iter()
        .position(|(k, _)| *k == FileKind::Snapshot)
        .expect("a backup writes its snapshot");
    let mut trials = 0;
    for effect in [CrashEffect::Lost, CrashEffect::Durable] {
        for n in 0..log.len() as u64 {
            let when = format!(
                "{store:?} backup, crash at write {n} {effect:?} ({:?})",
                log[n as usize]
            );
            let t = Trial::of(&base, store);
            let result = {
                let repo = t.open().unwrap();
                t.fault.arm(FaultPlan::crash(n, effect));
                backup_files(&repo, &t.src(), &next, 2, &gone())
            };
            let err = result.expect_err(&when);
            assert!(
                matches!(
                    err.io_cause().and_then(FaultBackend::injected),
                    Some(InjectedFault::Crash { .. })
                ),
                "{when}: {err}"
            );
            assert!(t.fault.crashed(), "{when}");
            let repo = t.reopen(n % 2 == 1);
            // The snapshot exists exactly when its write happened.
            let written = n as usize > snapshot_write
                || (n as usize == snapshot_write && effect == CrashEffect::Durable);
            let mut model = base.model.clone();
            let extra: Vec<String> = snapshot_ids(&repo)
                .into_iter()
                .filter(|id| !model.contains_key(id))
                .collect();
            assert_eq!(
                extra.len(),
                usize::from(written),
                "{when}: new snapshots {extra:?}"
            );
            for id in extra {
                model.insert(id, next.clone());
            }
            assert_consistent(&repo, &model, &t, &when);
            assert_takes_new_backups(&repo, &t, 3, &when);
            trials += 1;
        }
    }
    println!("{store:?}: {trials} backup crash points verified");
}

#[test]
fn backup_crashed_at_every_write_memory() {
    backup_crash_at_every_write(Store::Memory);
}

#[test]
fn backup_crashed_at_every_write_local() {
    backup_crash_at_every_write(Store::Local);
}

/// Prune (after forget) crashed at every write: nothing is lost, and the next prune finishes.
fn prune_crash_at_every_write(store: Store) {
    let base = base(0..4, 2);
    let (log, plan) = {
        let t = Trial::of(&base, store);
        let repo = t.open().unwrap();
        t.fault.arm(FaultPlan::none());
        let st = prune_all(&repo, &gone(), false).unwrap();
        (t.fault.write_log(), st.plan)
    };
    println!(
        "prune writes: {:?} (rewrite {}, delete {})",
        kinds(&log),
        plan.rewrite.len(),
        plan.delete.len()
    );
    assert!(
        !plan.rewrite.is_empty() && !plan.delete.is_empty(),
        "{plan:?}"
    );
    let mut trials = 0;
    for effect in [CrashEffect::Lost, CrashEffect::Durable] {
        for n in 0..log.len() as u64 {
            let when = format!(
                "{store:?} prune, crash at write {n} {effect:?} ({:?})",
                log[n as usize]
            );
            let t = Trial::of(&base, store);
            {
                let repo = t.open().unwrap();
                t.fault.arm(FaultPlan::crash(n, effect));
                let err = prune_all(&repo, &gone(), false).expect_err(&when);
                assert!(
                    err.io_cause().and_then(FaultBackend::injected).is_some(),
                    "{when}: {err}"
                );
            }
            let repo = t.reopen(n % 2 == 0);
            assert_consistent(&repo, &base.model, &t, &when);
            // The next prune finishes the job: nothing is left to delete or rewrite.
            prune_all(&repo, &alive(), false).unwrap_or_else(|e| panic!("{when}: next prune: {e}"));
            let again = prune_all(&repo, &alive(), true).unwrap();
            assert!(
                again.plan.delete.is_empty() && again.plan.rewrite.is_empty(),
                "{when}: a prune after the next one still plans {:?}",
                again.plan
            );
            assert_consistent(&repo, &base.model, &t, &when);
            assert_takes_new_backups(&repo, &t, 9, &when);
            trials += 1;
        }
    }
    println!("{store:?}: {trials} prune crash points verified");
}

#[test]
fn prune_crashed_at_every_write_memory() {
    prune_crash_at_every_write(Store::Memory);
}

#[test]
fn prune_crashed_at_every_write_local() {
    prune_crash_at_every_write(Store::Local);
}

/// Forget deletes snapshot files one by one: a crash leaves the named ones partly deleted and
/// nothing else touched.
#[test]
fn forget_crashed_at_every_write_deletes_only_named_snapshots() {
    let base = base(0..4, 0);
    let ids: Vec<String> = base.model.keys().cloned().collect();
    let named = &ids[1..3];
    let forget_named = |repo: &IndexedRepository| {
        locked(repo, &gone(), |lock| {
            forget::forget(repo, lock, named, &KeepPolicy::default(), false)
        })
    };
    let writes = {
        let t = Trial::of(&base, Store::Memory);
        let repo = t.open().unwrap();
        t.fault.arm(FaultPlan::none());
        forget_named(&repo).unwrap();
        t.fault.counts().total_writes()
    };
    for n in 0..writes {
        let when = format!("forget, crash at write {n}");
        let t = Trial::of(&base, Store::Memory);
        {
            let repo = t.open().unwrap();
            t.fault.arm(FaultPlan::crash(n, CrashEffect::Lost));
            forget_named(&repo).expect_err(&when);
        }
        let repo = t.reopen(false);
        let left = snapshot_ids(&repo);
        let mut model = base.model.clone();
        model.retain(|id, _| left.contains(id));
        for id in &ids {
            assert!(
                left.contains(id) || named.contains(id),
                "{when}: {id} was not named but is gone"
            );
        }
        assert_consistent(&repo, &model, &t, &when);
    }
}

/// A disk-full at any write of backup or prune: a clear error, the lock released, the
/// repository consistent, and (the disk has room again) the same handle backs up.
#[test]
fn no_space_at_any_write_fails_cleanly() {
    let base = base(0..4, 2);
    for command in ["backup", "prune"] {
        let run = |repo: &IndexedRepository, t: &Trial| -> Result<()> {
            match command {
                "backup" => backup_files(repo, &t.src(), &tree(7), 7, &alive()).map(|_| ()),
                _ => prune_all(repo, &alive(), false).map(|_| ()),
            }
        };
        let log = {
            let t = Trial::of(&base, Store::Memory);
            let repo = t.open().unwrap();
            t.fault.arm(FaultPlan::none());
            run(&repo, &t).unwrap();
            t.fault.write_log()
        };
        for n in 0..log.len() as u64 {
            let when = format!("{command}, no space at write {n} ({:?})", log[n as usize]);
            let t = Trial::of(&base, Store::Memory);
            let repo = t.open().unwrap();
            t.fault.arm(FaultPlan::no_space(n));
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&repo, &t)))
                .unwrap_or_else(|_| panic!("{when}: panicked"));
            let err = result.expect_err(&when);
            assert!(
                matches!(&err, Error::Io { cause, .. } if cause.kind() == std::io::ErrorKind::StorageFull),
                "{when}: not a disk-full error: {err}"
            );
            assert!(err.to_string().contains("no space left"), "{when}: {err}");
            let last = n as usize + 1 == log.len();
            if last {
                // The failed write was the lock's release: the error says so, and the lock
                // (of a live process) stays until someone removes it.
                assert_eq!(log[n as usize].0, FileKind::Lock, "{when}");
                t.fault.inner().delete(FileKind::Lock, "exclusive").unwrap();
            }
            t.fault.disarm();
            let mut model = base.model.clone();
            for id in snapshot_ids(&repo) {
                model.entry(id).or_insert_with(|| tree(7));
            }
            assert!(model.len() <= base.model.len() + 1, "{when}");
            // The same handle, no restart: its index must be as consistent as the backend.
            assert_consistent(&repo, &model, &t, &when);
            assert_takes_new_backups(&repo, &t, 8, &when);
        }
        println!("{command}: {} disk-full points verified", log.len());
    }
}

/// The damaged reads tried at each read index: short by one byte, nearly empty, one bit.
fn read_damages(n: u64) -> [ReadDamage; 3] {
    [
        ReadDamage::Short { missing_bytes: 1 },
        ReadDamage::Short {
            missing_bytes: usize::MAX / 2,
        },
        ReadDamage::Flip {
            position: BytePosition::Seeded(n),
            mask: 0x10,
        },
    ]
}

/// A short or flipped read anywhere in a restore: never a wrong byte, never a panic.
#[test]
fn damaged_reads_in_restore_never_write_wrong_bytes() {
    let base = base(0..3, 0);
    let t = Trial::of(&base, Store::Memory);
    let repo = t.open().unwrap();
    let (mut exact, mut failed) = (0, 0);
    for (id, files) in &base.model {
        t.fault.arm(FaultPlan::none());
        assert_restores_exact(&repo, id, files, &t);
        let reads = t.fault.counts().reads(FileKind::Container);
        for n in 0..reads {
            for damage in read_damages(n) {
                t.fault.arm(FaultPlan::none().with_read_fault(ReadFault {
                    kind: FileKind::Container,
                    nth: Some(n),
                    damage,
                }));
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    restore_exact_or_error(&repo, id, files, &t.path("out"))
                }))
                .unwrap_or_else(|_| panic!("restore panicked on read {n} {damage:?}"));
                match outcome {
                    Restored::Exact => exact += 1,
                    Restored::Failed(e) => {
                        assert!(
                            matches!(e, Error::CorruptChunk { .. } | Error::Corrupt { .. }),
                            "read {n} {damage:?}: the error does not name the damage: {e}"
                        );
                        failed += 1;
                    }
                }
            }
        }
    }
    println!("damaged restore reads: {failed} failed naming the damage, {exact} exact");
    assert!(failed > 0);
}

/// A short or flipped read anywhere in `check --read-data` is reported as a problem.
#[test]
fn damaged_reads_in_check_are_reported() {
    let base = base(0..3, 0);
    let t = Trial::of(&base, Store::Memory);
    let repo = t.open().unwrap();
    t.fault.arm(FaultPlan::none());
    assert!(run_check(&repo, true).unwrap().problems.is_empty());
    let counts = t.fault.counts();
    let mut reported = 0;
    for kind in [FileKind::Container, FileKind::Snapshot] {
        for n in 0..counts.reads(kind) {
            for damage in read_damages(n) {
                let when = format!("check, {} read {n} {damage:?}", kind.noun());
                t.fault.arm(FaultPlan::none().with_read_fault(ReadFault {
                    kind,
                    nth: Some(n),
                    damage,
                }));
                let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_check(&repo, true)
                }))
                .unwrap_or_else(|_| panic!("{when}: panicked"))
                .unwrap_or_else(|e| panic!("{when}: check failed instead of reporting: {e}"));
                // Every byte is checked, the footer's reserved ones too (they must be 0).
                let log = t.fault.injection_log();
                assert!(
                    !report.problems.is_empty(),
                    "{when}: not reported ({log:?})"
                );
                reported += 1;
            }
        }
    }
    println!("damaged check reads: {reported}, all reported");
}

/// A short or flipped read during a backup (delta bases, the parent snapshot): the backup
/// fails or makes a snapshot that restores bit-exact; the repository stays consistent.
#[test]
fn damaged_reads_in_backup_never_make_a_bad_snapshot() {
    let base = base(0..3, 0);
    let next = tree(3);
    let counts = {
        let t = Trial::of(&base, Store::Memory);
        let repo = t.open().unwrap();
        t.fault.arm(FaultPlan::none());
        backup_files(&repo, &t.src(), &next, 3, &alive()).unwrap();
        t.fault.counts()
    };
    let (mut ok, mut failed) = (0, 0);
    for kind in [FileKind::Container, FileKind::Snapshot] {
        for n in 0..counts.reads(kind) {
            for damage in read_damages(n) {
                let when = format!("backup, {} read {n} {damage:?}", kind.noun());
                let t = Trial::of(&base, Store::Memory);
                let repo = t.open().unwrap();
                t.fault.arm(FaultPlan::none().with_read_fault(ReadFault {
                    kind,
                    nth: Some(n),
                    damage,
                }));
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    backup_files(&repo, &t.src(), &next, 3, &alive())
                }))
                .unwrap_or_else(|_| panic!("{when}: panicked"));
                t.fault.disarm();
                let mut model = base.model.clone();
                match result {
                    Ok(id) => {
                        model.insert(id.to_hex(), next.clone());
                        ok += 1;
                    }
                    Err(e) => {
                        assert!(!e.to_string().contains("panicked"), "{when}: {e}");
                        failed += 1;
                    }
                }
                assert_consistent(&repo, &model, &t, &when);
            }
        }
    }
    println!("damaged backup reads: {ok} backups correct anyway, {failed} failed");
}

/// Damage at rest (one flipped byte anywhere in a container): `check --read-data` reports
/// it, and every restore is bit-exact or fails; never a wrong byte.
#[test]
fn damage_at_rest_is_reported_and_never_restored_wrong() {
    let base = base(0..3, 0);
    let t = Trial::of(&base, Store::Memory);
    let repo = t.open().unwrap();
    let containers = t.fault.inner().list(FileKind::Container).unwrap();
    let (mut injected, mut detected, mut exact, mut failed) = (0, 0, 0, 0);
    for (i, (name, size)) in containers.iter().enumerate() {
        // Header, first region, middle, metadata, footer.
        let offsets = [3, HEADER_LEN as u64 + 5, size / 2, size - 40, size - 3];
        for (j, offset) in offsets.into_iter().enumerate() {
            let when = format!("container {name} damaged at {offset} of {size}");
            let original = t
                .fault
                .damage(FileKind::Container, name, offset, 1 << ((i + j) % 8))
                .unwrap();
            injected += 1;
            let report = run_check(&repo, true).unwrap();
            assert!(!report.problems.is_empty(), "{when}: check found nothing");
            detected += 1;
            for (id, files) in &base.model {
                match restore_exact_or_error(&repo, id, files, &t.path("out")) {
                    Restored::Exact => exact += 1,
                    Restored::Failed(_) => failed += 1,
                }
            }
            t.fault
                .inner()
                .put(FileKind::Container, name, &original)
                .unwrap();
        }
    }
    assert_consistent(&repo, &base.model, &t, "after healing");
    println!(
        "damage at rest: {injected} injected, {detected} detected by check; restores: {exact} exact, {failed} failed"
    );
}

/// The container holding the first chunk of `file` in snapshot `id`.
fn container_of_first_chunk(repo: &IndexedRepository, id: &str, file: &str) -> String {
    let (_, snap) = snapshots::load(repo.backend().as_ref(), id).unwrap();
    let mut first = None;
    dedelta_store::read::walk_tree(repo, &snap, |node, chunks| {
        if node.path.ends_with(file.as_bytes()) && first.is_none() {
            first = chunks.first().map(|c| c.id);
        }
        Ok(())
    })
    .unwrap();
    let loc = repo.index().get(&first.unwrap()).unwrap().unwrap();
    loc.container.to_hex()
}

/// Known bug: once damage is found, a new backup of the same data still deduplicates against
/// the damaged chunks, so the new snapshot cannot be restored either although the source was
/// at hand.
#[test]
fn backup_after_detected_damage_stores_good_copies() {
    let base = base(0..1, 0);
    let t = Trial::of(&base, Store::Memory);
    let repo = t.open().unwrap();
    let (id, files) = base.model.iter().next().unwrap();
    let name = container_of_first_chunk(&repo, id, "new0.bin");
    t.fault
        .damage(FileKind::Container, &name, HEADER_LEN as u64 + 100, 0x04)
        .unwrap();
    let report = run_check(&repo, true).unwrap();
    assert!(!report.problems.is_empty());
    let new = backup_files(&repo, &t.src(), files, 1, &alive()).unwrap();
    assert_restores_exact(&repo, &new.to_hex(), files, &t);
}

/// Known bug: restore stops at the first damaged chunk, so files after it are not restored
/// although their data is intact.
#[test]
fn restore_goes_on_past_a_damaged_file() {
    let base = base(0..1, 0);
    let t = Trial::of(&base, Store::Memory);
    let repo = t.open().unwrap();
    let (id, files) = base.model.iter().next().unwrap();
    // f0.txt sorts first; its first container is damaged.
    let name = container_of_first_chunk(&repo, id, "f0.txt");
    t.fault
        .damage(FileKind::Container, &name, HEADER_LEN as u64 + 10, 0x04)
        .unwrap();
    let (result, got) = restore_files(&repo, id, &t.path("out"));
    let err = result.expect_err("a damaged file must fail the restore");
    assert!(
        err.to_string().contains("f0.txt"),
        "the error names the file: {err}"
    );
    let damaged: BTreeSet<String> = files
        .keys()
        .filter(|f| err.to_string().contains(f.as_str()))
        .cloned()
        .collect();
    for (f, data) in files {
        if !damaged.contains(f) {
            assert_eq!(got.get(f), Some(data), "intact file {f} not restored");
        }
    }
}

/// Known bug: one unreadable snapshot file (damaged, or a stray name) makes commands that
/// list snapshots fail, so no new backup can be taken.
#[test]
fn damaged_or_stray_snapshot_file_does_not_block_commands() {
    for stray in [false, true] {
        let base = base(0..3, 0);
        let t = Trial::of(&base, Store::Memory);
        let repo = t.open().unwrap();
        let mut model = base.model.clone();
        let victim = model.keys().next().unwrap().clone();
        if stray {
            t.fault
                .inner()
                .put(FileKind::Snapshot, "not-a-snapshot", b"junk")
                .unwrap();
        } else {
            t.fault
                .damage(FileKind::Snapshot, &victim, 40, 0x01)
                .unwrap();
            model.remove(&victim);
        }
        let report = run_check(&repo, true).unwrap();
        assert!(
            !report.problems.is_empty(),
            "check reports the bad snapshot file"
        );
        let id = backup_files(&repo, &t.src(), &tree(5), 5, &alive())
            .unwrap_or_else(|e| panic!("stray={stray}: backup blocked: {e}"));
        assert_restores_exact(&repo, &id.to_hex(), &tree(5), &t);
        let keep = model.keys().last().unwrap().clone();
        locked(&repo, &alive(), |lock| {
            forget::forget(&repo, lock, &[keep], &KeepPolicy::default(), false)
        })
        .unwrap_or_else(|e| panic!("stray={stray}: forget blocked: {e}"));
        for (id, files) in model
            .iter()
            .filter(|(id, _)| snapshot_ids(&repo).contains(*id))
        {
            assert_restores_exact(&repo, id, files, &t);
        }
    }
}

/// Known bug: a lock file left empty by a crash inside `create_new` (a local file created but
/// not yet written) blocks every later command as "locked by an unreadable lock file".
#[test]
fn torn_lock_file_does_not_block_the_repository() {
    let base = base(0..1, 0);
    let t = Trial::of(&base, Store::Local);
    {
        let repo = t.open().unwrap();
        t.fault.arm(FaultPlan::crash(0, CrashEffect::Torn));
        backup_files(&repo, &t.src(), &tree(1), 1, &gone()).expect_err("crashed");
    }
    assert_eq!(
        t.fault.inner().get(FileKind::Lock, "exclusive").unwrap(),
        b"",
        "the crash left an empty lock file"
    );
    let repo = t.reopen(false);
    let id = backup_files(&repo, &t.src(), &tree(1), 1, &alive())
        .unwrap_or_else(|e| panic!("the empty lock blocks the repository: {e}"));
    assert_restores_exact(&repo, &id.to_hex(), &tree(1), &t);
}

/// Found by the campaign (seed 25482355066, step 106): a prune that keeps a partly-dead
/// container removes its dead entries from the index only. Its dead deltas stay in the
/// container, and their bases (in containers that were wholly dead) are deleted. An index
/// rebuilt from the containers (`repair index`, or a missing index at open) indexes those
/// deltas again, without their bases, and the next backup of that content deduplicates
/// against them: its snapshot cannot be restored.
#[test]
fn rebuilt_index_does_not_resurrect_dead_deltas() {
    let t = Trial::new(Store::Memory, None, None);
    let repo = t.open().unwrap();
    let original = text(60_000, 1);
    let mut edited = original.clone();
    for k in 0..12 {
        edited[k * 4_999 + 7] = b'#';
    }
    let keep = noise(8_000, 2);
    let v1 = Files::from([("data.txt".to_string(), original)]);
    let v2 = Files::from([
        ("data.txt".to_string(), edited.clone()),
        ("keep.bin".to_string(), keep.clone()),
    ]);
    let v3 = Files::from([("keep.bin".to_string(), keep)]);
    let s1 = backup_files(&repo, &t.src(), &v1, 0, &alive()).unwrap();
    let s2 = backup_files(&repo, &t.src(), &v2, 1, &alive()).unwrap();
    let s3 = backup_files(&repo, &t.src(), &v3, 2, &alive()).unwrap();
    let (_, snap2) = snapshots::load(repo.backend().as_ref(), &s2.to_hex()).unwrap();
    assert!(
        snap2.summary.delta_chunks > 0,
        "v2 is stored as deltas of v1"
    );
    let forget = [s1.to_hex(), s2.to_hex()];
    locked(&repo, &alive(), |lock| {
        forget::forget(&repo, lock, &forget, &KeepPolicy::default(), false)
    })
    .unwrap();
    // Keep every partly-live container as it is.
    locked(&repo, &alive(), |lock| {
        let opts = prune::PruneOptions {
            max_unused: 1.0,
            dry_run: false,
        };
        prune::prune(&repo, lock, &opts, &NoProgress)
    })
    .unwrap();
    drop(repo);
    let repo = t.reopen(true);
    // A backup of the forgotten content must not deduplicate against the dead deltas.
    let s4 = backup_files(&repo, &t.src(), &v2, 3, &alive()).unwrap();
    assert_restores_exact(&repo, &s4.to_hex(), &v2, &t);
    assert_restores_exact(&repo, &s3.to_hex(), &v3, &t);
    let report = run_check(&repo, true).unwrap();
    assert!(
        report.problems.is_empty(),
        "after an index rebuild: {:?}",
        report.problems.first()
    );
}

/// Found by the campaign (seed 25482355066, steps 44-52): the parent snapshot's recipe is
/// read for DupAdj, and a damaged tree chunk of the parent aborts the backup ("corrupt tree
/// stream: no header: corrupt chunk ..."). The parent is only a hint for delta compression.
#[test]
fn backup_works_when_the_parent_tree_is_damaged() {
    let base = base(0..1, 0);
    let t = Trial::of(&base, Store::Memory);
    let repo = t.open().unwrap();
    let (id, _) = base.model.iter().next().unwrap();
    let (_, snap) = snapshots::load(repo.backend().as_ref(), id).unwrap();
    let tree_chunk = snap.tree.chunks[0];
    let loc = repo.index().get(&tree_chunk).unwrap().unwrap();
    let meta = repo.read_container_meta(&loc.container).unwrap();
    let region = &meta.regions[meta.entries[loc.entry as usize].region as usize];
    t.fault
        .damage(
            FileKind::Container,
            &loc.container.to_hex(),
            u64::from(region.offset) + 1,
            0x02,
        )
        .unwrap();
    let id = backup_files(&repo, &t.src(), &tree(1), 1, &alive())
        .unwrap_or_else(|e| panic!("backup with a damaged parent tree: {e}"));
    assert_restores_exact(&repo, &id.to_hex(), &tree(1), &t);
}

/// Found by the campaign (seed 1846831542, step 106): the same dead deltas as in
/// `rebuilt_index_does_not_resurrect_dead_deltas`, but their chunks were stored again (in
/// full) by a later backup. A rebuilt index keeps whichever copy it meets last (containers in
/// name order), so when the dead delta's container sorts after the live copy's, the index
/// points the live chunk at the delta whose base is gone: a snapshot that restored before the
/// rebuild no longer does, and prune refuses to run.
#[test]
fn rebuilt_index_keeps_the_live_copy_of_a_stored_again_chunk() {
    for variant in 0..16u64 {
        let t = Trial::new(Store::Memory, None, None);
        let repo = t.open().unwrap();
        let original = text(60_000, 1);
        let mut edited = original.clone();
        for k in 0..12 {
            edited[k * 4_999 + 7] = b'#';
        }
        let keep = noise(8_000, 2 + variant);
        let v1 = Files::from([("data.txt".to_string(), original)]);
        let v2 = Files::from([
            ("data.txt".to_string(), edited.clone()),
            ("keep.bin".to_string(), keep.clone()),
        ]);
        let v3 = Files::from([("keep.bin".to_string(), keep)]);
        let s1 = backup_files(&repo, &t.src(), &v1, 0, &alive()).unwrap();
        let s2 = backup_files(&repo, &t.src(), &v2, 1, &alive()).unwrap();
        backup_files(&repo, &t.src(), &v3, 2, &alive()).unwrap();
        let forget = [s1.to_hex(), s2.to_hex()];
        locked(&repo, &alive(), |lock| {
            forget::forget(&repo, lock, &forget, &KeepPolicy::default(), false)
        })
        .unwrap();
        let kept = locked(&repo, &alive(), |lock| {
            let opts = prune::PruneOptions {
                max_unused: 1.0,
                dry_run: false,
            };
            prune::prune(&repo, lock, &opts, &NoProgress)
        })
        .unwrap();
        assert!(kept.plan.dead_chunks > 0 && kept.plan.keep > 0);
        // The edited file again: its chunks are no longer indexed, so stored anew.
        let s4 = backup_files(&repo, &t.src(), &v2, 3, &alive()).unwrap();
        assert_restores_exact(&repo, &s4.to_hex(), &v2, &t);
        // Which copy wins a rebuild: the one in the container sorting last. Where each chunk
        // of the new snapshot is now:
        let live: BTreeMap<String, String> = {
            let mut ids = BTreeMap::new();
            let (_, snap) = snapshots::load(repo.backend().as_ref(), &s4.to_hex()).unwrap();
            dedelta_store::read::walk_tree(&repo, &snap, |_, chunks| {
                for c in chunks {
                    let loc = repo.index().get(&c.id)?.expect("indexed");
                    ids.insert(c.id.to_hex(), loc.container.to_hex());
                }
                Ok(())
            })
            .unwrap();
            ids
        };
        drop(repo);
        let repo = t.reopen(true);
        let moved = {
            let (_, snap) = snapshots::load(repo.backend().as_ref(), &s4.to_hex()).unwrap();
            let mut moved = false;
            dedelta_store::read::walk_tree(&repo, &snap, |_, chunks| {
                for c in chunks {
                    let loc = repo.index().get(&c.id)?.expect("indexed");
                    moved |= live.get(&c.id.to_hex()) != Some(&loc.container.to_hex());
                }
                Ok(())
            })
            .unwrap();
            moved
        };
        // Whichever copy the rebuild picked (`moved` says whether it changed), it must be one
        // that reads: a full copy, or a delta whose base exists.
        let _ = moved;
        assert_restores_exact(&repo, &s4.to_hex(), &v2, &t);
        let report = run_check(&repo, true).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems.first());
        prune_all(&repo, &alive(), false).expect("prune after the rebuild");
    }
}

/// `check`, under the exclusive lock it needs (it records damage).
fn run_check(
    repo: &IndexedRepository,
    read_data: bool,
) -> dedelta_store::Result<check::CheckReport> {
    let lock = repo.lock(&LockInfo {
        pid: std::process::id(),
        host: "faults".into(),
        time: "t".into(),
        command: "check".into(),
    })?;
    check::check(repo, &lock, read_data, "2026-01-01T00:00:00Z", &NoProgress)
}

/// A restore that skipped damaged files, as an error naming each of them (restore goes on
/// past damage and lists it; these tests judge what it left like a failed restore).
fn files_restored(st: restore::RestoreStats) -> dedelta_store::Result<restore::RestoreStats> {
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
