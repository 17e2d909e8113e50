//! Several clients of one repository, each with its own chunk index in its own cache: what
//! one client adds, deletes or finds damaged, the others' indexes catch up with on open, so
//! that no backup deduplicates against a chunk that is gone or damaged.

use crate::support::{
    backup_files, config, files, forget_ids, init_repo, locked, me, prune_with, read_files,
    restore_to, restored_root, text, Files,
};
use dedelta_store::backend::FileKind;
use dedelta_store::commands::check;
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::snapshot::Snapshot;
use dedelta_store::progress::NoProgress;
use dedelta_store::{IndexedRepository, Repository};
use std::fs;
use std::path::PathBuf;

struct TwoClients {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
}

impl TwoClients {
    fn new() -> TwoClients {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let repo = root.join("repo");
        // Client "a" creates it; the tests open each client with its own cache root.
        drop(init_repo(&repo, config(1, DeltaConfig::recommended())));
        TwoClients {
            _tmp: tmp,
            root,
            repo,
        }
    }

    /// Opens the repository as client `who` (its cache in `<root>/cache-<who>`).
    fn open(&self, who: &str) -> IndexedRepository {
        Repository::open_local_with_cache(&self.repo, &self.root.join(format!("cache-{who}")))
            .unwrap()
            .open_index()
            .unwrap()
    }

    /// The source directory every client backs up (so that a snapshot restores to the same
    /// place whoever made it).
    fn src(&self) -> PathBuf {
        self.root.join("src")
    }

    /// Backs `files` up as client `who` (backup number `n`); returns the snapshot id.
    fn backup(&self, who: &str, files: &Files, n: u64) -> String {
        let repo = self.open(who);
        let src = self.src();
        if src.exists() {
            fs::remove_dir_all(&src).unwrap();
        }
        let res = backup_files(&repo, &src, files, n, &me()).unwrap();
        res.snapshot_id.to_hex()
    }

    /// Restores snapshot `id` as client `who`; returns the files restored.
    fn restore(&self, who: &str, id: &str) -> Files {
        let repo = self.open(who);
        let (_, snap): (_, Snapshot) = repo.find_snapshot(id).unwrap();
        let target = self.root.join(format!("out-{who}-{id}"));
        let st = restore_to(&repo, &snap, &target).unwrap();
        assert!(st.errors.is_empty(), "{:?}", st.errors);
        read_files(&restored_root(&target, &self.src()))
    }

    /// The file of the biggest container (data, not a tree).
    fn biggest_container(&self) -> PathBuf {
        let (name, _) = self
            .open("a")
            .backend()
            .list(FileKind::Container)
            .unwrap()
            .into_iter()
            .max_by_key(|(_, size)| *size)
            .unwrap();
        self.repo.join("containers").join(&name[..2]).join(&name)
    }

    fn check(&self, who: &str) -> check::CheckReport {
        let repo = self.open(who);
        locked(&repo, &me(), |lock| {
            check::check(&repo, Some(lock), true, "2026-01-01T00:00:00Z", &NoProgress)
        })
        .unwrap()
    }
}

/// The index is not in the repository: each client keeps its own under its cache root.
#[test]
fn the_index_lives_in_the_client_cache_not_in_the_repository() {
    let t = TwoClients::new();
    t.backup("a", &files([("f", text(50_000, 1))]), 0);
    assert!(!t.repo.join("index").exists());
    let a = t.open("a");
    assert!(a.index_path().starts_with(t.root.join("cache-a")));
    assert!(a.index_path().is_file());
}

/// Client b's index names chunks that client a's prune then deletes. When b opens the
/// repository again its index drops them, so b's next backup of the same content stores it
/// again instead of deduplicating against deleted containers, and restores.
#[test]
fn an_index_catches_up_with_containers_another_client_deleted() {
    let t = TwoClients::new();
    let v1 = files([("f", text(120_000, 2)), ("g", text(60_000, 3))]);
    let first = t.backup("a", &v1, 0);
    // b sees everything (a fresh index is rebuilt from the containers).
    t.backup("b", &files([("h", text(30_000, 4))]), 1);
    // a forgets the first snapshot and prunes: v1's chunks are deleted.
    let a = t.open("a");
    locked(&a, &me(), |lock| {
        forget_ids(&a, lock, std::slice::from_ref(&first))?;
        prune_with(&a, lock, 0.0, false)
    })
    .unwrap();
    drop(a);
    // b's index is rebuilt: a's prune kept only the copies a's index named (campaign seed
    // 1522224658, step 106: with b's index caught up by dropping entries of deleted
    // containers alone, chunks b knew elsewhere went missing).
    let b = t.open("b");
    let notices = b.take_notices();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("deleted by another client")),
        "{notices:?}"
    );
    drop(b);
    // b backs v1 up again: it must store it again, and restore it.
    let again = t.backup("b", &v1, 2);
    assert_eq!(t.restore("b", &again), v1);
    assert_eq!(t.restore("a", &again), v1);
    let report = t.check("a");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// Client b's backups land in containers client a's index has never seen: a takes them in
/// when it opens, deduplicates against them, and restores b's snapshots.
#[test]
fn an_index_catches_up_with_containers_another_client_added() {
    let t = TwoClients::new();
    t.backup("a", &files([("x", text(10_000, 5))]), 0);
    let shared = files([("f", text(150_000, 6))]);
    let by_b = t.backup("b", &shared, 1);
    let before: u64 = t
        .open("a")
        .backend()
        .list(FileKind::Container)
        .unwrap()
        .len() as u64;
    // a backs up the same content: nothing new to store.
    t.backup("a", &shared, 2);
    let after = t
        .open("a")
        .backend()
        .list(FileKind::Container)
        .unwrap()
        .len() as u64;
    // Only the tree of a's snapshot may be new.
    assert!(after <= before + 1, "{before} -> {after} containers");
    assert_eq!(t.restore("a", &by_b), shared);
}

