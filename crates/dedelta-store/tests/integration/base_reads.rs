//! Backup's delta bases read back in batches (issues 19 and 20): a round's base regions are
//! requested several at a time, at most the repository's reads in flight, neighbours in one
//! request, and what is stored is exactly what reading them one at a time stores. A read
//! that fails in a batch is read again the slow way: a passing failure changes nothing, a
//! lasting one is reported and its candidate not used, and nothing hangs.

use crate::intercept::{Hooks, Intercept};
use crate::support::{
    backup_options, backup_with, cache_root_for, config, edited_texts, locked, me, restore_to,
    time_of, write_files, Files,
};
use dedelta_store::backend::{Backend, BackendError, FileKind, Result as BackendResult};
use dedelta_store::commands::backup::BackupResult;
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::{IndexedRepository, Repository};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts container data reads (as regions are read; metadata comes with `get_range` and
/// `get_tail`) and the most in flight at once, each taking a little while (a round trip);
/// fails the next `fail_next` base reads, or all while `fail_all`.
pub(crate) type Probe = Intercept<Arc<dyn Backend>, ProbeHooks>;

/// [`Probe`]'s counters and failure switches.
pub(crate) struct ProbeHooks {
    delay: Duration,
    now: AtomicU64,
    most: AtomicU64,
    reads: AtomicU64,
    longest: AtomicU64,
    pub(crate) fail_next: AtomicU64,
    pub(crate) fail_all: AtomicBool,
}

impl Probe {
    pub(crate) fn new(inner: Arc<dyn Backend>) -> Self {
        Self::with_delay(inner, Duration::from_millis(2))
    }

    /// A probe whose reads each take `delay`: long enough that reads meant to overlap do,
    /// even on a loaded machine.
    pub(crate) fn with_delay(inner: Arc<dyn Backend>, delay: Duration) -> Self {
        Intercept {
            inner,
            hooks: ProbeHooks {
                delay,
                now: AtomicU64::new(0),
                most: AtomicU64::new(0),
                reads: AtomicU64::new(0),
                longest: AtomicU64::new(0),
                fail_next: AtomicU64::new(0),
                fail_all: AtomicBool::new(false),
            },
        }
    }
}

impl ProbeHooks {
    /// (data reads, most in flight, longest read) since the last call.
    pub(crate) fn take(&self) -> (u64, u64, u64) {
        (
            self.reads.swap(0, Ordering::SeqCst),
            self.most.swap(0, Ordering::SeqCst),
            self.longest.swap(0, Ordering::SeqCst),
        )
    }
}

impl Hooks for ProbeHooks {
    fn container_data_read(
        &self,
        name: &str,
        len: usize,
        read: &mut dyn FnMut() -> BackendResult<()>,
    ) -> BackendResult<()> {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.longest.fetch_max(len as u64, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        // Only base reads fail: those of the dedup thread and of the threads it reads with.
        let base_read = std::thread::current()
            .name()
            .is_some_and(|n| n == "dedelta-dedup" || n.starts_with("dedelta-read"));
        let fail = base_read
            && (self.fail_all.load(Ordering::SeqCst)
                || self
                    .fail_next
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |k| k.checked_sub(1))
                    .is_ok());
        let out = if fail {
            Err(BackendError::io(
                format!("reading container {name}"),
                std::io::Error::other("injected read failure"),
            ))
        } else {
            read()
        };
        self.now.fetch_sub(1, Ordering::SeqCst);
        out
    }
}

/// No bases kept in memory: every candidate base of a later version is read back.
pub(crate) fn cold() -> DeltaConfig {
    DeltaConfig {
        base_cache_bytes: 0,
        ..DeltaConfig::recommended()
    }
}

/// A new repository at `path` whose requests go through a [`Probe`], with `in_flight` reads
/// at once.
fn probed(path: &Path, in_flight: usize) -> (IndexedRepository, Arc<Probe>) {
    probed_with(path, in_flight, false)
}

/// [`probed`], its reads taken as round trips (as on S3) if `round_trips`.
fn probed_with(
    path: &Path,
    in_flight: usize,
    round_trips: bool,
) -> (IndexedRepository, Arc<Probe>) {
    let made =
        Repository::init_local_with_cache(path, config(1, cold()), &cache_root_for(path)).unwrap();
    let probe = Arc::new(Probe::new(made.backend().clone()));
    let repo = Repository::open_in_cache(probe.clone(), &cache_root_for(path))
        .unwrap()
        .with_reads_in_flight(in_flight)
        .with_round_trips(round_trips)
        .open_index()
        .unwrap();
    (repo, probe)
}

/// Version `v`: three texts, 300 bytes edited in each per version (most chunks similar to
/// the last version's, their bases in most regions of many containers).
pub(crate) fn tree(v: u64) -> Files {
    edited_texts(
        v,
        300,
        &[("a.txt", 400_000), ("b.txt", 300_000), ("c.txt", 200_000)],
    )
}

fn backup(repo: &IndexedRepository, src: &Path, v: u64) -> dedelta_store::Result<BackupResult> {
    locked(repo, &me(), |lock| {
        backup_with(
            repo,
            lock,
            backup_options(vec![src.to_path_buf()], time_of(v)),
        )
    })
}

/// The repository's container names, sorted: equal lists are equal stored bytes.
fn containers(repo: &IndexedRepository) -> Vec<String> {
    crate::support::sorted_names(repo.backend().as_ref(), FileKind::Container)
}

/// Every snapshot restores to its version.
fn restores(repo: &IndexedRepository, dir: &Path, src: &Path, versions: &[Files]) {
    let snaps = repo.snapshots().unwrap().snapshots;
    assert_eq!(snaps.len(), versions.len());
    for (i, (_, snap)) in snaps.iter().enumerate() {
        let target = dir.join(format!("out-{i}"));
        crate::support::files_restored(restore_to(repo, snap, &target).unwrap()).unwrap();
        let root = crate::support::restored_root(&target, src);
        assert_eq!(
            crate::support::read_files(&root),
            versions[i],
            "snapshot {i}"
        );
    }
}

/// Bases read a round at a time, 4 requests in flight at most, store exactly what reading
/// them one at a time stores, in the same requests (neighbouring regions share one: reads
/// longer than a region); where reads are round trips, reading a container's next regions
/// ahead stores the same in fewer requests.
#[test]
fn bases_are_read_in_bounded_batches_and_store_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let (serial, one) = probed(&tmp.path().join("serial"), 1);
    let (batched, four) = probed(&tmp.path().join("batched"), 4);
    let (ahead, four_ahead) = probed_with(&tmp.path().join("ahead"), 4, true);
    let src = tmp.path().join("src");
    let mut versions = Vec::new();
    let (mut without, mut with) = (0, 0);
    for v in 0..3 {
        let t = tree(v);
        write_files(&src, &t);
        versions.push(t);
        let s = backup(&serial, &src, v).unwrap();
        let (serial_reads, serial_most, _) = one.take();
        let b = backup(&batched, &src, v).unwrap();
        let (batched_reads, batched_most, longest) = four.take();
        let a = backup(&ahead, &src, v).unwrap();
        let (ahead_reads, ahead_most, _) = four_ahead.take();
        assert!(a.notices.is_empty(), "{:?}", a.notices);
        assert_eq!(containers(&serial), containers(&ahead), "v{v}");
        assert!(ahead_most <= 4, "v{v}");
        assert!(
            s.notices.is_empty() && b.notices.is_empty(),
            "{:?}",
            b.notices
        );
        assert_eq!(s.summary.delta_chunks, b.summary.delta_chunks, "v{v}");
        assert_eq!(s.summary.bytes_added, b.summary.bytes_added, "v{v}");
        assert_eq!(containers(&serial), containers(&batched), "v{v}");
        if v > 0 {
            let bases = b.metrics.bases.read_back;
            assert!(bases > 100, "v{v}: {:?}", b.metrics.bases);
            assert!(b.summary.delta_chunks > 100, "v{v}: {:?}", b.summary);
            assert_eq!(serial_most, 1, "v{v}: one at a time");
            assert!(
                (2..=4).contains(&batched_most),
                "v{v}: {batched_most} reads in flight at most"
            );
            assert_eq!(batched_reads, serial_reads, "v{v}");
            assert!(
                batched_reads * 10 < bases,
                "v{v}: {batched_reads} reads for {bases} bases"
            );
            let region = serial.config().region_size as u64;
            assert!(longest > region, "v{v}: {longest} bytes read at most");
            without += batched_reads;
            with += ahead_reads;
        }
    }
    // Reading the next regions of a container ahead saves requests of later rounds.
    assert!(
        with < without,
        "{with} reads with read-ahead, {without} without"
    );
    restores(&batched, tmp.path(), &src, &versions);
    restores(&ahead, &tmp.path().join("ahead-out"), &src, &versions);
}

