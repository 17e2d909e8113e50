//! Restore against hostile snapshots, damaged repositories and concurrent prunes.
//!
//! The bugs these guard: restore recreated a symlink and then wrote the nodes stored below it
//! *through* it, overwriting live files outside the target; one damaged chunk aborted the
//! whole restore after leaving a truncated file under its real name; a prune deleting a
//! container under a running restore was reported as a corrupt chunk; paths that are not
//! UTF-8 could not be named. The snapshots here are built node by node through the store API
//! (tree stream and chunks stored as backup stores them), so they do not depend on what
//! backup chooses to record.

use crate::support::{init_repo, restore_to, walk};
use dedelta_core::ChunkId;
use dedelta_store::backend::FileKind;
use dedelta_store::commands::{ls, restore};
use dedelta_store::format::config::RepoConfig;
use dedelta_store::format::container::{ContainerId, EntryKind, RegionBuilder};
use dedelta_store::format::snapshot::{BackupSummary, Snapshot, SnapshotId, TreeRef};
use dedelta_store::format::tree::{ChunkRef, Node, NodeKind, TreeEncoder};
use dedelta_store::progress::NoProgress;
use dedelta_store::read::ChunkLocator;
use dedelta_store::repository::ContainerWriter;
use dedelta_store::{Error, IndexedRepository};
use std::collections::HashSet;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

/// Bytes per stored chunk of file content.
const CHUNK_BYTES: usize = 1000;

fn repo(dir: &Path) -> IndexedRepository {
    init_repo(&dir.join("repo"), RepoConfig::new("test".into()))
}

/// One node of a crafted snapshot.
enum Item {
    Dir(&'static [u8]),
    File(Vec<u8>, Vec<u8>),
    Link(&'static [u8], Vec<u8>),
    /// A file with two links: the same inode number at every path that names it.
    HardLinked(Vec<u8>, Vec<u8>, u64),
}

/// 2 MB of bytes that do not repeat within a chunk, different for each `seed`: a file large
/// enough to stay in flight on a restore's target thread while later nodes come.
fn big(seed: u8) -> Vec<u8> {
    (0..2_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed)
        .collect()
}

fn file(path: &[u8], content: &[u8]) -> Item {
    Item::File(path.to_vec(), content.to_vec())
}

fn node(path: &[u8], kind: NodeKind) -> Node {
    Node {
        path: path.to_vec(),
        kind,
        mode: if kind == NodeKind::Dir {
            0o40755
        } else {
            0o100644
        },
        mtime_secs: 1_000_000_000,
        mtime_nanos: 7,
        size: 0,
        target: Vec::new(),
        meta: Default::default(),
    }
}

/// How to damage a crafted snapshot.
#[derive(Default)]
struct Damage {
    /// Chunks stored with other bytes than their fingerprint says.
    wrong_bytes: HashSet<ChunkId>,
    /// Chunks never stored (so not indexed).
    unstored: HashSet<ChunkId>,
    /// Files whose recorded size is off by this much.
    size_off_by: Option<(Vec<u8>, u64)>,
    /// Store only this many bytes of the tree stream's chunks; the rest is missing.
    tree_stored_bytes: Option<usize>,
}

fn chunk_ids(content: &[u8]) -> Vec<ChunkId> {
    content.chunks(CHUNK_BYTES).map(ChunkId::of).collect()
}

/// Stores `items` as a snapshot (one container, tree stream chunked like content) and
/// returns it.
fn store(repo: &IndexedRepository, items: &[Item], damage: &Damage) -> Snapshot {
    let mut region = RegionBuilder::default();
    let mut stored = HashSet::new();
    let mut put = |region: &mut RegionBuilder, data: &[u8], stored_ok: bool| -> ChunkRef {
        let id = ChunkId::of(data);
        if stored.insert(id) && stored_ok && !damage.unstored.contains(&id) {
            let mut bytes = data.to_vec();
            if damage.wrong_bytes.contains(&id) {
                bytes[0] ^= 0xff;
            }
            region.push(id, EntryKind::Full, &bytes, data.len(), Vec::new());
        }
        ChunkRef {
            id,
            len: data.len() as u32,
        }
    };
    let mut enc = TreeEncoder::default();
    let mut tree = Vec::new();
    enc.begin(&mut tree);
    for item in items {
        match item {
            Item::Dir(p) => enc.node(&node(p, NodeKind::Dir), &mut tree),
            Item::Link(p, target) => {
                let mut n = node(p, NodeKind::Symlink);
                n.target = target.clone();
                enc.node(&n, &mut tree);
            }
            Item::File(p, content) | Item::HardLinked(p, content, _) => {
                let mut n = node(p, NodeKind::File);
                if let Item::HardLinked(_, _, ino) = item {
                    n.meta.nlink = 2;
                    n.meta.dev = 1;
                    n.meta.ino = *ino;
                }
                n.size = content.len() as u64;
                if let Some((path, off)) = &damage.size_off_by {
                    if path == p {
                        n.size += off;
                    }
                }
                enc.file_start(&n, &mut tree);
                for c in content.chunks(CHUNK_BYTES) {
                    let r = put(&mut region, c, true);
                    enc.chunk(&r, &mut tree);
                }
                enc.file_end(&mut tree);
            }
        }
    }
    enc.end(&mut tree);
    let mut tree_chunks = Vec::new();
    let mut offset = 0;
    for c in tree.chunks(64) {
        let keep = damage.tree_stored_bytes.is_none_or(|n| offset < n);
        tree_chunks.push(put(&mut region, c, keep).id);
        offset += c.len();
    }
    let mut writer = ContainerWriter::new(repo);
    writer
        .add_region(region.compress(repo.config().compression))
        .unwrap();
    writer.seal().unwrap();
    Snapshot {
        time: "2026-01-01T00:00:00Z".into(),
        host: "test".into(),
        paths: vec!["/".into()],
        tags: vec![],
        tree: TreeRef {
            chunks: tree_chunks,
            len: tree.len() as u64,
        },
        summary: BackupSummary::default(),
        ..Default::default()
    }
}

/// Every entry below `dir` (not following symlinks) with its kind, size and mtime.
fn state(dir: &Path) -> Vec<(PathBuf, u32, u64, i64, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walk(dir) {
        let md = fs::symlink_metadata(&e).unwrap();
        let content = if md.is_file() {
            fs::read(&e).unwrap()
        } else {
            Vec::new()
        };
        out.push((e, md.mode(), md.size(), md.mtime(), content));
    }
    out.sort();
    out
}

fn messages(st: &restore::RestoreStats) -> Vec<(String, String)> {
    st.errors
        .iter()
        .map(|e| (e.path_lossy(), e.message.clone()))
        .collect()
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    walk(dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b".dedelta-tmp-"))
        })
        .collect()
}

