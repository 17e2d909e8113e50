//! Delta codecs: encode a target chunk as instructions against a similar base chunk.
//!
//! All codecs emit one instruction format ([`mod@format`]: varint Copy/Insert instructions), so
//! one decoder ([`format::decode`]) serves them all and the repository config's codec only
//! matters when writing. The codecs, one per file:
//! - [`xdelta::XdeltaCodec`]: the Xdelta-style baseline (hash index of base windows, byte-wise
//!   sliding window over the target).
//! - [`ddelta::DdeltaCodec`]: Ddelta (Gear-chunked strings, fingerprints verified byte-wise,
//!   greedy prefix/suffix and duplicate-adjacent scans).
//! - [`edelta::EdeltaCodec`]: Edelta (Ddelta plus word-by-word enlargement of confirmed
//!   matches, skipping the chunking and fingerprinting of what they cover).
//! - [`zstd_ref::ZstdRefCodec`]: zstd with the base as reference prefix, zdelta's modern
//!   equivalent; its deltas are zstd frames (delta format version 2), which the same
//!   [`format::decode`] reads.
//!
//! The choice made: instructions copy only from the base, never from the target already
//! written. The alternative rejected, LZ-style self-references (xdelta3, zdelta), compresses
//! repeated inserts a little better but makes every codec pay for a second index; the
//! container compressor (zstd) after delta compression catches most of that redundancy.

pub mod ddelta;
pub mod edelta;
pub mod format;
mod scan;
mod strings;
pub mod xdelta;
pub mod zstd_ref;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

/// A delta that cannot be decoded against the given base.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeltaError {
    /// The delta could not be decoded.
    #[error("malformed delta: {0}")]
    Malformed(&'static str),
    /// The first byte is not a format version this build reads.
    #[error("unsupported delta format version {version}")]
    UnsupportedVersion {
        /// The version byte found.
        version: u8,
    },
    /// The header declares a target longer than [`format::MAX_TARGET_LEN`].
    #[error("delta declares a {declared}-byte target, more than the {max}-byte limit")]
    TargetTooLong {
        /// The declared length.
        declared: u64,
        /// The limit.
        max: usize,
    },
    /// An instruction is truncated, empty or runs past the declared target length.
    #[error("bad delta instruction at byte {at}: {reason}")]
    BadInstruction {
        /// Offset of the instruction (or header field) in the delta.
        at: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A Copy reaches outside the base.
    #[error(
        "delta copy at byte {at} reads {len} bytes at base offset {offset}, base is {base_len} bytes"
    )]
    CopyOutOfBase {
        /// Offset of the instruction in the delta.
        at: usize,
        /// The resolved base offset (`i64::MIN` if it overflowed).
        offset: i64,
        /// The copy length.
        len: usize,
        /// The base length.
        base_len: usize,
    },
    /// The instructions end before producing the declared target length.
    #[error("delta declares {declared} bytes but its instructions produce {produced}")]
    WrongLength {
        /// The declared target length.
        declared: usize,
        /// The bytes the instructions produce.
        produced: usize,
    },
}

/// Encodes a target against a base, and back.
pub trait DeltaCodec: Send + Sync {
    /// Appends the delta of `target` against `base` to `out`.
    ///
    /// Deterministic: the same inputs give the same bytes in every process.
    ///
    /// # Panics
    /// If `target` is longer than [`format::MAX_TARGET_LEN`] (64 MiB), which no chunker
    /// produces.
    fn encode(&self, base: &[u8], target: &[u8], out: &mut Vec<u8>);
    /// Appends the target rebuilt from `base` and `delta` to `out`.
    ///
    /// # Errors
    /// [`DeltaError`] for a delta that is malformed or does not fit `base`; never panics.
    fn decode(&self, base: &[u8], delta: &[u8], out: &mut Vec<u8>) -> Result<(), DeltaError>;
    /// The codec name used on the command line and in benchmarks.
    fn name(&self) -> &'static str;
}

/// Which delta codec; recorded in the repository config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeltaKind {
    /// Xdelta-style baseline.
    Xdelta,
    /// Ddelta.
    Ddelta,
    /// Edelta.
    Edelta,
    /// Zstd with the base as reference prefix (zdelta's modern equivalent).
    Zstd,
}

impl DeltaKind {
    /// All kinds.
    pub const ALL: [DeltaKind; 4] = [
        DeltaKind::Xdelta,
        DeltaKind::Ddelta,
        DeltaKind::Edelta,
        DeltaKind::Zstd,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeltaKind::Xdelta => "xdelta",
            DeltaKind::Ddelta => "ddelta",
            DeltaKind::Edelta => "edelta",
            DeltaKind::Zstd => "zstd",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Builds the codec of `kind` with its default parameters.
pub fn new_codec(kind: DeltaKind) -> Box<dyn DeltaCodec> {
    match kind {
        DeltaKind::Xdelta => Box::new(xdelta::XdeltaCodec::default()),
        DeltaKind::Ddelta => Box::new(ddelta::DdeltaCodec::default()),
        DeltaKind::Edelta => Box::new(edelta::EdeltaCodec::default()),
        DeltaKind::Zstd => Box::new(zstd_ref::ZstdRefCodec::default()),
    }
}
