//! Tests of what writing a run records besides its entries ([`super::change::write_run`]):
//! the entries the new ones supersede, and the loaded fingerprint filter.

use super::tests::{chunk, container_of};
use super::*;

/// The entries a newer copy of their chunk supersedes are recorded, whichever way the newer
/// copy came in (a later commit, the same batch, a rebuild), kept across a reopen, and left
/// out once their container is trimmed. The locality fingerprint cache leaves them out
/// (`backup::fingerprint_index`).
#[test]
fn entries_superseded_by_a_newer_copy_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.idx");
    let index = ChunkIndex::open(&path).unwrap();
    let (a, ma) = container_of(1, &[10, 11, 12]);
    let (b, mb) = container_of(2, &[20, 11]);
    let (c, mc) = container_of(3, &[12, 30]);
    let (d, md) = container_of(4, &[30, 40]);
    index.insert_container(a, &ma).unwrap();
    index.insert_container(b, &mb).unwrap();
    // Two copies in one batch: the later one wins, as the run keeps it.
    index.insert_containers([(c, &mc), (d, &md)]).unwrap();
    let expect = |index: &ChunkIndex| {
        let r = index.reader().unwrap();
        assert_eq!(r.superseded(&a), &[1, 2]);
        assert!(r.superseded(&b).is_empty());
        assert_eq!(r.superseded(&c), &[1]);
        assert!(r.superseded(&d).is_empty());
        assert_eq!(r.get(&chunk(11)).unwrap().unwrap().container, b);
        assert_eq!(r.get(&chunk(30)).unwrap().unwrap().container, d);
    };
    expect(&index);
    drop(index);
    let index = ChunkIndex::open(&path).unwrap();
    expect(&index);
    // A rebuild meeting the copies in the same order finds the same.
    index
        .rebuild(
            [(a, &ma), (b, &mb), (c, &mc), (d, &md)],
            |_, _, _| true,
            [(a, 3), (b, 2), (c, 2), (d, 2)],
            0,
        )
        .unwrap();
    expect(&index);
    // A prune's removal trims the containers of the copies the index named: what they
    // list is no longer trusted, and their superseded entries are forgotten.
    index
        .remove_chunks_trimming(&[chunk(10)].into_iter().collect(), &[], &[])
        .unwrap();
    let r = index.reader().unwrap();
    assert!(r.superseded(&a).is_empty());
    assert_eq!(r.superseded(&c), &[1]);
}

/// A catch-up's delta copies, taken in once their bases are known, reach the loaded
/// fingerprint filter as every other entry does. Before, the rounds that take them in wrote
/// their runs without it, so a locality backup's filter turned those chunks away as new and
/// the backup stored them again.
#[test]
fn delta_copies_taken_in_by_a_catch_up_reach_the_loaded_filter() {
    let dir = tempfile::tempdir().unwrap();
    let index = ChunkIndex::open(&dir.path().join("chunks.idx")).unwrap();
    let (a, ma) = container_of(1, &[1, 2]);
    index.insert_container(a, &ma).unwrap();
    let (filter, _) = index.fingerprint_filter().unwrap();
    let (b, mut mb) = container_of(2, &[3, 4]);
    mb.entries[1].kind = EntryKind::delta(chunk(1));
    let delta = mb.entries[1].id;
    assert!(!filter.contains(&delta));
    index
        .take_in_steps(|r| {
            r.add([(b, &mb)], |_, _, e| e.kind == EntryKind::Full, [(b, 2)])?;
            r.set_aside(&DeltaCopy {
                id: delta,
                base: chunk(1),
                at: ChunkLocation {
                    container: b,
                    entry: 1,
                },
            })?;
            r.take_in_set_aside(|copy, full| Ok(!full(&copy.id)? && full(&copy.base)?))
        })
        .unwrap();
    assert_eq!(index.get(&delta).unwrap().unwrap().container, b);
    assert!(filter.contains(&chunk(3)));
    assert!(
        filter.contains(&delta),
        "the delta copy is not in the filter"
    );
}
