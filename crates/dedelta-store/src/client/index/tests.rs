use super::*;
use proptest::prelude::*;

/// A container of `n` full entries with three super-features each; chunk ids from `ids`.
pub(super) fn container_of(seed: u64, ids: &[u64]) -> (ContainerId, ContainerMeta) {
    let entries = ids
        .iter()
        .map(|&c| EntryMeta {
            id: chunk(c),
            kind: EntryKind::Full,
            region: 0,
            offset: 0,
            stored_len: 100,
            original_len: 100,
            super_features: vec![c * 1_000_003, c * 7 + 1, seed],
        })
        .collect();
    let id = ContainerId(ChunkId::of(&seed.to_le_bytes()).0);
    (
        id,
        ContainerMeta {
            regions: vec![],
            entries,
        },
    )
}

fn container(seed: u64, n: u64) -> (ContainerId, ContainerMeta) {
    let ids: Vec<u64> = (0..n).map(|i| seed * 100_000 + i).collect();
    container_of(seed, &ids)
}

pub(super) fn chunk(c: u64) -> ChunkId {
    ChunkId::of(&c.to_le_bytes())
}

/// Many small commits (one container each, as prune makes them) stay a few runs, and every
/// entry is still found; compaction leaves one run of about 40 bytes per chunk plus the
/// super-features.
#[test]
fn many_commits_stay_few_runs_and_compact_to_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let index = ChunkIndex::open(&path).unwrap();
    let mut all = Vec::new();
    for seed in 0..200 {
        let (id, meta) = container(seed, 100);
        index.insert_container(id, &meta).unwrap();
        all.push((id, meta));
        assert!(index.runs().len() <= MAX_RUNS, "{:?}", index.runs());
    }
    let check = |index: &ChunkIndex| {
        let r = index.reader().unwrap();
        for (id, meta) in &all {
            for (i, e) in meta.entries.iter().enumerate() {
                let loc = r.get(&e.id).unwrap().unwrap();
                assert_eq!((loc.container, loc.entry), (*id, i as u32));
                assert_eq!(r.sketch(0, e.super_features[0]).unwrap(), Some(e.id));
            }
        }
        assert_eq!(index.len().unwrap(), 20_000);
    };
    check(&index);
    let (before, after) = index
        .compact_if_worthwhile()
        .unwrap()
        .expect("several runs are merged");
    assert_eq!(index.runs().len(), 1);
    assert!(after < before + before / 20, "{before} -> {after}");
    // 20,000 chunks with 2 distinct super-features each (the third is the container's):
    // 37 + 2 x 7 bytes of entries, and the filters.
    assert!(after < 20_000 * 56, "{after} bytes");
    check(&index);
    assert_eq!(index.compact_if_worthwhile().unwrap(), None);
    drop(index);
    check(&ChunkIndex::open(&path).unwrap());
}

/// A command that adds a few chunks to an index of more than [`COMPACT_ALWAYS_BYTES`] does not
/// rewrite it whole (issue 20: a one-byte backup rewrote 5 MB); once the new runs hold an
/// eighth of the largest, they are merged whole again.
#[test]
fn a_small_addition_to_a_large_index_is_not_merged_whole() {
    let dir = tempfile::tempdir().unwrap();
    let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
    for seed in 0..8 {
        let (id, meta) = container(seed, 4_000);
        index.insert_container(id, &meta).unwrap();
    }
    index.compact_if_worthwhile().unwrap();
    assert_eq!(index.runs().len(), 1);
    assert!(files_bytes(index.path()) > COMPACT_ALWAYS_BYTES);
    let (id, meta) = container(100, 3);
    index.insert_container(id, &meta).unwrap();
    assert_eq!(index.compact_if_worthwhile().unwrap(), None);
    assert_eq!(index.runs().len(), 2);
    let mut seed = 101;
    while index.compact_if_worthwhile().unwrap().is_none() {
        let (id, meta) = container(seed, 400);
        index.insert_container(id, &meta).unwrap();
        seed += 1;
        assert!(seed < 200, "never merged: {:?}", index.runs());
    }
    assert_eq!(index.runs().len(), 1);
    assert!(index
        .reader()
        .unwrap()
        .get(&chunk(100 * 100_000 + 2))
        .unwrap()
        .is_some());
}

