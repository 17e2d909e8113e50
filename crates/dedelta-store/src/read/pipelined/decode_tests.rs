//! The decoding half's batches: what each chunk of a batch gives, alone or beside chunks that
//! fail, and which base a failing delta is traced to.

use super::super::*;
use super::*;
use crate::read::RestoreCacheChoice;
use dedelta_core::delta::{new_codec, DeltaKind};
use dedelta_core::ChunkHasher;

const HASHER: ChunkHasher = ChunkHasher::Plain;

/// Text of `n` bytes that varies with `seed`.
fn text(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| b"abcdefghij klmnop\n"[((i / 7 + seed * (i % 5)) % 18) as usize])
        .collect()
}

fn full(data: &[u8]) -> LocatedChunk {
    LocatedChunk::for_test(HASHER.id(data), data.len(), None, data.to_vec())
}

fn delta(target: &[u8], base: &[u8]) -> LocatedChunk {
    let mut d = Vec::new();
    new_codec(DeltaKind::Ddelta).encode(base, target, &mut d);
    LocatedChunk::for_test(HASHER.id(target), target.len(), Some(HASHER.id(base)), d)
}

fn fetched(chunk: LocatedChunk, bases: Vec<LocatedChunk>) -> FetchedChunk {
    FetchedChunk {
        chunk,
        bases: Ok(bases),
    }
}

fn messages(results: Vec<Result<&[u8]>>) -> Vec<std::result::Result<Vec<u8>, String>> {
    results
        .into_iter()
        .map(|r| r.map(<[u8]>::to_vec).map_err(|e| e.to_string()))
        .collect()
}

/// A batch gives what decoding its chunks one by one gives: full chunks, a delta whose base
/// comes with it (a base stored in full comes with every delta on it: it is not cached), a
/// delta on a base an earlier chain left in the cache (one rebuilt from a delta); a chunk
/// whose bytes are not its fingerprint's fails alone, whether the batch is hashed on one
/// thread or shared with the helper (a large batch).
#[test]
fn a_batch_decodes_as_chunks_one_by_one() {
    let base = text(20_000, 1);
    let mut v1 = base.clone();
    v1[500..520].copy_from_slice(&[b'X'; 20]);
    let mut v2 = base.clone();
    v2.truncate(18_000);
    let mut w1 = v1.clone();
    w1[9_000..9_030].copy_from_slice(&[b'W'; 30]);
    let mut w2 = v1.clone();
    w2.truncate(15_000);
    let other = text(9_000, 3);
    let mut forged = full(&other);
    forged.id = HASHER.id(b"something else");
    for copies in [1, 40] {
        let mut chunks = Vec::new();
        for _ in 0..copies {
            chunks.push(fetched(full(&other), vec![]));
        }
        chunks.push(fetched(delta(&v1, &base), vec![full(&base)]));
        chunks.push(fetched(forged.clone(), vec![]));
        chunks.push(fetched(delta(&v2, &base), vec![full(&base)]));
        chunks.push(fetched(
            delta(&w1, &v1),
            vec![delta(&v1, &base), full(&base)],
        ));
        chunks.push(fetched(delta(&w2, &v1), vec![]));
        let one_by_one: Vec<_> = {
            let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
            chunks
                .iter()
                .map(|f| d.decode(f).map(<[u8]>::to_vec).map_err(|e| e.to_string()))
                .collect()
        };
        let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
        let refs: Vec<&FetchedChunk> = chunks.iter().collect();
        let batch = messages(d.decode_batch(&refs));
        assert_eq!(batch, one_by_one);
        // Into a buffer: the same bytes, after what it held, and nothing of a failed chunk.
        let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
        let mut out = b"before".to_vec();
        let ranges = d.decode_batch_into(&refs, &mut out);
        let into: Vec<_> = ranges
            .iter()
            .map(|r| match r {
                Ok(r) => Ok(out[r.clone()].to_vec()),
                Err(e) => Err(e.to_string()),
            })
            .collect();
        assert_eq!(into, one_by_one);
        assert!(out.starts_with(b"before"));
        let ok: Vec<_> = ranges.iter().flatten().cloned().collect();
        assert!(ok.windows(2).all(|w| w[0].end <= w[1].start) && ok[0].start == 6);
        assert_eq!(batch[copies - 1], Ok(other.clone()));
        assert_eq!(batch[copies], Ok(v1.clone()));
        let forged_err = batch[copies + 1].as_ref().unwrap_err();
        assert!(
            forged_err.contains("does not match its fingerprint"),
            "{forged_err}"
        );
        assert_eq!(batch[copies + 2], Ok(v2.clone()));
        assert_eq!(batch[copies + 3], Ok(w1.clone()));
        assert_eq!(batch[copies + 4], Ok(w2.clone()));
    }
}

