//! A backup's fixed costs (issue 20): the damage records are listed once per command, and
//! the locking open takes the lock beside the key's derivation, releasing it again when the
//! password opens no key. And the requests of an open in as few sequential rounds as their
//! dependencies allow (issue 19: on an object store each round is a round trip, 40-60 ms on
//! a Garage cluster): seen through [`Rounds`], which makes requests issued together overlap
//! however loaded the machine is.

use crate::intercept::{Hooks, Intercept};
use crate::support::{backup_files, backup_options, config, files, me, text, time_of, write_files};
use dedelta_store::backend::local::LocalBackend;
use dedelta_store::backend::{Backend, FileKind, Result as BackendResult};
use dedelta_store::crypto::{KdfParams, KeyOrigin};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::repository::lock::LockMode;
use dedelta_store::repository::open::LockRequest;
use dedelta_store::{Error, Repository};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Counts the listings of damage records.
#[derive(Default)]
struct DamageListings(AtomicU64);

impl Hooks for DamageListings {
    fn listing(
        &self,
        kind: FileKind,
        list: &mut dyn FnMut() -> BackendResult<Vec<(String, u64)>>,
    ) -> BackendResult<Vec<(String, u64)>> {
        if kind == FileKind::Damage {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        list()
    }
}

/// An open and a backup list the damage records once (the open's catch-up), where they
/// listed them three times: the catch-up, the backup's lookups, and its writer.
#[test]
fn a_backup_lists_damage_records_once() {
    let (tmp, path, cache) = plain();
    let src = tmp.path().join("src");
    for n in 0..2 {
        let probe = Arc::new(Intercept {
            inner: Arc::new(LocalBackend::new(&path)) as Arc<dyn Backend>,
            hooks: DamageListings::default(),
        });
        let repo = Repository::open_in_cache(probe.clone(), &cache)
            .unwrap()
            .open_index()
            .unwrap();
        backup_files(&repo, &src, &files([("f", text(50_000, n))]), n, &me()).unwrap();
        assert_eq!(probe.0.load(Ordering::SeqCst), 1, "backup {n}");
    }
}

/// A temporary directory holding an encrypted repository (`repo`, password "pw") and a
/// client cache (`cache`).
fn encrypted() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let cache = tmp.path().join("cache");
    drop(
        Repository::init_local_encrypted(
            &path,
            config(1, DeltaConfig::recommended()),
            &cache,
            "pw",
            KdfParams::insecure_for_tests(),
            &KeyOrigin::default(),
        )
        .unwrap(),
    );
    (tmp, path, cache)
}

/// A plain repository (the temporary directory, the repository's path, the client cache's).
fn plain() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let cache = tmp.path().join("cache");
    drop(
        Repository::init_local_with_cache(&path, config(1, DeltaConfig::recommended()), &cache)
            .unwrap(),
    );
    (tmp, path, cache)
}

/// A reader's open of a plain repository through `probe`: the locking open (a shared lock
/// for `who`), then its index's open listing the snapshots (a backup's, a restore's).
fn open_listing<H: Hooks + 'static>(
    probe: &Arc<Intercept<Arc<dyn Backend>, H>>,
    cache: &std::path::Path,
    who: &dedelta_store::repository::lock::LockInfo,
) -> (
    dedelta_store::IndexedRepository,
    dedelta_store::repository::lock::RepoLock,
) {
    let (repo, lock) = Repository::open_in_cache_locked(
        probe.clone(),
        cache,
        &mut || Err(Error::PasswordNeeded),
        &shared(who, false),
    )
    .unwrap();
    (repo.listing_snapshots_at_open().open_index().unwrap(), lock)
}

/// Lock objects in the repository at `path`.
fn locks(path: &std::path::Path) -> usize {
    LocalBackend::new(path).list(FileKind::Lock).unwrap().len()
}

