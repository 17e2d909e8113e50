//! The delta settings of a repository config ([`DeltaConfig`]): resemblance detection, the
//! sketch index, the codec and the bounds on deltas, with their defaults and their checks.

use super::{DEFAULT_MAX_DEPTH, MAX_DELTA_DEPTH};
use crate::error::{Error, Result};
use dedelta_core::delta::DeltaKind;
use dedelta_core::sketch::{SketchKeep, SketchKind, SketchParams};
use serde::{Deserialize, Serialize};

/// How the sketch index finds candidate bases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SketchIndexKind {
    /// An index of the super-features of every full chunk (LoopDelta's Greedy baseline).
    Full,
    /// Stream-informed (SIDC, Shilane et al.): only sketches of containers recently consulted
    /// for deduplication, and of this backup's own chunks, are matched.
    Stream,
    /// LoopDelta's potential base chunk cache (§4.2-§4.3): only the full chunks of dense
    /// containers, loaded whole when deduplication prefetches their metadata, and this
    /// backup's own new chunks are matched; a base is never read on its own. Needs the
    /// locality fingerprint index, which a backup then uses.
    Prefetch,
}

impl SketchIndexKind {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SketchIndexKind::Full => "full",
            SketchIndexKind::Stream => "stream",
            SketchIndexKind::Prefetch => "prefetch",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        [
            SketchIndexKind::Full,
            SketchIndexKind::Stream,
            SketchIndexKind::Prefetch,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

/// Most candidate bases tried per chunk ([`DeltaConfig::candidates`]).
pub const MAX_CANDIDATES: usize = 8;

/// The re-anchoring bound with one-level deltas ([`DeltaConfig::reanchor`]): a data chunk
/// whose best delta is above 30 % of the chunk is stored in full. Measured (docs/benchmarks.md
/// §6, "Base re-anchoring"): on 30 Redis dumps the repository shrank from 300.4 to 265.2 MB
/// (20 %: 269.5, 25 %: 264.5, 40 %: 274.3, 50 %: 287.6), on 10 of them from 92.4 to 89.9 MB,
/// because with one-level deltas a database file's chunks drift further from their first copy
/// in every version; on series that do not drift it costs little (10 SQLite copies +0.8 %, 20
/// SQLAlchemy sdists +0.2 %, 10 uncompressed Redis dumps +0.5 %), and a series of backups does
/// not end at ten.
pub const ONE_LEVEL_REANCHOR: f64 = 0.3;

/// The re-anchoring bound of new repositories, whose deltas form chains: a version's delta is
/// against the previous version, so drift matters less and a full copy costs more than it
/// saves below 60 % (20 SQLAlchemy sdists, depth 8, 512 KiB regions: 30 % 15.79 MB, 45 %
/// 15.51, 60 % 15.55, 75 % 15.75, none 15.85; 10 prettier packs: 45 % 6.25, 60 % 6.13, 75 %
/// 6.14; docs/benchmarks.md §6, "Meeting the size targets").
pub const DEFAULT_REANCHOR: f64 = 0.6;

/// The re-anchoring bound that suits delta chains `max_depth` deep.
pub fn default_reanchor(max_depth: u8) -> f64 {
    if max_depth > 1 {
        DEFAULT_REANCHOR
    } else {
        ONE_LEVEL_REANCHOR
    }
}

/// Candidate bases tried per chunk by new repositories ([`DeltaConfig::candidates`]), and when
/// the second is tried ([`DEFAULT_CANDIDATES_ENOUGH`]).
pub const DEFAULT_CANDIDATES: usize = 2;

/// A delta of at most 10 % of its chunk is good enough: no further candidate is tried (20
/// SQLAlchemy sdists, 2 candidates: 5 % 15.07 MB, 10 % 15.12, 20 % 15.18, every candidate
/// 14.96 MB for 25 % more backup CPU; one candidate 15.55).
pub const DEFAULT_CANDIDATES_ENOUGH: f64 = 0.1;

/// Resemblance detection and delta compression settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeltaConfig {
    /// Sketch method; `None` disables resemblance detection by super-features.
    pub sketch: Option<SketchKind>,
    /// Super-features per chunk and features per super-feature.
    #[serde(flatten)]
    pub sketch_params: SketchParams,
    /// Delta codec.
    pub codec: DeltaKind,
    /// Sketch index strategy.
    pub sketch_index: SketchIndexKind,
    /// Duplicate-adjacency detection (DARE) before super-features.
    pub dupadj: bool,
    /// A delta is kept only if its length is at most `(1 - min_saving)` times the chunk's
    /// zstd-compressed size (so it saves space after local compression too). Writers may
    /// skip compressing a chunk whose delta is far below that bound by what the backup has
    /// seen of its chunks (`backup::saving`).
    pub min_saving: f64,
    /// Bytes of base chunks cached in memory during backup.
    pub base_cache_bytes: usize,
    /// Containers whose sketches the stream-informed index keeps.
    pub stream_cache_containers: usize,
    /// Candidate bases tried per chunk from the sketch index: 1 is the papers' FirstFit (the
    /// first delta that saves enough is kept); more tries FirstFit's further matches too and
    /// keeps the smallest delta (beyond the papers). Absent means 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub candidates: usize,
    /// With more than one candidate: a further candidate is tried only while the delta kept so
    /// far is above this fraction of the chunk (beyond the papers). Most chunks of versioned
    /// data get a delta of a few percent from their first candidate, which another base could
    /// shave by bytes at the cost of a base read and an encoding each; the chunks whose first
    /// delta is poor are where a second base pays. `None` tries every candidate (best-of-N).
    /// Absent means `None`; in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates_enough: Option<f64>,
    /// Base re-anchoring of file data (beyond the papers): a data chunk whose best delta is
    /// larger than this fraction of the chunk is stored in full, so that the next versions
    /// take it as their base instead of an ever older one. `None` is the papers' rule:
    /// deltas against the first full copy for as long as they save space. Deltas stay one
    /// level deep either way. Applies only with [`Self::dupadj`], whose positional hint is
    /// how the next version finds the newer copy. Absent means `None`; in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reanchor: Option<f64>,
    /// Longest delta chain writers make (beyond the papers): 1 is the papers' one-level rule
    /// (a delta's base is stored in full); `d` lets a delta's base be a delta of depth up to
    /// `d - 1`, so a chunk of version `n` deltas against its copy in version `n - 1` rather
    /// than against the last full copy, several versions older. Above 1 only in repositories
    /// of version [`super::CHAINS_VERSION`] or later. Absent means 1; 1 ..= [`MAX_DELTA_DEPTH`].
    #[serde(default = "one_u8", skip_serializing_if = "is_one_u8")]
    pub max_depth: u8,
    /// Which full chunk the `full` sketch index keeps per super-feature: the oldest (Finesse's
    /// FirstFit) or the newest (LoopDelta §3.1.3 replaces the entry). Absent means oldest,
    /// what every repository made before the key existed does; written only when newest.
    #[serde(default, skip_serializing_if = "is_oldest")]
    pub sketch_keep: SketchKeep,
    /// Super-features only for the new data chunks DupAdj did not resolve (DARE §3.1): a chunk
    /// whose DupAdj base gives a delta worth keeping (with best-of-N, one good enough to stop
    /// at, [`Self::candidates_enough`]) is never sketched, the others are sketched after that
    /// attempt (on the dedup thread, with the pool's free threads) and looked up in the
    /// sketch index. Off (absent): every new chunk is sketched with its fingerprint on the
    /// worker pool, before DupAdj is asked. Applies only with [`Self::dupadj`] and a sketch
    /// method; it changes which chunks are sketched, not what is stored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sketch_dupadj_misses: bool,
    /// With the `prefetch` sketch index: a container goes on a backup's dense container list
    /// when the backup referenced more than this fraction of its chunks (as duplicates or as
    /// delta bases; LoopDelta §4.2, 0.3 in §5.2.1). Absent means 0.3; in [0, 1].
    #[serde(
        default = "default_dense_threshold",
        skip_serializing_if = "is_default_dense_threshold"
    )]
    pub dense_threshold: f64,
    /// With the `prefetch` sketch index: the containers of full chunks the potential base
    /// chunk cache holds (LRU, a container at a time). Absent means LoopDelta §5's sizes: 150,
    /// or 20 for a backup with Capping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch_cache_containers: Option<usize>,
    /// With the `prefetch` sketch index: how far, in bytes of file data, deduplication (and
    /// with it the dense containers' loads and the cache-aware filter's judgements) runs
    /// ahead of resemblance detection, as the paper's phase pipeline does (see
    /// [`crate::backup::lookahead`]). A dense container enters the potential base chunk
    /// cache when the stream's first duplicate in it comes within this distance of the new
    /// chunks being delta-checked. Absent means [`DEFAULT_PREFETCH_LOOKAHEAD_BYTES`]; 0 is a
    /// block (the container enters at its first duplicate's block).
    #[serde(
        default = "default_prefetch_lookahead",
        skip_serializing_if = "is_default_prefetch_lookahead"
    )]
    pub prefetch_lookahead_bytes: u64,
}

