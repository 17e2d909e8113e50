//! The campaign's `copy` step: the campaign's repository is the source of `copy` into a
//! mirror, a second repository (in memory, chunked at twice the scale, so that every copy is
//! chunked, deduplicated and delta-encoded anew). Now and then the copy crashes at a drawn
//! write of the mirror, and a copy in the mirror is forgotten and pruned first. The rules:
//!
//! - `copy` never removes a mirror snapshot, and every mirror snapshot restores bit-exact to
//!   what its source snapshot restored to when it was copied (the source's own restore at
//!   that time, itself compared with the model where the model knows it exactly);
//! - a copy that succeeded left one copy of every source snapshot, and a second run (dry)
//!   finds nothing left to copy;
//! - a copy fails only on damage in the source (at rest, or lost chunks), or when crashed;
//!   after a crash the mirror reopens (its index kept or rebuilt) and the rules hold;
//! - `check --read-data` of the mirror finds nothing.

use super::*;
use dedelta_store::commands::backup::Workers;
use dedelta_store::commands::copy::{self, CopyOptions, CopyStats};

/// The mirror `copy` writes into.
pub(super) struct Mirror {
    fault: Arc<FaultBackend>,
    repo: Option<IndexedRepository>,
    index: PathBuf,
    /// Mirror snapshot id -> what it restores to.
    copies: BTreeMap<String, Tree>,
    /// Writes of the last copy that ran to its end: where crash points are drawn from.
    writes: u64,
    workers: Workers,
}

impl Mirror {
    fn new(dir: &Path) -> Result<Mirror, String> {
        let inner: Arc<dyn Backend> = Arc::new(MemoryBackend::default());
        inner
            .put(
                FileKind::Config,
                "config",
                &config(2, DeltaConfig::recommended()).to_bytes(),
            )
            .map_err(|e| e.to_string())?;
        let mut m = Mirror {
            fault: Arc::new(FaultBackend::new(inner)),
            repo: None,
            index: dir.join("mirror-client").join("chunks.idx"),
            copies: BTreeMap::new(),
            writes: 0,
            workers: Workers::new(2).map_err(|e| e.to_string())?,
        };
        m.reopen(false)?;
        Ok(m)
    }

    fn repo(&self) -> &IndexedRepository {
        self.repo.as_ref().expect("mirror open")
    }

    /// Opens the mirror again (after a crash: faults off), its index kept or deleted.
    fn reopen(&mut self, rebuild: bool) -> Outcome {
        self.repo = None;
        self.fault.disarm();
        if rebuild && self.index.exists() {
            std::fs::remove_file(&self.index).map_err(|e| format!("removing the index: {e}"))?;
        }
        let repo = Repository::open(self.fault.clone(), self.index.clone())
            .and_then(Repository::open_index)
            .map_err(|e| format!("opening the mirror (rebuild={rebuild}): {e}"))?;
        self.repo = Some(repo);
        Ok(())
    }

    fn snapshot_ids(&self) -> Result<BTreeSet<String>, String> {
        crate::support::snapshot_ids(self.repo())
            .map_err(|e| format!("listing the mirror's snapshots: {e}"))
    }

    /// Mirror snapshot `id` restored and read back.
    fn restored(&self, id: &str, src: &Path, dir: &Path) -> Result<Tree, String> {
        let target = dir.join("mirror-restore");
        let _ = std::fs::remove_dir_all(&target);
        let repo = self.repo();
        let st = snapshots::load(repo.backend().as_ref(), id)
            .and_then(|(_, snap)| restore_to(repo, &snap, &target))
            .map_err(|e| format!("restore of mirror snapshot {}: {e}", &id[..8]))?;
        ensure!(
            st.errors.is_empty(),
            "restore of mirror snapshot {} failed on {:?}",
            &id[..8],
            st.errors.iter().map(|e| e.path_lossy()).collect::<Vec<_>>()
        );
        Ok(scan(&restored_root(&target, src)))
    }
}

