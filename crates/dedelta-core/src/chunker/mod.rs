//! Chunkers: where to cut a byte stream into chunks.
//!
//! One trait, [`Chunker`], asks a single question: how long is the chunk that starts here? The
//! caller keeps a buffer that holds at least [`Chunker::max_size`] bytes (or the rest of the
//! stream), so cut points never depend on how the stream was split into reads: the property
//! the repository's deduplication rests on. [`cut::cut_buffer`] is the one loop that keeps
//! that rule for a stream read in pieces; [`chunk_all`] is its one-buffer case.
//!
//! Implementations, one per file:
//! - [`fastcdc::FastCdcChunker`]: FastCDC 2020 with normalized chunking (the `fastcdc` crate), the default.
//! - [`gear::GearChunker`]: Gear CDC as in Ddelta §3.2 (Algorithm 2).
//! - [`rabin::RabinChunker`]: Rabin CDC as in LBFS and destor (48-byte window).
//! - [`fixed::FixedChunker`]: fixed-size chunks.

pub mod cut;
pub mod fastcdc;
pub mod fixed;
pub mod gear;
pub mod rabin;

pub use cut::{cut_buffer, Cuts};

use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Cuts a stream into chunks. Implementations are pure and deterministic.
pub trait Chunker: Send + Sync {
    /// Length of the chunk that starts at `data[0]`.
    ///
    /// Contract: `data` is non-empty and holds either at least [`Chunker::max_size`] bytes or the
    /// whole rest of the stream. The result is in `1..=min(data.len(), max_size)` and is shorter
    /// than `min_size` only when `data` is the (short) end of the stream.
    fn next_chunk_len(&self, data: &[u8]) -> usize;

    /// The size bounds this chunker was built with.
    fn params(&self) -> ChunkerParams;

    /// Largest chunk this chunker returns.
    fn max_size(&self) -> usize {
        self.params().max_size
    }

    /// The method's name as used on the command line and in benchmarks (`fastcdc`, `gear`, ...).
    fn name(&self) -> &'static str;
}

/// Minimum, average (target) and maximum chunk size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkerParams {
    /// No chunk but the last of a stream is shorter.
    pub min_size: usize,
    /// The expected chunk size; a power of two for the CDC chunkers.
    pub avg_size: usize,
    /// No chunk is longer.
    pub max_size: usize,
}

impl Default for ChunkerParams {
    /// 2 / 8 / 64 KiB, the repository default.
    fn default() -> Self {
        ChunkerParams {
            min_size: 2 * 1024,
            avg_size: 8 * 1024,
            max_size: 64 * 1024,
        }
    }
}

/// Which chunking method; recorded in the repository config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChunkerKind {
    /// FastCDC 2020, normalization level 1, the `fastcdc` crate's fixed Gear table.
    FastCdc,
    /// Gear CDC (Ddelta).
    Gear,
    /// Rabin CDC (LBFS).
    Rabin,
    /// Fixed-size chunks of `avg_size`.
    Fixed,
}

