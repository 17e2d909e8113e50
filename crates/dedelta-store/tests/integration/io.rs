//! I/O accounting (issue 16 item 4): a metered repository files backup's and restore's
//! requests under the purpose they were made for. Guards the tags at their narrow points:
//! a region read for a delta base must count as a base read, a metadata section as metadata,
//! and a restore cache's reads (either strategy) as chunk data.

use crate::support::{
    backup_options, backup_with, cache_root_for, config, edited_texts, files, locked, me,
    restored_root, text, time_of, write_files, Files,
};
use dedelta_store::backend::wrap::metered::{Direction, IoCounts, Purpose, Traffic};
use dedelta_store::commands::restore;
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::progress::NoProgress;
use dedelta_store::read::RestoreCacheChoice;
use dedelta_store::{IndexedRepository, Repository};
use std::path::Path;

/// Version `v` of the test tree: two texts with a few edits per version (deltas of the last).
fn tree(v: u64) -> Files {
    edited_texts(v, 8, &[("a.txt", 200_000), ("b.txt", 150_000)])
}

fn metered_repo(path: &Path) -> IndexedRepository {
    crate::support::metered_repo(path, DeltaConfig::recommended())
}

/// What `f` did to the repository's counters.
fn counted<T>(repo: &IndexedRepository, f: impl FnOnce() -> T) -> (T, IoCounts) {
    let before = repo.io_counts().expect("metered");
    let out = f();
    (out, repo.io_counts().expect("metered").since(&before))
}

fn restore_with(
    repo: &IndexedRepository,
    target: &Path,
    cache: RestoreCacheChoice,
) -> restore::RestoreStats {
    let (_, snap) = repo.find_snapshot("latest").unwrap();
    let opts = restore::RestoreOptions {
        target: target.to_path_buf(),
        include: vec![],
        cache_bytes: 1 << 20,
        cache,
        ..Default::default()
    };
    restore::restore(repo, &snap, &opts, &NoProgress).unwrap()
}

#[test]
fn backup_and_restore_count_requests_by_purpose() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let zero = Traffic::default();
    for v in 0..2 {
        write_files(&src, &tree(v));
        let (res, c) = counted(&repo, || {
            // No local base cache: every base of the second backup is read back.
            locked(&repo, &me(), |lock| {
                backup_with(&repo, lock, backup_options(vec![src.clone()], time_of(v)))
            })
            .unwrap()
        });
        let data = c.get(Purpose::ChunkData, Direction::Write);
        assert!(data.requests > 0, "v{v}: no container written: {c:?}");
        assert_eq!(data.bytes, res.summary.bytes_added, "v{v}");
        assert_eq!(c.get(Purpose::Snapshot, Direction::Write).requests, 1);
        // Nothing else: the lock is taken on the backend under the meter, and the damage
        // records come from the open's catch-up (issue 20: a backup listed them twice more,
        // which is what this counted before).
        assert_eq!(c.purpose(Purpose::Other), zero, "{c:?}");
        assert_eq!(c.purpose(Purpose::Prefetch), zero);
        if v == 1 {
            assert!(res.summary.delta_chunks > 0, "no deltas: {:?}", res.summary);
            let bases = c.get(Purpose::BaseRead, Direction::Read);
            assert!(bases.requests > 0 && bases.bytes > 0, "{c:?}");
            // The bases' containers' metadata: read ahead in one suffix read each, or when
            // read alone a size query and two ranged reads.
            let meta = c.get(Purpose::ContainerMeta, Direction::Read);
            assert!(meta.requests > 0 && meta.bytes > 0, "{c:?}");
            assert!(
                meta.requests >= 2 * c.get(Purpose::ContainerMeta, Direction::Query).requests,
                "{c:?}"
            );
        }
    }

    // Restore: reads only, regions as chunk data and their containers' metadata.
    let (st, c) = counted(&repo, || {
        restore_with(&repo, &tmp.path().join("t1"), RestoreCacheChoice::default())
    });
    assert!(st.errors.is_empty());
    let data = c.get(Purpose::ChunkData, Direction::Read);
    assert!(
        data.requests >= st.reads.regions_read && data.requests > 0,
        "{c:?}"
    );
    assert!(data.bytes >= st.reads.bytes_read && data.bytes > 0, "{c:?}");
    let meta = c.get(Purpose::ContainerMeta, Direction::Read);
    // One suffix read per container whose metadata the restore reads: its locator's
    // (counted in its stats) and its tree walk's (since 2026-11-29 the same way, where it
    // read the exact way: a size query and two ranged reads). No size query.
    let queries = c.get(Purpose::ContainerMeta, Direction::Query).requests;
    assert!(st.reads.container_metas_read > 0);
    assert_eq!(queries, 0, "{c:?}");
    assert!(meta.requests >= st.reads.container_metas_read, "{c:?}");
    assert_eq!(c.direction(Direction::Write), zero);
    assert_eq!(c.purpose(Purpose::BaseRead), zero);
    assert!(restored_root(&tmp.path().join("t1"), &src)
        .join("a.txt")
        .exists());

    // Forward assembly's reads are chunk data too: one request per container read (and
    // the tree's), nothing written.
    let forward = RestoreCacheChoice::Forward {
        area_bytes: 1 << 20,
    };
    let (st, c) = counted(&repo, || {
        restore_with(&repo, &tmp.path().join("t2"), forward)
    });
    assert!(st.errors.is_empty());
    let data = c.get(Purpose::ChunkData, Direction::Read);
    assert!(data.requests >= st.restore_cache.containers_read, "{c:?}");
    assert!(st.restore_cache.containers_read > 0);
    assert_eq!(c.direction(Direction::Write), zero);
}