/// Live files outside the target that a hostile snapshot aims at.
fn outside(dir: &Path) -> PathBuf {
    let out = dir.join("outside");
    fs::create_dir_all(out.join("sub")).unwrap();
    fs::write(out.join("victim"), b"precious").unwrap();
    fs::write(out.join("sub/f"), b"precious too").unwrap();
    out
}

#[test]
fn restore_never_writes_through_a_symlink_it_restored() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let out = outside(tmp.path());
    let before = state(&out);
    let abs = out.as_os_str().as_bytes().to_vec();
    let snap = store(
        &repo,
        &[
            Item::Dir(b"a"),
            Item::Link(b"a/abs", abs),
            file(b"a/abs/victim", b"evil"),
            Item::Dir(b"a/abs/sub"),
            file(b"a/abs/sub/f", b"evil"),
            file(b"a/abs/new", b"evil"),
            // ../../outside from target/a/rel is tmp/outside.
            Item::Link(b"a/rel", b"../../outside".to_vec()),
            file(b"a/rel/victim", b"evil"),
            file(b"a/z", b"fine"),
        ],
        &Damage::default(),
    );
    let target = tmp.path().join("target");
    let st = restore_to(&repo, &snap, &target).unwrap();
    assert_eq!(state(&out), before, "something outside the target changed");
    // The links themselves are restored; every node below them is an error, by path.
    assert_eq!(
        fs::read_link(target.join("a/abs")).unwrap().as_os_str(),
        out.as_os_str()
    );
    assert_eq!(fs::read(target.join("a/z")).unwrap(), b"fine");
    let errs = messages(&st);
    let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/a/abs/victim",
            "/a/abs/sub",
            "/a/abs/sub/f",
            "/a/abs/new",
            "/a/rel/victim"
        ],
        "{errs:?}"
    );
    for (_, m) in &errs {
        assert!(m.contains("is a symlink"), "{m}");
    }
    assert_eq!((st.files, st.symlinks), (1, 2));
}