/// What each source snapshot restores to now, where it restores whole (`None` where it does
/// not: damage or lost chunks, which its copy must not get past). Where the model knows the
/// snapshot exactly (not cut by `repair snapshots`), the restore must be the model's.
fn source_trees(w: &World) -> Result<BTreeMap<String, Option<Tree>>, String> {
    let target = w.dir.join("copy-source");
    let mut out = BTreeMap::new();
    for id in w.ids_by_time() {
        let _ = std::fs::remove_dir_all(&target);
        let repo = w.repo();
        let restored = snapshots::load(repo.backend().as_ref(), &id)
            .and_then(|(_, snap)| restore_to(repo, &snap, &target));
        let tree = match restored {
            Ok(st) if st.errors.is_empty() => Some(scan(&restored_root(&target, &w.src))),
            _ => None,
        };
        let want = &w.model[&id];
        if let Some(t) = &tree {
            if want.damaged.is_empty() && !want.truncated {
                ensure!(
                    *t == want.tree,
                    "source snapshot {} restored wrong before the copy: {}",
                    &id[..8],
                    diff(&want.tree, t)
                );
            }
        }
        out.insert(id, tree);
    }
    Ok(out)
}

/// Runs `copy` of every source snapshot into the mirror (`dry_run`: only what it would copy).
fn run_copy(
    w: &mut World,
    mirror: &Mirror,
    dry_run: bool,
    crashing: bool,
) -> Result<CopyStats, String> {
    // `copy` reads the source through an `Arc` (its node source outlives the call's borrow);
    // the world gets its repository back afterwards.
    let src = Arc::new(w.repo.take().expect("repository open"));
    let dst_owner = if crashing { gone() } else { me() };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        locked(&src, &me(), |_src_lock| {
            let dst = mirror.repo();
            let lock = dst.lock(&dst_owner)?;
            let out = copy::copy(
                &src,
                dst,
                &lock,
                &[],
                &SnapshotFilter::default(),
                &CopyOptions {
                    cache_dir: None,
                    dry_run,
                },
                &mirror.workers,
                &NoProgress,
            );
            // A crashed process leaves its lock (stale: the next command removes it).
            let released = if mirror.fault.crashed() {
                Ok(())
            } else {
                lock.release()
            };
            let out = out?;
            released?;
            Ok(out)
        })
    }));
    w.repo = Some(
        Arc::try_unwrap(src).unwrap_or_else(|_| panic!("copy kept the source repository open")),
    );
    match result {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(p) => Err(format!("copy panicked: {}", panic_message(&*p))),
    }
}

/// The step (see the module doc).
pub(super) fn step_copy(w: &mut World) -> Outcome {
    if w.flaky_reads {
        w.note("  copy: not while reads are damaged".into());
        return Ok(());
    }
    // The mirror is out of the world while the step runs (a failure ends the episode).
    let mut mirror = match w.mirror.take() {
        Some(m) => m,
        None => Mirror::new(&w.dir)?,
    };
    let outcome = copy_into(w, &mut mirror);
    w.mirror = Some(mirror);
    outcome
}