/// The locking open holds its lock when it returns (a second exclusive one is refused), and
/// a wrong password leaves no lock behind.
#[test]
fn the_locking_open_takes_the_lock_and_gives_it_back_on_a_wrong_password() {
    let (tmp, path, cache) = encrypted();
    let loc = path.to_str().unwrap();
    let who = me();
    let exclusive = LockRequest {
        me: &who,
        mode: LockMode::Exclusive,
        retry_for: Duration::ZERO,
        prompt_may_wait: false,
    };
    let pw = |p: &'static str| move || Ok::<_, Error>(zeroize::Zeroizing::new(p.to_string()));
    let wrong = Repository::open_location_locked(loc, &cache, None, &mut pw("nope"), &exclusive);
    assert!(matches!(wrong, Err(Error::WrongPassword)), "{wrong:?}");
    assert_eq!(locks(&path), 0, "the wrong password's lock was left behind");

    let (repo, lock) =
        Repository::open_location_locked(loc, &cache, None, &mut pw("pw"), &exclusive).unwrap();
    assert!(repo.config().is_encrypted());
    assert_eq!(locks(&path), 1);
    let again = Repository::open_location_locked(loc, &cache, None, &mut pw("pw"), &exclusive);
    assert!(matches!(again, Err(Error::Locked { .. })), "{again:?}");
    assert_eq!(locks(&path), 1);
    // The repository works with it: a backup through the lock it was opened with.
    let repo = repo.open_index().unwrap();
    let src = tmp.path().join("src");
    crate::support::write_files(&src, &files([("f", text(10_000, 1))]));
    let res = crate::support::backup_with(
        &repo,
        &lock,
        crate::support::backup_options(vec![src], crate::support::time_of(1)),
    )
    .unwrap();
    assert!(res.summary.files == 1, "{:?}", res.summary);
    lock.release().unwrap();
    assert_eq!(locks(&path), 0);
}

/// A request as [`Rounds`] saw it.
struct Seen {
    op: &'static str,
    kind: FileKind,
    start: Instant,
    end: Option<Instant>,
}

/// Every request and when it ran. Each lingers, once done, until a later one has started
/// (or [`Rounds::LINGER`] has passed): requests issued together are then seen overlapping
/// however late a loaded machine starts the second, and requests issued one after another
/// never are. A test's requests grouped as [`Self::rounds`] are its sequential rounds.
#[derive(Default)]
struct Rounds {
    seen: Mutex<Vec<Seen>>,
    changed: Condvar,
    /// Stands for a local disk (requests not round trips): no lingering either.
    local: bool,
    /// The threads the requests came from.
    threads: Mutex<Vec<std::thread::ThreadId>>,
    /// Counts of requests at which the test knows a round has been sent whole: its last
    /// request then does not linger. (A listing of locks lingering `LINGER` would be answered
    /// more than `SETTLE` after the catch-up listings beside it were sent, and these would be
    /// made again: what a loaded machine did when the lock's listing happened to start last.)
    complete_at: Vec<usize>,
}

