//! Tests of the local base cache.

use super::index::{ENTRY_LEN, HEAD_LEN};
use super::*;
use crate::format::config::MAX_DELTA_DEPTH;

fn entry(n: u8, len: usize) -> (ChunkId, Bytes) {
    let bytes = vec![n; len];
    (ChunkId::of(&bytes), Bytes::from(bytes))
}

fn data_files(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != INDEX_FILE)
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn saves_appends_only_what_is_new_and_carries_old_entries_over() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sub");
    assert!(LocalBaseCache::open(&dir).unwrap().is_none());
    let (a, b, c) = (entry(1, 100), entry(2, 200), entry(3, 300));
    LocalBaseCache::save(&dir, [a.clone(), b.clone()], None, 1000).unwrap();
    assert_eq!(data_files(&dir), [(data_file_name(1), 300)]);
    let mut old = LocalBaseCache::open(&dir).unwrap().unwrap();
    assert_eq!(old.len(), 2);
    assert_eq!(old.get(&a.0).as_deref(), Some(&a.1[..]));
    // a again and c are fresh; only c is written; b is carried over.
    LocalBaseCache::save(&dir, [a.clone(), c.clone()], Some(&old), 1000).unwrap();
    assert_eq!(data_files(&dir), [(data_file_name(1), 600)]);
    let mut new = LocalBaseCache::open(&dir).unwrap().unwrap();
    assert_eq!(new.len(), 3);
    for (id, bytes) in [&a, &b, &c] {
        assert_eq!(new.get(id).as_deref(), Some(&bytes[..]));
    }
    // A tight budget leaves b out.
    LocalBaseCache::save(&dir, [c.clone(), a.clone()], Some(&new), 400).unwrap();
    let mut small = LocalBaseCache::open(&dir).unwrap().unwrap();
    assert_eq!(small.len(), 2);
    assert!(small.get(&b.0).is_none());
    // Past twice the budget the data file is rewritten as a new generation.
    let d = entry(4, 300);
    LocalBaseCache::save(&dir, [d.clone()], Some(&small), 400).unwrap();
    assert_eq!(data_files(&dir), [(data_file_name(2), 400)]);
    let mut next = LocalBaseCache::open(&dir).unwrap().unwrap();
    assert_eq!(next.get(&d.0).as_deref(), Some(&d.1[..]));
    assert_eq!(next.get(&a.0).as_deref(), Some(&a.1[..]));
    assert!(next.get(&c.0).is_none(), "over budget");
}

/// Old entries the backup met as duplicates (current chunks) are kept before the others
/// when the budget cannot hold them all, whatever their place in the data file.
#[test]
fn current_chunks_are_kept_before_other_old_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (a, b, c, d) = (entry(1, 100), entry(2, 100), entry(3, 100), entry(4, 100));
    LocalBaseCache::save(dir, [a.clone(), b.clone(), c.clone()], None, 1000).unwrap();
    let old = LocalBaseCache::open(dir).unwrap().unwrap();
    // Room for d and two old entries: c (current, last in the file) and then a.
    let d_fresh = [(d.0, d.1.clone(), None)];
    LocalBaseCache::save_preferring(dir, d_fresh, Some(&old), 300, |id| *id == c.0, || None)
        .unwrap();
    let mut next = LocalBaseCache::open(dir).unwrap().unwrap();
    assert_eq!(next.len(), 3);
    for kept in [&d, &c, &a] {
        assert_eq!(next.get(&kept.0).as_deref(), Some(&kept.1[..]));
    }
    assert!(next.get(&b.0).is_none());
}