/// A fresh index is incomplete; a rebuild makes it complete and replaces what it held.
#[test]
fn rebuild_replaces_everything_and_marks_complete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let index = ChunkIndex::open(&path).unwrap();
    assert!(!index.is_complete().unwrap());
    let (a, ma) = container(1, 50);
    let (b, mb) = container(2, 50);
    index.insert_container(a, &ma).unwrap();
    index
        .rebuild([(b, &mb)], |_, i, _| i % 2 == 0, [(b, 50), (a, 0)], 1234)
        .unwrap();
    assert!(index.is_complete().unwrap());
    assert_eq!(index.damage_digest().unwrap(), 1234);
    assert_eq!(index.known_containers().unwrap(), HashSet::from([a, b]));
    assert_eq!(index.get(&ma.entries[0].id).unwrap(), None);
    assert_eq!(index.get(&mb.entries[1].id).unwrap(), None);
    assert_eq!(
        index.get(&mb.entries[2].id).unwrap(),
        Some(ChunkLocation {
            container: b,
            entry: 2
        })
    );
    drop(index);
    let index = ChunkIndex::open(&path).unwrap();
    assert!(index.is_complete().unwrap());
    assert_eq!(index.len().unwrap(), 25);
    index.forget_containers(&[a]).unwrap();
    assert_eq!(index.known_containers().unwrap(), HashSet::from([b]));
}

/// A torn, damaged or other-version manifest, or a missing or damaged run, is damage: open
/// fails with `IndexDamaged` having removed the files, and the next open starts empty and
/// incomplete (the repository then rebuilds it). Never a wrong answer.
#[test]
fn damaged_files_mean_rebuild_never_wrong_answers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let fill = || {
        let index = ChunkIndex::open(&path).unwrap();
        for seed in 0..3 {
            let (id, meta) = container(seed, 300);
            index.insert_container(id, &meta).unwrap();
        }
        index.rebuild([], |_, _, _| true, [], 0).unwrap();
        for seed in 0..3 {
            let (id, meta) = container(seed, 300);
            index.insert_container(id, &meta).unwrap();
        }
        assert!(index.is_complete().unwrap());
    };
    type Damage = Box<dyn Fn(&Path)>;
    let runs_of = |path: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "run"))
            .collect();
        v.sort();
        v
    };
    let damages: Vec<(&str, Damage)> = vec![
        (
            "torn manifest",
            Box::new(|p: &Path| {
                let b = std::fs::read(p).unwrap();
                std::fs::write(p, &b[..b.len() - 3]).unwrap();
            }),
        ),
        (
            "manifest of another version",
            Box::new(|p: &Path| {
                let mut b = std::fs::read(p).unwrap();
                b[8] = 9;
                std::fs::write(p, b).unwrap();
            }),
        ),
        (
            "run missing",
            Box::new(move |p: &Path| std::fs::remove_file(&runs_of(p)[0]).unwrap()),
        ),
        (
            "run torn",
            Box::new(move |p: &Path| {
                let r = &runs_of(p)[0];
                let b = std::fs::read(r).unwrap();
                std::fs::write(r, &b[..b.len() - 10]).unwrap();
            }),
        ),
    ];
    for (what, damage) in &damages {
        fill();
        damage(&path);
        match ChunkIndex::open(&path) {
            Err(Error::IndexDamaged(_)) => {}
            other => panic!("{what}: {other:?}"),
        }
        let index = ChunkIndex::open(&path).unwrap();
        assert!(!index.is_complete().unwrap(), "{what}");
        assert!(index.is_empty().unwrap(), "{what}");
        assert_eq!(runs_of(&path), Vec::<PathBuf>::new(), "{what}");
        drop(index);
    }
    // A damaged bucket is found when read: the lookup fails, the manifest goes, changes
    // are refused, and the next open starts over.
    fill();
    let index = ChunkIndex::open(&path).unwrap();
    for r in runs_of(&path) {
        let mut b = std::fs::read(&r).unwrap();
        for i in (16..b.len() / 2).step_by(37) {
            b[i] ^= 0x40;
        }
        std::fs::write(&r, b).unwrap();
    }
    let (_, meta) = container(0, 300);
    let mut damaged = false;
    for e in &meta.entries {
        match index.get(&e.id) {
            Ok(Some(loc)) => assert_eq!(meta.entries[loc.entry as usize].id, e.id),
            Ok(None) => {}
            Err(Error::IndexDamaged(_)) => damaged = true,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(damaged);
    assert!(!path.exists());
    assert!(matches!(
        index.set_damage_digest(5),
        Err(Error::IndexDamaged(_))
    ));
    index.reset().unwrap();
    index.set_damage_digest(5).unwrap();
    drop(index);
    assert!(!ChunkIndex::open(&path).unwrap().is_complete().unwrap());
}

/// The redb file of earlier versions and run files that no manifest names (a commit or
/// merge killed before its manifest) are deleted at open; another process cannot open the
/// index while this one holds it (this one can, twice).
#[test]
fn open_cleans_up_and_holds_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    std::fs::write(dir.path().join(LEGACY_FILE), b"old redb").unwrap();
    let orphan = run_path(&path, 77);
    std::fs::write(&orphan, b"half a run").unwrap();
    let index = ChunkIndex::open(&path).unwrap();
    assert!(!dir.path().join(LEGACY_FILE).exists());
    assert!(!orphan.exists());
    assert!(path.is_file());
    let second = ChunkIndex::open(&path).unwrap();
    // What another process would meet: the lock file locked.
    let other = std::fs::File::open(lock_path(&path)).unwrap();
    assert!(
        rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
    );
    drop((index, second));
    rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
}

