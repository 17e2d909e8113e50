use super::*;
use crate::backend::memory::MemoryBackend;
use crate::repository::lock_guard::WriteGuard;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

fn info(pid: u32) -> LockInfo {
    LockInfo {
        pid,
        host: "h".into(),
        time: "t".into(),
        command: "backup".into(),
    }
}

fn me() -> LockInfo {
    info(std::process::id())
}

fn memory() -> Arc<dyn Backend> {
    Arc::new(MemoryBackend::default())
}

fn take(b: &Arc<dyn Backend>, mode: LockMode) -> Result<RepoLock> {
    RepoLock::acquire_with(b.clone(), &me(), mode, LockTiming::default())
}

fn record(host: &str, pid: u32, exclusive: bool, age_secs: u64) -> LockRecord {
    LockRecord {
        info: LockInfo {
            pid,
            host: host.into(),
            time: "t".into(),
            command: "backup".into(),
        },
        owner: "u".into(),
        exclusive,
        refreshed: epoch_secs(SystemTime::now()) - age_secs,
        refresh_secs: 300,
        stale_secs: 1800,
    }
}

fn plant(b: &Arc<dyn Backend>, name: &str, r: &LockRecord) {
    b.put(FileKind::Lock, name, &serde_json::to_vec(r).unwrap())
        .unwrap();
}

#[test]
fn shared_locks_coexist_and_exclude_an_exclusive_one() {
    let b = memory();
    let s1 = take(&b, LockMode::Shared).unwrap();
    let s2 = take(&b, LockMode::Shared).unwrap();
    assert!(matches!(
        take(&b, LockMode::Exclusive),
        Err(Error::Locked { .. })
    ));
    // The refused attempt left nothing behind.
    assert_eq!(b.list(FileKind::Lock).unwrap().len(), 2);
    s1.release().unwrap();
    drop(s2);
    assert!(b.list(FileKind::Lock).unwrap().is_empty());
    let x = take(&b, LockMode::Exclusive).unwrap();
    let e = take(&b, LockMode::Shared).unwrap_err();
    assert!(e.to_string().contains("exclusive lock"), "{e}");
    assert!(matches!(
        take(&b, LockMode::Exclusive),
        Err(Error::Locked { .. })
    ));
    x.release().unwrap();
}

#[test]
fn stale_locks_are_ignored_and_removed() {
    let b = memory();
    // A dead process on this host; a lock of another host not refreshed for an hour; garbage.
    plant(&b, "dead", &record("h", u32::MAX - 7, true, 0));
    plant(&b, "old", &record("elsewhere", 1, true, 3600));
    for garbage in [&b""[..], b"{\"pid\": 1", b"\xff\xfe"] {
        b.put(FileKind::Lock, "garbage", garbage).unwrap();
        let l = take(&b, LockMode::Exclusive).unwrap();
        assert_eq!(b.list(FileKind::Lock).unwrap().len(), 1);
        l.release().unwrap();
    }
    // A live lock of another host, refreshed a minute ago, holds.
    plant(&b, "live", &record("elsewhere", 1, false, 60));
    let e = take(&b, LockMode::Exclusive).unwrap_err();
    assert!(e.to_string().contains("elsewhere"), "{e}");
    take(&b, LockMode::Shared).unwrap().release().unwrap();
    // `unlock` removes only stale locks, `unlock --remove-all` every lock.
    plant(&b, "old", &record("elsewhere", 1, true, 3600));
    assert_eq!(remove_locks(b.as_ref(), false, "h").unwrap(), vec!["old"]);
    assert_eq!(remove_locks(b.as_ref(), true, "h").unwrap(), vec!["live"]);
}

/// Locks of versions before shared locks (`locks/exclusive`, no timing) still exclude.
#[test]
fn an_older_versions_lock_counts_as_exclusive() {
    let b = memory();
    let old = serde_json::to_vec(&info(std::process::id())).unwrap();
    b.put(FileKind::Lock, "exclusive", &old).unwrap();
    assert!(matches!(
        take(&b, LockMode::Shared),
        Err(Error::Locked { .. })
    ));
    let dead = serde_json::to_vec(&info(u32::MAX - 7)).unwrap();
    b.put(FileKind::Lock, "exclusive", &dead).unwrap();
    take(&b, LockMode::Shared).unwrap().release().unwrap();
}