impl ChunkerKind {
    /// All kinds, in benchmark order.
    pub const ALL: [ChunkerKind; 4] = [
        ChunkerKind::Rabin,
        ChunkerKind::Gear,
        ChunkerKind::FastCdc,
        ChunkerKind::Fixed,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ChunkerKind::FastCdc => "fastcdc",
            ChunkerKind::Gear => "gear",
            ChunkerKind::Rabin => "rabin",
            ChunkerKind::Fixed => "fixed",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Invalid chunker parameters.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChunkerError {
    /// The sizes are not ordered `min <= avg <= max`, or out of the supported range.
    #[error("invalid chunk sizes min={min} avg={avg} max={max}: {reason}")]
    InvalidSizes {
        /// Requested minimum.
        min: usize,
        /// Requested average.
        avg: usize,
        /// Requested maximum.
        max: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

impl ChunkerParams {
    /// Checks the bounds every chunker needs: `64 <= min <= avg <= max <= 16 MiB`, and for the
    /// CDC chunkers a power-of-two average.
    pub fn validate(&self, kind: ChunkerKind) -> Result<(), ChunkerError> {
        let err = |reason| ChunkerError::InvalidSizes {
            min: self.min_size,
            avg: self.avg_size,
            max: self.max_size,
            reason,
        };
        if !(self.min_size <= self.avg_size && self.avg_size <= self.max_size) {
            return Err(err("need min <= avg <= max"));
        }
        if self.min_size < 64 || self.max_size > 16 * 1024 * 1024 {
            return Err(err("sizes must lie in 64 B ..= 16 MiB"));
        }
        if kind != ChunkerKind::Fixed && !self.avg_size.is_power_of_two() {
            return Err(err("the average must be a power of two"));
        }
        if kind == ChunkerKind::FastCdc
            && (self.avg_size < 256 || self.max_size < 1024 || self.min_size > 1024 * 1024)
        {
            return Err(err(
                "FastCDC needs avg >= 256, max >= 1024 and min <= 1 MiB",
            ));
        }
        Ok(())
    }
}

/// Builds the chunker of `kind` with `params`.
pub fn new_chunker(
    kind: ChunkerKind,
    params: ChunkerParams,
) -> Result<Box<dyn Chunker>, ChunkerError> {
    params.validate(kind)?;
    Ok(match kind {
        ChunkerKind::FastCdc => Box::new(fastcdc::FastCdcChunker::new(params)),
        ChunkerKind::Gear => Box::new(gear::GearChunker::new(params)),
        ChunkerKind::Rabin => Box::new(rabin::RabinChunker::new(params)),
        ChunkerKind::Fixed => Box::new(fixed::FixedChunker::new(params)),
    })
}

/// Cuts a whole in-memory buffer, the complete stream; returns the chunk ranges in order.
///
/// The same cut points as feeding the buffer to [`cut_buffer`] in any pieces.
pub fn chunk_all(chunker: &dyn Chunker, data: &[u8]) -> Vec<Range<usize>> {
    cut_buffer(chunker, data, true).ranges
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Inputs shared by the chunker tests.
    use super::{new_chunker, Chunker, ChunkerKind, ChunkerParams};

    /// `len` bytes of an xorshift64 stream seeded with `seed`.
    pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// 256 B / 1 KiB / 4 KiB: many chunks, and many max-size cuts, from little data.
    pub fn small_params() -> ChunkerParams {
        ChunkerParams {
            min_size: 256,
            avg_size: 1024,
            max_size: 4096,
        }
    }

    /// A chunker of every kind with [`small_params`].
    pub fn small_chunkers() -> Vec<(ChunkerKind, Box<dyn Chunker>)> {
        ChunkerKind::ALL
            .into_iter()
            .map(|kind| (kind, new_chunker(kind, small_params()).unwrap()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::{pseudo_random, small_chunkers, small_params};
    use super::*;

    #[test]
    fn every_chunker_respects_bounds() {
        let data = pseudo_random(300_000, 7);
        for (kind, c) in small_chunkers() {
            let ranges = chunk_all(c.as_ref(), &data);
            assert_eq!(ranges.last().unwrap().end, data.len());
            for (i, r) in ranges.iter().enumerate() {
                assert!(r.len() <= 4096, "{kind:?}");
                if i + 1 < ranges.len() {
                    assert!(r.len() >= 256, "{kind:?} chunk {i} len {}", r.len());
                }
            }
            if kind != ChunkerKind::Fixed {
                let avg = data.len() / ranges.len();
                assert!((400..3000).contains(&avg), "{kind:?} avg {avg}");
            }
        }
    }

    #[test]
    fn cdc_insertion_changes_only_first_chunks() {
        let data = pseudo_random(200_000, 11);
        let mut edited = b"inserted bytes!".to_vec();
        edited.extend_from_slice(&data);
        for kind in [ChunkerKind::FastCdc, ChunkerKind::Gear, ChunkerKind::Rabin] {
            let c = new_chunker(kind, small_params()).unwrap();
            let a: std::collections::HashSet<&[u8]> = chunk_all(c.as_ref(), &data)
                .into_iter()
                .map(|r| &data[r])
                .collect();
            let b: Vec<&[u8]> = chunk_all(c.as_ref(), &edited)
                .into_iter()
                .map(|r| &edited[r])
                .collect();
            let differing = b.iter().filter(|ch| !a.contains(*ch)).count();
            assert!(differing <= 3, "{kind:?}: {differing} chunks changed");
        }
    }

    #[test]
    fn rejects_bad_params() {
        let p = ChunkerParams {
            min_size: 9000,
            avg_size: 8192,
            max_size: 65536,
        };
        assert!(new_chunker(ChunkerKind::FastCdc, p).is_err());
        let p = ChunkerParams {
            min_size: 2048,
            avg_size: 6000,
            max_size: 65536,
        };
        assert!(new_chunker(ChunkerKind::Gear, p).is_err());
        assert!(new_chunker(ChunkerKind::Fixed, p).is_ok());
    }
}