/// A delta rebuilt from a base stored in full whose bytes are wrong (its region read fine)
/// fails its own check, and the error names the base, even when later chunks of the batch
/// used the cache. Such a base is never cached (used where it lies), so a later delta on it
/// without it is not rebuilt from it, and one sent with it again names it again.
#[test]
fn a_damaged_base_is_named_and_dropped() {
    let base = text(20_000, 1);
    let mut v1 = base.clone();
    v1[100..110].copy_from_slice(&[b'Y'; 10]);
    let mut bytes = base.clone();
    bytes[10_000] ^= 0x20;
    let damaged_base = LocatedChunk::for_test(HASHER.id(&base), bytes.len(), None, bytes);
    let filler = text(9_000, 2);
    let mut chunks = vec![fetched(delta(&v1, &base), vec![damaged_base])];
    for _ in 0..30 {
        chunks.push(fetched(full(&filler), vec![]));
    }
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
    let refs: Vec<&FetchedChunk> = chunks.iter().collect();
    let batch = messages(d.decode_batch(&refs));
    let e = batch[0].as_ref().unwrap_err();
    let base_hex = HASHER.id(&base).to_hex();
    assert!(e.contains("delta base") && e.contains(&base_hex), "{e}");
    assert!(batch[1..].iter().all(|r| r.as_deref() == Ok(&filler[..])));
    let later = fetched(delta(&v1, &base), vec![]);
    let e = d.decode(&later).unwrap_err().to_string();
    assert!(e.contains("not available"), "{e}");
    let again = d.decode(&chunks[0]).unwrap_err().to_string();
    assert!(
        again.contains("delta base") && again.contains(&base_hex),
        "{again}"
    );
}

/// A base rebuilt from a delta whose bytes are wrong (its delta intact, decoded to the right
/// length, but from other bytes) is named by the delta rebuilt from it, the full base below
/// it, intact, being checked first; and it is dropped from the cache, so a later delta on it
/// is not rebuilt from it again.
#[test]
fn a_damaged_rebuilt_base_is_named_and_dropped() {
    let below = text(20_000, 8);
    let mut base = below.clone();
    base[2_000..2_010].copy_from_slice(&[b'V'; 10]);
    let mut wrong = base.clone();
    wrong[7_000] ^= 0x20;
    let mut v1 = base.clone();
    v1[100..110].copy_from_slice(&[b'Y'; 10]);
    let mut damaged_base = delta(&wrong, &below);
    damaged_base.id = HASHER.id(&base);
    let f = fetched(delta(&v1, &base), vec![damaged_base, full(&below)]);
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
    let e = d.decode(&f).unwrap_err().to_string();
    let base_hex = HASHER.id(&base).to_hex();
    assert!(e.contains("delta base") && e.contains(&base_hex), "{e}");
    assert!(!e.contains(&HASHER.id(&below).to_hex()), "{e}");
    assert!(d.decoder.peek_base(&HASHER.id(&base)).is_none());
    let later = fetched(delta(&v1, &base), vec![]);
    let e = d.decode(&later).unwrap_err().to_string();
    assert!(e.contains("not available"), "{e}");
}

