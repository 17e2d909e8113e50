use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, FileKind};
use crate::backup::fingerprint::IndexLookup;
use crate::backup::fingerprint_index::MetaLoader;
use crate::backup::prefetch::{DensePrefetcher, PrefetchSketchIndex, PrefetchedBases};
use crate::backup::resemble::sketch_index::SketchIndex;
use crate::format::container::{ContainerBuilder, EntryKind, RegionBuilder};
use bytes::Bytes;
use crossbeam_channel::unbounded;
use dedelta_core::compress::Compression;
use dedelta_core::sketch::SuperFeatures;
use dedelta_core::ChunkId;
use std::collections::HashSet;
use std::sync::Arc;

/// A container in `backend` holding one full chunk (64 bytes `n`) with super-feature `n`.
fn stored(backend: &MemoryBackend, n: u8) -> (ContainerId, ChunkId) {
    let data = vec![n; 64];
    let id = ChunkId::of(&data);
    let mut reg = RegionBuilder::default();
    reg.push(id, EntryKind::Full, &data, data.len(), vec![u64::from(n)]);
    let mut b = ContainerBuilder::new();
    b.add_region(reg.compress(Compression::None));
    let (cid, file, _) = b.seal();
    backend
        .put(FileKind::Container, &cid.to_hex(), &file)
        .unwrap();
    (cid, id)
}

/// A chunk of `len` bytes `fill`, as the pool hands it over.
fn chunk(fill: u8, len: usize, sfs: Option<u64>, lookup: IndexLookup) -> Fingerprinted {
    let data = Bytes::from(vec![fill; len]);
    Fingerprinted {
        id: ChunkId::of(&data),
        data,
        sfs: sfs.map(|s| SuperFeatures(vec![s])),
        lookup,
    }
}

/// The walker's items: one block of file data per entry of `blocks`.
fn items(blocks: Vec<Vec<Fingerprinted>>) -> Receiver<Item> {
    let (tx, rx) = unbounded();
    for b in blocks {
        let (btx, brx) = unbounded();
        btx.send(b).unwrap();
        tx.send(Item::FileData(brx)).unwrap();
    }
    tx.send(Item::FileEnd).unwrap();
    rx
}

/// The bases resemblance detection offers the new chunk of the stream's first block (1000
/// bytes, super-feature 1), similar to a chunk of a dense container whose first duplicate
/// comes in the next block, with a window of `window` bytes; the pool read the dense
/// container ahead of the stream when `pool_ahead`, else the dedup thread reads it when the
/// stream reaches it.
fn offered(window: u64, pool_ahead: bool) -> Vec<ChunkId> {
    let backend = MemoryBackend::default();
    let (c1, x1) = stored(&backend, 1);
    let bases = Arc::new(PrefetchedBases::new(HashSet::from([c1]), 4));
    let loader = DensePrefetcher {
        bases: bases.clone(),
    };
    if pool_ahead {
        loader.load(&backend, &c1).unwrap();
    }
    let similar = chunk(9, 1000, Some(1), IndexLookup::Absent);
    let sfs = similar.sfs.clone().unwrap();
    let duplicate = Fingerprinted {
        id: x1,
        ..chunk(1, 64, None, IndexLookup::Stored(c1))
    };
    let mut ahead = LookAhead::new(items(vec![vec![similar], vec![duplicate]]), window);
    // What the dedup thread does as a chunk enters the window (LocalityIndex::reached with
    // its loader).
    let mut enter = |c: &Fingerprinted| {
        if let IndexLookup::Stored(container) = c.lookup {
            MetaLoader::reached(&loader, &backend, &container);
        }
        false
    };
    let Some(Ahead::Block(first)) = ahead.next(&mut enter).unwrap() else {
        panic!("the first item is the first block");
    };
    assert_eq!(first.len(), 1);
    // Resemblance detection of the first block runs now.
    let mut index = PrefetchSketchIndex::new(bases.clone(), 4);
    let found = index.lookup(&sfs, 1).unwrap();
    // The rest of the stream goes by.
    while ahead.next(&mut enter).unwrap().is_some() {}
    found
}

/// A dense container whose first duplicate comes after a similar new chunk, within the
/// window, offers that chunk its base, whether or not the pool read the container ahead
/// (before the window, the container entered the cache at its first duplicate's block, and
/// the pool's reads ahead took effect only there: the chunk got no base).
#[test]
fn dense_container_reached_within_the_window_offers_bases_to_earlier_chunks() {
    let x1 = ChunkId::of(&[1u8; 64]);
    assert_eq!(offered(64, false), vec![x1]);
    assert_eq!(offered(64, true), vec![x1]);
    assert_eq!(offered(8 << 20, true), vec![x1]);
    // No window: the first duplicate's block is too late for the block before it, however
    // far the pool read ahead.
    assert_eq!(offered(0, false), Vec::<ChunkId>::new());
    assert_eq!(offered(0, true), Vec::<ChunkId>::new());
}

/// The window is counted in the stream's bytes: the item handed on has at least the window's
/// bytes of file data behind it (whole blocks), or the rest of the stream.
#[test]
fn window_is_counted_in_bytes_of_the_stream() {
    let blocks = (0..6u8)
        .map(|i| vec![chunk(i, 10, None, IndexLookup::Absent)])
        .collect();
    let mut ahead = LookAhead::new(items(blocks), 25);
    let mut entered = Vec::new();
    let mut seen = Vec::new();
    while let Some(a) = ahead
        .next(&mut |c| {
            entered.push(c.data[0]);
            false
        })
        .unwrap()
    {
        if let Ahead::Block(b) = a {
            seen.push((b[0].chunk.data[0], entered.len()));
        }
    }
    // Block 0 handed on with blocks 1-3 (30 bytes) behind it, and so on; the end of the
    // stream comes with fewer.
    assert_eq!(seen, vec![(0, 4), (1, 5), (2, 6), (3, 6), (4, 6), (5, 6)]);
    assert_eq!(entered, (0..6).collect::<Vec<u8>>());
}
