//! Single-thread kernel speeds on a sample of the dataset: super-feature computing and delta
//! encode/decode, the way `dedelta bench sketch` and `bench delta` measure them.
//!
//! The sample is the first [`SAMPLE_BYTES`] of the last two versions (files only), chunked
//! with the repository's default FastCDC parameters. Sketch speed is measured over the chunks
//! of the newer sample that are not duplicates of the older one (the chunks a backup
//! sketches); codecs over the similar pairs that Finesse 3x4 finds between them. Each timing
//! is the fastest of [`RUNS`] runs.

use crate::dataset::Dataset;
use crate::error::{EvalError, IoContext, Result};
use dedelta_core::chunker::{chunk_all, new_chunker, ChunkerKind, ChunkerParams};
use dedelta_core::delta::{new_codec, DeltaKind};
use dedelta_core::sketch::{new_sketcher, FirstFitIndex, SketchKind, SketchParams};
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::io::Read;
use std::time::{Duration, Instant};

/// Bytes of each version that the kernels are measured on.
pub const SAMPLE_BYTES: u64 = 16 << 20;
/// Runs per timing (the fastest counts).
pub const RUNS: usize = 3;

/// Codec speeds on the sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct CodecSpeed {
    /// Target bytes encoded per second, in MB (10^6).
    pub encode_mb_s: f64,
    /// Target bytes decoded per second, in MB.
    pub decode_mb_s: f64,
    /// Target bytes / delta bytes.
    pub ratio: f64,
}

/// Measured kernels, computed lazily per sketch and codec.
pub struct Kernels {
    new_chunks: Vec<Vec<u8>>,
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    sketch: HashMap<(&'static str, usize, usize), f64>,
    codec: HashMap<&'static str, CodecSpeed>,
}

fn read_prefix(path: &std::path::Path) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(SAMPLE_BYTES).read_to_end(&mut out))
        .ctx(|| format!("reading {}", path.display()))?;
    Ok(out)
}

fn fastest(mut f: impl FnMut()) -> Duration {
    (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn mb_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

impl Kernels {
    /// Prepares the sample; `None` when the dataset has fewer than two file versions.
    ///
    /// # Errors
    /// A version cannot be read.
    pub fn prepare(dataset: &Dataset) -> Result<Option<Self>> {
        let files: Vec<_> = dataset.versions.iter().filter(|v| !v.is_dir).collect();
        if files.len() < 2 {
            return Ok(None);
        }
        let old = read_prefix(&files[files.len() - 2].path)?;
        let new = read_prefix(&files[files.len() - 1].path)?;
        let chunker = new_chunker(ChunkerKind::FastCdc, ChunkerParams::default())
            .map_err(|e| EvalError::InvalidOption(e.to_string()))?;
        let old_chunks: Vec<&[u8]> = chunk_all(chunker.as_ref(), &old)
            .into_iter()
            .map(|r| &old[r])
            .collect();
        let old_ids: HashSet<ChunkId> = old_chunks.iter().map(|c| ChunkId::of(c)).collect();
        let new_chunks: Vec<Vec<u8>> = chunk_all(chunker.as_ref(), &new)
            .into_iter()
            .map(|r| &new[r])
            .filter(|c| !old_ids.contains(&ChunkId::of(c)))
            .map(<[u8]>::to_vec)
            .collect();
        let sketcher = new_sketcher(SketchKind::Finesse, SketchParams::default())
            .map_err(|e| EvalError::InvalidOption(e.to_string()))?;
        let index: FirstFitIndex<&[u8]> = old_chunks
            .iter()
            .map(|c| (*c, sketcher.sketch(c)))
            .collect();
        let pairs = new_chunks
            .iter()
            .filter_map(|c| Some((index.lookup(&sketcher.sketch(c))?.to_vec(), c.clone())))
            .collect();
        Ok(Some(Kernels {
            new_chunks,
            pairs,
            sketch: HashMap::new(),
            codec: HashMap::new(),
        }))
    }

    /// Super-feature computing speed in MB/s (single thread).
    ///
    /// # Errors
    /// Invalid sketch parameters.
    pub fn sketch_mb_s(&mut self, kind: SketchKind, params: SketchParams) -> Result<f64> {
        let key = (kind.name(), params.sf_count, params.features_per_sf);
        if let Some(&v) = self.sketch.get(&key) {
            return Ok(v);
        }
        let sketcher =
            new_sketcher(kind, params).map_err(|e| EvalError::InvalidOption(e.to_string()))?;
        let bytes: usize = self.new_chunks.iter().map(Vec::len).sum();
        let d = fastest(|| {
            for c in &self.new_chunks {
                black_box(sketcher.sketch(c));
            }
        });
        let v = mb_s(bytes, d);
        self.sketch.insert(key, v);
        Ok(v)
    }

    /// Encode and decode speed of a codec on the similar pairs (single thread).
    ///
    /// # Errors
    /// A delta does not decode to its target.
    pub fn codec(&mut self, kind: DeltaKind) -> Result<CodecSpeed> {
        if let Some(&v) = self.codec.get(kind.name()) {
            return Ok(v);
        }
        let codec = new_codec(kind);
        let bytes: usize = self.pairs.iter().map(|(_, t)| t.len()).sum();
        let mut deltas = Vec::new();
        let enc = fastest(|| {
            deltas = self
                .pairs
                .iter()
                .map(|(b, t)| {
                    let mut d = Vec::new();
                    codec.encode(b, t, &mut d);
                    d
                })
                .collect();
        });
        let mut ok = true;
        let dec = fastest(|| {
            let mut out = Vec::with_capacity(1 << 16);
            for ((b, _), d) in self.pairs.iter().zip(&deltas) {
                out.clear();
                ok &= codec.decode(b, d, &mut out).is_ok();
                black_box(&out);
            }
        });
        for ((b, t), d) in self.pairs.iter().zip(&deltas) {
            let mut out = Vec::new();
            ok &= codec.decode(b, d, &mut out).is_ok() && out == *t;
        }
        if !ok {
            return Err(EvalError::Tool {
                tool: format!("codec {}", kind.name()),
                reason: "a delta did not decode to its target".into(),
            });
        }
        let delta_bytes: usize = deltas.iter().map(Vec::len).sum();
        let v = CodecSpeed {
            encode_mb_s: mb_s(bytes, enc),
            decode_mb_s: mb_s(bytes, dec),
            ratio: bytes as f64 / delta_bytes.max(1) as f64,
        };
        self.codec.insert(kind.name(), v);
        Ok(v)
    }

    /// Similar pairs found in the sample.
    pub fn pairs(&self) -> usize {
        self.pairs.len()
    }
}
