//! Index files (`indexes/`): written by every backup, used by a client with an empty or
//! stale cache instead of reading each container's metadata, ignored where stale or damaged,
//! consolidated by prune, sealed in an encrypted repository.

use crate::intercept::{Hooks, Intercept};
use crate::support::{
    backup_files, config, files, forget_ids, init_repo, locked, me, noise, prune_with, read_files,
    restore_to, restored_root, run_check, text, Files,
};
use dedelta_store::backend::local::LocalBackend;
use dedelta_store::backend::wrap::metered::{MeteredBackend, Purpose};
use dedelta_store::backend::{Backend, FileKind};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::container::ContainerId;
use dedelta_store::format::index_file;
use dedelta_store::{IndexedRepository, Repository};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let repo = root.join("repo");
        drop(init_repo(&repo, config(1, DeltaConfig::recommended())));
        Setup {
            _tmp: tmp,
            root,
            repo,
        }
    }

    fn cache(&self, who: &str) -> PathBuf {
        self.root.join(format!("cache-{who}"))
    }

    /// Opens as client `who`, every request counted by the returned meter.
    fn open_metered(&self, who: &str) -> (IndexedRepository, Arc<MeteredBackend>) {
        let meter = Arc::new(MeteredBackend::new(Arc::new(LocalBackend::new(&self.repo))));
        let repo = Repository::open_in_cache(meter.clone(), &self.cache(who))
            .unwrap()
            .with_index_files(true)
            .open_index()
            .unwrap();
        (repo, meter)
    }

    fn open(&self, who: &str) -> IndexedRepository {
        Repository::open_local_with_cache(&self.repo, &self.cache(who))
            .unwrap()
            .with_index_files(true)
            .open_index()
            .unwrap()
    }

    fn backup(&self, who: &str, files: &Files, n: u64) -> String {
        let repo = self.open(who);
        let src = self.root.join("src");
        if src.exists() {
            std::fs::remove_dir_all(&src).unwrap();
        }
        backup_files(&repo, &src, files, n, &me())
            .unwrap()
            .snapshot_id
            .to_hex()
    }

    fn raw(&self) -> LocalBackend {
        LocalBackend::new(&self.repo)
    }

    fn index_files(&self) -> Vec<String> {
        crate::support::sorted_names(&self.raw(), FileKind::Index)
    }

    fn containers(&self) -> BTreeSet<ContainerId> {
        self.raw()
            .list(FileKind::Container)
            .unwrap()
            .iter()
            .filter_map(|(n, _)| ContainerId::from_hex(n))
            .collect()
    }

    /// The containers the index files cover.
    fn covered(&self) -> BTreeSet<ContainerId> {
        let raw = self.raw();
        let mut out = BTreeSet::new();
        for name in self.index_files() {
            let bytes = raw.get(FileKind::Index, &name).unwrap();
            for (rec, _) in index_file::decode(&bytes, "test").unwrap() {
                out.insert(rec.id);
            }
        }
        out
    }

    fn restores(&self, who: &str, id: &str, want: &Files) {
        let repo = self.open(who);
        let target = self.root.join(format!("out-{who}-{}", &id[..8]));
        let (_, snap) = repo.find_snapshot(id).unwrap();
        let st = restore_to(&repo, &snap, &target).unwrap();
        assert!(st.errors.is_empty(), "{:?}", st.errors);
        assert_eq!(
            &read_files(&restored_root(&target, &self.root.join("src"))),
            want
        );
    }
}

fn version(v: u64) -> Files {
    files([
        ("a.txt", text(120_000, 1 + v)),
        ("b.txt", noise(100_000, 100 + v)),
    ])
}

/// Every chunk's location in `repo`'s index, to compare two clients.
fn all_locations(repo: &IndexedRepository) -> Vec<String> {
    let mut out = Vec::new();
    repo.index()
        .for_each(|id, loc| out.push(format!("{id} {} {}", loc.container, loc.entry)))
        .unwrap();
    out.sort();
    out
}