/// A batched read that fails once is read again one by one: nothing changes. One that keeps
/// failing leaves its candidates unused, says why (naming the failure), and the backup
/// finishes and restores: never a hang or a panic.
#[test]
fn a_failed_batched_read_is_read_again_then_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let (reference, _) = probed(&tmp.path().join("reference"), 4);
    let (repo, probe) = probed(&tmp.path().join("repo"), 4);
    let src = tmp.path().join("src");
    let mut versions = Vec::new();
    for v in 0..2 {
        let t = tree(v);
        write_files(&src, &t);
        versions.push(t);
        backup(&reference, &src, v).unwrap();
        if v == 1 {
            probe.fail_next.store(3, Ordering::SeqCst);
        }
        let r = backup(&repo, &src, v).unwrap();
        assert!(r.notices.is_empty(), "v{v}: {:?}", r.notices);
        assert_eq!(containers(&reference), containers(&repo), "v{v}");
    }
    assert_eq!(
        probe.fail_next.load(Ordering::SeqCst),
        0,
        "the failures hit"
    );

    let t = tree(2);
    write_files(&src, &t);
    versions.push(t);
    probe.fail_all.store(true, Ordering::SeqCst);
    let r = backup(&repo, &src, 2);
    probe.fail_all.store(false, Ordering::SeqCst);
    let r = r.unwrap();
    let said = r.notices.join("\n");
    assert!(
        said.contains("could not be read") && said.contains("injected read failure"),
        "{said}"
    );
    restores(&repo, tmp.path(), &src, &versions);
}
