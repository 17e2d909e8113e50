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
        // Into a buffer: the same bytes, after what it held, and nothing of a failed chunk.
        let mut d = PipelinedDecoder::new(HASHER);
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

/// A delta met again in the same bytes is not hashed again when its base is trusted: its base
/// chain's every link matched before where it lies (here the base, restored first). Met with
/// its base from the cache, the same. Met with its base rebuilt from another copy, never
/// verified, it is hashed again; when that copy is damaged it fails and names the base (taken
/// as verified, it would have given wrong bytes).
#[test]
fn a_delta_is_taken_as_verified_only_on_a_trusted_base() {
    let base = text(20_000, 5);
    let mut v1 = base.clone();
    v1[300..340].copy_from_slice(&[b'Z'; 40]);
    let b = full(&base);
    let dl = delta(&v1, &base);
    let mut d = PipelinedDecoder::new(HASHER);
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
    assert_eq!(decode(&mut d, fetched(dl.clone(), vec![])), Ok(v1.clone()));
    assert_eq!(d.stats().chunks_verified_before, 2);

    // Another copy of the base, intact but never verified: the delta is hashed again, and
    // again from the cache, which now holds that copy.
    assert_eq!(
        decode(&mut d, fetched(dl.clone(), vec![full(&base)])),
        Ok(v1.clone())
    );
    assert_eq!(decode(&mut d, fetched(dl.clone(), vec![])), Ok(v1.clone()));
    assert_eq!(d.stats().chunks_verified_before, 2);

    // A damaged copy of the base, in the bytes the delta copies from.
    let mut bytes = base.clone();
    bytes[5_000] ^= 0x20;
    let damaged = LocatedChunk::for_test(HASHER.id(&base), bytes.len(), None, bytes);
    let e = decode(&mut d, fetched(dl.clone(), vec![damaged])).unwrap_err();
    assert!(e.contains("delta base"), "{e}");
    assert_eq!(d.stats().chunks_verified_before, 2);
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
    let mut d = PipelinedDecoder::new(HASHER);
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
        fetched(cut, vec![]),
        fetched(long, vec![]),
        fetched(full(&after), vec![]),
    ];
    let refs: Vec<&FetchedChunk> = chunks.iter().collect();
    let mut d = PipelinedDecoder::new(HASHER);
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