/// A request as a test names it: the backend method and the kind of object.
type Request = (&'static str, FileKind);

impl Rounds {
    const LINGER: Duration = Duration::from_millis(500);

    /// The requests so far, in groups that overlap (in order of their starts): each group
    /// is one round trip on an object store.
    fn rounds(&self) -> Vec<Vec<Request>> {
        let seen = self.seen.lock().unwrap();
        let mut order: Vec<&Seen> = seen.iter().collect();
        order.sort_by_key(|s| s.start);
        let mut out: Vec<Vec<Request>> = Vec::new();
        let mut end: Option<Instant> = None;
        for s in order {
            let s_end = s.end.unwrap_or_else(Instant::now);
            match end {
                Some(e) if s.start < e => {
                    out.last_mut().unwrap().push((s.op, s.kind));
                    end = Some(e.max(s_end));
                }
                _ => {
                    out.push(vec![(s.op, s.kind)]);
                    end = Some(s_end);
                }
            }
        }
        out
    }

    /// How many requests so far.
    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl Hooks for Rounds {
    fn round_trips(&self) -> bool {
        !self.local
    }

    fn started(&self, op: &'static str, kind: FileKind, _name: &str) -> usize {
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        let mut seen = self.seen.lock().unwrap();
        seen.push(Seen {
            op,
            kind,
            start: Instant::now(),
            end: None,
        });
        self.changed.notify_all();
        seen.len() - 1
    }

    fn ended(&self, token: usize) {
        let linger = if self.local {
            Duration::ZERO
        } else {
            Self::LINGER
        };
        let deadline = Instant::now() + linger;
        let mut seen = self.seen.lock().unwrap();
        while seen.len() == token + 1 && !self.complete_at.contains(&seen.len()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            seen = self.changed.wait_timeout(seen, left).unwrap().0;
        }
        seen[token].end = Some(Instant::now());
    }
}

/// `round` holds exactly `want` (in any order).
fn exactly(round: &[Request], want: &[Request]) -> bool {
    let mut a = round.to_vec();
    let mut b = want.to_vec();
    a.sort_by_key(|r| format!("{r:?}"));
    b.sort_by_key(|r| format!("{r:?}"));
    a == b
}

/// `round` holds each of `want` (and maybe more).
fn holds(round: &[Request], want: &[Request]) -> bool {
    want.iter().all(|w| round.contains(w))
}

/// The repository at `path` through a fresh [`Rounds`].
fn probed(path: &std::path::Path) -> Arc<Intercept<Arc<dyn Backend>, Rounds>> {
    probed_in_rounds(path, Vec::new())
}

/// The repository at `path` through a fresh [`Rounds`] that knows its rounds are complete
/// at the counts of requests `complete_at`.
fn probed_in_rounds(
    path: &std::path::Path,
    complete_at: Vec<usize>,
) -> Arc<Intercept<Arc<dyn Backend>, Rounds>> {
    Arc::new(Intercept {
        inner: Arc::new(LocalBackend::new(path)) as Arc<dyn Backend>,
        hooks: Rounds {
            complete_at,
            ..Rounds::default()
        },
    })
}

/// A shared lock for [`me`], `prompt_may_wait` as given.
fn shared(
    who: &dedelta_store::repository::lock::LockInfo,
    prompt_may_wait: bool,
) -> LockRequest<'_> {
    LockRequest {
        me: who,
        mode: LockMode::Shared,
        retry_for: Duration::ZERO,
        prompt_may_wait,
    }
}

const CONFIG_GET: Request = ("get", FileKind::Config);
const KEYS_LISTED: Request = ("list", FileKind::Key);
const LOCK_PUT: Request = ("put", FileKind::Lock);
const LOCKS_LISTED: Request = ("list", FileKind::Lock);

/// The catch-up's listings, sent in the lock's round by a shared locker on an object store.
const CATCH_UP_LISTED: [Request; 4] = [
    ("list", FileKind::Container),
    ("list", FileKind::Damage),
    ("list", FileKind::Snapshot),
    ("list", FileKind::Index),
];

/// The first round of a shared locking open on an object store: the config, the key files'
/// listing, the lock's record and the locks' listing, and the catch-up's listings.
fn first_round() -> Vec<Request> {
    let mut r = vec![CONFIG_GET, KEYS_LISTED, LOCK_PUT, LOCKS_LISTED];
    r.extend(CATCH_UP_LISTED);
    r
}

/// The locking open of a plain repository, then its index's open listing the snapshots (a
/// backup's, a restore's): the config, the key files' listing, the lock's record, the locks'
/// listing and every listing of the catch-up (the snapshots' and the index files' with them)
/// in one round; nothing else with a cache that is up to date, and with an empty one the
/// snapshot's read and the rebuild's of the index file in a second. (Before 2026-11-29, second session, the catch-up had a
/// round of its own; before 2026-11-29 the locks' listing too; before 2026-11-28: config;
/// keys ‖ lock record; lock listing; catch-up: four rounds, and a reader's open five.)
#[test]
fn a_plain_open_lists_the_catch_up_in_the_locks_round() {
    let (tmp, path, cache) = plain();
    let src = tmp.path().join("src");
    {
        // A container and its index file, so that a rebuild has something to read.
        let repo = Repository::open_in_cache(Arc::new(LocalBackend::new(&path)), &cache)
            .unwrap()
            .with_index_files(true)
            .open_index()
            .unwrap();
        backup_files(&repo, &src, &files([("f", text(50_000, 1))]), 1, &me()).unwrap();
    }
    let who = me();
    for (n, fresh) in [(0, false), (1, true)] {
        // The second open has an empty cache: its index is rebuilt, index files consulted.
        let cache = if fresh {
            tmp.path().join("empty")
        } else {
            cache.clone()
        };
        // The first round's last request does not linger: the lock's listing answered late
        // would have the catch-up list again (on a loaded machine, when it started last).
        let first = first_round().len();
        let probe = probed_in_rounds(&path, vec![first, first + 2]);
        let (repo, lock) = open_listing(&probe, &cache, &who);
        let rounds = probe.rounds();
        assert!(exactly(&rounds[0], &first_round()), "open {n}: {rounds:?}");
        if fresh {
            // The snapshot (not in the client's snapshot cache) and the index file at once.
            assert!(
                exactly(
                    &rounds[1],
                    &[("get", FileKind::Snapshot), ("get", FileKind::Index)]
                ),
                "open {n}: {rounds:?}"
            );
            assert_eq!(rounds.len(), 2, "open {n}: {rounds:?}");
        } else {
            assert_eq!(rounds.len(), 1, "open {n}: {rounds:?}");
        }
        drop(repo);
        lock.release().unwrap();
    }
}

/// The same open when its lock's listing is the first round's last request to start (as on
/// a loaded machine, where CI once saw it): still one round. The probe used to hold that
/// last request `LINGER`, past `SETTLE`, and the catch-up listed again.
#[test]
fn an_open_whose_locks_listing_starts_last_is_still_one_round() {
    let (_tmp, path, cache) = plain();
    let who = me();
    let probe = Arc::new(Intercept {
        inner: Arc::new(LocalBackend::new(&path)) as Arc<dyn Backend>,
        hooks: DelayedLockListing {
            rounds: Rounds {
                complete_at: vec![first_round().len()],
                ..Rounds::default()
            },
            start: Duration::from_millis(40),
            answer: Duration::ZERO,
        },
    });
    let (repo, lock) = open_listing(&probe, &cache, &who);
    let rounds = probe.hooks.rounds.rounds();
    assert!(exactly(&rounds[0], &first_round()), "{rounds:?}");
    assert_eq!(rounds[0].last(), Some(&LOCKS_LISTED), "{rounds:?}");
    assert_eq!(rounds.len(), 1, "{rounds:?}");
    drop(repo);
    lock.release().unwrap();
}

/// A catch-up listing counts only when it was sent at most `SETTLE` before the answer of
/// the listing that confirmed the lock: when that answer comes later, the catch-up lists
/// again, after the lock (see `catch_up_listings`'s module doc).
#[test]
fn a_catch_up_listing_sent_long_before_the_lock_was_confirmed_is_made_again() {
    let (_tmp, path, cache) = plain();
    let who = me();
    let probe = Arc::new(Intercept {
        inner: Arc::new(LocalBackend::new(&path)) as Arc<dyn Backend>,
        hooks: DelayedLockListing {
            rounds: Rounds::default(),
            start: Duration::ZERO,
            answer: dedelta_store::repository::lock::SETTLE + Duration::from_millis(200),
        },
    });
    let (repo, lock) = Repository::open_in_cache_locked(
        probe.clone(),
        &cache,
        &mut || Err(Error::PasswordNeeded),
        &shared(&who, false),
    )
    .unwrap();
    let repo = repo.listing_snapshots_at_open().open_index().unwrap();
    let rounds = probe.rounds.rounds();
    assert!(exactly(&rounds[0], &first_round()), "{rounds:?}");
    let later = rounds[1..].concat();
    for listed in [
        ("list", FileKind::Container),
        ("list", FileKind::Damage),
        ("list", FileKind::Snapshot),
    ] {
        assert!(
            later.contains(&listed),
            "{listed:?} not listed again: {rounds:?}"
        );
    }
    drop(repo);
    lock.release().unwrap();
}

/// An exclusive lock on an object store is deleted only once `SETTLE` has passed since the
/// last write made under it was acknowledged: what lets a shared open keep the catch-up
/// listings it sent beside its lock (see `catch_up_listings`'s module doc).
#[test]
fn an_exclusive_lock_on_an_object_store_is_deleted_settle_after_its_last_write() {
    let (_tmp, path, cache) = plain();
    let who = me();
    let probe = probed(&path);
    let exclusive = LockRequest {
        me: &who,
        mode: LockMode::Exclusive,
        retry_for: Duration::ZERO,
        prompt_may_wait: false,
    };
    let (repo, lock) = Repository::open_in_cache_locked(
        probe.clone(),
        &cache,
        &mut || Err(Error::PasswordNeeded),
        &exclusive,
    )
    .unwrap();
    repo.backend()
        .put(FileKind::Damage, "written-under-the-lock", b"x")
        .unwrap();
    lock.release().unwrap();
    let seen = probe.hooks.seen.lock().unwrap();
    let at = |op: &str, kind: FileKind| {
        let s = seen
            .iter()
            .find(|s| s.op == op && s.kind == kind)
            .unwrap_or_else(|| panic!("no {op} of {kind:?}"));
        (s.start, s.end.expect("ended"))
    };
    let (_, written) = at("put", FileKind::Damage);
    let (deleted, _) = at("delete", FileKind::Lock);
    assert!(
        deleted >= written + dedelta_store::repository::lock::SETTLE,
        "the lock was deleted {:?} after the last write",
        deleted.saturating_duration_since(written)
    );
}

/// [`Rounds`], whose listings of locks start `start` late (seen by the probe as starting
/// then) and, once started, are answered `answer` late.
struct DelayedLockListing {
    rounds: Rounds,
    start: Duration,
    answer: Duration,
}

impl Hooks for DelayedLockListing {
    fn round_trips(&self) -> bool {
        true
    }

    fn listing(
        &self,
        kind: FileKind,
        list: &mut dyn FnMut() -> BackendResult<Vec<(String, u64)>>,
    ) -> BackendResult<Vec<(String, u64)>> {
        if kind == FileKind::Lock {
            std::thread::sleep(self.answer);
        }
        list()
    }

    fn started(&self, op: &'static str, kind: FileKind, name: &str) -> usize {
        if (op, kind) == LOCKS_LISTED {
            std::thread::sleep(self.start);
        }
        self.rounds.started(op, kind, name)
    }

    fn ended(&self, token: usize) {
        self.rounds.ended(token)
    }
}

/// On a local disk the same open sends its requests one after another, on the caller's
/// thread: a request takes microseconds there, less than starting a thread (issue 14).
#[test]
fn a_local_open_sends_one_request_at_a_time() {
    let (_tmp, path, cache) = plain();
    let who = me();
    let probe = Arc::new(Intercept {
        inner: Arc::new(LocalBackend::new(&path)) as Arc<dyn Backend>,
        hooks: Rounds {
            local: true,
            ..Rounds::default()
        },
    });
    let (repo, lock) = open_listing(&probe, &cache, &who);
    let rounds = probe.rounds();
    assert!(rounds.iter().all(|r| r.len() == 1), "{rounds:?}");
    let me = std::thread::current().id();
    assert!(
        probe.threads.lock().unwrap().iter().all(|t| *t == me),
        "every request from the caller's thread"
    );
    let all: Vec<Request> = rounds.concat();
    assert!(
        holds(
            &all,
            &[
                CONFIG_GET,
                KEYS_LISTED,
                LOCK_PUT,
                LOCKS_LISTED,
                ("list", FileKind::Container),
                ("list", FileKind::Damage),
                ("list", FileKind::Snapshot),
            ]
        ),
        "{rounds:?}"
    );
    drop(repo);
    lock.release().unwrap();
}

/// An encrypted repository whose password is given (file, environment): the key file is
/// read in the round after the config's, the lock's record and listing having gone with
/// the config; a wrong password leaves no lock behind.
#[test]
fn an_encrypted_open_reads_its_key_beside_the_locks_listing() {
    let (_tmp, path, cache) = encrypted();
    let who = me();
    let pw = |p: &'static str| move || Ok::<_, Error>(zeroize::Zeroizing::new(p.to_string()));
    let probe = probed(&path);
    let (repo, lock) = Repository::open_in_cache_locked(
        probe.clone(),
        &cache,
        &mut pw("pw"),
        &shared(&who, false),
    )
    .unwrap();
    assert!(repo.config().is_encrypted());
    let rounds = probe.rounds();
    assert!(exactly(&rounds[0], &first_round()), "{rounds:?}");
    assert!(exactly(&rounds[1], &[("get", FileKind::Key)]), "{rounds:?}");
    assert_eq!(rounds.len(), 2, "{rounds:?}");
    lock.release().unwrap();
    let wrong = Repository::open_in_cache_locked(
        probed(&path),
        &cache,
        &mut pw("nope"),
        &shared(&who, false),
    );
    assert!(matches!(wrong, Err(Error::WrongPassword)), "{wrong:?}");
    assert_eq!(locks(&path), 0, "the wrong password's lock was left behind");
}

/// When the password prompt may wait for a user, no lock is held while it waits: the
/// record written beside the config's read is deleted before the prompt, and the lock
/// taken once the password is given.
#[test]
fn no_lock_is_held_while_a_prompt_waits() {
    let (_tmp, path, cache) = encrypted();
    let who = me();
    let probe = probed(&path);
    let mut held_at_prompt = None;
    let mut prompt = || {
        held_at_prompt = Some(locks(&path));
        Ok(zeroize::Zeroizing::new("pw".to_string()))
    };
    let (_repo, lock) =
        Repository::open_in_cache_locked(probe.clone(), &cache, &mut prompt, &shared(&who, true))
            .unwrap();
    assert_eq!(
        held_at_prompt,
        Some(0),
        "a lock was held while the prompt waited"
    );
    assert_eq!(locks(&path), 1);
    let rounds = probe.rounds();
    assert!(exactly(&rounds[0], &first_round()), "{rounds:?}");
    assert!(
        exactly(&rounds[1], &[("delete", FileKind::Lock)]),
        "{rounds:?}"
    );
    // The lock taken after the prompt: its record and listing in one round.
    assert!(
        exactly(
            &rounds[2],
            &[("get", FileKind::Key), LOCK_PUT, LOCKS_LISTED]
        ),
        "{rounds:?}"
    );
    lock.release().unwrap();
}

/// A reader's open that listed the snapshots beside its catch-up (restore, dump, ls) finds
/// `latest`, and a snapshot by id prefix, in that listing: no request after the open, where
/// it listed the snapshots again and read the one it found (two rounds after the open).
#[test]
fn a_reader_finds_its_snapshot_in_the_listing_made_at_open() {
    let (tmp, path, cache) = plain();
    let src = tmp.path().join("src");
    let mut ids = Vec::new();
    for n in 0..2 {
        let repo = Repository::open_in_cache(Arc::new(LocalBackend::new(&path)), &cache)
            .unwrap()
            .open_index()
            .unwrap();
        let res = backup_files(&repo, &src, &files([("f", text(5_000, n))]), n, &me()).unwrap();
        ids.push(res.snapshot_id);
    }
    for empty_cache in [false, true] {
        let cache = if empty_cache {
            tmp.path().join("empty")
        } else {
            cache.clone()
        };
        let probe = probed(&path);
        let repo = Repository::open_in_cache(probe.clone(), &cache)
            .unwrap()
            .listing_snapshots_at_open()
            .open_index()
            .unwrap();
        let after_open = probe.count();
        let filter = dedelta_store::repository::snapshot_filter::SnapshotFilter::default();
        let (latest, _) = repo.find_snapshot_filtered("latest", &filter).unwrap();
        assert_eq!(latest, ids[1]);
        let hex = ids[0].to_hex();
        let (first, snap) = repo.find_snapshot(&hex[..8]).unwrap();
        assert_eq!(first, ids[0]);
        assert_eq!(snap.summary.files, 1);
        assert!(
            matches!(
                repo.find_snapshot("ffffffffffff"),
                Err(Error::SnapshotNotFound(_))
            ) || ids.iter().any(|i| i.to_hex().starts_with("ffffffffffff"))
        );
        assert_eq!(
            probe.count(),
            after_open,
            "requests after the open (empty cache: {empty_cache}): {:?}",
            probe.rounds()
        );
    }
}

/// The texts of the backups below (three of 120,000 bytes, edited by version).
const THREE_TEXTS: [(&str, usize); 3] = [("a", 120_000), ("b", 120_000), ("c", 120_000)];

/// Opens a client with cache `cache` as on an object store: reads as round trips, 16 in
/// flight, index files written if `index_files`.
fn object_store_client(
    cache: &std::path::Path,
    index_files: bool,
) -> impl Fn(Arc<dyn Backend>) -> dedelta_store::IndexedRepository + '_ {
    move |backend| {
        Repository::open_in_cache(backend, cache)
            .unwrap()
            .with_round_trips(true)
            .with_index_files(index_files)
            .with_reads_in_flight(16)
            .open_index()
            .unwrap()
    }
}

