//! Encode and decode throughput of the delta codecs (Ddelta and Edelta against the
//! Xdelta-style baseline) on pairs of similar 8 KiB chunks.
//!
//! Synthetic pairs: a text-like 8 KiB base and a target made from it by scattered edits
//! (overwrites, insertions, deletions), 64 pairs per iteration so that no single pair sits in
//! the branch predictor. Throughput counts target bytes. The total delta size of each codec is
//! printed once before its timings. Run:
//! `cargo bench -p dedelta-core --bench delta`.
//!
//! Real data: with `DEDELTA_DELTA_PAIRS=old.tar,new.tar` set, the bench instead chunks both
//! files with FastCDC, pairs the non-duplicate chunks of the new file with base chunks of the
//! old one twice, by DARE's DupAdj rule (the old neighbour of the duplicate chunk next to it)
//! and by Finesse super-features (FirstFit, as the store does), and for each pairing
//! prints per codec the total delta size (raw, and after zstd in 128 KiB regions as the
//! containers store it) and the best-of-9 encode and decode throughput (target bytes per
//! second of wall time, one thread).

use criterion::{BenchmarkId, Criterion, Throughput};
use dedelta_core::delta::{new_codec, DeltaKind};
use std::hint::black_box;
use std::time::Duration;

const CHUNK_LEN: usize = 8 * 1024;
const PAIRS: usize = 64;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Text-like bytes: words from a small vocabulary, now and then a short run of noise.
fn text(rng: &mut Rng, len: usize) -> Vec<u8> {
    const VOCABULARY: &str = "def class self return None import from session query table \
        column = ( ) : , . if else for in not and or \n \n\x20\x20\x20\x20 \n\x20\x20\x20\x20\x20\x20\x20\x20";
    let words: Vec<&str> = VOCABULARY.split(' ').collect();
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        let r = rng.next();
        if r & 511 == 0 {
            for _ in 0..4 {
                out.extend_from_slice(&rng.next().to_le_bytes());
            }
        } else {
            out.extend_from_slice(words[(r >> 20) as usize % words.len()].as_bytes());
            out.push(b' ');
        }
    }
    out.truncate(len);
    out
}

/// A base chunk and a target derived from it by 4 to 12 scattered edits.
fn similar_pair(rng: &mut Rng) -> (Vec<u8>, Vec<u8>) {
    let base = text(rng, CHUNK_LEN);
    let mut target = base.clone();
    let edits = 4 + rng.below(9);
    for _ in 0..edits {
        let at = rng.below(target.len());
        let n = 1 + rng.below(24);
        match rng.below(3) {
            0 => {
                for i in at..(at + n).min(target.len()) {
                    target[i] = rng.next() as u8;
                }
            }
            1 => {
                let bytes = text(rng, n);
                target.splice(at..at, bytes);
            }
            _ => {
                let end = (at + n).min(target.len());
                target.drain(at..end);
            }
        }
    }
    (base, target)
}

fn bench_synthetic(c: &mut Criterion) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..PAIRS).map(|_| similar_pair(&mut rng)).collect();
    let target_bytes: usize = pairs.iter().map(|(_, t)| t.len()).sum();

    let mut encode = c.benchmark_group("delta_encode");
    encode.throughput(Throughput::Bytes(target_bytes as u64));
    for kind in DeltaKind::ALL {
        let codec = new_codec(kind);
        let delta_bytes: usize = pairs
            .iter()
            .map(|(b, t)| {
                let mut d = Vec::new();
                codec.encode(b, t, &mut d);
                d.len()
            })
            .sum();
        eprintln!(
            "{}: {delta_bytes} delta bytes for {target_bytes} target bytes ({:.2}%)",
            kind.name(),
            100.0 * delta_bytes as f64 / target_bytes as f64
        );
        let mut out = Vec::with_capacity(4 * CHUNK_LEN);
        encode.bench_function(BenchmarkId::from_parameter(kind.name()), |b| {
            b.iter(|| {
                for (base, target) in &pairs {
                    out.clear();
                    codec.encode(black_box(base), black_box(target), &mut out);
                    black_box(&out);
                }
            })
        });
    }
    encode.finish();

    let mut decode = c.benchmark_group("delta_decode");
    decode.throughput(Throughput::Bytes(target_bytes as u64));
    for kind in DeltaKind::ALL {
        let codec = new_codec(kind);
        let deltas: Vec<Vec<u8>> = pairs
            .iter()
            .map(|(b, t)| {
                let mut d = Vec::new();
                codec.encode(b, t, &mut d);
                d
            })
            .collect();
        let mut out = Vec::with_capacity(2 * CHUNK_LEN);
        decode.bench_function(BenchmarkId::from_parameter(kind.name()), |b| {
            b.iter(|| {
                for ((base, _), delta) in pairs.iter().zip(&deltas) {
                    out.clear();
                    codec
                        .decode(black_box(base), black_box(delta), &mut out)
                        .expect("valid delta");
                    black_box(&out);
                }
            })
        });
    }
    decode.finish();
}