/// A base stored in full is used where it lies, not cached, so a later delta on it needs it
/// sent again (as the locating half does), and is rebuilt from it; a base rebuilt from a
/// delta is cached.
#[test]
fn a_base_stored_in_full_is_not_cached() {
    let base = text(20_000, 9);
    let mut v1 = base.clone();
    v1[400..440].copy_from_slice(&[b'Q'; 40]);
    let mut w1 = v1.clone();
    w1[8_000..8_020].copy_from_slice(&[b'R'; 20]);
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
    for round in 0..3 {
        let f = fetched(delta(&v1, &base), vec![full(&base)]);
        assert_eq!(d.decode(&f).map(<[u8]>::to_vec).ok(), Some(v1.clone()));
        assert!(d.decoder.peek_base(&HASHER.id(&base)).is_none());
        let s = d.stats();
        assert_eq!((s.bases_in_place, s.base_cache_misses), (round + 1, 0));
    }
    let f = fetched(delta(&w1, &v1), vec![delta(&v1, &base), full(&base)]);
    assert_eq!(d.decode(&f).map(<[u8]>::to_vec).ok(), Some(w1.clone()));
    assert!(d.decoder.peek_base(&HASHER.id(&v1)).is_some());
    assert!(d.decoder.peek_base(&HASHER.id(&base)).is_none());
    let s = d.stats();
    assert_eq!((s.bases_in_place, s.base_cache_misses), (4, 1));
}

/// A chunk stored in full is not hashed again only while its bytes are those that matched:
/// met again in the same region it is taken as verified (counted), met in other bytes it is
/// hashed, and damaged bytes fail, also when their region is made just after the one that
/// matched was dropped (a memory allocator reuses the place; the decoder's record keeps it
/// from doing so while it lasts).
#[test]
fn a_chunk_is_taken_as_verified_only_in_the_bytes_that_matched() {
    let data = text(9_000, 4);
    let good = full(&data);
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
    for _ in 0..3 {
        let again = fetched(good.clone(), vec![]);
        assert_eq!(
            d.decode(&again).map(<[u8]>::to_vec).ok(),
            Some(data.clone())
        );
    }
    assert_eq!(d.stats().chunks_verified_before, 2);

    let other_copy = fetched(full(&data), vec![]);
    assert_eq!(
        d.decode(&other_copy).map(<[u8]>::to_vec).ok(),
        Some(data.clone())
    );
    assert_eq!(d.stats().chunks_verified_before, 2);

    drop(good);
    drop(other_copy);
    let mut damaged = data.clone();
    damaged[100] ^= 1;
    for _ in 0..50 {
        let bad = LocatedChunk::for_test(HASHER.id(&data), data.len(), None, damaged.clone());
        let err = d.decode(&fetched(bad, vec![])).unwrap_err().to_string();
        assert!(err.contains("does not match its fingerprint"), "{err}");
    }
    assert_eq!(d.stats().chunks_verified_before, 2);
}