/// One copy step into `mirror`.
fn copy_into(w: &mut World, mirror: &mut Mirror) -> Outcome {
    // Now and then a copy forgotten (and its data pruned) first: the next copy stores it
    // again, against what the mirror holds.
    let held: Vec<String> = mirror.copies.keys().cloned().collect();
    if !held.is_empty() && w.rng.chance(20) {
        let id = w.rng.pick(&held).clone();
        w.note(format!("  mirror: forget {} and prune", &id[..8]));
        locked(mirror.repo(), &me(), |lock| {
            forget::forget(
                mirror.repo(),
                lock,
                std::slice::from_ref(&id),
                &KeepPolicy::default(),
                false,
            )?;
            prune_with(mirror.repo(), lock, 0.0, false).map(|_| ())
        })
        .map_err(|e| format!("forget and prune in the mirror: {e}"))?;
        mirror.copies.remove(&id);
    }
    let sources = source_trees(w)?;
    let before = mirror.snapshot_ids()?;
    ensure!(
        before == mirror.copies.keys().cloned().collect(),
        "the mirror holds {before:?}, its model {:?}",
        mirror.copies.keys()
    );
    let writes = mirror.writes;
    let crash_at = (writes > 0 && w.rng.chance(30)).then(|| w.rng.below(writes + 1));
    let effect = *w
        .rng
        .pick(&[CrashEffect::Lost, CrashEffect::Durable, CrashEffect::Torn]);
    let plan = match crash_at {
        Some(n) => FaultPlan::crash(n, effect),
        None => FaultPlan::none(),
    };
    mirror.fault.arm(plan);
    let result = run_copy(w, mirror, false, crash_at.is_some());
    let crashed = mirror.fault.crashed();
    let wrote = mirror.fault.counts().total_writes();
    for inj in mirror.fault.injection_log() {
        if let InjectionDetail::Crash(effect) = inj.detail {
            w.figures.crash_points += 1;
            *w.figures
                .crash_points_by_write
                .entry(format!("mirror {} {effect:?}", inj.kind.noun()))
                .or_default() += 1;
        }
    }
    let mut line = match crash_at {
        Some(n) => format!("  copy crashing at mirror write {n} ({effect:?}) -> "),
        None => "  copy -> ".to_string(),
    };
    match &result {
        Ok(st) => {
            line += &format!(
                "{} copied, {} copied before",
                st.copied.len(),
                st.already_copied.len()
            )
        }
        Err(e) => line += &format!("error: {e}"),
    }
    line += &format!(" ({wrote} mirror writes)");
    w.note(line);
    if crashed {
        let rebuild = w.rng.chance(30);
        w.note(format!("  mirror restart (rebuild the index: {rebuild})"));
        mirror.reopen(rebuild)?;
    } else {
        mirror.fault.disarm();
        if result.is_ok() && wrote > 0 {
            mirror.writes = wrote;
        }
    }
    // Which source each new copy is of, where the copy said so.
    let mut copied_from: BTreeMap<String, String> = BTreeMap::new();
    match &result {
        Ok(st) => {
            for c in &st.copied {
                let new = c
                    .new
                    .as_ref()
                    .map(|n| n.to_hex())
                    .ok_or("a copy without its snapshot")?;
                copied_from.insert(new, c.source.to_hex());
            }
            // Every source snapshot is copied, now or before.
            let done: BTreeSet<String> = st
                .copied
                .iter()
                .map(|c| c.source.to_hex())
                .chain(st.already_copied.iter().map(|s| s.to_hex()))
                .collect();
            let all: BTreeSet<String> = sources.keys().cloned().collect();
            ensure!(
                done == all,
                "copy succeeded but left out {:?}",
                all.difference(&done).collect::<Vec<_>>()
            );
        }
        Err(e) => {
            let unreadable = sources.values().any(Option::is_none);
            ensure!(
                crashed || unreadable || w.damaged() || w.lost,
                "copy failed with the source whole and no crash: {e}"
            );
        }
    }
    let now = mirror.snapshot_ids()?;
    ensure!(
        before.is_subset(&now),
        "copy removed mirror snapshots: {:?}",
        before.difference(&now).collect::<Vec<_>>()
    );
    for id in now.difference(&before) {
        let got = mirror.restored(id, &w.src, &w.dir)?;
        match copied_from.get(id) {
            Some(source) => {
                let want = sources[source].as_ref().ok_or_else(|| {
                    format!(
                        "source {} was copied as {} but does not restore whole",
                        &source[..8],
                        &id[..8]
                    )
                })?;
                ensure!(
                    got == *want,
                    "mirror snapshot {} is not its source {}: {}",
                    &id[..8],
                    &source[..8],
                    diff(want, &got)
                );
            }
            // Crashed: no list of what was copied; it must be a whole copy of some source.
            None => ensure!(
                sources.values().flatten().any(|t| *t == got),
                "mirror snapshot {} is no whole copy of any source snapshot",
                &id[..8]
            ),
        }
        mirror.copies.insert(id.clone(), got);
    }
    w.figures.copies += (now.len() - before.len()) as u64;
    if result.is_ok() {
        let again =
            run_copy(w, mirror, true, false).map_err(|e| format!("copy again (dry run): {e}"))?;
        ensure!(
            again.copied.is_empty(),
            "a second copy would copy {:?} again",
            again
                .copied
                .iter()
                .map(|c| c.source.to_hex())
                .collect::<Vec<_>>()
        );
    }
    // One earlier copy restored again, and the mirror checked whole.
    let held: Vec<String> = mirror.copies.keys().cloned().collect();
    if !held.is_empty() {
        let id = w.rng.pick(&held).clone();
        let got = mirror.restored(&id, &w.src, &w.dir)?;
        ensure!(
            got == mirror.copies[&id],
            "mirror snapshot {} restores differently now: {}",
            &id[..8],
            diff(&mirror.copies[&id], &got)
        );
    }
    let report =
        run_check(mirror.repo(), true).map_err(|e| format!("check of the mirror failed: {e}"))?;
    ensure!(
        report.problems.is_empty(),
        "check of the mirror found {:?}",
        report
            .problems
            .iter()
            .map(|p| &p.message)
            .collect::<Vec<_>>()
    );
    Ok(())
}
