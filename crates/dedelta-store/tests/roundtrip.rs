//! restore(backup(x)) == x on random trees, through the library API.

use dedelta_store::commands::{backup, check, restore};
use dedelta_store::format::config::RepoConfig;
use dedelta_store::progress::NoProgress;
use dedelta_store::repository::lock::LockInfo;
use dedelta_store::Repository;
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
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
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

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        out.push(p.clone());
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            out.extend(walk(&p));
        }
    }
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
        let mut cfg = RepoConfig::new("test".into());
        cfg.chunker.params.min_size = 512;
        cfg.chunker.params.avg_size = 2048;
        cfg.chunker.params.max_size = 8192;
        cfg.region_size = 16 * 1024;
        cfg.container_size = 64 * 1024;
        let repo = Repository::init_local(&tmp.path().join("repo"), cfg).unwrap().open_index().unwrap();
        let me = LockInfo { pid: std::process::id(), host: "t".into(), time: "t".into(), command: "test".into() };
        for _round in 0..2 {
            let lock = repo.lock(&me).unwrap();
            let opts = backup::BackupOptions {
                paths: vec![src.clone()],
                excludes: vec![],
                tags: vec![],
                stdin: None,
                host: "t".into(),
                time: format!("2026-01-01T00:00:0{_round}Z"),
                delta: None,
                cache_dir: None,
            };
            let res = backup::backup(&repo, &lock, opts, &backup::Workers::new(2).unwrap(), &NoProgress).unwrap();
            prop_assert!(res.warnings.is_empty(), "{:?}", res.warnings);
            drop(lock);
        }
        let (_, snap) = repo.find_snapshot("latest").unwrap();
        let target = tmp.path().join("out");
        restore::restore(&repo, &snap, &restore::RestoreOptions { target: target.clone(), include: vec![], cache_bytes: 1 << 20 }, &NoProgress).unwrap();
        let restored_root = target.join(src.strip_prefix("/").unwrap());
        prop_assert_eq!(listing(&src), listing(&restored_root));
        let report = check::check(&repo, &repo.lock(&me).unwrap(), true, "now", &NoProgress).unwrap();
        prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
