//! `dedelta bench chunk|sketch`: single-threaded throughput of the chunkers and the sketches on
//! the caller's files, read into memory first so that only the algorithm is timed.
//!
//! Each method runs at least [`MIN_RUNS`] times and until [`MIN_SECONDS`] have passed (at most
//! [`MAX_RUNS`] runs); the fastest run is reported, the usual choice for a CPU-bound kernel on a
//! machine with other load (the slower runs measure the neighbours). Throughput is in
//! MB/s = 10^6 bytes per second of input.
//!
//! Output: a table, or with `--json` one object
//! `{"results":[{"method":"gear","mb_per_s":812.5,"chunks":1234}, ...]}`.

use anyhow::{bail, Context, Result};
use dedelta_core::chunker::{chunk_all, new_chunker, ChunkerKind, ChunkerParams};
use dedelta_core::sketch::{new_sketcher, SketchKind, SketchParams};
use serde::Serialize;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Every method runs at least this many times.
const MIN_RUNS: usize = 3;
/// ... and keeps running until this much time has passed ...
const MIN_SECONDS: f64 = 1.0;
/// ... but never more than this many times.
const MAX_RUNS: usize = 20;

/// One measured method.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchResult {
    /// The method's name (`gear`, `ntransform-2f`, ...).
    pub method: String,
    /// Throughput of the fastest run, in 10^6 bytes per second.
    pub mb_per_s: f64,
    /// Chunks produced (chunkers) or sketched (sketches) in one run.
    pub chunks: usize,
}

/// The JSON document: `{"results": [...]}`.
#[derive(Serialize)]
struct Report<'a> {
    results: &'a [BenchResult],
}

/// `dedelta bench chunk FILES...`: times the Rabin, Gear, FastCDC and fixed-size chunkers
/// with the default 2/8/64 KiB sizes, each file chunked as its own stream.
///
/// # Errors
///
/// A file cannot be read, the files hold no bytes, or stdout fails.
pub fn bench_chunk(files: &[PathBuf], json: bool) -> Result<()> {
    let data = read_files(files)?;
    let results = measure_chunkers(&data)?;
    print_results("chunk", &data, &results, json)
}

/// `dedelta bench sketch FILES...`: cuts the files with FastCDC (2/8/64 KiB), then times each
/// sketch method over all the chunks: `ntransform` (3 SFs x 4 features), `ntransform-2f`
/// (3 x 2), `finesse` (3 x 4) and `odess` (3 x 4).
///
/// # Errors
///
/// A file cannot be read, the files hold no bytes, or stdout fails.
pub fn bench_sketch(files: &[PathBuf], json: bool) -> Result<()> {
    let data = read_files(files)?;
    let results = measure_sketches(&data)?;
    print_results("sketch", &data, &results, json)
}

/// Reads every file whole; refuses an empty input (no throughput to measure).
pub(crate) fn read_files(files: &[PathBuf]) -> Result<Vec<Vec<u8>>> {
    let mut data = Vec::with_capacity(files.len());
    for f in files {
        data.push(std::fs::read(f).with_context(|| format!("reading {}", f.display()))?);
    }
    if data.iter().all(|d| d.is_empty()) {
        bail!("nothing to measure: the input files are empty (or none were given)");
    }
    Ok(data)
}

/// Runs `f` [`MIN_RUNS`]..=[`MAX_RUNS`] times (until [`MIN_SECONDS`]), returns the fastest
/// run's duration and its result.
pub(crate) fn fastest<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let started = Instant::now();
    let mut best: Option<(Duration, T)> = None;
    for run in 0..MAX_RUNS {
        let t = Instant::now();
        let out = black_box(f());
        let took = t.elapsed();
        let faster = match &best {
            Some((b, _)) => took < *b,
            None => true,
        };
        if faster {
            best = Some((took, out));
        }
        if run + 1 >= MIN_RUNS && started.elapsed().as_secs_f64() >= MIN_SECONDS {
            break;
        }
    }
    match best {
        Some(b) => b,
        // MAX_RUNS >= 1, so the loop ran; this arm only satisfies the type checker.
        None => (Duration::ZERO, f()),
    }
}

/// `bytes` over `d` in MB/s; 0 when nothing was timed (no division by zero, no infinity in the
/// JSON).
pub(crate) fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    let secs = d.as_secs_f64();
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}

fn total_bytes(data: &[Vec<u8>]) -> usize {
    data.iter().map(Vec::len).sum()
}