/// The first backup of [`THREE_TEXTS`] from `src` into the repository at `path`, through a
/// client `open` makes; returns that client.
fn first_backup(
    open: &impl Fn(Arc<dyn Backend>) -> dedelta_store::IndexedRepository,
    path: &std::path::Path,
    src: &std::path::Path,
) -> dedelta_store::IndexedRepository {
    let repo = open(Arc::new(LocalBackend::new(path)));
    let first = crate::support::edited_texts(0, 0, &THREE_TEXTS);
    backup_files(&repo, src, &first, 0, &me()).unwrap();
    repo
}

/// A backup on an object store reads the metadata of its parent's containers (the tree's,
/// and the others its snapshot names, up to the reads in flight) in one round, before its
/// tree walk: the delta stage then finds them cached, where it read each alone as it met its
/// bases (backup 2 of the SQLAlchemy trace: three metadata reads, one after another).
#[test]
fn a_backup_reads_its_parents_container_metadata_in_one_round() {
    let (tmp, path, cache) = plain();
    let src = tmp.path().join("src");
    let texts = THREE_TEXTS;
    let open = object_store_client(&cache, false);
    drop(first_backup(&open, &path, &src));
    let parent_containers = LocalBackend::new(&path)
        .list(FileKind::Container)
        .unwrap()
        .len();
    assert!(parent_containers >= 3, "{parent_containers} containers");
    let probe = probed(&path);
    let repo = open(probe.clone());
    let res = backup_files(
        &repo,
        &src,
        &crate::support::edited_texts(1, 40, &texts),
        1,
        &me(),
    )
    .unwrap();
    assert!(res.metrics.bases.read_back > 0, "{:?}", res.metrics.bases);
    let rounds = probe.rounds();
    let with_meta: Vec<&Vec<Request>> = rounds
        .iter()
        .filter(|r| r.contains(&("get_tail", FileKind::Container)))
        .collect();
    assert_eq!(with_meta.len(), 1, "{rounds:?}");
    let metas = with_meta[0]
        .iter()
        .filter(|r| **r == ("get_tail", FileKind::Container))
        .count();
    assert_eq!(metas, parent_containers, "{rounds:?}");
}

