//! Throughput of the chunkers (Gear against its Rabin baseline, FastCDC, fixed) and of the
//! sketches (Finesse and Odess against the N-transform baseline) on 8 MiB of generated data.
//!
//! The data is pseudo-random but compressible (words drawn from a small vocabulary, with
//! runs of binary noise), so that neither the hash tables nor the branch predictor see a
//! degenerate input. Run: `cargo bench -p dedelta-core --bench chunk_sketch`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dedelta_core::chunker::{chunk_all, new_chunker, ChunkerKind, ChunkerParams};
use dedelta_core::sketch::{new_sketcher, SketchKind, SketchParams};
use std::hint::black_box;
use std::time::Duration;

const DATA_LEN: usize = 8 << 20;

/// Deterministic text-like data: xorshift-chosen words (a newline after one in 16), with a
/// 256-byte run of noise once per ~2048 words (~10 KiB).
fn corpus(len: usize) -> Vec<u8> {
    const VOCABULARY: &str = "the of backup chunk delta store index = { } ( ); return fn let \
        mut self data 0x1f if else match Some None usize u64 :: container sketch feature";
    let words: Vec<&str> = VOCABULARY.split_whitespace().collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        let r = next();
        if r % 2048 == 0 {
            for _ in 0..32 {
                out.extend_from_slice(&next().to_le_bytes());
            }
        } else {
            out.extend_from_slice(words[(r >> 20) as usize % words.len()].as_bytes());
            out.push(if r % 16 == 0 { b'\n' } else { b' ' });
        }
    }
    out.truncate(len);
    out
}

fn bench_chunkers(c: &mut Criterion) {
    let data = corpus(DATA_LEN);
    let mut g = c.benchmark_group("chunk");
    g.throughput(Throughput::Bytes(data.len() as u64));
    for kind in ChunkerKind::ALL {
        let chunker = new_chunker(kind, ChunkerParams::default()).expect("default params");
        g.bench_function(BenchmarkId::from_parameter(kind.name()), |b| {
            b.iter(|| black_box(chunk_all(chunker.as_ref(), black_box(&data)).len()))
        });
    }
    g.finish();
}

fn bench_sketches(c: &mut Criterion) {
    let data = corpus(DATA_LEN);
    let chunker = new_chunker(ChunkerKind::FastCdc, ChunkerParams::default()).expect("params");
    let chunks: Vec<&[u8]> = chunk_all(chunker.as_ref(), &data)
        .into_iter()
        .map(|r| &data[r])
        .collect();
    let sf4 = SketchParams::default();
    let sf2 = SketchParams {
        sf_count: 3,
        features_per_sf: 2,
    };
    let methods = [
        ("ntransform", SketchKind::NTransform, sf4),
        ("ntransform-2f", SketchKind::NTransform, sf2),
        ("finesse", SketchKind::Finesse, sf4),
        ("odess", SketchKind::Odess, sf4),
    ];
    let mut g = c.benchmark_group("sketch");
    g.throughput(Throughput::Bytes(data.len() as u64));
    for (name, kind, params) in methods {
        let sketcher = new_sketcher(kind, params).expect("valid params");
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let mut acc = 0u64;
                for ch in &chunks {
                    acc ^= sketcher.sketch(black_box(ch)).0[0];
                }
                black_box(acc)
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_chunkers, bench_sketches
}
criterion_main!(benches);