/// Issue 20: a backup reads each container's metadata once, in one request. The parent
/// tree's chunks are deltas down a chain of older trees' chunks, in as many containers; its
/// reader read each one's metadata with a size query and two ranged reads, and the delta
/// bases' reader read them again (88 requests for ~30 containers in the 20th SQLAlchemy
/// backup). Now one reader does both and reads a section in one suffix read.
#[test]
fn backup_reads_each_containers_metadata_once() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = metered_repo(&tmp.path().join("repo"));
    let src = tmp.path().join("src");
    let names: Vec<String> = (0..60).map(|i| format!("f{i:02}.txt")).collect();
    let texts: Vec<(&str, usize)> = names.iter().map(|n| (n.as_str(), 20_000)).collect();
    for v in 0..6 {
        write_files(&src, &edited_texts(v, 2, &texts));
        let containers = repo
            .backend()
            .list_names(dedelta_store::backend::FileKind::Container)
            .unwrap()
            .len() as u64;
        let opts = dedelta_store::commands::backup::BackupOptions {
            sources: dedelta_store::commands::backup::SourceOptions {
                force: true,
                ..Default::default()
            },
            ..backup_options(vec![src.clone()], time_of(v))
        };
        let (res, c) = counted(&repo, || {
            locked(&repo, &me(), |lock| backup_with(&repo, lock, opts)).unwrap()
        });
        if v < 2 {
            continue;
        }
        assert!(res.summary.delta_chunks > 0, "v{v}: {:?}", res.summary);
        let reads = c.get(Purpose::ContainerMeta, Direction::Read).requests;
        assert!(reads > 0, "v{v}: {c:?}");
        assert_eq!(
            c.get(Purpose::ContainerMeta, Direction::Query).requests,
            0,
            "v{v}: metadata read with size queries: {c:?}"
        );
        assert!(
            reads <= containers,
            "v{v}: {reads} metadata reads for {containers} containers: {c:?}"
        );
    }
}

/// A repository opened without metering counts nothing and reports no counts.
#[test]
fn unmetered_repository_reports_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let cfg = config(1, DeltaConfig::default());
    let repo = Repository::init_local_with_cache(&path, cfg, &cache_root_for(&path)).unwrap();
    assert_eq!(repo.io_counts(), None);
    let repo = repo.metered().metered();
    let after_open = repo.io_counts().unwrap();
    assert_eq!(after_open, IoCounts::default());
    let repo = repo.open_index().unwrap();
    // Opening the index lists the containers and damage records, as index traffic.
    let c = repo.io_counts().unwrap();
    assert!(
        c.get(Purpose::Index, Direction::Query).requests >= 2,
        "{c:?}"
    );
}

/// A container's metadata costs restore one request, a suffix read of its end, when the section fits
/// the read (it used to cost three: the size, the footer, the section); a section larger than
/// the read costs a second request, after which the read grows to hold it. Small containers
/// are read whole (the test config's 48 KiB), large ones by their last bytes.
#[test]
fn container_metadata_is_one_request() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("repo");
    let mut cfg = config(1, DeltaConfig::default());
    // Text compressed about 3x: some 6,000 chunks of 2 KiB in a 4 MiB container, far more
    // metadata than the first read's 64 KiB.
    cfg.container_size = 4 << 20;
    let repo = Repository::init_local_with_cache(&path, cfg, &cache_root_for(&path))
        .unwrap()
        .metered()
        .open_index()
        .unwrap();
    let src = tmp.path().join("src");
    write_files(&src, &files([("t.txt", text(12 << 20, 5))]));
    locked(&repo, &me(), |lock| {
        backup_with(&repo, lock, backup_options(vec![src.clone()], time_of(0)))
    })
    .unwrap();
    let containers = repo
        .backend()
        .list(dedelta_store::backend::FileKind::Container)
        .unwrap();
    assert!(!containers.is_empty());
    let mut largest = 0;
    for (name, _) in &containers {
        let id = dedelta_store::format::container::ContainerId::from_hex(name).unwrap();
        let (first, c) = counted(&repo, || repo.read_container_meta_tail(&id).unwrap());
        let reads = c.get(Purpose::ContainerMeta, Direction::Read).requests;
        assert!((1..=2).contains(&reads), "{reads} requests");
        assert_eq!(c.get(Purpose::ContainerMeta, Direction::Query).requests, 0);
        // Read again: one request, the read having grown if it had to.
        let (again, c) = counted(&repo, || repo.read_container_meta_tail(&id).unwrap());
        assert_eq!(c.purpose(Purpose::ContainerMeta).requests, 1, "{c:?}");
        assert_eq!(first, again);
        largest = largest.max(first.entries.len());
    }
    assert!(
        largest > 1_500,
        "{largest} entries: the metadata fits the first read"
    );
}
