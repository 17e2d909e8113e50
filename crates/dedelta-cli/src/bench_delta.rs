//! `dedelta bench delta OLD NEW`: every delta codec on the similar chunk pairs of two versions.
//!
//! Both files are chunked with FastCDC (2/8/64 KiB). Each chunk of NEW that is not a
//! duplicate of a chunk of OLD is paired, by Finesse super-features (3 x 4, FirstFit), with a
//! similar chunk of OLD. Every codec encodes all pairs and decodes them back (timed
//! separately, single thread, fastest of several runs), and every round trip is verified.
//! Output: a table, or with `--json` one object `{"results": [...]}` with one entry per codec.
//! `delta_zstd_bytes` is what the deltas occupy as containers store them: concatenated into
//! 128 KiB regions, each compressed with the repository default (zstd 3, or 6 where a region
//! looks compressible).
//!
//! `--dump-pairs FILE` also writes the pairs, so that outside codecs run on exactly the same
//! chunks (`scripts/xdelta3-chunks.py`, real xdelta3 in process): per pair a 4-byte
//! little-endian base length, the base, a 4-byte little-endian target length, the target.

use crate::bench::{fastest, mb_per_s, read_files};
use anyhow::{bail, Context, Result};
use dedelta_core::chunker::{chunk_all, new_chunker, ChunkerKind, ChunkerParams};
use dedelta_core::compress::Compression;
use dedelta_core::delta::{new_codec, DeltaKind};
use dedelta_core::sketch::{new_sketcher, FirstFitIndex, SketchKind, SketchParams};
use dedelta_core::ChunkId;
use serde::Serialize;
use std::collections::HashSet;
use std::hint::black_box;
use std::path::Path;

/// One codec's result.
#[derive(Clone, Debug, Serialize)]
pub struct DeltaResult {
    /// Codec name.
    pub codec: String,
    /// Target bytes encoded per second (10^6).
    pub encode_mb_per_s: f64,
    /// Target bytes decoded per second (10^6).
    pub decode_mb_per_s: f64,
    /// Bytes of the target chunks of all pairs.
    pub input_bytes: usize,
    /// Bytes of all deltas.
    pub delta_bytes: usize,
    /// The deltas as stored: in [`REGION_BYTES`] regions, compressed as containers compress.
    pub delta_zstd_bytes: usize,
    /// Pairs.
    pub pairs: usize,
    /// Whether every decode reproduced its target.
    pub roundtrip_ok: bool,
}

/// Raw bytes per compression region, as the repository default (`region_size`).
pub const REGION_BYTES: usize = 128 * 1024;

/// Bytes of `deltas` concatenated into [`REGION_BYTES`] regions (a delta is not split, as
/// the packer does not split entries), each compressed with the repository default.
fn stored_bytes(deltas: &[Vec<u8>]) -> usize {
    let compression = Compression::default();
    let mut total = 0;
    let mut region: Vec<u8> = Vec::with_capacity(2 * REGION_BYTES);
    let mut flush = |region: &mut Vec<u8>| {
        if !region.is_empty() {
            total += compression.compress(region).1.len();
            region.clear();
        }
    };
    for d in deltas {
        region.extend_from_slice(d);
        if region.len() >= REGION_BYTES {
            flush(&mut region);
        }
    }
    flush(&mut region);
    total
}