/// A reader keeps answering from its runs while a commit merges them away.
#[test]
fn a_reader_outlives_a_merge() {
    let dir = tempfile::tempdir().unwrap();
    let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
    let (a, ma) = container(1, 100);
    index.insert_container(a, &ma).unwrap();
    let r = index.reader().unwrap();
    for seed in 2..20 {
        let (id, meta) = container(seed, 100);
        index.insert_container(id, &meta).unwrap();
    }
    index.compact_if_worthwhile().unwrap();
    for (i, e) in ma.entries.iter().enumerate() {
        assert_eq!(r.get(&e.id).unwrap().unwrap().entry, i as u32);
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// A container (seed) with these chunk ids.
    Insert(u64, Vec<u64>),
    Remove(Vec<u64>),
    Forget(u64),
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..30, prop::collection::vec(0u64..500, 1..60)).prop_map(|(s, c)| Op::Insert(s, c)),
        2 => prop::collection::vec(0u64..500, 0..40).prop_map(Op::Remove),
        1 => (0u64..30).prop_map(Op::Forget),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The index answers as a map does (a later insert of a chunk replaces its location, a
    /// super-feature keeps its first live chunk), through merges, removals and reopens.
    #[test]
    fn index_answers_as_a_map(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chunks.idx");
        let mut index = ChunkIndex::open(&path).unwrap();
        let mut chunks: HashMap<ChunkId, ChunkLocation> = HashMap::new();
        let mut known: HashSet<ContainerId> = HashSet::new();
        for op in ops {
            match op {
                Op::Insert(seed, ids) => {
                    let (id, meta) = container_of(seed, &ids);
                    index.insert_container(id, &meta).unwrap();
                    for (i, e) in meta.entries.iter().enumerate() {
                        chunks.insert(e.id, ChunkLocation { container: id, entry: i as u32 });
                    }
                    known.insert(id);
                }
                Op::Remove(ids) => {
                    let dead: HashSet<ChunkId> = ids.iter().map(|c| chunk(*c)).collect();
                    index.remove_chunks(&dead).unwrap();
                    chunks.retain(|c, _| !dead.contains(c));
                }
                Op::Forget(seed) => {
                    let id = container_of(seed, &[]).0;
                    index.forget_containers(&[id]).unwrap();
                    known.remove(&id);
                }
                Op::Compact => {
                    index.compact_if_worthwhile().unwrap();
                }
                Op::Reopen => {
                    drop(index);
                    index = ChunkIndex::open(&path).unwrap();
                }
            }
            prop_assert!(index.runs().len() <= MAX_RUNS);
        }
        let r = index.reader().unwrap();
        for c in 0..500 {
            let id = chunk(c);
            prop_assert_eq!(r.get(&id).unwrap(), chunks.get(&id).copied());
            // The super-feature unique to chunk c names c while it is indexed (whether a
            // removed chunk's key stays is not promised: it names a chunk no lookup finds).
            if chunks.contains_key(&id) {
                prop_assert_eq!(r.sketch(0, c * 1_000_003).unwrap(), Some(id));
            }
        }
        let mut seen = HashMap::new();
        index.for_each(|id, loc| { seen.insert(id, loc); }).unwrap();
        prop_assert_eq!(seen, chunks);
        prop_assert_eq!(index.known_containers().unwrap(), known);
        prop_assert!(index.check_integrity().unwrap());
    }
}

/// What the fuzz target does, on every truncation and many single-byte changes of a real
/// manifest and run: errors, never a panic.
#[test]
fn damaged_files_never_panic_the_decoders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let index = ChunkIndex::open(&path).unwrap();
    for seed in 0..3 {
        let (id, meta) = container(seed, 200);
        index.insert_container(id, &meta).unwrap();
    }
    // Two chunks stored again: the manifest lists superseded entries.
    let (id, meta) = container_of(9, &[5, 100_005]);
    index.insert_container(id, &meta).unwrap();
    index.compact_if_worthwhile().unwrap();
    assert_eq!(index.reader().unwrap().superseded(&container(0, 1).0), &[5]);
    let manifest = std::fs::read(&path).unwrap();
    let run = run_path(&path, index.runs()[0].0);
    let run_bytes = std::fs::read(&run).unwrap();
    drop(index);
    for cut in 0..manifest.len() {
        fuzzing::manifest(&manifest[..cut]);
    }
    let scratch = dir.path().join("scratch.run");
    let step = (run_bytes.len() / 500).max(1);
    for at in (0..run_bytes.len()).step_by(step) {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = run_bytes.clone();
            b[at] ^= flip;
            std::fs::write(&scratch, &b).unwrap();
            fuzzing::run(&scratch);
        }
        std::fs::write(&scratch, &run_bytes[..at]).unwrap();
        fuzzing::run(&scratch);
    }
}