/// After the current chunks, old entries of chunks stored in full are kept before the
/// others: they are the roots of the delta chains and the sketch index's candidates. The
/// flag comes from the save that wrote or last chose the entry.
#[test]
fn chunks_stored_in_full_are_kept_before_other_old_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (a, b, c, d, e) = (
        entry(1, 100),
        entry(2, 100),
        entry(3, 100),
        entry(4, 100),
        entry(5, 100),
    );
    let with =
        |(id, bytes): &(ChunkId, Bytes), full: bool| (*id, bytes.clone(), Some(u8::from(!full)));
    // a and b are deltas, c in full, in that file order.
    let first = [with(&a, false), with(&b, false), with(&c, true)];
    LocalBaseCache::save_preferring(
        dir,
        first,
        None::<&LocalBaseCache>,
        1000,
        |_| false,
        || None,
    )
    .unwrap();
    let old = LocalBaseCache::open(dir).unwrap().unwrap();
    // Room for d and two old entries: b (current), then c (in full) before a.
    LocalBaseCache::save_preferring(
        dir,
        [with(&d, false)],
        Some(&old),
        300,
        |id| *id == b.0,
        || None,
    )
    .unwrap();
    let mut next = LocalBaseCache::open(dir).unwrap().unwrap();
    for kept in [&d, &b, &c] {
        assert_eq!(next.get(&kept.0).as_deref(), Some(&kept.1[..]));
    }
    assert!(next.get(&a.0).is_none());
    assert!(next.entries[&c.0].full && !next.entries[&b.0].full);
    // A fresh entry's flag replaces the old one: d is now known to be stored in full ...
    let fresh = [with(&e, false), with(&d, true)];
    LocalBaseCache::save_preferring(dir, fresh, Some(&next), 300, |_| false, || None).unwrap();
    let last = LocalBaseCache::open(dir).unwrap().unwrap();
    assert!(last.entries[&d.0].full);
    // ... and so is kept with c before e, which lies later in the file than both.
    LocalBaseCache::save_preferring(dir, [with(&a, false)], Some(&last), 300, |_| false, || None)
        .unwrap();
    let mut kept = LocalBaseCache::open(dir).unwrap().unwrap();
    assert!(kept.get(&d.0).is_some() && kept.get(&c.0).is_some());
    assert!(kept.get(&b.0).is_none() && kept.get(&e.0).is_none());
}

/// Two processes saving beside each other (each on a private copy of the chunk index)
/// may write the same new generation: the second must not truncate the first's file
/// under a third process that has it mapped (its reads would fault), so a new data file
/// is written under a temporary name and renamed. A temporary file whose process died
/// is removed by the next rewrite.
#[test]
fn a_rewrite_never_truncates_a_mapped_data_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (a, b, c, d) = (
        entry(1, 4096),
        entry(2, 4096),
        entry(3, 4096),
        entry(4, 4096),
    );
    LocalBaseCache::save(dir, [a.clone()], None, 4096).unwrap();
    let first = LocalBaseCache::open(dir).unwrap().unwrap();
    LocalBaseCache::save(dir, [b.clone()], Some(&first), 4096).unwrap();
    // Generation 1 holds a and b, twice the budget: the next save rewrites it.
    let full = LocalBaseCache::open(dir).unwrap().unwrap();
    // One process rewrites generation 1 as 2 ...
    LocalBaseCache::save(dir, [c.clone()], Some(&full), 4096).unwrap();
    assert_eq!(data_files(dir), [(data_file_name(2), 4096)]);
    // ... a third maps it ...
    let mut reader = LocalBaseCache::open(dir).unwrap().unwrap();
    let dead = dir.join(format!("{}.tmp-4000000000", data_file_name(3)));
    std::fs::write(&dead, b"left by a crash").unwrap();
    // ... and another, which had opened generation 1 too, writes generation 2 again.
    LocalBaseCache::save(dir, [d.clone()], Some(&full), 4096).unwrap();
    assert_eq!(reader.get(&c.0).as_deref(), Some(&c.1[..]));
    assert!(!dead.exists());
    let mut now = LocalBaseCache::open(dir).unwrap().unwrap();
    assert_eq!(now.get(&d.0).as_deref(), Some(&d.1[..]));
}