/// Writes the pairs in the `--dump-pairs` format (see the module doc).
fn dump_pairs(path: &Path, pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
    let mut out = Vec::new();
    for (b, t) in pairs {
        for part in [b, t] {
            let len = u32::try_from(part.len())?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// Pairs of (base, target) chunks.
fn similar_pairs(old: &[u8], new: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let chunker = new_chunker(ChunkerKind::FastCdc, ChunkerParams::default())?;
    let sketcher = new_sketcher(SketchKind::Finesse, SketchParams::default())?;
    let old_chunks: Vec<&[u8]> = chunk_all(chunker.as_ref(), old)
        .into_iter()
        .map(|r| &old[r])
        .collect();
    let old_ids: HashSet<ChunkId> = old_chunks.iter().map(|c| ChunkId::of(c)).collect();
    let index: FirstFitIndex<&[u8]> = old_chunks
        .iter()
        .map(|c| (*c, sketcher.sketch(c)))
        .collect();
    let mut pairs = Vec::new();
    for r in chunk_all(chunker.as_ref(), new) {
        let c = &new[r];
        if old_ids.contains(&ChunkId::of(c)) {
            continue;
        }
        if let Some(base) = index.lookup(&sketcher.sketch(c)) {
            pairs.push((base.to_vec(), c.to_vec()));
        }
    }
    Ok(pairs)
}

/// Measures every codec on the pairs; writes them to `dump` first when given.
pub fn measure(old: &[u8], new: &[u8], dump: Option<&Path>) -> Result<Vec<DeltaResult>> {
    let pairs = similar_pairs(old, new)?;
    if let Some(path) = dump {
        dump_pairs(path, &pairs)?;
    }
    let input_bytes: usize = pairs.iter().map(|(_, t)| t.len()).sum();
    let mut results = Vec::new();
    for kind in DeltaKind::ALL {
        let codec = new_codec(kind);
        let (enc_time, deltas) = fastest(|| {
            pairs
                .iter()
                .map(|(b, t)| {
                    let mut d = Vec::new();
                    codec.encode(b, t, &mut d);
                    d
                })
                .collect::<Vec<_>>()
        });
        let mut roundtrip_ok = true;
        let (dec_time, _) = fastest(|| {
            let mut out = Vec::with_capacity(65536);
            for ((b, _), d) in pairs.iter().zip(&deltas) {
                out.clear();
                if codec.decode(b, d, &mut out).is_err() {
                    roundtrip_ok = false;
                }
                black_box(&out);
            }
        });
        for ((b, t), d) in pairs.iter().zip(&deltas) {
            let mut out = Vec::new();
            roundtrip_ok &= codec.decode(b, d, &mut out).is_ok() && out == *t;
        }
        results.push(DeltaResult {
            codec: kind.name().to_string(),
            encode_mb_per_s: mb_per_s(input_bytes, enc_time),
            decode_mb_per_s: mb_per_s(input_bytes, dec_time),
            input_bytes,
            delta_bytes: deltas.iter().map(Vec::len).sum(),
            delta_zstd_bytes: stored_bytes(&deltas),
            pairs: pairs.len(),
            roundtrip_ok,
        });
    }
    Ok(results)
}

/// `dedelta bench delta OLD NEW`.
///
/// # Errors
/// A file cannot be read, or a round trip fails (exit 1 after printing the results).
pub fn bench_delta(old: &Path, new: &Path, json: bool, dump: Option<&Path>) -> Result<()> {
    let data = read_files(&[old.to_path_buf(), new.to_path_buf()])?;
    let results = measure(&data[0], &data[1], dump)?;
    if json {
        println!("{}", serde_json::json!({ "results": results }));
    } else {
        println!(
            "delta codecs, single thread, {} similar pairs ({:.1} MB of targets)",
            results[0].pairs,
            results[0].input_bytes as f64 / 1e6
        );
        println!(
            "{:<8} {:>12} {:>12} {:>14} {:>12} {:>8} {:>10}",
            "codec",
            "encode MB/s",
            "decode MB/s",
            "delta bytes",
            "+zstd bytes",
            "ratio",
            "roundtrip"
        );
        for r in &results {
            println!(
                "{:<8} {:>12.1} {:>12.1} {:>14} {:>12} {:>8.2} {:>10}",
                r.codec,
                r.encode_mb_per_s,
                r.decode_mb_per_s,
                r.delta_bytes,
                r.delta_zstd_bytes,
                r.input_bytes as f64 / r.delta_bytes.max(1) as f64,
                if r.roundtrip_ok { "ok" } else { "FAILED" }
            );
        }
    }
    if results.iter().any(|r| !r.roundtrip_ok) {
        bail!("a delta codec failed its round trip");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_every_codec_and_round_trips() {
        let mut old = Vec::new();
        for i in 0..20_000u32 {
            old.extend_from_slice(
                format!("line {i} value {}\n", i.wrapping_mul(2_654_435_761) % 1000).as_bytes(),
            );
        }
        let mut new = old.clone();
        for k in 0..40 {
            new[k * 7_919 % old.len()] = b'#';
        }
        let dir = tempfile::tempdir().unwrap();
        let dump = dir.path().join("pairs.bin");
        let r = measure(&old, &new, Some(&dump)).unwrap();
        assert_eq!(r.len(), DeltaKind::ALL.len());
        for x in &r {
            assert!(
                x.roundtrip_ok
                    && x.pairs > 0
                    && x.delta_bytes < x.input_bytes / 4
                    && x.delta_zstd_bytes > 0
                    && x.delta_zstd_bytes <= x.delta_bytes + 64,
                "{x:?}"
            );
        }
        // The dump holds every pair, length-prefixed, the targets summing to input_bytes.
        let bytes = std::fs::read(&dump).unwrap();
        let (mut at, mut pairs, mut targets) = (0, 0, 0);
        while at < bytes.len() {
            for side in 0..2 {
                let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
                at += 4 + len;
                if side == 1 {
                    targets += len;
                }
            }
            pairs += 1;
        }
        assert_eq!(at, bytes.len());
        assert_eq!((pairs, targets), (r[0].pairs, r[0].input_bytes));
    }

    #[test]
    fn stored_bytes_compresses_per_region() {
        assert_eq!(stored_bytes(&[]), 0);
        let text = vec![b"abcdefgh".repeat(40_000)];
        let s = stored_bytes(&text);
        assert!(s > 0 && s < 10_000, "{s}");
    }
}