/// Times every chunker in [`ChunkerKind::ALL`] order (rabin, gear, fastcdc, fixed).
fn measure_chunkers(data: &[Vec<u8>]) -> Result<Vec<BenchResult>> {
    let bytes = total_bytes(data);
    let mut results = Vec::new();
    for kind in ChunkerKind::ALL {
        let chunker = new_chunker(kind, ChunkerParams::default())
            .with_context(|| format!("building the {} chunker", kind.name()))?;
        let (took, chunks) = fastest(|| {
            data.iter()
                .map(|d| chunk_all(chunker.as_ref(), black_box(d)).len())
                .sum::<usize>()
        });
        results.push(BenchResult {
            method: kind.name().to_string(),
            mb_per_s: mb_per_s(bytes, took),
            chunks,
        });
    }
    Ok(results)
}

/// The sketch configurations measured, in output order.
fn sketch_methods() -> [(&'static str, SketchKind, SketchParams); 4] {
    let sf4 = SketchParams::default();
    let sf2 = SketchParams {
        sf_count: 3,
        features_per_sf: 2,
    };
    [
        ("ntransform", SketchKind::NTransform, sf4),
        ("ntransform-2f", SketchKind::NTransform, sf2),
        ("finesse", SketchKind::Finesse, sf4),
        ("odess", SketchKind::Odess, sf4),
    ]
}

/// Cuts the data with FastCDC, then times every sketch method over all the chunks.
fn measure_sketches(data: &[Vec<u8>]) -> Result<Vec<BenchResult>> {
    let chunker = new_chunker(ChunkerKind::FastCdc, ChunkerParams::default())
        .context("building the fastcdc chunker")?;
    let chunks: Vec<&[u8]> = data
        .iter()
        .flat_map(|d| chunk_all(chunker.as_ref(), d).into_iter().map(|r| &d[r]))
        .collect();
    let bytes = total_bytes(data);
    let mut results = Vec::new();
    for (name, kind, params) in sketch_methods() {
        let sketcher =
            new_sketcher(kind, params).with_context(|| format!("building the {name} sketcher"))?;
        let (took, _) = fastest(|| {
            // Fold every SF in, so that no sketch can be optimised away.
            chunks.iter().fold(0u64, |acc, c| {
                sketcher
                    .sketch(black_box(c))
                    .0
                    .iter()
                    .fold(acc, |a, sf| a ^ sf)
            })
        });
        results.push(BenchResult {
            method: name.to_string(),
            mb_per_s: mb_per_s(bytes, took),
            chunks: chunks.len(),
        });
    }
    Ok(results)
}

/// Renders the results: a table, or the JSON object.
fn print_results(what: &str, data: &[Vec<u8>], results: &[BenchResult], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(&Report { results })?);
        return Ok(());
    }
    println!(
        "{what} throughput, single thread, {:.1} MB in {} file(s), fastest of up to {MAX_RUNS} runs",
        total_bytes(data) as f64 / 1e6,
        data.len()
    );
    println!("{:<16} {:>10} {:>10}", "method", "MB/s", "chunks");
    for r in results {
        println!("{:<16} {:>10.1} {:>10}", r.method, r.mb_per_s, r.chunks);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_data() -> Vec<Vec<u8>> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut file = |len: usize| -> Vec<u8> {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 40) as u8
                })
                .collect()
        };
        vec![file(300_000), file(0), file(5_000)]
    }

    #[test]
    fn chunk_results_cover_every_chunker() {
        let data = sample_data();
        let r = measure_chunkers(&data).unwrap();
        let names: Vec<&str> = r.iter().map(|r| r.method.as_str()).collect();
        assert_eq!(names, ["rabin", "gear", "fastcdc", "fixed"]);
        for res in &r {
            assert!(res.mb_per_s > 0.0 && res.mb_per_s.is_finite(), "{res:?}");
            assert!(res.chunks >= 2, "{res:?}");
        }
        // Fixed-size: 300_000 / 8192 -> 37 chunks, 5_000 -> 1.
        assert_eq!(r[3].chunks, 37 + 1);
    }

    #[test]
    fn sketch_results_cover_every_method() {
        let data = sample_data();
        let r = measure_sketches(&data).unwrap();
        let names: Vec<&str> = r.iter().map(|r| r.method.as_str()).collect();
        assert_eq!(names, ["ntransform", "ntransform-2f", "finesse", "odess"]);
        assert!(r.iter().all(|x| x.chunks == r[0].chunks && x.chunks > 2));
    }

    #[test]
    fn json_shape() {
        let results = [BenchResult {
            method: "gear".into(),
            mb_per_s: 812.5,
            chunks: 1234,
        }];
        let s = serde_json::to_string(&Report { results: &results }).unwrap();
        assert_eq!(
            s,
            r#"{"results":[{"method":"gear","mb_per_s":812.5,"chunks":1234}]}"#
        );
    }

    #[test]
    fn refuses_empty_or_missing_input() {
        assert!(read_files(&[]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert!(read_files(std::slice::from_ref(&empty)).is_err());
        assert!(read_files(&[dir.path().join("missing")]).is_err());
    }
}