/// Client a's check records damage; client b's index drops the damaged copies when it opens,
/// so b's next backup of the same files stores good copies and restores.
#[test]
fn an_index_drops_copies_another_client_recorded_as_damaged() {
    let t = TwoClients::new();
    let v = files([("f", text(200_000, 7))]);
    t.backup("a", &v, 0);
    t.backup("b", &files([("y", text(5_000, 8))]), 1);
    // Damage a region of the biggest container (f's data).
    let path = t.biggest_container();
    let mut bytes = fs::read(&path).unwrap();
    bytes[40] ^= 0x10;
    fs::write(&path, bytes).unwrap();
    let report = t.check("a");
    assert!(!report.damage_recorded.is_empty(), "{:?}", report.problems);
    // b stores f again instead of deduplicating against the damaged copies.
    let healed = t.backup("b", &v, 2);
    assert_eq!(t.restore("b", &healed), v);
}

/// A container client b has never seen may hold dead deltas: a prune by client a kept the
/// container for its live chunks and deleted the deltas' bases. b must not take those deltas
/// in (it would deduplicate against chunks that cannot be read): its backup of that content
/// stores it again, and restores.
#[test]
fn an_index_does_not_take_in_dead_deltas_of_containers_it_never_saw() {
    let t = TwoClients::new();
    drop(t.open("b")); // b's index: complete, and empty
    let original = text(60_000, 1);
    let mut edited = original.clone();
    for k in 0..12 {
        edited[k * 4_999 + 7] = b'#';
    }
    let keep = crate::support::noise(8_000, 2);
    let v2 = files([("data.txt", edited), ("keep.bin", keep.clone())]);
    let s1 = t.backup("a", &files([("data.txt", original)]), 0);
    let s2 = t.backup("a", &v2, 1);
    let s3 = t.backup("a", &files([("keep.bin", keep)]), 2);
    let a = t.open("a");
    let kept = locked(&a, &me(), |lock| {
        forget_ids(&a, lock, &[s1, s2])?;
        prune_with(&a, lock, 1.0, false)
    })
    .unwrap();
    assert!(kept.plan.dead_chunks > 0 && kept.plan.keep > 0, "{kept:?}");
    drop(a);
    let again = t.backup("b", &v2, 3);
    assert_eq!(t.restore("b", &again), v2);
    assert_eq!(t.restore("b", &s3).len(), 1);
    let report = t.check("b");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// Client b catches up while a container is recorded as damaged (its copies leave b's index);
/// the container is then restored and a's check clears the records. When b opens again its
/// index must name those copies again, or b could not restore snapshots that need them.
#[test]
fn an_index_takes_back_copies_whose_damage_records_were_cleared() {
    let t = TwoClients::new();
    let v = files([("f", text(200_000, 9))]);
    let first = t.backup("a", &v, 0);
    let path = t.biggest_container();
    let original = fs::read(&path).unwrap();
    let mut bytes = original.clone();
    // The metadata, just before the footer: the container is recorded whole.
    bytes[original.len() - dedelta_store::format::container::FOOTER_LEN - 1] ^= 0x04;
    fs::write(&path, bytes).unwrap();
    assert!(!t.check("a").damage_recorded.is_empty());
    let b = t.open("b");
    assert!(b.restore_fails_for(&first));
    drop(b);
    fs::write(&path, original).unwrap();
    let report = t.check("a");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(t.restore("b", &first), v);
}

trait RestoreFails {
    fn restore_fails_for(&self, id: &str) -> bool;
}

impl RestoreFails for IndexedRepository {
    /// Whether restoring snapshot `id` fails on some file (into a scratch directory).
    fn restore_fails_for(&self, id: &str) -> bool {
        let (_, snap): (_, Snapshot) = self.find_snapshot(id).unwrap();
        let target = tempfile::tempdir().unwrap();
        match restore_to(self, &snap, target.path()) {
            Ok(st) => !st.errors.is_empty(),
            Err(_) => true,
        }
    }
}

/// Client b's prune leaves dead chunks in a container it keeps, and drops them from its own
/// index; client a, whose index is built from the containers, names them, and its next
/// backup of that content deduplicates against them. b's index, catching up, must name them
/// again, or b cannot restore a's snapshot ("missing from the index"; campaign seed
/// 696826238, step 239, and a replay of it at step 235). Fixed in prune, which now keeps
/// dead chunks indexed where their copies stay.
#[test]
fn an_index_takes_in_dead_chunks_another_client_made_live_again() {
    let t = TwoClients::new();
    let (a_part, x_part, b_part) = (text(60_000, 11), text(40_000, 12), text(60_000, 13));
    let with_x = files([("f", [a_part.clone(), x_part, b_part.clone()].concat())]);
    let without_x = files([("f", [a_part, b_part].concat())]);
    let first = t.backup("b", &with_x, 0);
    t.backup("b", &without_x, 1);
    let b = t.open("b");
    let pruned = locked(&b, &me(), |lock| {
        forget_ids(&b, lock, std::slice::from_ref(&first))?;
        prune_with(&b, lock, 1.0, false)
    })
    .unwrap();
    assert!(
        pruned.plan.dead_chunks > 0 && pruned.plan.keep > 0,
        "{pruned:?}"
    );
    drop(b);
    // a's first open builds its index from the containers: the dead chunks are in it.
    let again = t.backup("a", &with_x, 2);
    assert_eq!(t.restore("a", &again), with_x);
    assert_eq!(t.restore("b", &again), with_x);
    let report = t.check("b");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