/// LoopDelta's dense container threshold (§5.2.1).
pub const DEFAULT_DENSE_THRESHOLD: f64 = 0.3;

/// The potential base chunk cache without rewriting, in containers (LoopDelta §5.3).
pub const PREFETCH_CACHE_CONTAINERS: usize = 150;

/// How far deduplication runs ahead of resemblance detection with the `prefetch` sketch
/// index, in bytes of file data ([`DeltaConfig::prefetch_lookahead_bytes`]). Measured
/// (docs/eval/papers.md, LoopDelta's newest run): on 10 Redis dumps `loopdelta` stores 6.3 %
/// more than `greedy` with none, 4.2 % with 2 MiB, 2.8 % with 4 MiB and 2.7 % with 8 MiB or
/// more; on 20 SQLAlchemy sdists in 1 MiB containers the restore speed factor stays at 3.43
/// with 2 MiB and falls to 3.39 with 4 MiB and 3.38 with 8 MiB (more deltas against old dense
/// containers, which restore then reads). 2 MiB is the largest window that costs no speed
/// factor there.
pub const DEFAULT_PREFETCH_LOOKAHEAD_BYTES: u64 = 2 << 20;

/// The largest look-ahead accepted: the dedup thread holds that much file data.
pub const MAX_PREFETCH_LOOKAHEAD_BYTES: u64 = 1 << 30;