#[test]
fn damaged_files_are_rejected_or_their_entries_fail_their_fingerprint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = entry(7, 1000);
    LocalBaseCache::save(dir, [a.clone()], None, 1 << 20).unwrap();
    let data = dir.join(data_file_name(1));
    let good = std::fs::read(&data).unwrap();
    // A flipped data byte: the cache opens, the entry is refused and dropped, and the
    // next save writes it afresh.
    let mut bad = good.clone();
    bad[500] ^= 1;
    std::fs::write(&data, &bad).unwrap();
    let mut cache = LocalBaseCache::open(dir).unwrap().unwrap();
    assert!(cache.get(&a.0).is_none());
    assert!(cache.is_empty());
    LocalBaseCache::save(dir, [a.clone()], Some(&cache), 1 << 20).unwrap();
    let mut healed = LocalBaseCache::open(dir).unwrap().unwrap();
    assert_eq!(healed.get(&a.0).as_deref(), Some(&a.1[..]));
    // A truncated data file, a flipped index byte, a truncated index, garbage.
    let index = std::fs::read(dir.join(INDEX_FILE)).unwrap();
    let data_now = dir.join(data_file_name(1));
    std::fs::write(&data_now, b"short").unwrap();
    assert!(matches!(
        LocalBaseCache::open(dir),
        Err(CacheError::Malformed { .. })
    ));
    for bad in [
        {
            let mut b = index.clone();
            b[HEAD_LEN + 3] ^= 1;
            b
        },
        index[..index.len() - 1].to_vec(),
        index[..10].to_vec(),
        b"garbage".to_vec(),
    ] {
        std::fs::write(dir.join(INDEX_FILE), &bad).unwrap();
        assert!(matches!(
            LocalBaseCache::open(dir),
            Err(CacheError::Malformed { .. })
        ));
    }
}