#[test]
fn restore_never_follows_a_symlink_already_in_the_target() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let out = outside(tmp.path());
    fs::write(out.join("hard"), b"precious").unwrap();
    let before = state(&out);
    let target = tmp.path().join("target");
    fs::create_dir_all(target.join("keep")).unwrap();
    // Where the snapshot has a directory, a file and a symlink, the target has links out.
    symlink(&out, target.join("d")).unwrap();
    symlink(out.join("victim"), target.join("f")).unwrap();
    symlink(&out, target.join("l")).unwrap();
    // A hard link to a live file: replacing it must not write into the live file.
    fs::hard_link(out.join("hard"), target.join("h")).unwrap();
    // A symlink above a node.
    symlink(&out, target.join("keep/up")).unwrap();
    let snap = store(
        &repo,
        &[
            Item::Dir(b"d"),
            file(b"d/victim", b"evil"),
            file(b"f", b"evil"),
            file(b"h", b"evil"),
            Item::Dir(b"keep"),
            file(b"keep/up/victim", b"evil"),
            Item::Link(b"l", b"elsewhere".to_vec()),
        ],
        &Damage::default(),
    );
    let st = restore_to(&repo, &snap, &target).unwrap();
    assert_eq!(state(&out), before, "something outside the target changed");
    // Links at a node's own path are replaced (the link, not what it points to).
    assert!(fs::symlink_metadata(target.join("d")).unwrap().is_dir());
    assert_eq!(fs::read(target.join("d/victim")).unwrap(), b"evil");
    assert!(fs::symlink_metadata(target.join("f")).unwrap().is_file());
    assert_eq!(fs::read(target.join("h")).unwrap(), b"evil");
    assert_eq!(
        fs::read_link(target.join("l")).unwrap(),
        Path::new("elsewhere")
    );
    // A link above a node is neither followed nor replaced.
    assert_eq!(
        messages(&st)
            .iter()
            .map(|(p, _)| p.as_str())
            .collect::<Vec<_>>(),
        ["/keep/up/victim"]
    );
    assert!(fs::symlink_metadata(target.join("keep/up"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn restore_into_a_target_named_through_a_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let real = tmp.path().join("real");
    fs::create_dir_all(&real).unwrap();
    symlink(&real, tmp.path().join("via")).unwrap();
    let snap = store(
        &repo,
        &[Item::Dir(b"x"), file(b"x/f", b"data")],
        &Damage::default(),
    );
    let st = restore_to(&repo, &snap, &tmp.path().join("via")).unwrap();
    assert!(st.errors.is_empty(), "{:?}", st.errors);
    assert_eq!(fs::read(real.join("x/f")).unwrap(), b"data");
    let md = fs::metadata(real.join("x")).unwrap();
    assert_eq!((md.mode() & 0o7777, md.mtime()), (0o755, 1_000_000_000));
}

#[test]
fn restore_skips_damaged_files_and_restores_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let content = |seed: u8| -> Vec<u8> {
        (0..3 * CHUNK_BYTES)
            .map(|i| (i as u8).wrapping_mul(seed))
            .collect()
    };
    let (good, bad, missing) = (content(3), content(5), content(7));
    let mut damage = Damage::default();
    // The last chunk of `bad` is damaged, so the first two are written before it fails.
    damage.wrong_bytes.insert(chunk_ids(&bad)[2]);
    damage.unstored.insert(chunk_ids(&missing)[1]);
    let snap = store(
        &repo,
        &[
            Item::Dir(b"d"),
            file(b"d/bad", &bad),
            file(b"d/good", &good),
            file(b"d/missing", &missing),
            file(b"d/z", b"last"),
        ],
        &damage,
    );
    let target = tmp.path().join("target");
    // Damage must not truncate or replace what is already at a damaged file's path.
    fs::create_dir_all(target.join("d")).unwrap();
    fs::write(target.join("d/bad"), b"old content").unwrap();
    let st = restore_to(&repo, &snap, &target).unwrap();
    let errs = messages(&st);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_eq!(errs[0].0, "/d/bad");
    assert!(errs[0].1.contains("corrupt chunk"), "{errs:?}");
    assert_eq!(errs[1].0, "/d/missing");
    assert!(errs[1].1.contains("missing"), "{errs:?}");
    assert_eq!(fs::read(target.join("d/bad")).unwrap(), b"old content");
    assert!(!target.join("d/missing").exists());
    assert_eq!(fs::read(target.join("d/good")).unwrap(), good);
    assert_eq!(fs::read(target.join("d/z")).unwrap(), b"last");
    assert_eq!(st.files, 2);
    assert_eq!(st.bytes_written, good.len() as u64 + 4);
    assert!(temp_files(&target).is_empty(), "{:?}", temp_files(&target));
    // Directory metadata is still applied after the failures.
    assert_eq!(
        fs::metadata(target.join("d")).unwrap().mtime(),
        1_000_000_000
    );
    let json = serde_json::to_value(&st).unwrap();
    assert_eq!(json["errors"][0]["path"], "/d/bad");
    assert!(json["errors"][0]["message"].is_string());
}

#[test]
fn restore_refuses_a_file_whose_chunks_do_not_add_up_to_its_size() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let damage = Damage {
        size_off_by: Some((b"short".to_vec(), 3)),
        ..Damage::default()
    };
    let snap = store(
        &repo,
        &[file(b"ok", b"12345"), file(b"short", b"12345")],
        &damage,
    );
    let target = tmp.path().join("target");
    let st = restore_to(&repo, &snap, &target).unwrap();
    assert_eq!(
        messages(&st),
        [(
            "/short".to_string(),
            "corrupt recipe: recorded size 8 but its chunks hold 5 bytes".to_string()
        )]
    );
    assert!(!target.join("short").exists());
    assert_eq!(fs::read(target.join("ok")).unwrap(), b"12345");
}

