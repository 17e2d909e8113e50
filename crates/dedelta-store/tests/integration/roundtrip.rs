//! restore(backup(x)) == x on random trees, through the library API.

use crate::support::{
    backup_dir, config, init_repo, me, restore_to, restored_root, run_check, walk, xorshift,
};
use dedelta_store::format::config::{DeltaConfig, RepoConfig};
use proptest::prelude::*;
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
enum Entry {
    File { name: String, len: usize, seed: u8 },
    Dir { name: String, children: Vec<Entry> },
    Link { name: String, target: String },
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,12}",
        "[a-zA-Z0-9 ._-]{1,20}".prop_filter("no dot names", |s| s != "." && s != ".."),
        Just("ünïcødé".to_string()),
        Just("日本語ファイル".to_string()),
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    let leaf = prop_oneof![
        (
            name(),
            prop_oneof![Just(0usize), 1usize..100, 1000usize..200_000],
            any::<u8>()
        )
            .prop_map(|(name, len, seed)| Entry::File { name, len, seed }),
        (name(), "[a-z/.]{1,30}").prop_map(|(name, target)| Entry::Link { name, target }),
    ];
    leaf.prop_recursive(4, 24, 6, |inner| {
        (name(), proptest::collection::vec(inner, 0..6))
            .prop_map(|(name, children)| Entry::Dir { name, children })
    })
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    // Half repetitive, half noisy: exercises dedup and compression.
    let mut x = u64::from(seed) * 0x9E37_79B9 + 1;
    (0..len)
        .map(|i| {
            if (i / 4096) % 2 == 0 {
                (i % 251) as u8 ^ seed
            } else {
                xorshift(&mut x) as u8
            }
        })
        .collect()
}

fn build(dir: &Path, e: &Entry) {
    match e {
        Entry::File { name, len, seed } => {
            let _ = fs::write(dir.join(name), content(*len, *seed));
        }
        Entry::Link { name, target } => {
            let p = dir.join(name);
            if fs::symlink_metadata(&p).is_err() {
                std::os::unix::fs::symlink(target, p).unwrap();
            }
        }
        Entry::Dir { name, children } => {
            let d = dir.join(name);
            if fs::symlink_metadata(&d).is_ok() && !d.is_dir() {
                return;
            }
            fs::create_dir_all(&d).unwrap();
            for c in children {
                build(&d, c);
            }
        }
    }
}

fn listing(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walk(root) {
        let md = fs::symlink_metadata(&e).unwrap();
        let rel = e.strip_prefix(root).unwrap().to_path_buf();
        let data = if md.file_type().is_symlink() {
            let mut v = b"link:".to_vec();
            v.extend_from_slice(fs::read_link(&e).unwrap().to_string_lossy().as_bytes());
            v
        } else if md.is_file() {
            fs::read(&e).unwrap()
        } else {
            b"dir".to_vec()
        };
        out.push((rel, data));
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn restore_of_backup_is_identity(entries in proptest::collection::vec(entry(), 1..8)) {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(&src).unwrap();
        for e in &entries {
            build(&src, e);
        }
        let cfg = RepoConfig {
            container_size: 64 * 1024,
            ..config(1, DeltaConfig::default())
        };
        let repo = init_repo(&tmp.path().join("repo"), cfg);
        for round in 0..2 {
            let res = backup_dir(&repo, &src, round, &me()).unwrap();
            prop_assert!(res.warnings.is_empty(), "{:?}", res.warnings);
        }
        let (_, snap) = repo.find_snapshot("latest").unwrap();
        let target = tmp.path().join("out");
        restore_to(&repo, &snap, &target).unwrap();
        prop_assert_eq!(listing(&src), listing(&restored_root(&target, &src)));
        let report = run_check(&repo, true).unwrap();
        prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}

/// A backup leaves a small chunk index merged into one run (its compaction runs beside the
/// snapshot's write, no longer after the command), and what it backed up restores.
#[test]
fn a_backup_leaves_a_small_index_compacted() {
    let tmp = tempfile::tempdir().unwrap();
    // Small containers: each backup commits several batches to the index, a run each.
    let cfg = RepoConfig {
        container_size: 64 * 1024,
        ..config(1, DeltaConfig::default())
    };
    let repo = init_repo(&tmp.path().join("repo"), cfg);
    let src = tmp.path().join("src");
    let mut seed = 7u64;
    for n in 0..3u64 {
        fs::create_dir_all(&src).unwrap();
        let data: Vec<u8> = (0..200_000).map(|_| xorshift(&mut seed) as u8).collect();
        fs::write(src.join(format!("f{n}")), data).unwrap();
        let res = backup_dir(&repo, &src, n, &me()).unwrap();
        assert!(res.notices.is_empty(), "{:?}", res.notices);
        assert_eq!(repo.index().runs().len(), 1, "after backup {n}");
    }
    let (_, snap) = repo.find_snapshot("latest").unwrap();
    let target = tmp.path().join("restored");
    restore_to(&repo, &snap, &target).unwrap();
    assert_eq!(listing(&restored_root(&target, &src)), listing(&src));
}
