//! The decoding half's batches: what each chunk of a batch gives, alone or beside chunks that
//! fail, and which base a failing delta is traced to.

use super::*;
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
/// comes with it, a delta on the base the first left in the cache; a chunk whose bytes are
/// not its fingerprint's fails alone, whether the batch is hashed on one thread or shared with
/// the helper (a large batch).
#[test]
fn a_batch_decodes_as_chunks_one_by_one() {
    let base = text(20_000, 1);
    let mut v1 = base.clone();
    v1[500..520].copy_from_slice(&[b'X'; 20]);
    let mut v2 = base.clone();
    v2.truncate(18_000);
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
        chunks.push(fetched(delta(&v2, &base), vec![]));
        let one_by_one: Vec<_> = {
            let mut d = PipelinedDecoder::new(HASHER);
            chunks
                .iter()
                .map(|f| d.decode(f).map(<[u8]>::to_vec).map_err(|e| e.to_string()))
                .collect()
        };
        let mut d = PipelinedDecoder::new(HASHER);
        let refs: Vec<&FetchedChunk> = chunks.iter().collect();
        let batch = messages(d.decode_batch(&refs));
        assert_eq!(batch, one_by_one);
        assert_eq!(batch[copies - 1], Ok(other.clone()));
        assert_eq!(batch[copies], Ok(v1.clone()));
        let forged_err = batch[copies + 1].as_ref().unwrap_err();
        assert!(
            forged_err.contains("does not match its fingerprint"),
            "{forged_err}"
        );
        assert_eq!(batch[copies + 2], Ok(v2.clone()));
    }
}

/// A delta rebuilt from a base whose bytes are wrong (its region read fine) fails its own
/// check, and the error names the base, even when later chunks of the batch used the cache;
/// the base is dropped, so a later delta on it is not rebuilt from it again.
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
    let mut d = PipelinedDecoder::new(HASHER);
    let refs: Vec<&FetchedChunk> = chunks.iter().collect();
    let batch = messages(d.decode_batch(&refs));
    let e = batch[0].as_ref().unwrap_err();
    let base_hex = HASHER.id(&base).to_hex();
    assert!(e.contains("delta base") && e.contains(&base_hex), "{e}");
    assert!(batch[1..].iter().all(|r| r.as_deref() == Ok(&filler[..])));
    let later = fetched(delta(&v1, &base), vec![]);
    let e = d.decode(&later).unwrap_err().to_string();
    assert!(e.contains("not available"), "{e}");
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
    let mut d = PipelinedDecoder::new(HASHER);
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