/// Without conditional writes, two processes racing for exclusive locks never both win.
#[test]
fn racing_exclusive_lockers_never_both_win() {
    // On an object store each exclusive locker waits `SETTLE` before it lists: fewer rounds.
    let store: Arc<dyn Backend> = TestLocks::object_store();
    for (b, rounds) in [(memory(), 100), (store, 8)] {
        racing_exclusive_lockers(&b, rounds);
    }
}

fn racing_exclusive_lockers(b: &Arc<dyn Backend>, rounds: usize) {
    for _ in 0..rounds {
        let barrier = Barrier::new(2);
        let won: Vec<bool> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        take(b, LockMode::Exclusive).ok()
                    })
                })
                .collect();
            let locks: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            locks.iter().map(Option::is_some).collect()
        });
        assert!(won.iter().filter(|w| **w).count() <= 1, "{won:?}");
        assert!(b.list(FileKind::Lock).unwrap().is_empty());
    }
}

#[test]
fn retry_lock_waits_for_the_holder() {
    let b = memory();
    let held = take(&b, LockMode::Exclusive).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        held.release().unwrap();
    });
    let start = std::time::Instant::now();
    let l = RepoLock::acquire_retrying(
        b.clone(),
        &me(),
        LockMode::Shared,
        LockTiming::default(),
        Duration::from_secs(20),
    )
    .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(1000));
    t.join().unwrap();
    l.release().unwrap();
    let _x = take(&b, LockMode::Exclusive).unwrap();
    let e = RepoLock::acquire_retrying(
        b.clone(),
        &me(),
        LockMode::Shared,
        LockTiming::default(),
        Duration::from_secs(2),
    );
    assert!(matches!(e, Err(Error::Locked { .. })));
}

/// Refuses lock writes while `broken` is set; delays them by `put_delay_ms`; says its
/// requests are round trips when `round_trips` (an object store).
#[derive(Debug, Default)]
struct TestLocks {
    inner: MemoryBackend,
    broken: AtomicBool,
    put_delay_ms: std::sync::atomic::AtomicU64,
    round_trips: bool,
}

impl TestLocks {
    fn object_store() -> Arc<Self> {
        Arc::new(TestLocks {
            round_trips: true,
            ..Default::default()
        })
    }
}

impl Backend for TestLocks {
    fn get(&self, k: FileKind, n: &str) -> crate::backend::Result<Vec<u8>> {
        self.inner.get(k, n)
    }
    fn get_range(&self, k: FileKind, n: &str, o: i64, l: usize) -> crate::backend::Result<Vec<u8>> {
        self.inner.get_range(k, n, o, l)
    }
    fn put(&self, k: FileKind, n: &str, d: &[u8]) -> crate::backend::Result<()> {
        if k == FileKind::Lock && self.broken.load(Ordering::Relaxed) {
            return Err(crate::backend::BackendError::io(
                "lock",
                std::io::Error::other("network down"),
            ));
        }
        if k == FileKind::Lock {
            let delay = self.put_delay_ms.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(delay));
        }
        self.inner.put(k, n, d)
    }
    fn create_new(&self, k: FileKind, n: &str, d: &[u8]) -> crate::backend::Result<bool> {
        self.inner.create_new(k, n, d)
    }
    fn list(&self, k: FileKind) -> crate::backend::Result<Vec<(String, u64)>> {
        self.inner.list(k)
    }
    fn delete(&self, k: FileKind, n: &str) -> crate::backend::Result<()> {
        self.inner.delete(k, n)
    }
    fn size(&self, k: FileKind, n: &str) -> crate::backend::Result<u64> {
        self.inner.size(k, n)
    }
    fn exists(&self, k: FileKind, n: &str) -> crate::backend::Result<bool> {
        self.inner.exists(k, n)
    }
    fn location(&self) -> String {
        "test".into()
    }
    fn requests_are_round_trips(&self) -> bool {
        self.round_trips
    }
}

fn quick() -> LockTiming {
    LockTiming {
        refresh: Duration::from_millis(1000),
        stale_after: Duration::from_millis(3000),
    }
}

