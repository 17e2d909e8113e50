//! Retention and garbage collection: random backup / forget / prune / restore / check
//! sequences keep every remaining snapshot bit-exact, and pruning gives the space back.

use crate::support::{
    backup_files, config, forget_ids, init_repo, me, prune_with, read_files, restore_to,
    restored_root, run_check, stored_bytes, text, versioned_text, Files,
};
use dedelta_store::backend::FileKind;
use dedelta_store::commands::forget::{self, KeepPolicy};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::repository::lock::RepoLock;
use dedelta_store::IndexedRepository;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Version `v` of a small tree: files edited a little per version, one file replaced.
fn tree(v: u64) -> Files {
    let mut m = Files::new();
    for f in 0..3u64 {
        m.insert(
            format!("f{f}.txt"),
            versioned_text(f, 60_000 + f as usize * 20_000, v),
        );
    }
    m.insert(format!("new{}.txt", v % 4), text(20_000, 100 + v));
    m
}

/// Backs up `files` as backup number `n`; returns the snapshot id.
fn do_backup(repo: &IndexedRepository, src: &Path, files: &Files, n: usize) -> String {
    backup_files(repo, src, files, n as u64, &me())
        .unwrap()
        .snapshot_id
        .to_hex()
}

/// Every snapshot restores to its files in `model`, and `check --read-data` finds nothing.
fn verify_all(repo: &IndexedRepository, dir: &Path, src: &Path, model: &BTreeMap<String, Files>) {
    let snaps = repo.snapshots().unwrap().snapshots;
    assert_eq!(snaps.len(), model.len());
    for (id, snap) in snaps {
        let target = dir.join("verify");
        let _ = fs::remove_dir_all(&target);
        restore_to(repo, &snap, &target).unwrap();
        let expected = &model[&id.to_hex()];
        let got = read_files(&restored_root(&target, src));
        assert!(got == *expected, "snapshot {} differs", id.short());
    }
    let report = run_check(repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[derive(Debug, Clone)]
enum Op {
    Backup(u64),
    Forget(usize),
    Prune(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..12).prop_map(Op::Backup),
        2 => (0usize..8).prop_map(Op::Forget),
        2 => (0u8..4).prop_map(Op::Prune),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn random_backup_forget_prune_sequences_stay_restorable(ops in proptest::collection::vec(op(), 1..10)) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = new_repo(&tmp.path().join("repo"));
        let src = tmp.path().join("src");
        let mut model: BTreeMap<String, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                Op::Backup(v) => {
                    let files = tree(v);
                    let id = do_backup(&repo, &src, &files, n);
                    model.insert(id, files);
                }
                Op::Forget(i) => {
                    if model.is_empty() { continue; }
                    let id = model.keys().nth(i % model.len()).unwrap().clone();
                    let lock = repo.lock(&me()).unwrap();
                    forget_ids(&repo, &lock, std::slice::from_ref(&id)).unwrap();
                    model.remove(&id);
                }
                Op::Prune(u) => {
                    let lock = repo.lock(&me()).unwrap();
                    prune_with(&repo, &lock, [0.0, 0.1, 0.5, 1.0][u as usize], false).unwrap();
                }
            }
            verify_all(&repo, tmp.path(), &src, &model);
        }
    }
}

/// A new repository at `path` with small chunks and delta compression.
fn new_repo(path: &Path) -> IndexedRepository {
    init_repo(path, config(1, DeltaConfig::recommended()))
}

/// After `forget --keep-last 1` and `prune --max-unused 0`, the repository is close to a fresh
/// one holding only the last snapshot: bases of its deltas are kept, not rebased. With delta
/// chains a delta keeps its whole chain (each link is a small delta of an older version, down
/// to a full chunk), so the bound is looser: 1.12x one level deep, 1.24x with chains 8 deep.
#[test]
fn forgetting_all_but_the_last_gives_the_space_back() {
    assert!(forget_all_but_the_last(1) <= 1.2);
    assert!(forget_all_but_the_last(8) <= 1.3);
}

