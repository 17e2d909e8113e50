//! Small files packed into runs (one pool job for many files) store exactly what the same
//! backups store with every file sent alone: the same tree, the same chunks and deltas, and a
//! bit-exact restore.

use crate::support::*;
use dedelta_store::commands::backup::{BackupResult, SourceOptions};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::IndexedRepository;
use std::fs;
use std::path::Path;

/// Largest file packed (backup's `small_files::SMALL_FILE_BYTES`).
const SMALL: usize = (1 << 20) - 1;

/// Version `v` of a tree: directories of small files of many sizes (empty, one byte, around
/// the packing bound, some that fill a run and some that do not fit in what is left of one), large files between them, empty directories and symlinks; from
/// version 1 on, some files edited, so that new chunks become deltas of the last version's.
/// Files whose content is the same keep their inode and times (unchanged for the next
/// backup).
fn write_tree(root: &Path, v: u64) {
    let put = |path: std::path::PathBuf, data: Vec<u8>| {
        if fs::read(&path).ok().as_ref() != Some(&data) {
            fs::write(path, data).unwrap();
        }
    };
    let sizes = [
        0,
        1,
        100,
        511,
        3000,
        9000,
        40_000,
        131_072,
        300_000,
        SMALL - 1,
        SMALL,
        SMALL + 1,
        2_500_000,
    ];
    for d in 0..3u64 {
        let dir = root.join(format!("d{d}"));
        fs::create_dir_all(dir.join("empty")).unwrap();
        for (i, &len) in sizes.iter().enumerate() {
            let seed = d * 100 + i as u64;
            let mut data = if i % 2 == 0 {
                text(len, seed)
            } else {
                noise(len, seed)
            };
            // Every third file changes a little in each version.
            if v > 0 && seed.is_multiple_of(3) && !data.is_empty() {
                let at = (seed as usize * 7919 + v as usize * 31) % data.len();
                data[at] ^= 0x5a;
            }
            put(dir.join(format!("f{i:02}")), data);
        }
        if fs::symlink_metadata(dir.join("link")).is_err() {
            std::os::unix::fs::symlink(format!("f{d:02}"), dir.join("link")).unwrap();
        }
        for k in 0..40u64 {
            put(
                dir.join(format!("tiny{k:02}")),
                text(k as usize * 37, seed_of(d, k)),
            );
        }
    }
}

/// Every path below `root` with what it holds: a file's bytes, a symlink's target, nothing
/// for a directory.
fn contents(root: &Path) -> Vec<(std::path::PathBuf, Option<Vec<u8>>)> {
    walk(root)
        .into_iter()
        .map(|p| {
            let md = fs::symlink_metadata(&p).unwrap();
            let held = if md.is_symlink() {
                Some(
                    fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                )
            } else if md.is_file() {
                Some(fs::read(&p).unwrap())
            } else {
                None
            };
            (p.strip_prefix(root).unwrap().to_path_buf(), held)
        })
        .collect()
}

fn seed_of(d: u64, k: u64) -> u64 {
    1000 + d * 50 + k
}

fn backup(repo: &IndexedRepository, src: &Path, n: u64, sources: SourceOptions) -> BackupResult {
    locked(repo, &me(), |lock| {
        let mut opts = backup_options(vec![src.to_path_buf()], time_of(n));
        opts.sources = sources;
        backup_with(repo, lock, opts)
    })
    .unwrap()
}

/// What a backup stored that must not depend on how files were sent to the pool.
#[derive(Debug, PartialEq)]
struct Stored {
    files: u64,
    dirs: u64,
    symlinks: u64,
    bytes_read: u64,
    chunks: u64,
    new_chunks: u64,
    bytes_new: u64,
    bytes_added: u64,
    delta_chunks: u64,
    delta_bytes: u64,
    files_unmodified: u64,
}

fn stored(r: &BackupResult) -> Stored {
    let s = &r.summary;
    Stored {
        files: s.files,
        dirs: s.dirs,
        symlinks: s.symlinks,
        bytes_read: s.bytes_read,
        chunks: s.chunks,
        new_chunks: s.new_chunks,
        bytes_new: s.bytes_new,
        bytes_added: s.bytes_added,
        delta_chunks: s.delta_chunks,
        delta_bytes: s.delta_bytes,
        files_unmodified: s.files_unmodified,
    }
}

#[test]
fn packed_small_files_store_what_files_sent_alone_store() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let repos = [true, false].map(|packed| {
        let name = if packed { "packed" } else { "alone" };
        let repo = init_repo(
            &tmp.path().join(name),
            config(1, DeltaConfig::recommended()),
        );
        (repo, packed)
    });
    // Versions 0 and 1 with their parents (unchanged files in runs too), then version 1 with
    // every file read again.
    let steps = [(0, false), (1, false), (1, true)];
    for (n, &(v, force)) in steps.iter().enumerate() {
        write_tree(&src, v);
        let mut results = Vec::new();
        for (repo, packed) in &repos {
            let sources = SourceOptions {
                force,
                one_job_per_file: !packed,
                ..Default::default()
            };
            let r = backup(repo, &src, n as u64, sources);
            let (_, snap) = repo.find_snapshot("latest").unwrap();
            assert_eq!(r.summary.warnings, 0, "step {n}");
            results.push((stored(&r), snap.tree.chunks.clone()));
        }
        // Read only now: reading the source sets its files' access times, which the tree records.
        let want = contents(&src);
        for (repo, packed) in &repos {
            let (_, snap) = repo.find_snapshot("latest").unwrap();
            let target = tmp.path().join(format!("restored-{packed}-{n}"));
            files_restored(restore_to(repo, &snap, &target).unwrap()).unwrap();
            assert_eq!(contents(&restored_root(&target, &src)), want, "step {n}");
        }
        assert_eq!(results[0], results[1], "step {n}: packed against alone");
        if n == 1 {
            assert!(
                results[0].0.delta_chunks > 0,
                "version 1 stores deltas: {:?}",
                results[0].0
            );
            assert!(
                results[0].0.files_unmodified > 0,
                "version 1 has unchanged files"
            );
        }
    }
    for (repo, _) in &repos {
        let report = run_check(repo, true).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
