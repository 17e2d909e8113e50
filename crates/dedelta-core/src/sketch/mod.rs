//! Resemblance sketches: super-features that similar chunks share.
//!
//! A [`Sketcher`] maps a chunk to M super-features ([`SuperFeatures`]); two chunks that share
//! any super-feature are considered similar, and one may be delta-encoded against the other.
//! Implementations, one per file (placeholders until the algorithm library lands):
//! - `ntransform`: Broder's N-transform super-features (Finesse §3, Algorithm 1).
//! - `finesse`: Finesse subchunk features with rank grouping (Finesse §4, Algorithm 2).
//! - `odess`: Odess content-defined sampling (Zhang et al., TPDS'21).

use serde::{Deserialize, Serialize};

/// The M super-features of one chunk, in a fixed order (SF i is only ever compared with SF i).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct SuperFeatures(pub Vec<u64>);

impl SuperFeatures {
    /// Whether any super-feature is equal in the same position.
    pub fn shares_any(&self, other: &SuperFeatures) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a == b)
    }
}

/// Computes the super-features of a chunk. Pure and deterministic: constants are fixed in code.
pub trait Sketcher: Send + Sync {
    /// The chunk's super-features (`params().sf_count` of them).
    fn sketch(&self, chunk: &[u8]) -> SuperFeatures;
    /// The sketch parameters.
    fn params(&self) -> SketchParams;
    /// The method name used on the command line and in benchmarks.
    fn name(&self) -> &'static str;
}

/// Number of super-features and features per super-feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SketchParams {
    /// M: super-features per chunk.
    pub sf_count: usize,
    /// K: features grouped into each super-feature.
    pub features_per_sf: usize,
}

impl Default for SketchParams {
    /// 3 super-features of 4 features each (SF-4F, as in SIDC and Finesse).
    fn default() -> Self {
        SketchParams {
            sf_count: 3,
            features_per_sf: 4,
        }
    }
}

/// Which sketch method; recorded in the repository config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SketchKind {
    /// Broder's N-transform super-features.
    NTransform,
    /// Finesse.
    Finesse,
    /// Odess.
    Odess,
}

impl SketchKind {
    /// All kinds.
    pub const ALL: [SketchKind; 3] = [
        SketchKind::NTransform,
        SketchKind::Finesse,
        SketchKind::Odess,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SketchKind::NTransform => "ntransform",
            SketchKind::Finesse => "finesse",
            SketchKind::Odess => "odess",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Invalid sketch parameters.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SketchError {
    /// M or K out of range.
    #[error("invalid sketch parameters: {0}")]
    InvalidParams(&'static str),
}

/// Builds the sketcher of `kind` with `params`.
pub fn new_sketcher(
    kind: SketchKind,
    params: SketchParams,
) -> Result<Box<dyn Sketcher>, SketchError> {
    if !(1..=8).contains(&params.sf_count) || !(1..=16).contains(&params.features_per_sf) {
        return Err(SketchError::InvalidParams(
            "need 1 <= M <= 8 and 1 <= K <= 16",
        ));
    }
    let _ = kind;
    Ok(Box::new(placeholder::Placeholder { params }))
}

mod placeholder {
    use super::*;
    /// Placeholder until the algorithm library lands: hashes of chunk quarters.
    pub struct Placeholder {
        pub params: SketchParams,
    }
    impl Sketcher for Placeholder {
        fn sketch(&self, chunk: &[u8]) -> SuperFeatures {
            let n = self.params.sf_count;
            let step = chunk.len() / n + 1;
            SuperFeatures(
                (0..n)
                    .map(|i| {
                        let s = (i * step).min(chunk.len());
                        let e = ((i + 1) * step).min(chunk.len());
                        xxhash_rust::xxh3::xxh3_64(&chunk[s..e])
                    })
                    .collect(),
            )
        }
        fn params(&self) -> SketchParams {
            self.params
        }
        fn name(&self) -> &'static str {
            "placeholder"
        }
    }
}