/// Twenty versions with deltas at most `max_depth` deep, all but the last forgotten and
/// pruned; returns the repository's size over a fresh one's holding only the last.
fn forget_all_but_the_last(max_depth: u8) -> f64 {
    let delta = DeltaConfig {
        max_depth,
        ..DeltaConfig::recommended()
    };
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, delta.clone()));
    let src = tmp.path().join("src");
    let mut last = BTreeMap::new();
    for v in 0..20 {
        last = tree(v);
        do_backup(&repo, &src, &last, v as usize);
    }
    let before = stored_bytes(&repo);
    let lock = repo.lock(&me()).unwrap();
    let dry = keep_last(&repo, &lock, 1, true).unwrap();
    assert_eq!(dry.iter().filter(|d| !d.keep).count(), 19);
    assert_eq!(
        repo.snapshots().unwrap().snapshots.len(),
        20,
        "dry run removed something"
    );
    keep_last(&repo, &lock, 1, false).unwrap();
    let plan = prune_with(&repo, &lock, 0.0, true).unwrap();
    assert_eq!(
        stored_bytes(&repo),
        before,
        "dry run changed the repository"
    );
    let st = prune_with(&repo, &lock, 0.0, false).unwrap();
    assert_eq!(st.plan.delete.len(), plan.plan.delete.len());
    drop(lock);
    let after = stored_bytes(&repo);
    let tmp2 = tempfile::tempdir().unwrap();
    let fresh = init_repo(&tmp2.path().join("repo"), config(1, delta));
    do_backup(&fresh, &tmp2.path().join("src"), &last, 0);
    let ratio = after as f64 / stored_bytes(&fresh) as f64;
    println!("depth {max_depth}, 20 versions: {before} bytes; after forget --keep-last 1 and prune: {after}; fresh: {}; ratio {ratio:.3}", stored_bytes(&fresh));
    let mut model = BTreeMap::new();
    model.insert(repo.snapshots().unwrap().snapshots[0].0.to_hex(), last);
    verify_all(&repo, tmp.path(), &src, &model);
    ratio
}

/// `forget --keep-last n` (with `dry_run`, only the decisions).
fn keep_last(
    repo: &IndexedRepository,
    lock: &RepoLock,
    n: usize,
    dry_run: bool,
) -> dedelta_store::Result<Vec<forget::ForgetDecision>> {
    let policy = KeepPolicy {
        last: n,
        ..KeepPolicy::default()
    };
    forget::forget(repo, lock, &[], &policy, dry_run)
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            fs::copy(e.path(), t).unwrap();
        }
    }
}

/// Regression: a prune killed after writing a copy but before indexing it leaves a container
/// whose name (a content hash) the next prune writes again and also plans to delete.
#[test]
fn unindexed_copy_from_a_killed_prune_is_not_deleted_after_rewrite() {
    let tmp = tempfile::tempdir().unwrap();
    let repo_dir = tmp.path().join("repo");
    let src = tmp.path().join("src");
    let mut last = BTreeMap::new();
    {
        let repo = new_repo(&repo_dir);
        for v in 0..4 {
            last = tree(v);
            do_backup(&repo, &src, &last, v as usize);
        }
        let lock = repo.lock(&me()).unwrap();
        keep_last(&repo, &lock, 1, false).unwrap();
    }
    // What a complete prune writes, learned on a copy.
    let twin = tmp.path().join("twin");
    copy_dir(&repo_dir, &twin);
    let before: std::collections::HashSet<String> = crate::support::open_repo(&twin)
        .unwrap()
        .backend()
        .list(FileKind::Container)
        .unwrap()
        .into_iter()
        .map(|c| c.0)
        .collect();
    {
        let repo = crate::support::open_repo(&twin)
            .unwrap()
            .open_index()
            .unwrap();
        let lock = repo.lock(&me()).unwrap();
        prune_with(&repo, &lock, 0.0, false).unwrap();
    }
    let twin_repo = crate::support::open_repo(&twin).unwrap();
    let new: Vec<String> = twin_repo
        .backend()
        .list(FileKind::Container)
        .unwrap()
        .into_iter()
        .map(|c| c.0)
        .filter(|c| !before.contains(c))
        .collect();
    assert!(!new.is_empty());
    // The "killed" prune got as far as writing those containers, not indexing them.
    for name in &new {
        let rel = Path::new("containers").join(&name[..2]).join(name);
        fs::create_dir_all(repo_dir.join(&rel).parent().unwrap()).unwrap();
        fs::copy(twin.join(&rel), repo_dir.join(&rel)).unwrap();
    }
    let repo = crate::support::open_repo(&repo_dir)
        .unwrap()
        .open_index()
        .unwrap();
    let lock = repo.lock(&me()).unwrap();
    prune_with(&repo, &lock, 0.0, false).unwrap();
    drop(lock);
    let mut model = BTreeMap::new();
    model.insert(repo.snapshots().unwrap().snapshots[0].0.to_hex(), last);
    verify_all(&repo, tmp.path(), &src, &model);
}

/// Regression: after a prune that keeps partly-dead containers, `check --read-data` met the
/// dead (unindexed) delta entries and reported them as missing chunks.
#[test]
fn check_after_prune_ignores_dead_entries_in_kept_containers() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = new_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let mut model = BTreeMap::new();
    let mut ids = Vec::new();
    for v in 0..4 {
        let files = tree(v);
        let id = do_backup(&repo, &src, &files, v as usize);
        ids.push(id.clone());
        model.insert(id, files);
    }
    let lock = repo.lock(&me()).unwrap();
    forget_ids(&repo, &lock, &ids[..2]).unwrap();
    for id in &ids[..2] {
        model.remove(id);
    }
    // Keep every container: dead entries stay on disk, out of the index.
    let st = prune_with(&repo, &lock, 1.0, false).unwrap();
    assert!(st.plan.dead_chunks > 0);
    drop(lock);
    verify_all(&repo, tmp.path(), &src, &model);
}