/// Lookup cost on runs of the sizes a 16 GB index of new data has (1.6 M, 123 k, 55 k, 21 k
/// chunks, three keys each): `cargo test -p dedelta-store --lib lookup_speed -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn lookup_speed() {
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    let mut next = 0u64;
    for (seq, n) in [1_633_487u64, 123_183, 55_263, 20_762]
        .into_iter()
        .enumerate()
    {
        let chunks: Vec<_> = (next..next + n).map(|c| (chunk(c).0, c)).collect();
        let sketches: Vec<_> = (next..next + n)
            .flat_map(|c| (0..3).map(move |p| (sketch_key(p, c), chunk(c).0)))
            .collect();
        next += n;
        let path = dir.path().join(format!("{seq}.run"));
        runs.push(Arc::new(
            run::write_batch(&path, seq as u64, chunks, sketches, SketchKeep::Oldest)
                .unwrap()
                .unwrap(),
        ));
    }
    let view = View {
        runs,
        ..View::default()
    };
    let t = std::time::Instant::now();
    for i in 0..100_000u64 {
        assert!(view
            .get(&chunk(u64::MAX - i), dir.path())
            .unwrap()
            .is_none());
    }
    eprintln!("100k chunk misses: {:?}", t.elapsed());
    let t = std::time::Instant::now();
    for i in 0..100_000u64 {
        let _ = view
            .sketch(
                sketch_key((i % 3) as usize, u64::MAX - i),
                SketchKeep::Oldest,
                &run::SketchCounts::default(),
            )
            .unwrap();
    }
    eprintln!("100k sketch lookups: {:?}", t.elapsed());
}

