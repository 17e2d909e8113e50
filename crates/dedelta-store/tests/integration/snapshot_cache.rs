//! The client's snapshot cache (issue 20): a backup's listing reads only the snapshot files
//! it has not seen, however many there are; a damaged cache entry is read again from the
//! repository, never believed; a forgotten snapshot drops out of the listing and the cache;
//! the parent a backup chooses is the one the repository's own listing gives.

use crate::intercept::{Hooks, Intercept};
use crate::support::*;
use dedelta_store::backend::wrap::metered::{Direction, Purpose};
use dedelta_store::backend::{Backend, FileKind, Result as BackendResult};
use dedelta_store::client::cache::repo_dir;
use dedelta_store::client::snapshot_cache::{SnapshotCache, SNAPSHOT_CACHE_FILE};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::snapshot::{Snapshot, SnapshotId};
use dedelta_store::repository::snapshots;
use dedelta_store::IndexedRepository;
use std::path::{Path, PathBuf};

/// Snapshot files (and dense lists) read so far.
fn snapshot_reads(repo: &IndexedRepository) -> u64 {
    let c = repo.io_counts().expect("metered");
    c.get(Purpose::Snapshot, Direction::Read).requests
}

/// The repository's client cache directory.
fn cache_dir(repo: &IndexedRepository, path: &Path) -> PathBuf {
    repo_dir(&cache_root_for(path), &repo.config().id).unwrap()
}

/// Snapshots as (id, file bytes).
type Listed = Vec<(String, Vec<u8>)>;

/// The listing through the cache, and what the repository's own listing (no cache) gives:
/// they must be the same.
fn listings(repo: &IndexedRepository) -> (Listed, Listed) {
    let flat = |l: snapshots::SnapshotList| {
        l.snapshots
            .into_iter()
            .map(|(id, s)| (id.to_hex(), s.to_bytes()))
            .collect::<Vec<_>>()
    };
    (
        flat(repo.snapshots().unwrap()),
        flat(snapshots::list(repo.backend().as_ref()).unwrap()),
    )
}

/// A backup's snapshot reads do not grow with the number of snapshots: the 2nd, 3rd and 12th
/// read the same (nothing: the cache holds the snapshots listed before and each backup adds
/// its own), and so does a listing.
#[test]
fn snapshot_reads_stay_constant_as_snapshots_grow() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let repo = metered_repo(&path, DeltaConfig::default());
    let src = tmp.path().join("src");
    let mut per_backup = Vec::new();
    for n in 0..12 {
        let before = snapshot_reads(&repo);
        backup_files(&repo, &src, &files([("f", text(2_000, n))]), n, &me()).unwrap();
        per_backup.push(snapshot_reads(&repo) - before);
    }
    assert_eq!(per_backup[1], per_backup[11], "{per_backup:?}");
    assert_eq!(per_backup[2], per_backup[11], "{per_backup:?}");
    let (cached, real) = listings(&repo);
    assert_eq!(cached.len(), 12);
    assert_eq!(cached, real);
    let before = snapshot_reads(&repo);
    assert_eq!(repo.snapshots().unwrap().snapshots.len(), 12);
    assert_eq!(
        snapshot_reads(&repo),
        before,
        "a warm listing reads no snapshot file"
    );
    assert_eq!(SnapshotCache::open(&cache_dir(&repo, &path)).len(), 12);
}

/// A cache entry whose bytes were damaged is not believed: that snapshot is read again from
/// the repository (one read), the listing is the repository's, and the cache is whole again
/// after. A cache file cut short or replaced by garbage is a cold cache, nothing worse.
#[test]
fn a_damaged_cache_entry_is_read_again_from_the_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let repo = metered_repo(&path, DeltaConfig::default());
    let src = tmp.path().join("src");
    for n in 0..4 {
        backup_files(&repo, &src, &files([("f", text(2_000, n))]), n, &me()).unwrap();
    }
    repo.snapshots().unwrap();
    let dir = cache_dir(&repo, &path);
    let file = dir.join(SNAPSHOT_CACHE_FILE);
    // The last entry's body ends the file.
    let mut bad = std::fs::read(&file).unwrap();
    let at = bad.len() - 5;
    bad[at] ^= 0x20;
    std::fs::write(&file, &bad).unwrap();
    let before = snapshot_reads(&repo);
    let (cached, real) = listings(&repo);
    assert_eq!(cached, real);
    assert_eq!(cached.len(), 4);
    assert_eq!(
        snapshot_reads(&repo) - before,
        1 + 4,
        "one read again (+ the real listing)"
    );
    assert_eq!(
        SnapshotCache::open(&dir).len(),
        4,
        "the cache is whole again"
    );
    let before = snapshot_reads(&repo);
    repo.snapshots().unwrap();
    assert_eq!(snapshot_reads(&repo), before);
    let good = std::fs::read(&file).unwrap();
    for garbage in [&good[..good.len() / 2], b"not a cache".as_slice()] {
        std::fs::write(&file, garbage).unwrap();
        let (cached, real) = listings(&repo);
        assert_eq!(cached, real);
        assert_eq!(SnapshotCache::open(&dir).len(), 4);
    }
}