fn default_prefetch_lookahead() -> u64 {
    DEFAULT_PREFETCH_LOOKAHEAD_BYTES
}

fn is_default_prefetch_lookahead(b: &u64) -> bool {
    *b == DEFAULT_PREFETCH_LOOKAHEAD_BYTES
}

/// The potential base chunk cache with Capping, in containers (LoopDelta §5.3).
pub const PREFETCH_CACHE_CONTAINERS_CAPPING: usize = 20;

fn default_dense_threshold() -> f64 {
    DEFAULT_DENSE_THRESHOLD
}

fn is_default_dense_threshold(t: &f64) -> bool {
    *t == DEFAULT_DENSE_THRESHOLD
}

fn is_oldest(k: &SketchKeep) -> bool {
    *k == SketchKeep::Oldest
}

fn one() -> usize {
    1
}

fn one_u8() -> u8 {
    1
}

fn is_one_u8(n: &u8) -> bool {
    *n == 1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl Default for DeltaConfig {
    /// Delta compression off: what a repository without a `delta` section means.
    fn default() -> Self {
        DeltaConfig {
            sketch: None,
            sketch_params: SketchParams::default(),
            codec: DeltaKind::Ddelta,
            sketch_index: SketchIndexKind::Full,
            dupadj: false,
            min_saving: 0.1,
            base_cache_bytes: 256 << 20,
            stream_cache_containers: 64,
            candidates: 1,
            candidates_enough: None,
            reanchor: None,
            max_depth: 1,
            sketch_keep: SketchKeep::Oldest,
            sketch_dupadj_misses: false,
            dense_threshold: DEFAULT_DENSE_THRESHOLD,
            prefetch_cache_containers: None,
            prefetch_lookahead_bytes: DEFAULT_PREFETCH_LOOKAHEAD_BYTES,
        }
    }
}

impl DeltaConfig {
    /// The defaults for a new repository: the measured best (docs/benchmarks.md): Odess
    /// with DupAdj stored the least on 20 SQLAlchemy sdists and was among the fastest;
    /// delta chains up to [`DEFAULT_MAX_DEPTH`] deep, re-anchoring at [`DEFAULT_REANCHOR`], a
    /// second candidate base for chunks whose first delta is poor
    /// ([`DEFAULT_CANDIDATES_ENOUGH`]). Two features per super-feature (DARE's SF-2F,
    /// with Odess's sampling): on DupAdj's misses, the more sensitive match finds the
    /// previous versions of rewritten minified code that 3 x 4 misses (prettier: 7.43 ->
    /// 6.87 MB; Redis 89.15 -> 86.49; SQLAlchemy 17.80 -> 17.74), for about 4% more backup
    /// CPU on SQLAlchemy. Edelta as the codec (Ddelta until 2026-11-29): the same deltas
    /// where the target matches the base in long runs, found without chunking and hashing
    /// those runs; the 10 Redis dumps backed up 6 % faster (2.69 s against 2.87) in 0.003 %
    /// less, the 20 SQLAlchemy tars 3 % faster in 0.09 % more (docs/benchmarks.md, "Edelta
    /// as the default codec"). Super-features only for the chunks DupAdj leaves to the
    /// sketch index (DARE §3.1, [`Self::sketch_dupadj_misses`]; every new chunk until
    /// 2026-11-30): the same bytes stored, a quarter of the chunks sketched, incremental
    /// backups of the 10 Redis dumps 5 % and of the 20 SQLAlchemy tars 11-14 % faster
    /// (docs/benchmarks.md, "Sketching only what DupAdj leaves").
    pub fn recommended() -> Self {
        DeltaConfig {
            sketch: Some(SketchKind::Odess),
            codec: DeltaKind::Edelta,
            sketch_params: SketchParams {
                sf_count: 3,
                features_per_sf: 2,
            },
            dupadj: true,
            reanchor: Some(DEFAULT_REANCHOR),
            max_depth: DEFAULT_MAX_DEPTH,
            candidates: DEFAULT_CANDIDATES,
            candidates_enough: Some(DEFAULT_CANDIDATES_ENOUGH),
            sketch_dupadj_misses: true,
            ..DeltaConfig::default()
        }
    }

    /// Whether any resemblance detection runs.
    pub fn enabled(&self) -> bool {
        self.sketch.is_some() || self.dupadj
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<()> {
        if let Some(kind) = self.sketch {
            dedelta_core::sketch::new_sketcher(kind, self.sketch_params)
                .map_err(|e| Error::InvalidOption(e.to_string()))?;
        }
        if !(0.0..1.0).contains(&self.min_saving) {
            return Err(Error::InvalidOption("min_saving must be in [0, 1)".into()));
        }
        if !(1..=MAX_CANDIDATES).contains(&self.candidates) {
            return Err(Error::InvalidOption(format!(
                "candidates must be 1 to {MAX_CANDIDATES}"
            )));
        }
        if let Some(r) = self.candidates_enough {
            if !(r > 0.0 && r <= 1.0) {
                return Err(Error::InvalidOption(
                    "candidates_enough must be in (0, 1] (a fraction of the chunk)".into(),
                ));
            }
        }
        if let Some(r) = self.reanchor {
            if !(r > 0.0 && r <= 1.0) {
                return Err(Error::InvalidOption(
                    "reanchor must be in (0, 1] (a fraction of the chunk)".into(),
                ));
            }
        }
        if self.stream_cache_containers == 0 {
            return Err(Error::InvalidOption(
                "the stream cache needs at least one container".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.dense_threshold) {
            return Err(Error::InvalidOption(
                "the dense threshold must be in [0, 1] (a reuse ratio)".into(),
            ));
        }
        if self.prefetch_cache_containers == Some(0) {
            return Err(Error::InvalidOption(
                "the prefetch cache needs at least one container".into(),
            ));
        }
        if self.prefetch_lookahead_bytes > MAX_PREFETCH_LOOKAHEAD_BYTES {
            return Err(Error::InvalidOption(format!(
                "the prefetch look-ahead must be at most {MAX_PREFETCH_LOOKAHEAD_BYTES} bytes"
            )));
        }
        if !(1..=MAX_DELTA_DEPTH).contains(&self.max_depth) {
            return Err(Error::InvalidOption(format!(
                "the delta depth must be 1 to {MAX_DELTA_DEPTH}"
            )));
        }
        Ok(())
    }
}