/// The fingerprint filter follows the index: rebuilt when missing, read back when it matches,
/// updated by every commit that adds chunks (so it never misses one, also after merges), and
/// dropped by a removal (a Bloom filter cannot take a chunk out), after which it is rebuilt
/// without the removed chunks' bits. A removal marks the containers it took chunks from as
/// trimmed.
#[test]
fn the_fingerprint_filter_follows_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let index = ChunkIndex::open(&path).unwrap();
    let (a, meta_a) = container(1, 300);
    index.insert_container(a, &meta_a).unwrap();
    let (f, why) = index.fingerprint_filter().unwrap();
    assert!(why.unwrap().contains("missing"));
    assert!(meta_a.entries.iter().all(|e| f.contains(&e.id)));
    // Commits while it is loaded go into it, merges included.
    let mut all = meta_a.entries.clone();
    for seed in 2..40 {
        let (id, meta) = container(seed, 50);
        index.insert_container(id, &meta).unwrap();
        all.extend(meta.entries);
    }
    index.compact_if_worthwhile().unwrap();
    assert!(all.iter().all(|e| f.contains(&e.id)));
    index.save_filter().unwrap();
    drop((index, f));
    let index = ChunkIndex::open(&path).unwrap();
    let (f, why) = index.fingerprint_filter().unwrap();
    assert_eq!(why, None, "the saved filter matches the index");
    assert!(all.iter().all(|e| f.contains(&e.id)));
    assert_eq!(index.reader().unwrap().trust(&a), Trust::Whole);
    // A removal drops it and trims the container.
    let dead: HashSet<ChunkId> = meta_a.entries[..100].iter().map(|e| e.id).collect();
    index.remove_chunks(&dead).unwrap();
    assert_eq!(index.reader().unwrap().trust(&a), Trust::Nothing);
    let (g, why) = index.fingerprint_filter().unwrap();
    assert!(why.unwrap().contains("another state"));
    assert!(!Arc::ptr_eq(&f, &g));
    assert!(all[100..].iter().all(|e| g.contains(&e.id)));
    let still = dead.iter().filter(|id| g.contains(id)).count();
    assert!(still < 10, "{still} of 100 removed chunks still pass");
    // The trimmed flag survives a reopen (it is in the manifest).
    drop((index, f, g));
    let index = ChunkIndex::open(&path).unwrap();
    assert_eq!(index.reader().unwrap().trust(&a), Trust::Nothing);
    // A container the caller names (prune: one holding an unnamed copy of a dead chunk) is
    // trimmed in the same commit.
    let (b, meta_b) = container(2, 10);
    index.insert_container(b, &meta_b).unwrap();
    let other = ContainerId([9; 32]);
    let dead_b: HashSet<ChunkId> = [meta_b.entries[0].id].into();
    index
        .remove_chunks_trimming(&dead_b, &[other], &[])
        .unwrap();
    let r = index.reader().unwrap();
    assert_eq!(r.trust(&b), Trust::Nothing);
    // `other` has no slot: nothing to mark, and an unknown container is never prefetched.
    assert_eq!(r.trust(&other), Trust::Whole);
}

