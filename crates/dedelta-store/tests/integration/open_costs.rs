//! A backup's fixed costs (issue 20): the damage records are listed once per command, and
//! the locking open takes the lock beside the key's derivation, releasing it again when the
//! password opens no key.

use crate::intercept::{Hooks, Intercept};
use crate::support::{backup_files, config, files, me, text};
use dedelta_store::backend::local::LocalBackend;
use dedelta_store::backend::{Backend, FileKind, Result as BackendResult};
use dedelta_store::crypto::{KdfParams, KeyOrigin};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::repository::lock::LockMode;
use dedelta_store::repository::open::LockRequest;
use dedelta_store::{Error, Repository};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let cache = tmp.path().join("cache");
    drop(
        Repository::init_local_with_cache(&path, config(1, DeltaConfig::recommended()), &cache)
            .unwrap(),
    );
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

/// An encrypted repository at `path` with password "pw".
fn encrypted(path: &std::path::Path, cache: &std::path::Path) {
    drop(
        Repository::init_local_encrypted(
            path,
            config(1, DeltaConfig::recommended()),
            cache,
            "pw",
            KdfParams::insecure_for_tests(),
            &KeyOrigin::default(),
        )
        .unwrap(),
    );
}

/// Lock objects in the repository at `path`.
fn locks(path: &std::path::Path) -> usize {
    LocalBackend::new(path).list(FileKind::Lock).unwrap().len()
}

/// The locking open holds its lock when it returns (a second exclusive one is refused), and
/// a wrong password leaves no lock behind.
#[test]
fn the_locking_open_takes_the_lock_and_gives_it_back_on_a_wrong_password() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let cache = tmp.path().join("cache");
    encrypted(&path, &cache);
    let loc = path.to_str().unwrap();
    let who = me();
    let exclusive = LockRequest {
        me: &who,
        mode: LockMode::Exclusive,
        retry_for: Duration::ZERO,
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