/// Each backup writes one index file covering the containers it wrote; a client with an
/// empty cache builds its index from them without a single container request, and gets the
/// index a client reading every container's metadata gets.
#[test]
fn a_fresh_client_reads_index_files_not_containers() {
    let s = Setup::new();
    let a = s.backup("a", &version(1), 1);
    assert_eq!(s.index_files().len(), 1);
    let b = s.backup("a", &version(2), 2);
    assert_eq!(s.index_files().len(), 2);
    assert!(s.containers().len() > 4, "several containers");
    assert_eq!(s.covered(), s.containers());

    let (fresh, meter) = s.open_metered("fresh");
    assert_eq!(
        meter.meter().kind(FileKind::Container).requests(),
        1,
        "the listing only"
    );
    assert_eq!(
        meter.meter().kind(FileKind::Index).requests(),
        3,
        "a listing, two files"
    );
    let from_files = all_locations(&fresh);
    drop(fresh);
    // The same index from the containers' own metadata (index files gone).
    for n in s.index_files() {
        s.raw().delete(FileKind::Index, &n).unwrap();
    }
    let (slow, meter) = s.open_metered("slow");
    assert!(meter.meter().kind(FileKind::Container).requests() > s.containers().len() as u64);
    assert_eq!(all_locations(&slow), from_files);
    drop(slow);
    s.restores("fresh", &a, &version(1));
    s.restores("fresh", &b, &version(2));
}

/// A client with an empty cache restores without reading any container's metadata: the
/// index files its open read hold every container's (issue 19: on an object store a
/// restore read each of them again, a suffix and a range request per container, some on
/// its locating thread one after another). The same where reads are round trips (regions
/// read ahead) and where they are not.
#[test]
fn a_fresh_client_restores_without_reading_container_metadata() {
    let s = Setup::new();
    s.backup("a", &version(1), 1);
    let b = s.backup("a", &version(2), 2);
    for round_trips in [false, true] {
        let who = format!("fresh-{round_trips}");
        let repo = Repository::open_local_with_cache(&s.repo, &s.cache(&who))
            .unwrap()
            .with_index_files(true)
            .with_round_trips(round_trips)
            .metered()
            .open_index()
            .unwrap();
        let before = repo.io_counts().unwrap();
        let target = s.root.join(format!("out-{who}"));
        let (_, snap) = repo.find_snapshot(&b).unwrap();
        let st = restore_to(&repo, &snap, &target).unwrap();
        assert!(st.errors.is_empty(), "{:?}", st.errors);
        assert_eq!(
            read_files(&restored_root(&target, &s.root.join("src"))),
            version(2)
        );
        let io = repo.io_counts().unwrap().since(&before);
        assert!(io.purpose(Purpose::ChunkData).requests > 0, "{io:?}");
        assert_eq!(
            io.purpose(Purpose::ContainerMeta).requests,
            0,
            "round trips {round_trips}: {io:?}"
        );
    }
}

/// A client catching up reads only the index files written since it last looked, and no
/// container's metadata.
#[test]
fn a_catch_up_reads_only_new_index_files() {
    let s = Setup::new();
    s.backup("a", &version(1), 1);
    drop(s.open("b"));
    s.backup("a", &version(2), 2);
    let id = s.backup("a", &version(3), 3);
    let before = s.containers().len();
    let (b, meter) = s.open_metered("b");
    assert_eq!(
        meter.meter().kind(FileKind::Container).requests(),
        1,
        "the listing only"
    );
    assert_eq!(
        meter.meter().kind(FileKind::Index).requests(),
        3,
        "a listing, two new files"
    );
    assert_eq!(s.containers().len(), before);
    drop(b);
    // Its own backup's index file is not read again by the next catch-up.
    s.backup("b", &version(4), 4);
    s.backup("a", &version(5), 5);
    let (_b, meter) = s.open_metered("b");
    assert_eq!(
        meter.meter().kind(FileKind::Index).requests(),
        2,
        "a listing, a's new file"
    );
    s.restores("b", &id, &version(3));
}

