//! Retention and garbage collection: random backup / forget / prune / restore / check
//! sequences keep every remaining snapshot bit-exact, and pruning gives the space back.

use dedelta_store::backend::FileKind;
use dedelta_store::commands::forget::{self, KeepPolicy};
use dedelta_store::commands::{backup, check, prune, restore};
use dedelta_store::format::config::{DeltaConfig, RepoConfig};
use dedelta_store::progress::NoProgress;
use dedelta_store::repository::lock::LockInfo;
use dedelta_store::{IndexedRepository, Repository};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(
            format!(
                "row {} value {} flag {}\n",
                x % 1_000_000,
                (x >> 24) % 9973,
                x >> 60
            )
            .as_bytes(),
        );
    }
    out.truncate(len);
    out
}

/// Version `v` of a small tree: files edited a little per version, one file replaced.
fn tree(v: u64) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    for f in 0..3u64 {
        let mut d = text(60_000 + f as usize * 20_000, f);
        for k in 0..v * 3 {
            let i = ((k + 1) * 7_919 * (f + 3)) as usize % d.len();
            d[i] = b'#';
        }
        m.insert(format!("f{f}.txt"), d);
    }
    m.insert(format!("new{}.txt", v % 4), text(20_000, 100 + v));
    m
}

fn me() -> LockInfo {
    LockInfo {
        pid: std::process::id(),
        host: "t".into(),
        time: "t".into(),
        command: "test".into(),
    }
}

fn config() -> RepoConfig {
    let mut cfg = RepoConfig::new("test".into());
    cfg.chunker.params.min_size = 512;
    cfg.chunker.params.avg_size = 2048;
    cfg.chunker.params.max_size = 8192;
    cfg.region_size = 16 * 1024;
    cfg.container_size = 48 * 1024;
    cfg.delta = DeltaConfig::recommended();
    cfg
}

fn do_backup(
    repo: &IndexedRepository,
    src: &Path,
    files: &BTreeMap<String, Vec<u8>>,
    n: usize,
) -> String {
    let _ = fs::remove_dir_all(src);
    fs::create_dir_all(src).unwrap();
    for (name, data) in files {
        fs::write(src.join(name), data).unwrap();
    }
    let lock = repo.lock(&me()).unwrap();
    let opts = backup::BackupOptions {
        paths: vec![src.to_path_buf()],
        excludes: vec![],
        tags: vec![],
        stdin: None,
        host: "t".into(),
        time: format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
        delta: None,
        cache_dir: None,
    };
    backup::backup(
        repo,
        &lock,
        opts,
        &backup::Workers::new(2).unwrap(),
        &NoProgress,
    )
    .unwrap()
    .snapshot_id
    .to_hex()
}

fn verify_all(
    repo: &IndexedRepository,
    dir: &Path,
    src: &Path,
    model: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
) {
    let snaps = repo.snapshots().unwrap().snapshots;
    assert_eq!(snaps.len(), model.len());
    for (id, snap) in snaps {
        let target = dir.join("verify");
        let _ = fs::remove_dir_all(&target);
        let opts = restore::RestoreOptions {
            target: target.clone(),
            include: vec![],
            cache_bytes: 1 << 20,
        };
        restore::restore(repo, &snap, &opts, &NoProgress).unwrap();
        let root = target.join(src.strip_prefix("/").unwrap());
        let expected = &model[&id.to_hex()];
        let mut got = BTreeMap::new();
        for e in fs::read_dir(&root).unwrap() {
            let e = e.unwrap();
            got.insert(
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            );
        }
        assert!(got == *expected, "snapshot {} differs", id.short());
    }
    let report = check::check(repo, &repo.lock(&me()).unwrap(), true, "now", &NoProgress).unwrap();
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
        let repo = Repository::init_local(&tmp.path().join("repo"), config()).unwrap().open_index().unwrap();
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
                    forget::forget(&repo, &lock, std::slice::from_ref(&id), &KeepPolicy::default(), false).unwrap();
                    model.remove(&id);
                }
                Op::Prune(u) => {
                    let lock = repo.lock(&me()).unwrap();
                    let opts = prune::PruneOptions { max_unused: [0.0, 0.1, 0.5, 1.0][u as usize], dry_run: false };
                    prune::prune(&repo, &lock, &opts, &NoProgress).unwrap();
                }
            }
            verify_all(&repo, tmp.path(), &src, &model);
        }
    }
}

fn stored(repo: &IndexedRepository) -> u64 {
    repo.backend()
        .list(FileKind::Container)
        .unwrap()
        .iter()
        .map(|(_, s)| s)
        .sum()
}