/// Where reads are round trips and index files are written (an object store), a client
/// keeps the metadata of the containers it writes in its cache directory: its next backup
/// reads its parent's tree and delta bases without a single request for container metadata
/// (on the Garage benchmark, two rounds before the tree's first region). A damaged cache file
/// is read from the container instead.
#[test]
fn a_backup_reads_no_container_metadata_its_client_wrote() {
    let (tmp, path, cache) = plain();
    let src = tmp.path().join("src");
    let texts = THREE_TEXTS;
    let open = object_store_client(&cache, true);
    let repo = first_backup(&open, &path, &src);
    let cached = repo.meta_cache().expect("a metadata cache");
    drop(repo);
    let containers: Vec<String> = LocalBackend::new(&path)
        .list(FileKind::Container)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(containers.len() >= 3, "{containers:?}");
    for v in 1..3u64 {
        if v == 2 {
            // A damaged file costs its container's metadata read, nothing else.
            let id =
                dedelta_store::format::container::ContainerId::from_hex(&containers[0]).unwrap();
            let file = cache_file(&cache, &containers[0]);
            let mut bytes = std::fs::read(&file).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
            std::fs::write(&file, &bytes).unwrap();
            assert!(cached.get(&id).is_none());
        }
        let probe = probed(&path);
        let repo = open(probe.clone());
        let res = backup_files(
            &repo,
            &src,
            &crate::support::edited_texts(v, 40, &texts),
            v,
            &me(),
        )
        .unwrap();
        assert!(res.metrics.bases.read_back > 0, "{:?}", res.metrics.bases);
        let metas: usize = probe
            .rounds()
            .iter()
            .map(|r| {
                r.iter()
                    .filter(|q| **q == ("get_tail", FileKind::Container))
                    .count()
            })
            .sum();
        let want = usize::from(v == 2);
        assert!(
            metas <= want,
            "backup {v}: {metas} metadata reads: {:?}",
            probe.rounds()
        );
    }
}