/// Records of containers a prune deleted (index files put back from before the prune, as an
/// older build's prune would leave them) are ignored: a fresh client's index names only
/// containers that exist, check passes with a notice, and every snapshot restores.
#[test]
fn stale_records_of_pruned_containers_are_ignored() {
    let s = Setup::new();
    let old = s.backup("a", &version(1), 1);
    let keep = s.backup("a", &files([("c.txt", text(150_000, 77))]), 2);
    let saved: Vec<(String, Vec<u8>)> = s
        .index_files()
        .into_iter()
        .map(|n| {
            let b = s.raw().get(FileKind::Index, &n).unwrap();
            (n, b)
        })
        .collect();
    let before = s.containers();
    let repo = s.open("a");
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, &[old])?;
        prune_with(&repo, lock, 0.0, false)
    })
    .unwrap();
    drop(repo);
    assert!(
        s.containers().len() < before.len(),
        "the prune deleted containers"
    );
    for (n, b) in &saved {
        s.raw().put(FileKind::Index, n, b).unwrap();
    }
    let fresh = s.open("fresh");
    let listed = s.containers();
    fresh
        .index()
        .for_each(|_, loc| assert!(listed.contains(&loc.container)))
        .unwrap();
    let report = run_check(&fresh, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(
        report.notices.iter().any(|n| n.contains("no longer exist")),
        "{:?}",
        report.notices
    );
    drop(fresh);
    s.restores("fresh", &keep, &files([("c.txt", text(150_000, 77))]));
}

/// A damaged index file is not trusted: a fresh client says so in a notice and reads its
/// containers' metadata instead, and check reports it.
#[test]
fn a_damaged_index_file_falls_back_to_container_metadata() {
    let s = Setup::new();
    let id = s.backup("a", &version(1), 1);
    let name = s.index_files().pop().unwrap();
    let path = s.repo.join("indexes").join(&name);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();
    let (fresh, meter) = s.open_metered("fresh");
    let notices = fresh.take_notices();
    assert!(
        notices
            .iter()
            .any(|n| n.contains(&name) && n.contains("not used")),
        "{notices:?}"
    );
    assert!(meter.meter().kind(FileKind::Container).requests() > s.containers().len() as u64);
    assert_eq!(
        fresh.index().known_containers().unwrap().len(),
        s.containers().len()
    );
    let report = run_check(&fresh, false).unwrap();
    assert!(
        report.problems.iter().any(|p| p.message.contains(&name)),
        "{:?}",
        report.problems
    );
    // What `repair index` (and prune) then does: the damaged file replaced, check clean.
    let st = dedelta_store::repository::index_files::consolidate(&fresh).unwrap();
    // The same records make the same bytes: the good file is written under the damaged
    // one's name (names are content hashes), over it.
    assert_eq!((st.written, st.deleted), (1, 0));
    assert_eq!(s.index_files(), vec![name.clone()]);
    assert!(
        st.notices.iter().any(|n| n.contains(&name)),
        "{:?}",
        st.notices
    );
    assert_eq!(s.covered(), s.containers());
    let report = run_check(&fresh, false).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    drop(fresh);
    s.restores("fresh", &id, &version(1));
}

/// Prune replaces every index file with one covering exactly the containers left.
#[test]
fn prune_consolidates_the_index_files() {
    let s = Setup::new();
    let ids: Vec<String> = (1..=3)
        .map(|v| s.backup("a", &version(v * 10), v))
        .collect();
    assert_eq!(s.index_files().len(), 3);
    let repo = s.open("a");
    let st = locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, &ids[..1])?;
        prune_with(&repo, lock, 0.0, false)
    })
    .unwrap();
    drop(repo);
    assert_eq!(st.index_files.written, 1);
    // The three backups' files, and the one of the prune's own copies if it made some.
    assert!(st.index_files.deleted >= 3);
    assert_eq!(s.index_files().len(), 1);
    assert_eq!(s.covered(), s.containers());
    let (fresh, meter) = s.open_metered("fresh");
    assert_eq!(meter.meter().kind(FileKind::Container).requests(), 1);
    let report = run_check(&fresh, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    drop(fresh);
    s.restores("fresh", &ids[2], &version(30));
}