fn wait_until(mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A lock that cannot be refreshed is lost before others may take it as stale, and the
/// repository's write guard then refuses writes (but not reads).
#[test]
fn a_lock_that_cannot_be_refreshed_stops_writes() {
    let raw = Arc::new(TestLocks::default());
    let guard = WriteGuard::new(raw.clone());
    let lock = RepoLock::acquire_with(raw.clone(), &me(), LockMode::Shared, quick()).unwrap();
    guard.watch(lock.health().clone());
    guard.put(FileKind::Snapshot, "s", b"1").unwrap();
    // Refreshes work: the lock stays healthy past its staleness timeout.
    std::thread::sleep(Duration::from_millis(3500));
    lock.check().unwrap();
    raw.broken.store(true, Ordering::Relaxed);
    wait_until(|| lock.check().is_err());
    let e = guard.put(FileKind::Container, "c", b"x").unwrap_err();
    assert!(e.to_string().contains("lock was lost"), "{e}");
    assert!(guard.delete(FileKind::Snapshot, "s").is_err());
    assert_eq!(guard.get(FileKind::Snapshot, "s").unwrap(), b"1");
    drop(lock);
}

/// A lock removed by another process (`unlock --remove-all`) is lost at the next refresh.
#[test]
fn a_removed_lock_is_lost() {
    let b = memory();
    let lock = RepoLock::acquire_with(b.clone(), &me(), LockMode::Shared, quick()).unwrap();
    remove_locks(b.as_ref(), true, "h").unwrap();
    wait_until(|| lock.check().is_err());
    assert!(lock.check().unwrap_err().to_string().contains("removed"));
}

/// Issue 12: a zombie lock holder counted as alive.
#[test]
fn zombie_holder_is_not_alive() {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    // Let it exit without reaping it: it stays a zombie until `wait`.
    wait_until(|| is_zombie(pid as libc::pid_t));
    assert!(!process_alive(pid));
    let b = memory();
    plant(&b, "z", &record("h", pid, true, 0));
    take(&b, LockMode::Exclusive).unwrap().release().unwrap();
    child.wait().unwrap();
    assert!(process_alive(std::process::id()));
}

#[test]
fn retry_lock_durations_parse() {
    assert_eq!(parse_wait("30s"), Some(Duration::from_secs(30)));
    assert_eq!(parse_wait("5m"), Some(Duration::from_secs(300)));
    assert_eq!(parse_wait("1h30m"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_wait("12"), Some(Duration::from_secs(12)));
    for bad in ["", "5x", "m", "5m3"] {
        assert_eq!(parse_wait(bad), None, "{bad}");
    }
}

/// Taking a lock in an empty repository makes two requests: the write of its record, then a
/// listing; its own record, just written, is not read back (each request is a round trip on
/// an object store). Another's lock is still read.
#[test]
fn taking_a_lock_reads_only_the_others() {
    use crate::backend::wrap::metered::MeteredBackend;
    let metered = Arc::new(MeteredBackend::new(memory()));
    let b: Arc<dyn Backend> = metered.clone();
    let lock = take(&b, LockMode::Shared).unwrap();
    let c = metered.counts(FileKind::Lock);
    assert_eq!((c.lists, c.puts, c.gets), (1, 1, 0), "{c:?}");
    assert_eq!(c.requests(), 2);
    let second = take(&b, LockMode::Shared).unwrap();
    let c = metered.counts(FileKind::Lock);
    // Its listing sees the first lock and reads it; its own is not read.
    assert_eq!((c.lists, c.puts, c.gets), (2, 2, 1), "{c:?}");
    second.release().unwrap();
    lock.release().unwrap();
}

/// On an object store a shared lock is taken in one round trip: its listing goes beside its
/// record's write. An exclusive one lists only `SETTLE` after its write.
#[test]
fn a_shared_lock_on_an_object_store_lists_beside_its_write() {
    use crate::backend::wrap::metered::MeteredBackend;
    let raw = TestLocks::object_store();
    let metered = Arc::new(MeteredBackend::new(raw.clone()));
    let b: Arc<dyn Backend> = metered.clone();
    let written = RepoLock::write(b.clone(), &me(), LockMode::Shared, quick()).unwrap();
    let c = metered.counts(FileKind::Lock);
    assert_eq!((c.lists, c.puts), (1, 1), "{c:?}");
    let shared = written.confirm().unwrap();
    assert_eq!(metered.counts(FileKind::Lock).lists, 1, "no second listing");
    shared.release().unwrap();

    let start = std::time::Instant::now();
    let written = RepoLock::write(b.clone(), &me(), LockMode::Exclusive, quick()).unwrap();
    assert_eq!(
        metered.counts(FileKind::Lock).lists,
        1,
        "an exclusive write lists nothing"
    );
    written.confirm().unwrap().release().unwrap();
    assert!(start.elapsed() >= SETTLE, "{:?}", start.elapsed());
    assert_eq!(metered.counts(FileKind::Lock).lists, 2);
}

/// The race the wait closes: a shared locker whose listing (beside its write) came before an
/// exclusive locker's write, and whose write is acknowledged after that. With its write
/// acknowledged within `SETTLE` of its listing, the exclusive locker's listing, `SETTLE`
/// after its own write, sees the shared lock; with a slower write, the shared locker does not
/// keep its listing and lists again. Either way never both hold their locks.
#[test]
fn a_shared_locker_listing_beside_its_write_and_an_exclusive_one_never_both_win() {
    for put_delay in [60u64, 400] {
        let raw = TestLocks::object_store();
        let b: Arc<dyn Backend> = raw.clone();
        let won: Vec<(LockMode, bool)> = std::thread::scope(|s| {
            let shared = s.spawn(|| {
                raw.put_delay_ms.store(put_delay, Ordering::Relaxed);
                let l = RepoLock::write(b.clone(), &me(), LockMode::Shared, quick())
                    .and_then(WrittenLock::confirm);
                (LockMode::Shared, l.ok())
            });
            let exclusive = s.spawn(|| {
                // After the shared listing was sent, while the shared write is in flight.
                std::thread::sleep(Duration::from_millis(20));
                let b = raw.clone();
                // The exclusive locker's own write is quick (the delay is read at each put:
                // it writes around the shared one's delay by writing to the inner backend).
                let inner: Arc<dyn Backend> = Arc::new(Quick(b));
                let l = RepoLock::write(inner, &me(), LockMode::Exclusive, quick())
                    .and_then(WrittenLock::confirm);
                (LockMode::Exclusive, l.ok())
            });
            [shared.join().unwrap(), exclusive.join().unwrap()]
                .into_iter()
                .map(|(m, l)| (m, l.is_some()))
                .collect()
        });
        let winners = won.iter().filter(|(_, w)| *w).count();
        assert!(winners <= 1, "delay {put_delay} ms: {won:?}");
        // Who wins: with a quick shared write the exclusive listing sees it; with a slow
        // one the shared locker's second listing sees the exclusive lock.
        let expect = if put_delay < SETTLE.as_millis() as u64 {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        };
        assert_eq!(
            won.iter().find(|(_, w)| *w).map(|(m, _)| *m),
            Some(expect),
            "delay {put_delay} ms: {won:?}"
        );
    }
}

/// [`TestLocks`] with lock writes undelayed (the other process's network).
#[derive(Debug)]
struct Quick(Arc<TestLocks>);

impl Backend for Quick {
    fn get(&self, k: FileKind, n: &str) -> crate::backend::Result<Vec<u8>> {
        self.0.get(k, n)
    }
    fn get_range(&self, k: FileKind, n: &str, o: i64, l: usize) -> crate::backend::Result<Vec<u8>> {
        self.0.get_range(k, n, o, l)
    }
    fn put(&self, k: FileKind, n: &str, d: &[u8]) -> crate::backend::Result<()> {
        self.0.inner.put(k, n, d)
    }
    fn create_new(&self, k: FileKind, n: &str, d: &[u8]) -> crate::backend::Result<bool> {
        self.0.create_new(k, n, d)
    }
    fn list(&self, k: FileKind) -> crate::backend::Result<Vec<(String, u64)>> {
        self.0.list(k)
    }
    fn delete(&self, k: FileKind, n: &str) -> crate::backend::Result<()> {
        self.0.delete(k, n)
    }
    fn size(&self, k: FileKind, n: &str) -> crate::backend::Result<u64> {
        self.0.size(k, n)
    }
    fn exists(&self, k: FileKind, n: &str) -> crate::backend::Result<bool> {
        self.0.exists(k, n)
    }
    fn location(&self) -> String {
        "test".into()
    }
    fn requests_are_round_trips(&self) -> bool {
        true
    }
}