/// The real-data measurement (see the module docs).
mod real {
    use dedelta_core::chunker::{chunk_all, new_chunker, ChunkerKind, ChunkerParams};
    use dedelta_core::compress::Compression;
    use dedelta_core::delta::{new_codec, DeltaKind};
    use dedelta_core::sketch::{new_sketcher, FirstFitIndex, SketchKind, SketchParams};
    use dedelta_core::ChunkId;
    use std::collections::HashMap;
    use std::time::Instant;

    const ROUNDS: usize = 9;

    /// A (base, target) pair.
    type Pair<'a> = (&'a [u8], &'a [u8]);

    /// Size after packing the items into 128 KiB regions compressed with the default zstd
    /// level, as the store's containers do.
    fn zstd_regions<'a>(items: impl Iterator<Item = &'a [u8]>) -> usize {
        const REGION: usize = 128 * 1024;
        let mut region = Vec::with_capacity(2 * REGION);
        let mut total = 0;
        for item in items {
            region.extend_from_slice(item);
            if region.len() >= REGION {
                total += Compression::default().compress(&region).1.len();
                region.clear();
            }
        }
        if !region.is_empty() {
            total += Compression::default().compress(&region).1.len();
        }
        total
    }

    fn chunks(data: &[u8]) -> Vec<&[u8]> {
        let chunker = new_chunker(ChunkerKind::FastCdc, ChunkerParams::default())
            .expect("default params are valid");
        chunk_all(chunker.as_ref(), data)
            .into_iter()
            .map(|r| &data[r])
            .collect()
    }

    /// DupAdj pairing: (base, target) for each non-duplicate chunk of `new` next to a
    /// duplicate (or next to an already paired chunk, continuing the run).
    fn pairs<'a>(old: &[&'a [u8]], new: &[&'a [u8]]) -> (Vec<Pair<'a>>, usize) {
        let old_pos: HashMap<ChunkId, usize> = old
            .iter()
            .enumerate()
            .map(|(i, c)| (ChunkId::of(c), i))
            .collect();
        let new_pos: Vec<Option<usize>> = new
            .iter()
            .map(|c| old_pos.get(&ChunkId::of(c)).copied())
            .collect();
        let mut base_of: Vec<Option<usize>> = vec![None; new.len()];
        // Forward: the chunk after a duplicate (or after a paired chunk) pairs with the old
        // chunk after its counterpart.
        for i in 0..new.len() {
            if new_pos[i].is_some() || i == 0 {
                continue;
            }
            let prev = new_pos[i - 1].or(base_of[i - 1]);
            base_of[i] = prev.map(|j| j + 1).filter(|&j| j < old.len());
        }
        // Backward, for what is still unpaired.
        for i in (0..new.len().saturating_sub(1)).rev() {
            if new_pos[i].is_some() || base_of[i].is_some() {
                continue;
            }
            let next = new_pos[i + 1].or(base_of[i + 1]);
            base_of[i] = next.and_then(|j| j.checked_sub(1));
        }
        let unique = new_pos.iter().filter(|p| p.is_none()).count();
        let list = base_of
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.map(|b| (old[b], new[i])))
            .collect();
        (list, unique)
    }

    /// Finesse pairing (3 super-features of 4 features, FirstFit): each non-duplicate chunk
    /// of `new` with the first chunk of `old` that shares a super-feature, as the store does.
    fn finesse_pairs<'a>(old: &[&'a [u8]], new: &[&'a [u8]]) -> Vec<Pair<'a>> {
        let sketcher = new_sketcher(SketchKind::Finesse, SketchParams::default())
            .expect("default params are valid");
        let old_ids: std::collections::HashSet<ChunkId> =
            old.iter().map(|c| ChunkId::of(c)).collect();
        let index: FirstFitIndex<&[u8]> = old.iter().map(|c| (*c, sketcher.sketch(c))).collect();
        new.iter()
            .filter(|c| !old_ids.contains(&ChunkId::of(c)))
            .filter_map(|c| Some((index.lookup(&sketcher.sketch(c))?, *c)))
            .collect()
    }

    fn measure(what: &str, pairs: &[Pair<'_>]) {
        let target_bytes: usize = pairs.iter().map(|(_, t)| t.len()).sum();
        let base_bytes: usize = pairs.iter().map(|(b, _)| b.len()).sum();
        println!(
            "\n{what}: {} pairs, {target_bytes} target bytes ({} after zstd), {base_bytes} base bytes",
            pairs.len(),
            zstd_regions(pairs.iter().map(|(_, t)| *t))
        );
        println!("codec    delta_bytes  ratio   +zstd_bytes  encode_MB/s  decode_MB/s");
        for kind in DeltaKind::ALL {
            let codec = new_codec(kind);
            let mut deltas: Vec<Vec<u8>> = vec![Vec::new(); pairs.len()];
            let mut best_encode = f64::MAX;
            for _ in 0..ROUNDS {
                for d in deltas.iter_mut() {
                    d.clear();
                }
                let t0 = Instant::now();
                for ((b, t), d) in pairs.iter().zip(deltas.iter_mut()) {
                    codec.encode(b, t, d);
                }
                best_encode = best_encode.min(t0.elapsed().as_secs_f64());
            }
            let delta_bytes: usize = deltas.iter().map(Vec::len).sum();
            let mut out = Vec::with_capacity(1 << 20);
            let mut best_decode = f64::MAX;
            for _ in 0..ROUNDS {
                let t0 = Instant::now();
                for ((b, _), d) in pairs.iter().zip(&deltas) {
                    out.clear();
                    codec.decode(b, d, &mut out).expect("valid delta");
                }
                best_decode = best_decode.min(t0.elapsed().as_secs_f64());
            }
            for ((b, t), d) in pairs.iter().zip(&deltas) {
                out.clear();
                codec.decode(b, d, &mut out).expect("valid delta");
                assert!(out == *t, "{}: round trip failed", kind.name());
            }
            println!(
                "{:8} {:11}  {:5.2}%  {:11}  {:11.0}  {:11.0}",
                kind.name(),
                delta_bytes,
                100.0 * delta_bytes as f64 / target_bytes as f64,
                zstd_regions(deltas.iter().map(Vec::as_slice)),
                target_bytes as f64 / best_encode / 1e6,
                target_bytes as f64 / best_decode / 1e6
            );
        }
    }

    pub fn report(spec: &str) {
        let (old_path, new_path) = spec.split_once(',').expect("DEDELTA_DELTA_PAIRS=old,new");
        let old_data = std::fs::read(old_path).expect("read old");
        let new_data = std::fs::read(new_path).expect("read new");
        let (old, new) = (chunks(&old_data), chunks(&new_data));
        let (dupadj, unique) = pairs(&old, &new);
        println!(
            "old {} B in {} chunks, new {} B in {} chunks, {} non-duplicate",
            old_data.len(),
            old.len(),
            new_data.len(),
            new.len(),
            unique
        );
        measure("DupAdj pairing", &dupadj);
        measure("Finesse pairing", &finesse_pairs(&old, &new));
    }
}

fn main() {
    if let Ok(spec) = std::env::var("DEDELTA_DELTA_PAIRS") {
        real::report(&spec);
        return;
    }
    let mut c = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench_synthetic(&mut c);
    c.final_summary();
}