/// In an encrypted repository index files are sealed like every other object (no plaintext
/// magic, no container id on disk), and a fresh client with the password uses them.
#[test]
fn index_files_are_sealed_in_an_encrypted_repository() {
    use dedelta_store::crypto::{KdfParams, KeyOrigin};
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let cfg = config(1, DeltaConfig::recommended());
    let repo = Repository::init_local_encrypted(
        &path,
        cfg,
        &tmp.path().join("cache-a"),
        "pw",
        KdfParams::insecure_for_tests(),
        &KeyOrigin::default(),
    )
    .unwrap()
    .with_index_files(true)
    .open_index()
    .unwrap();
    let src = tmp.path().join("src");
    backup_files(&repo, &src, &version(1), 1, &me()).unwrap();
    drop(repo);
    let raw = LocalBackend::new(&path);
    let names: Vec<String> = raw
        .list(FileKind::Index)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names.len(), 1);
    let bytes = raw.get(FileKind::Index, &names[0]).unwrap();
    assert!(
        index_file::decode(&bytes, "x").is_err(),
        "sealed, not plain"
    );
    assert!(!contains(&bytes, index_file::INDEX_MAGIC));
    for (c, _) in raw.list(FileKind::Container).unwrap() {
        let id = ContainerId::from_hex(&c).unwrap();
        assert!(!contains(&bytes, &id.0), "a container id in the clear");
    }
    let meter = Arc::new(MeteredBackend::new(Arc::new(LocalBackend::new(&path))));
    let fresh = Repository::open_in_cache_unlocking(
        meter.clone(),
        &tmp.path().join("cache-b"),
        &mut || Ok(zeroize::Zeroizing::new("pw".to_string())),
    )
    .unwrap()
    .open_index()
    .unwrap();
    assert_eq!(meter.meter().kind(FileKind::Container).requests(), 1);
    assert!(fresh.index().len().unwrap() > 0);
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Each listing takes a while (a round trip); counts the most in flight at once.
#[derive(Default)]
struct SlowListings {
    now: std::sync::atomic::AtomicU64,
    most: std::sync::atomic::AtomicU64,
}

impl Hooks for SlowListings {
    fn round_trips(&self) -> bool {
        true
    }

