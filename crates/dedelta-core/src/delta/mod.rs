//! Delta codecs: encode a target chunk as instructions against a similar base chunk.
//!
//! All codecs emit one instruction format, so one decoder serves them all (placeholders until
//! the algorithm library lands).

use serde::{Deserialize, Serialize};

/// A malformed delta.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeltaError {
    /// The delta could not be decoded.
    #[error("malformed delta: {0}")]
    Malformed(&'static str),
}

/// Encodes a target against a base, and back.
pub trait DeltaCodec: Send + Sync {
    /// Appends the delta of `target` against `base` to `out`.
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
}

impl DeltaKind {
    /// All kinds.
    pub const ALL: [DeltaKind; 3] = [DeltaKind::Xdelta, DeltaKind::Ddelta, DeltaKind::Edelta];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeltaKind::Xdelta => "xdelta",
            DeltaKind::Ddelta => "ddelta",
            DeltaKind::Edelta => "edelta",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Builds the codec of `kind`.
pub fn new_codec(kind: DeltaKind) -> Box<dyn DeltaCodec> {
    let _ = kind;
    Box::new(Placeholder)
}

/// Placeholder: the delta is the target itself.
struct Placeholder;
impl DeltaCodec for Placeholder {
    fn encode(&self, _base: &[u8], target: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(target);
    }
    fn decode(&self, _base: &[u8], delta: &[u8], out: &mut Vec<u8>) -> Result<(), DeltaError> {
        out.extend_from_slice(delta);
        Ok(())
    }
    fn name(&self) -> &'static str {
        "placeholder"
    }
}