/// A delta met again in the same bytes is not hashed again when its base is trusted: its base
/// chain's every link matched before where it lies (here the base stored in full, restored
/// first, and sent again with each delta: it is not cached). Met with another copy of its
/// base, never verified, it is hashed again; when that copy is damaged it fails and names the
/// base (taken as verified, it would have given wrong bytes).
#[test]
fn a_delta_is_taken_as_verified_only_on_a_trusted_base() {
    let base = text(20_000, 5);
    let mut v1 = base.clone();
    v1[300..340].copy_from_slice(&[b'Z'; 40]);
    let b = full(&base);
    let dl = delta(&v1, &base);
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
    let decode = |d: &mut PipelinedDecoder, f: FetchedChunk| {
        d.decode(&f).map(<[u8]>::to_vec).map_err(|e| e.to_string())
    };
    assert_eq!(decode(&mut d, fetched(b.clone(), vec![])), Ok(base.clone()));
    // First met: hashed (its base's link matched before), then taken as verified twice.
    assert_eq!(
        decode(&mut d, fetched(dl.clone(), vec![b.clone()])),
        Ok(v1.clone())
    );
    assert_eq!(
        decode(&mut d, fetched(dl.clone(), vec![b.clone()])),
        Ok(v1.clone())
    );
    assert_eq!(
        decode(&mut d, fetched(dl.clone(), vec![b.clone()])),
        Ok(v1.clone())
    );
    assert_eq!(d.stats().chunks_verified_before, 2);

    // Another copy of the base, intact but never verified: the delta is hashed again, each
    // time.
    let other_copy = full(&base);
    for _ in 0..2 {
        assert_eq!(
            decode(&mut d, fetched(dl.clone(), vec![other_copy.clone()])),
            Ok(v1.clone())
        );
    }
    assert_eq!(d.stats().chunks_verified_before, 2);
    // The first copy still is trusted.
    assert_eq!(
        decode(&mut d, fetched(dl.clone(), vec![b.clone()])),
        Ok(v1.clone())
    );
    assert_eq!(d.stats().chunks_verified_before, 3);

    // A damaged copy of the base, in the bytes the delta copies from.
    let mut bytes = base.clone();
    bytes[5_000] ^= 0x20;
    let damaged = LocatedChunk::for_test(HASHER.id(&base), bytes.len(), None, bytes);
    let e = decode(&mut d, fetched(dl.clone(), vec![damaged])).unwrap_err();
    assert!(e.contains("delta base"), "{e}");
    assert_eq!(d.stats().chunks_verified_before, 3);
}

/// A base rebuilt from a delta and cached is trusted when the chain it was rebuilt from was
/// (here a base stored in full and the base's delta, both restored first): a delta met again
/// on it, from the cache, is not hashed again. Rebuilt from another copy of its delta, never
/// verified, the cached base is not trusted, and the delta on it is hashed again.
#[test]
fn a_delta_on_a_cached_base_is_taken_as_verified_only_when_that_base_is_trusted() {
    let below = text(20_000, 11);
    let mut base = below.clone();
    base[1_000..1_040].copy_from_slice(&[b'P'; 40]);
    let mut v1 = base.clone();
    v1[6_000..6_030].copy_from_slice(&[b'O'; 30]);
    let (b0, b1, dl) = (full(&below), delta(&base, &below), delta(&v1, &base));
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
    let decode = |d: &mut PipelinedDecoder, f: FetchedChunk| {
        d.decode(&f).map(<[u8]>::to_vec).map_err(|e| e.to_string())
    };
    assert_eq!(
        decode(&mut d, fetched(b0.clone(), vec![])),
        Ok(below.clone())
    );
    assert_eq!(
        decode(&mut d, fetched(b1.clone(), vec![b0.clone()])),
        Ok(base.clone())
    );
    assert_eq!(
        decode(&mut d, fetched(dl.clone(), vec![b1.clone(), b0.clone()])),
        Ok(v1.clone())
    );
    assert_eq!(d.stats().chunks_verified_before, 0);
    assert_eq!(decode(&mut d, fetched(dl.clone(), vec![])), Ok(v1.clone()));
    assert_eq!(d.stats().chunks_verified_before, 1);

    let other_b1 = delta(&base, &below);
    assert_eq!(
        decode(&mut d, fetched(dl.clone(), vec![other_b1, b0.clone()])),
        Ok(v1.clone())
    );
    assert_eq!(decode(&mut d, fetched(dl.clone(), vec![])), Ok(v1.clone()));
    assert_eq!(d.stats().chunks_verified_before, 1);
}