/// A metered repository at `path` with three snapshots listed through its cache, then the
/// middle one forgotten: the repository, the three as listed, the forgotten one's id.
fn three_snapshots_the_middle_forgotten(
    path: &Path,
) -> (IndexedRepository, Vec<(SnapshotId, Snapshot)>, String) {
    let repo = metered_repo(path, DeltaConfig::default());
    let src = path.with_extension("src");
    for n in 0..3 {
        backup_files(&repo, &src, &files([("f", text(2_000, n))]), n, &me()).unwrap();
    }
    let listed = repo.snapshots().unwrap().snapshots;
    let gone = listed[1].0.to_hex();
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, std::slice::from_ref(&gone))
    })
    .unwrap();
    (repo, listed, gone)
}

/// A forgotten snapshot is gone from the listing and from the cache, though the cache held
/// it; the others are still served from the cache.
#[test]
fn a_forgotten_snapshot_drops_out_of_the_cached_listing() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let (repo, listed, gone) = three_snapshots_the_middle_forgotten(&path);
    let before = snapshot_reads(&repo);
    let ids: Vec<String> = repo
        .snapshots()
        .unwrap()
        .snapshots
        .iter()
        .map(|(id, _)| id.to_hex())
        .collect();
    assert_eq!(
        snapshot_reads(&repo),
        before,
        "the others come from the cache"
    );
    assert_eq!(ids, vec![listed[0].0.to_hex(), listed[2].0.to_hex()]);
    let cache = SnapshotCache::open(&cache_dir(&repo, &path));
    assert_eq!(cache.len(), 2);
    assert!(cache.get(&listed[1].0).is_none());
    assert!(repo.find_snapshot(&gone).is_err());
}

/// The parent comes from the cached listing as it would from the repository's: with two
/// sources backed up in turn, each backup compares with the last one of its own paths (its
/// files are not read again), and `latest` is the newest.
#[test]
fn the_parent_chosen_from_the_cache_is_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let repo = init_repo(&path, config(1, DeltaConfig::default()));
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write_files(&a, &files([("x", text(30_000, 1))]));
    write_files(&b, &files([("y", text(40_000, 2))]));
    let backup = |src: &Path, n: u64| backup_dir(&repo, src, n, &me()).unwrap();
    for n in 0..2 {
        backup(&a, 2 * n);
        backup(&b, 2 * n + 1);
    }
    let (cached, real) = listings(&repo);
    assert_eq!(cached, real);
    let again_a = backup(&a, 10);
    assert_eq!(again_a.summary.files_unmodified, 1, "{:?}", again_a.summary);
    let again_b = backup(&b, 11);
    assert_eq!(again_b.summary.files_unmodified, 1, "{:?}", again_b.summary);
    let (id, _) = repo.find_snapshot("latest").unwrap();
    assert_eq!(id, again_b.snapshot_id);
}

/// A listing that still names a deleted snapshot, as an object store's listing can for a
/// moment after another client's `forget` (seen on a Garage cluster after a node restart).
struct LaggingListing {
    deleted: String,
}

impl Hooks for LaggingListing {
    fn listing(
        &self,
        kind: FileKind,
        list: &mut dyn FnMut() -> BackendResult<Vec<(String, u64)>>,
    ) -> BackendResult<Vec<(String, u64)>> {
        let mut l = list()?;
        if kind == FileKind::Snapshot {
            l.push((self.deleted.clone(), 1));
            l.sort();
        }
        Ok(l)
    }
}

/// A snapshot the listing names but that is gone when read was removed after the listing:
/// the repository's own listing (what `check` reads) leaves it out instead of reporting it
/// unreadable. (The cached listing believes the names it is given: a cached copy of such a
/// snapshot is listed until the listing catches up, as restic's cache does.)
#[test]
fn a_snapshot_listed_but_gone_is_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let (repo, listed, gone) = three_snapshots_the_middle_forgotten(&path);
    let lagging = Intercept {
        inner: repo.backend().as_ref(),
        hooks: LaggingListing {
            deleted: gone.clone(),
        },
    };
    assert!(lagging
        .list_names(FileKind::Snapshot)
        .unwrap()
        .contains(&gone));
    let l = snapshots::list(&lagging).unwrap();
    assert!(l.unreadable.is_empty(), "{:?}", l.unreadable);
    let ids: Vec<String> = l.snapshots.iter().map(|(id, _)| id.to_hex()).collect();
    assert_eq!(ids, vec![listed[0].0.to_hex(), listed[2].0.to_hex()]);
}