#[test]
fn index_round_trips_and_decode_never_panics_on_short_or_lying_input() {
    let (a, _) = entry(1, 10);
    let (b, _) = entry(2, 10);
    let extent = |offset, full, depth| Extent {
        offset,
        len: 10,
        xxh3: 77,
        full,
        depth,
    };
    let index = CacheIndex {
        generation: 9,
        mark: LayoutMark {
            epoch: 2,
            slots: 3,
            slots_hash: 4,
            superseded_hash: 5,
        },
        entries: vec![(a, extent(5, true, Some(0))), (b, extent(15, false, None))],
    };
    let bytes = index.encode();
    assert_eq!(CacheIndex::decode(&bytes).unwrap(), index);
    assert!(index.check_within(25).is_ok());
    assert!(index.check_within(24).is_err());
    for n in 0..bytes.len() + 8 {
        let mut b = bytes.clone();
        b.resize(n, 0);
        if n != bytes.len() {
            assert!(CacheIndex::decode(&b).is_err(), "length {n}");
        }
    }
    let mut lying = bytes.clone();
    lying[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(CacheIndex::decode(&lying).is_err());
    // The first entry's byte `at` set to `value`, its CRC made right.
    let altered = |at: usize, value: u8| {
        let mut b = bytes.clone();
        b[HEAD_LEN + at] = value;
        let crc = crc32c::crc32c(&b[..b.len() - 4]);
        let n = b.len();
        b[n - 4..].copy_from_slice(&crc.to_le_bytes());
        CacheIndex::decode(&b)
    };
    // A flags byte with an undefined bit is rejected.
    let err = altered(ENTRY_LEN - 2, 0x03).unwrap_err();
    assert!(err.contains("flags"), "{err}");
    // So is a depth beyond any chain, and a delta depth on a chunk stored in full.
    let err = altered(ENTRY_LEN - 1, MAX_DELTA_DEPTH + 1).unwrap_err();
    assert!(err.contains("depth"), "{err}");
    let err = altered(ENTRY_LEN - 1, 2).unwrap_err();
    assert!(err.contains("in full"), "{err}");
}

/// Depths are written under the mark the save is given once the data is written, and only
/// then: a save given no mark (a backup that did not commit) records none, and old entries
/// keep theirs unless forgotten.
#[test]
fn depths_are_recorded_only_under_a_mark() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (a, b, c) = (entry(1, 100), entry(2, 100), entry(3, 100));
    let mark = LayoutMark {
        epoch: 6,
        slots: 2,
        slots_hash: 7,
        superseded_hash: 8,
    };
    let fresh = |x: &(ChunkId, Bytes), d| (x.0, x.1.clone(), Some(d));
    LocalBaseCache::save_preferring(
        dir,
        [fresh(&a, 0), fresh(&b, 3)],
        None::<&LocalBaseCache>,
        1000,
        |_| false,
        || Some(mark),
    )
    .unwrap();
    let mut old = LocalBaseCache::open(dir).unwrap().unwrap();
    assert_eq!(old.mark(), mark);
    assert_eq!((old.depth_of(&a.0), old.depth_of(&b.0)), (Some(0), Some(3)));
    // Not committed: nothing recorded, though the data is saved and `a` is still flagged.
    let save = |old: &LocalBaseCache, mark: Option<LayoutMark>| {
        LocalBaseCache::save_preferring(dir, [fresh(&c, 1)], Some(old), 1000, |_| false, || mark)
            .unwrap();
        LocalBaseCache::open(dir).unwrap().unwrap()
    };
    let uncommitted = save(&old, None);
    for x in [&a, &b, &c] {
        assert_eq!(uncommitted.depth_of(&x.0), None);
    }
    assert!(uncommitted.entries[&a.0].full && uncommitted.contains(&c.0));
    // Committed: the old entries keep theirs, the fresh one has its own.
    let committed = save(&old, Some(mark));
    assert_eq!(committed.depth_of(&b.0), Some(3));
    assert_eq!(committed.depth_of(&c.0), Some(1));
    // Forgotten (the index no longer keeps their mark): only the fresh one's is recorded.
    old.forget_depths();
    let forgotten = save(&old, Some(mark));
    assert_eq!(
        (forgotten.depth_of(&a.0), forgotten.depth_of(&b.0)),
        (None, None)
    );
    assert_eq!(forgotten.depth_of(&c.0), Some(1));
    assert!(forgotten.entries[&a.0].full);
}

/// The data file is written in batches of vectored writes: many entries, over several
/// batches by count and by size, land where the index says, when appended to an old cache
/// the save owns (and drops beside the write) as when written afresh.
#[test]
fn entries_over_many_write_batches_read_back_and_an_owned_old_cache_is_appended_to() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let make = |n: usize| {
        let bytes: Vec<u8> = (0..1 + n * 37 % 4000).map(|i| (i * 7 + n) as u8).collect();
        (ChunkId::of(&bytes), Bytes::from(bytes))
    };
    let first: Vec<_> = (0..1300).map(make).collect();
    let second: Vec<_> = (1300..2000).map(make).collect();
    assert!(first.len() > 2 * WriteBatch::MAX_PARTS);
    let budget = 64 << 20;
    LocalBaseCache::save(dir, first.iter().cloned(), None, budget).unwrap();
    let old = LocalBaseCache::open(dir).unwrap().unwrap();
    let old_len = old.data.len();
    assert!(old_len > 2 * WriteBatch::MAX_LEN);
    LocalBaseCache::save_preferring(
        dir,
        second.iter().map(|(id, b)| (*id, b.clone(), None)),
        Some(old),
        budget,
        |_| false,
        || None,
    )
    .unwrap();
    let mut cache = LocalBaseCache::open(dir).unwrap().unwrap();
    assert_eq!(cache.generation, 1, "appended, not rewritten");
    assert!(cache.data.len() > old_len);
    assert_eq!(cache.len(), 2000);
    for (id, bytes) in first.iter().chain(&second) {
        assert_eq!(cache.get(id).as_deref(), Some(&bytes[..]));
    }
}