    fn listing(
        &self,
        _kind: FileKind,
        list: &mut dyn FnMut() -> dedelta_store::backend::Result<Vec<(String, u64)>>,
    ) -> dedelta_store::backend::Result<Vec<(String, u64)>> {
        use std::sync::atomic::Ordering::SeqCst;
        let n = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(n, SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let out = list();
        self.now.fetch_sub(1, SeqCst);
        out
    }
}

/// Opening a repository lists its damage records and its containers at once (each listing
/// is a round trip on an object store; they do not depend on each other), and a rebuild
/// lists the index files with them.
#[test]
fn opening_lists_damage_records_and_containers_at_once() {
    let s = Setup::new();
    let v: Files = [("a.txt".to_string(), text(50_000, 1))]
        .into_iter()
        .collect();
    s.backup("a", &v, 0);

    let slow = Arc::new(Intercept {
        inner: Arc::new(LocalBackend::new(&s.repo)) as Arc<dyn Backend>,
        hooks: SlowListings::default(),
    });
    let opened = Repository::open_in_cache(slow.clone(), &s.root.join("cache-slow"))
        .unwrap()
        .open_index()
        .unwrap();
    assert_eq!(opened.snapshots().unwrap().snapshots.len(), 1);
    drop(opened);
    // An empty cache builds the index (a rebuild), a warm one catches up (a sync): both.
    for (how, want) in [("rebuilt", 3), ("caught up", 2)] {
        let most = slow.most.swap(0, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(most, want, "index {how}: {most} listings at once at most");
        drop(
            Repository::open_in_cache(slow.clone(), &s.root.join("cache-slow"))
                .unwrap()
                .open_index()
                .unwrap(),
        );
    }
}

/// A crash while a backup's last container and its index file are both being written (they
/// are written side by side): the index file is durable, the container is lost, and the
/// process writes nothing more.
#[derive(Default)]
struct CrashBesideIndexFile {
    state: std::sync::Mutex<CrashState>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct CrashState {
    containers_put: u32,
    index_written: bool,
    crashed: bool,
    lost: Option<String>,
}

impl Hooks for CrashBesideIndexFile {
    fn write(
        &self,
        kind: FileKind,
        name: &str,
        write: &mut dyn FnMut() -> dedelta_store::backend::Result<()>,
    ) -> dedelta_store::backend::Result<()> {
        let crash = || {
            Err(dedelta_store::backend::BackendError::io(
                format!("writing {name}"),
                std::io::Error::other("crashed"),
            ))
        };
        let mut st = self.state.lock().unwrap();
        if st.crashed {
            return crash();
        }
        match kind {
            FileKind::Index => {
                drop(st);
                write()?;
                self.state.lock().unwrap().index_written = true;
                self.changed.notify_all();
                Ok(())
            }
            FileKind::Container => {
                st.containers_put += 1;
                // Waits (a while) for the index file, which the backup writes beside this
                // PUT; then crashes, this container lost.
                let (mut st, _) = self
                    .changed
                    .wait_timeout_while(st, std::time::Duration::from_secs(5), |s| !s.index_written)
                    .unwrap();
                st.crashed = true;
                st.lost = Some(name.to_string());
                crash()
            }
            _ => {
                drop(st);
                write()
            }
        }
    }
}

/// A backup's last container and its index file are written side by side (one round trip
/// fewer before the snapshot): a crash that leaves the index file durable and the container
/// lost leaves a repository that opens (with an empty cache and with the old one), checks,
/// restores and takes the backup again; the record of the lost container is ignored until
/// the container exists.
#[test]
fn a_crash_between_the_last_container_and_its_index_file() {
    let s = Setup::new();
    let v1 = version(1);
    let a = s.backup("a", &v1, 1);
    let files_before = s.index_files();
    // Small enough for one container.
    let v2: Files = files([("c.txt", text(6_000, 9))]);

    let hooked = Arc::new(Intercept {
        inner: Arc::new(LocalBackend::new(&s.repo)) as Arc<dyn Backend>,
        hooks: CrashBesideIndexFile::default(),
    });
    let repo = Repository::open_in_cache(hooked.clone(), &s.cache("a"))
        .unwrap()
        .with_index_files(true)
        .open_index()
        .unwrap();
    let src = s.root.join("src");
    std::fs::remove_dir_all(&src).unwrap();
    let crashed = backup_files(&repo, &src, &v2, 2, &me());
    drop(repo);
    let st = hooked.state.lock().unwrap();
    assert!(crashed.is_err(), "the backup stopped at the crash");
    assert_eq!(st.containers_put, 1, "one container");
    assert!(
        st.index_written,
        "the index file was written beside the last container"
    );
    let lost = ContainerId::from_hex(st.lost.as_ref().unwrap()).unwrap();
    drop(st);
    assert!(!s.containers().contains(&lost));
    assert!(s.covered().contains(&lost), "the new index file names it");
    assert_eq!(s.index_files().len(), files_before.len() + 1);
    // The crashed process's lock is left behind; its process is gone after a real crash, so
    // the lock is stale: removed here as the next process would.
    for (name, _) in s.raw().list(FileKind::Lock).unwrap() {
        s.raw().delete(FileKind::Lock, &name).unwrap();
    }

    for who in ["a", "fresh"] {
        let repo = s.open(who);
        assert_eq!(repo.snapshots().unwrap().snapshots.len(), 1, "{who}");
        assert!(all_locations(&repo)
            .iter()
            .all(|l| !l.contains(&lost.to_hex())));
        let report = run_check(&repo, true).unwrap();
        assert!(report.problems.is_empty(), "{who}: {:?}", report.problems);
        drop(repo);
        s.restores(who, &a, &v1);
    }
    let b = s.backup("a", &v2, 2);
    s.restores("fresh", &b, &v2);
    s.restores("a", &a, &v1);
    let report = run_check(&s.open("fresh"), true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