#[test]
fn unreadable_tree_is_fatal_after_restoring_what_came_before() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let mut items = vec![Item::Dir(b"d"), file(b"d/first", b"first")];
    for i in 0..50 {
        items.push(file(format!("d/later{i:02}").as_bytes(), b"later"));
    }
    let damage = Damage {
        tree_stored_bytes: Some(128),
        ..Damage::default()
    };
    let snap = store(&repo, &items, &damage);
    let target = tmp.path().join("target");
    let err = restore_to(&repo, &snap, &target).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(fs::read(target.join("d/first")).unwrap(), b"first");
    assert!(!target.join("d/later49").exists());
    assert!(temp_files(&target).is_empty());
}

#[test]
fn restore_and_dump_take_names_that_are_not_utf8() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let snap = store(
        &repo,
        &[
            Item::Dir(b"d"),
            file(b"d/caf\xff", b"bytes"),
            file(b"d/other", b"x"),
        ],
        &Damage::default(),
    );
    let target = tmp.path().join("target");
    let st = restore::restore(
        &repo,
        &snap,
        &restore::RestoreOptions {
            target: target.clone(),
            include: vec![b"/d/caf\xff".to_vec()],
            cache_bytes: 1 << 20,
            cache: Default::default(),
            ..Default::default()
        },
        &NoProgress,
    )
    .unwrap();
    assert!(st.errors.is_empty(), "{:?}", st.errors);
    let name = std::ffi::OsStr::from_bytes(b"caf\xff");
    assert_eq!(fs::read(target.join("d").join(name)).unwrap(), b"bytes");
    assert!(!target.join("d/other").exists());
    let mut out = Vec::new();
    ls::dump(&repo, &SnapshotId([0; 32]), &snap, b"d/caf\xff", &mut out).unwrap();
    assert_eq!(out, b"bytes");
}

/// The container holding `id`, and a copy of all its chunks written to a new container and
/// indexed, as prune does before deleting the old one.
fn copy_container_of(repo: &IndexedRepository, id: &ChunkId) -> ContainerId {
    let old = repo.index().get(id).unwrap().unwrap().container;
    let meta = repo.read_container_meta(&old).unwrap();
    let mut reader = dedelta_store::read::ChunkReader::new(repo, 1 << 20).unwrap();
    let mut region = RegionBuilder::default();
    // A different region layout than the original, so the copy is another container.
    region.push(ChunkId::of(b"pad"), EntryKind::Full, b"pad", 3, Vec::new());
    for e in &meta.entries {
        let data = reader.read_chunk(&e.id).unwrap();
        region.push(e.id, EntryKind::Full, &data, data.len(), Vec::new());
    }
    let mut writer = ContainerWriter::new(repo);
    writer
        .add_region(region.compress(repo.config().compression))
        .unwrap();
    writer.seal().unwrap();
    assert_ne!(writer.written[0], old);
    old
}