#[test]
fn forgetting_all_but_the_last_gives_the_space_back() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repository::init_local(&tmp.path().join("repo"), config())
        .unwrap()
        .open_index()
        .unwrap();
    let src = tmp.path().join("src");
    let mut last = BTreeMap::new();
    for v in 0..20 {
        last = tree(v);
        do_backup(&repo, &src, &last, v as usize);
    }
    let before = stored(&repo);
    let lock = repo.lock(&me()).unwrap();
    let dry = forget::forget(
        &repo,
        &lock,
        &[],
        &KeepPolicy {
            last: 1,
            ..Default::default()
        },
        true,
    )
    .unwrap();
    assert_eq!(dry.iter().filter(|d| !d.keep).count(), 19);
    assert_eq!(
        repo.snapshots().unwrap().snapshots.len(),
        20,
        "dry run removed something"
    );
    forget::forget(
        &repo,
        &lock,
        &[],
        &KeepPolicy {
            last: 1,
            ..Default::default()
        },
        false,
    )
    .unwrap();
    let plan = prune::prune(
        &repo,
        &lock,
        &prune::PruneOptions {
            max_unused: 0.0,
            dry_run: true,
        },
        &NoProgress,
    )
    .unwrap();
    assert_eq!(stored(&repo), before, "dry run changed the repository");
    let st = prune::prune(
        &repo,
        &lock,
        &prune::PruneOptions {
            max_unused: 0.0,
            dry_run: false,
        },
        &NoProgress,
    )
    .unwrap();
    assert_eq!(st.plan.delete.len(), plan.plan.delete.len());
    drop(lock);
    let after = stored(&repo);
    let tmp2 = tempfile::tempdir().unwrap();
    let fresh = Repository::init_local(&tmp2.path().join("repo"), config())
        .unwrap()
        .open_index()
        .unwrap();
    do_backup(&fresh, &tmp2.path().join("src"), &last, 0);
    let ratio = after as f64 / stored(&fresh) as f64;
    println!("20 versions: {before} bytes; after forget --keep-last 1 and prune: {after}; fresh: {}; ratio {ratio:.3}", stored(&fresh));
    assert!(ratio <= 1.2, "pruned repository is {ratio:.2}x a fresh one");
    let mut model = BTreeMap::new();
    model.insert(repo.snapshots().unwrap().snapshots[0].0.to_hex(), last);
    verify_all(&repo, tmp.path(), &src, &model);
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
        let repo = Repository::init_local(&repo_dir, config())
            .unwrap()
            .open_index()
            .unwrap();
        for v in 0..4 {
            last = tree(v);
            do_backup(&repo, &src, &last, v as usize);
        }
        let lock = repo.lock(&me()).unwrap();
        forget::forget(
            &repo,
            &lock,
            &[],
            &KeepPolicy {
                last: 1,
                ..Default::default()
            },
            false,
        )
        .unwrap();
    }
    // What a complete prune writes, learned on a copy.
    let twin = tmp.path().join("twin");
    copy_dir(&repo_dir, &twin);
    let before: std::collections::HashSet<String> = Repository::open_local(&twin)
        .unwrap()
        .backend()
        .list(FileKind::Container)
        .unwrap()
        .into_iter()
        .map(|c| c.0)
        .collect();
    {
        let repo = Repository::open_local(&twin).unwrap().open_index().unwrap();
        let lock = repo.lock(&me()).unwrap();
        prune::prune(
            &repo,
            &lock,
            &prune::PruneOptions {
                max_unused: 0.0,
                dry_run: false,
            },
            &NoProgress,
        )
        .unwrap();
    }
    let twin_repo = Repository::open_local(&twin).unwrap();
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
    let repo = Repository::open_local(&repo_dir)
        .unwrap()
        .open_index()
        .unwrap();
    let lock = repo.lock(&me()).unwrap();
    prune::prune(
        &repo,
        &lock,
        &prune::PruneOptions {
            max_unused: 0.0,
            dry_run: false,
        },
        &NoProgress,
    )
    .unwrap();
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
    let repo = Repository::init_local(&tmp.path().join("repo"), config())
        .unwrap()
        .open_index()
        .unwrap();
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
    forget::forget(&repo, &lock, &ids[..2], &KeepPolicy::default(), false).unwrap();
    for id in &ids[..2] {
        model.remove(id);
    }
    // Keep every container: dead entries stay on disk, out of the index.
    let st = prune::prune(
        &repo,
        &lock,
        &prune::PruneOptions {
            max_unused: 1.0,
            dry_run: false,
        },
        &NoProgress,
    )
    .unwrap();
    assert!(st.plan.dead_chunks > 0);
    drop(lock);
    verify_all(&repo, tmp.path(), &src, &model);
}