/// A catch-up or rebuild that leaves a container's delta entries out marks it so: its full
/// entries stay trusted, its delta entries do not.
#[test]
fn left_out_deltas_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
    let (a, mut meta) = container(1, 10);
    meta.entries[3].kind = EntryKind::delta(meta.entries[0].id);
    index
        .take_in([(a, &meta)], |_, _, e| e.kind == EntryKind::Full, [(a, 10)])
        .unwrap();
    assert_eq!(index.reader().unwrap().trust(&a), Trust::FullEntries);
    let (b, meta_b) = container(2, 10);
    index.insert_container(b, &meta_b).unwrap();
    assert_eq!(index.reader().unwrap().trust(&b), Trust::Whole);
}

/// A commit made while no filter is loaded (an exact backup, a catch-up in another run)
/// leaves the saved filter naming older runs: the next load rebuilds it, so it never misses
/// the chunks that commit added.
#[test]
fn a_filter_saved_before_later_commits_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let index = ChunkIndex::open(&path).unwrap();
    let (a, meta_a) = container(1, 100);
    index.insert_container(a, &meta_a).unwrap();
    index.fingerprint_filter().unwrap();
    index.save_filter().unwrap();
    drop(index);
    let index = ChunkIndex::open(&path).unwrap();
    let (b, meta_b) = container(2, 100);
    index.insert_container(b, &meta_b).unwrap();
    let (f, why) = index.fingerprint_filter().unwrap();
    assert!(why.unwrap().contains("another state"));
    assert!(meta_a
        .entries
        .iter()
        .chain(&meta_b.entries)
        .all(|e| f.contains(&e.id)));
}

/// Another process holds the index (its flock, taken here through a second open file): the
/// index refuses to open as in use, and a private copy opens with every entry, takes its own
/// writes without changing the shared index, and is removed when dropped. Copies left by
/// dead processes are removed.
#[test]
fn a_private_copy_opens_beside_a_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    {
        let index = ChunkIndex::open(&path).unwrap();
        let (id, meta) = container(1, 50);
        index.insert_container(id, &meta).unwrap();
    }
    let holder = std::fs::OpenOptions::new()
        .write(true)
        .open(lock_path(&path))
        .unwrap();
    rustix::fs::flock(
        &holder,
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    )
    .unwrap();
    assert!(matches!(ChunkIndex::open(&path), Err(Error::IndexInUse(_))));
    let abandoned = dir.path().join("chunks.idx.private/4000000000-gone");
    std::fs::create_dir_all(&abandoned).unwrap();
    let (copy, index) = PrivateIndex::open(&path).unwrap();
    assert!(!abandoned.exists());
    assert_eq!(index.len().unwrap(), 50);
    let (id, meta) = container(2, 10);
    index.insert_container(id, &meta).unwrap();
    assert_eq!(index.len().unwrap(), 60);
    let copy_dir = copy.dir().to_path_buf();
    assert!(copy_dir.exists());
    drop(index);
    drop(copy);
    assert!(!copy_dir.exists());
    drop(holder);
    assert_eq!(ChunkIndex::open(&path).unwrap().len().unwrap(), 50);
}

/// A copy whose manifest names a run that is gone (deleted by the holder between the links)
/// is made again, then opened empty for the caller to rebuild; the shared index is untouched.
#[test]
fn a_torn_private_copy_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let runs = {
        let index = ChunkIndex::open(&path).unwrap();
        let (id, meta) = container(1, 50);
        index.insert_container(id, &meta).unwrap();
        index.runs()
    };
    let run = run_path(&path, runs[0].0);
    let kept = std::fs::read(&run).unwrap();
    std::fs::remove_file(&run).unwrap();
    let (_copy, index) = PrivateIndex::open(&path).unwrap();
    assert_eq!(index.len().unwrap(), 0);
    assert!(!index.is_complete().unwrap());
    drop(index);
    std::fs::write(&run, kept).unwrap();
    assert_eq!(ChunkIndex::open(&path).unwrap().len().unwrap(), 50);
}