#[test]
fn locator_follows_a_chunk_that_a_concurrent_prune_moved() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let content: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    store(&repo, &[file(b"f", &content)], &Damage::default());
    let ids = chunk_ids(&content);
    // The reader's index view is taken before the prune.
    let mut locator = ChunkLocator::new(&repo, 1 << 20).unwrap();
    let old = copy_container_of(&repo, &ids[0]);
    repo.backend()
        .delete(FileKind::Container, &old.to_hex())
        .unwrap();
    for id in &ids {
        let c = locator.locate(id).unwrap();
        assert_ne!(c.container, old);
        assert_eq!(ChunkId::of(c.stored()), *id);
    }
}

#[test]
fn a_container_removed_under_a_reader_is_missing_not_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    store(&repo, &[file(b"f", b"content")], &Damage::default());
    let id = ChunkId::of(b"content");
    let mut locator = ChunkLocator::new(&repo, 1 << 20).unwrap();
    let old = repo.index().get(&id).unwrap().unwrap().container;
    repo.backend()
        .delete(FileKind::Container, &old.to_hex())
        .unwrap();
    let err = locator.locate(&id).unwrap_err();
    assert!(matches!(err, Error::ContainerGone { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("is missing, possibly removed by a concurrent prune")
            && !msg.contains("corrupt"),
        "{msg}"
    );
}

/// Restore writes files on more than one thread, but the target must see the nodes in tree
/// order, as one thread makes them. A crafted snapshot holds a large file and then a
/// directory below its path, and a file and then a directory at the same path: made out of
/// order, the directory would come first (the file still queued behind others) and the file
/// fail on it. In order, the file is made, the nodes below it are refused, and the directory
/// at its path replaces it.
#[test]
fn nodes_at_or_below_a_file_are_made_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let mut items = Vec::new();
    for i in 0..6u8 {
        items.push(Item::File(format!("q{i}").into_bytes(), big(i)));
    }
    items.extend([
        Item::File(b"x".to_vec(), big(7)),
        Item::Dir(b"x/sub"),
        file(b"x/sub/f", b"below a file"),
        Item::File(b"y".to_vec(), big(8)),
        Item::Dir(b"y"),
        file(b"z", b"fine"),
    ]);
    let snap = store(&repo, &items, &Damage::default());
    for round in 0..3 {
        let target = tmp.path().join(format!("target{round}"));
        let st = restore_to(&repo, &snap, &target).unwrap();
        let errs = messages(&st);
        let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["/x/sub", "/x/sub/f"], "{errs:?}");
        assert_eq!(fs::read(target.join("x")).unwrap(), big(7));
        assert!(fs::symlink_metadata(target.join("y")).unwrap().is_dir());
        assert_eq!(fs::read(target.join("z")).unwrap(), b"fine");
    }
}

/// A hard link whose file is still being written on one target thread while its own path
/// lies below a node in flight on the other: whichever threads they take, the link is made
/// once both are done, names the file's inode, and nothing fails.
#[test]
fn a_hard_link_below_a_node_in_flight_waits_for_its_file() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let mut items = Vec::new();
    for i in 0..4u8 {
        items.push(Item::File(format!("q{i}").into_bytes(), big(i)));
    }
    // The file linked to is large and the file below which the link lies small, so that
    // the link's thread reaches it while the file's thread is still writing.
    let linked = [big(7), big(9), big(10), big(11)].concat();
    items.extend([
        Item::HardLinked(b"a".to_vec(), linked.clone(), 42),
        Item::File(b"y".to_vec(), big(8)[..100_000].to_vec()),
        Item::Dir(b"y"),
        Item::HardLinked(b"y/l".to_vec(), linked.clone(), 42),
        file(b"z", b"fine"),
    ]);
    let snap = store(&repo, &items, &Damage::default());
    for round in 0..4 {
        let target = tmp.path().join(format!("target{round}"));
        let st = restore_to(&repo, &snap, &target).unwrap();
        assert!(messages(&st).is_empty(), "{:?}", messages(&st));
        assert_eq!(st.hard_links, 1);
        assert!(fs::symlink_metadata(target.join("y")).unwrap().is_dir());
        let (a, l) = (target.join("a"), target.join("y/l"));
        assert_eq!(fs::read(&l).unwrap(), linked);
        assert_eq!(
            fs::metadata(&a).unwrap().ino(),
            fs::metadata(&l).unwrap().ino()
        );
        assert_eq!(fs::read(target.join("z")).unwrap(), b"fine");
    }
}