/// A delta verified against a base that was not trusted is not remembered: its bytes decoded
/// against the base's true content are known only from a trusted base. So it is hashed each
/// time it is met on an untrusted base.
#[test]
fn a_delta_verified_on_an_untrusted_base_is_hashed_again() {
    let base = text(20_000, 6);
    let mut v1 = base.clone();
    v1[900..960].copy_from_slice(&[b'W'; 60]);
    let b = full(&base);
    let dl = delta(&v1, &base);
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
    for _ in 0..3 {
        let f = fetched(dl.clone(), vec![b.clone()]);
        assert_eq!(d.decode(&f).map(<[u8]>::to_vec).ok(), Some(v1.clone()));
    }
    assert_eq!(d.stats().chunks_verified_before, 0);
}

/// A delta that cannot be rebuilt (its instructions cut short, or rebuilt to the wrong
/// length) leaves nothing in the buffer, so the next chunk's bytes follow the last good one's.
#[test]
fn a_delta_that_cannot_be_rebuilt_appends_nothing() {
    let base = text(20_000, 1);
    let mut v1 = base.clone();
    v1[300..340].copy_from_slice(&[b'Z'; 40]);
    let good = delta(&v1, &base);
    let mut cut = delta(&v1, &base);
    let stored = cut.stored().to_vec();
    cut = LocatedChunk::for_test(
        cut.id,
        v1.len(),
        cut.delta_base,
        stored[..stored.len() - 3].to_vec(),
    );
    let mut long = delta(&v1, &base);
    long = LocatedChunk::for_test(
        long.id,
        v1.len() - 1,
        long.delta_base,
        long.stored().to_vec(),
    );
    let after = text(5_000, 7);
    let chunks = [
        fetched(good, vec![full(&base)]),
        fetched(cut, vec![full(&base)]),
        fetched(long, vec![full(&base)]),
        fetched(full(&after), vec![]),
    ];
    let refs: Vec<&FetchedChunk> = chunks.iter().collect();
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::default());
    let mut out = Vec::new();
    let got = d.decode_batch_into(&refs, &mut out);
    assert_eq!(got[0].as_ref().ok(), Some(&(0..v1.len())));
    assert!(got[1].is_err() && got[2].is_err());
    assert_eq!(
        got[3].as_ref().ok(),
        Some(&(v1.len()..v1.len() + after.len()))
    );
    assert_eq!(out, [v1, after].concat());
}

/// With a small restore cache (the papers' runs) a base stored in full is copied into the
/// decoder's cache, as before bases were used in place: a later delta on it needs no chain
/// (the locator's mirror holds it too), so its container is not read again.
#[test]
fn with_a_small_restore_cache_a_base_stored_in_full_is_cached() {
    assert!(!full_bases_in_place(&RestoreCacheChoice::Lru {
        containers: 4
    }));
    assert!(full_bases_in_place(&RestoreCacheChoice::Lru {
        containers: RESTORE_BASE_CACHE_ENTRIES
    }));
    assert!(!full_bases_in_place(&RestoreCacheChoice::Forward {
        area_bytes: 64 << 20
    }));
    let base = text(20_000, 9);
    let mut v1 = base.clone();
    v1[400..440].copy_from_slice(&[b'Q'; 40]);
    let mut v2 = base.clone();
    v2[9_000..9_030].copy_from_slice(&[b'S'; 30]);
    let mut d = PipelinedDecoder::new(HASHER, &RestoreCacheChoice::Lru { containers: 4 });
    let f = fetched(delta(&v1, &base), vec![full(&base)]);
    assert_eq!(d.decode(&f).map(<[u8]>::to_vec).ok(), Some(v1.clone()));
    assert!(d.decoder.peek_base(&HASHER.id(&base)).is_some());
    let later = fetched(delta(&v2, &base), vec![]);
    assert_eq!(d.decode(&later).map(<[u8]>::to_vec).ok(), Some(v2.clone()));
    let s = d.stats();
    assert_eq!(
        (s.bases_in_place, s.base_cache_misses, s.base_cache_hits),
        (0, 1, 1)
    );
}