/// The metadata cache file of container `name` under cache root `root`.
fn cache_file(root: &std::path::Path, name: &str) -> std::path::PathBuf {
    let repo_dir = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.join(dedelta_store::client::meta_cache::META_CACHE_DIR)
                .is_dir()
        })
        .expect("a repository cache directory with metadata");
    repo_dir
        .join(dedelta_store::client::meta_cache::META_CACHE_DIR)
        .join(name)
}

/// A backup whose client wrote its parent finds the parent's tree in the local tree cache:
/// it reads no region of the repository for it, nor for the new tree's delta bases (the
/// parent's tree chunks). Here every file is written again with the same bytes, so that the
/// data chunks are duplicates and only the tree (its times) changes: the backup reads no
/// container at all. A damaged cache file is not used: the tree is read from the repository.
#[test]
fn a_backup_reads_no_parent_tree_its_client_wrote() {
    use dedelta_store::backend::wrap::metered::MeteredBackend;
    let (tmp, path, cache) = plain();
    let src = tmp.path().join("src");
    let open = object_store_client(&cache, true);
    let backup_with = |repo: &dedelta_store::IndexedRepository, n: u64, from_repo: bool| {
        crate::support::write_files(&src, &crate::support::edited_texts(0, 0, &THREE_TEXTS));
        crate::support::locked(repo, &me(), |lock| {
            let mut opts =
                crate::support::backup_options(vec![src.clone()], crate::support::time_of(n));
            opts.cache_dir = Some(cache.clone());
            opts.sources.parent_tree_from_repository = from_repo;
            crate::support::backup_with(repo, lock, opts)
        })
        .unwrap()
    };
    let backup = |repo: &dedelta_store::IndexedRepository, n: u64| backup_with(repo, n, false);
    drop(backup(&open(Arc::new(LocalBackend::new(&path))), 0));
    let trees = || {
        let repo_dir = std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .find(|e| e.path().join("trees").is_dir())
            .expect("a tree cache")
            .path();
        std::fs::read_dir(repo_dir.join("trees"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect::<Vec<_>>()
    };
    for n in 1..4u64 {
        if n == 3 {
            for file in trees() {
                let mut bytes = std::fs::read(&file).unwrap();
                bytes[20] ^= 1;
                std::fs::write(&file, &bytes).unwrap();
            }
        }
        let metered = Arc::new(MeteredBackend::new(Arc::new(LocalBackend::new(&path))));
        let repo = open(metered.clone());
        let res = backup(&repo, n);
        assert!(res.summary.files_changed > 0, "{:?}", res.summary);
        let c = metered.counts(FileKind::Container);
        let reads = c.gets + c.range_gets;
        if n < 3 {
            assert_eq!(reads, 0, "backup {n}: {c:?}, bases {:?}", res.metrics.bases);
        } else {
            assert!(reads > 0, "backup {n}: the damaged tree was used: {c:?}");
        }
    }
    // Only the newest trees stay.
    assert!(trees().len() <= dedelta_store::client::tree_cache::TREE_CACHE_FILES);
    // The eval's backups read the parent's tree from the repository whatever the cache holds
    // (`parent_tree_from_repository`).
    let metered = Arc::new(MeteredBackend::new(Arc::new(LocalBackend::new(&path))));
    drop(backup(&open(metered.clone()), 4));
    assert_eq!(metered.counts(FileKind::Container).range_gets, 0);
    let metered = Arc::new(MeteredBackend::new(Arc::new(LocalBackend::new(&path))));
    drop(backup_with(&open(metered.clone()), 5, true));
    let c = metered.counts(FileKind::Container);
    assert!(c.gets + c.range_gets > 0, "{c:?}");
}

/// On an object store a backup predicts DupAdj's bases as chunks enter its look-ahead window
/// and reads their regions in the background (backup/base_ahead.rs): requests made ahead,
/// and exactly what it stores without them (the same sources backed up into two
/// repositories, one read as an object store: the same containers).
#[test]
fn an_object_store_backup_reads_its_bases_ahead_and_stores_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let repos: Vec<_> = [false, true]
        .into_iter()
        .map(|round_trips| {
            let path = tmp.path().join(format!("repo-{round_trips}"));
            let cache = tmp.path().join(format!("cache-{round_trips}"));
            drop(
                Repository::init_local_with_cache(
                    &path,
                    config(1, DeltaConfig::recommended()),
                    &cache,
                )
                .unwrap(),
            );
            let repo = Repository::open_in_cache(Arc::new(LocalBackend::new(&path)), &cache)
                .unwrap()
                .with_round_trips(round_trips)
                .with_reads_in_flight(16)
                .open_index()
                .unwrap();
            (round_trips, repo)
        })
        .collect();
    for v in 0..3u64 {
        crate::support::write_files(&src, &crate::support::edited_texts(v, 40, &THREE_TEXTS));
        let mut stored = Vec::new();
        for (round_trips, repo) in &repos {
            let res = crate::support::backup_dir(repo, &src, v, &me()).unwrap();
            let b = res.metrics.bases;
            if v > 0 {
                assert!(b.read_back > 0, "v{v}: {b:?}");
                assert_eq!(b.requests_ahead > 0, *round_trips, "v{v}: {b:?}");
            }
            let names = crate::support::sorted_names(repo.backend().as_ref(), FileKind::Container);
            stored.push((res.summary.bytes_added, names));
        }
        assert_eq!(stored[0], stored[1], "v{v}");
    }
}

/// `backup_then_release` (the CLI's backup) deletes its lock as the backup's last write,
/// after the snapshot that needs what it wrote, and leaves none; a backup that fails leaves
/// none either. (It deletes it without waiting for the local base cache's save, which is
/// the client's own: on an object store the deletion is a round trip.)
#[test]
fn a_backup_releases_its_lock_after_its_snapshot() {
    use dedelta_store::backend::wrap::fault::{FaultBackend, FaultPlan};
    use dedelta_store::commands::backup::{backup_then_release, Workers};
    use dedelta_store::progress::NoProgress;
    use dedelta_store::repository::lock::list_locks;
    let (tmp, path, cache) = plain();
    // The fault wrapper without faults: its log of the writes (and deletes), in order.
    let probe = Arc::new(FaultBackend::new(Arc::new(LocalBackend::new(&path))));
    let repo = Repository::open_in_cache(probe.clone(), &cache)
        .unwrap()
        .open_index()
        .unwrap();
    let src = tmp.path().join("src");
    let workers = Workers::new(2).unwrap();
    for n in 0..2 {
        write_files(&src, &files([("f", text(300_000, n))]));
        probe.arm(FaultPlan::none());
        let lock = repo.lock(&me()).unwrap();
        let name = lock.name().to_string();
        let opts = backup_options(vec![src.clone()], time_of(n));
        let (result, released) =
            backup_then_release(&repo, lock, opts, &workers, &NoProgress).unwrap();
        released.unwrap();
        let log = probe.write_log();
        assert_eq!(log.last(), Some(&(FileKind::Lock, name)), "{log:?}");
        let snapshot = log
            .iter()
            .rposition(|(k, _)| *k == FileKind::Snapshot)
            .expect("the snapshot was written");
        assert_eq!(snapshot, log.len() - 2, "{log:?}");
        assert!(list_locks(repo.backend().as_ref()).unwrap().is_empty());
        assert!(!result.skipped);
    }
    let lock = repo.lock(&me()).unwrap();
    let nothing = backup_options(vec![], time_of(2));
    assert!(backup_then_release(&repo, lock, nothing, &workers, &NoProgress).is_err());
    assert!(list_locks(repo.backend().as_ref()).unwrap().is_empty());
}
