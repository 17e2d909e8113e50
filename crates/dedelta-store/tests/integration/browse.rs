//! Browsing snapshots (issue 21): the mount tree read in the kernel's pieces through delta
//! decoding, and `tag`'s rewrite stopped at every write (new before old: never no snapshot).

use crate::support::*;
use dedelta_store::backend::memory::MemoryBackend;
use dedelta_store::backend::wrap::fault::{CrashEffect, FaultBackend, FaultPlan};
use dedelta_store::backend::{Backend, FileKind};
use dedelta_store::commands::mount::MountTree;
use dedelta_store::commands::tag::{tag, TagChange};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::format::tree::NodeKind;
use dedelta_store::repository::snapshot_filter::SnapshotFilter;
use dedelta_store::repository::snapshots;
use dedelta_store::{IndexedRepository, Repository};
use std::sync::Arc;

/// The inode of `path` (`/`-separated) under `from`.
fn resolve(tree: &MountTree<'_>, from: u64, path: &str) -> u64 {
    path.split('/')
        .filter(|p| !p.is_empty())
        .fold(from, |ino, name| {
            tree.lookup(ino, name.as_bytes())
                .unwrap()
                .unwrap_or_else(|| panic!("{name} not found in {path}"))
                .ino
        })
}

/// A file read in pieces of every size the kernel uses, from any offset, equals the
/// source; a file of the older snapshot (its chunks bases of the newer one's deltas) too.
#[test]
fn mount_tree_reads_files_through_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let repo = init_repo(
        &dir.path().join("repo"),
        config(1, DeltaConfig::recommended()),
    );
    let src = dir.path().join("src");
    let v1 = files([
        ("a.txt", versioned_text(1, 200_000, 0)),
        ("b.txt", text(30_000, 2)),
    ]);
    let v2 = files([
        ("a.txt", versioned_text(1, 200_000, 1)),
        ("b.txt", text(30_000, 2)),
    ]);
    backup_files(&repo, &src, &v1, 1, &me()).unwrap();
    let r2 = backup_files(&repo, &src, &v2, 2, &me()).unwrap();
    assert!(r2.summary.delta_chunks > 0, "{:?}", r2.summary);
    let snaps = repo.snapshots().unwrap().snapshots;
    let tree = MountTree::new(&repo, snaps, 1 << 20).unwrap();
    let root = dedelta_store::commands::mount::ROOT_INO;
    let names: Vec<Vec<u8>> = tree
        .readdir(root)
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        [&b"hosts"[..], b"ids", b"latest", b"snapshots", b"tags"]
    );
    let rel = src.strip_prefix("/").unwrap().to_str().unwrap();
    let (t1, t2) = ("2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z");
    let views = [
        (format!("snapshots/{t2}"), &v2),
        (format!("hosts/test/{t1}"), &v1),
    ];
    for (view, want) in views {
        let base = resolve(&tree, root, &view);
        let dir_ino = resolve(&tree, base, rel);
        assert_eq!(tree.attr(dir_ino).unwrap().kind, NodeKind::Dir);
        for (name, content) in want {
            let ino = resolve(&tree, dir_ino, name);
            assert_eq!(tree.attr(ino).unwrap().size, content.len() as u64);
            for piece in [4096u32, 131_072, 7_919] {
                let mut got = Vec::new();
                while let Some(d) = tree.read(ino, got.len() as u64, piece).unwrap() {
                    if d.is_empty() {
                        break;
                    }
                    got.extend_from_slice(&d);
                }
                assert!(got == *content, "{view}/{name} read in pieces of {piece}");
            }
            let mid = tree.read(ino, 12_345, 100).unwrap().unwrap();
            assert_eq!(mid, content[12_345..12_445]);
            assert!(tree
                .read(ino, content.len() as u64 + 5, 10)
                .unwrap()
                .unwrap()
                .is_empty());
        }
    }
    // `latest` is a symlink to the newest snapshot's directory.
    let latest = tree.lookup(root, b"latest").unwrap().unwrap();
    assert_eq!(latest.kind, NodeKind::Symlink);
    assert_eq!(
        tree.readlink(latest.ino).unwrap(),
        b"snapshots/2026-01-01T00:00:02Z"
    );
    assert!(tree.lookup(root, b"nothing").unwrap().is_none());
    assert!(tree.read(root, 0, 10).unwrap().is_none());
    let in_snapshots = resolve(&tree, root, "snapshots/latest");
    assert_eq!(tree.readlink(in_snapshots).unwrap(), t2.as_bytes());
    // Both snapshots' directories are the same inodes in every view.
    let by_id = tree.readdir(resolve(&tree, root, "ids")).unwrap().unwrap();
    assert_eq!(by_id.len(), 2);
    assert_eq!(
        by_id
            .iter()
            .filter(|e| e.ino == resolve(&tree, root, &format!("snapshots/{t1}")))
            .count(),
        1
    );
}

/// `tag` stopped at each of its writes, the write lost or durable: afterwards the snapshot
/// exists with its old tags, its new tags, or (stopped between the two steps) both, never
/// neither; a rerun finishes the change.
#[test]
fn tag_stopped_at_every_write_never_loses_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let trials = std::cell::Cell::new(0);
    let trial = |plan: Option<FaultPlan>| -> (Arc<FaultBackend>, IndexedRepository, bool) {
        trials.set(trials.get() + 1);
        let fault = Arc::new(FaultBackend::new(Arc::new(MemoryBackend::default())));
        let cfg = config(1, DeltaConfig::recommended());
        fault
            .put(FileKind::Config, "config", &cfg.to_bytes())
            .unwrap();
        let index = dir
            .path()
            .join(format!("index-{}", trials.get()))
            .join("chunks.idx");
        let repo = Repository::open(fault.clone(), index)
            .unwrap()
            .open_index()
            .unwrap();
        backup_files(&repo, &src, &files([("f", text(10_000, 1))]), 1, &me()).unwrap();
        fault.arm(plan.unwrap_or_default());
        let change = TagChange {
            add: vec!["keep".into()],
            ..Default::default()
        };
        let done = locked(&repo, &me(), |lock| {
            tag(&repo, lock, &[], &SnapshotFilter::default(), &change)
        })
        .is_ok();
        (fault, repo, done)
    };
    let (fault, _, done) = trial(None);
    assert!(done);
    let writes = fault.counts().total_writes();
    assert!(writes >= 2, "a put and a delete at least: {writes}");
    for n in 0..writes {
        for effect in [CrashEffect::Lost, CrashEffect::Durable] {
            let (fault, repo, _) = trial(Some(FaultPlan::crash(n, effect)));
            fault.disarm();
            let listed = snapshots::list(repo.backend().as_ref()).unwrap();
            assert!(listed.unreadable.is_empty());
            let tags: Vec<Vec<String>> =
                listed.snapshots.iter().map(|s| s.1.tags.clone()).collect();
            assert!(
                !tags.is_empty() && tags.len() <= 2,
                "write {n} {effect:?}: {tags:?}"
            );
            let trees: Vec<_> = listed.snapshots.iter().map(|s| s.1.tree.clone()).collect();
            assert!(trees.windows(2).all(|w| w[0] == w[1]));
        }
    }
}
