//! [`DeltaArgs`]: the resemblance detection and delta compression options `init` and
//! `backup` share, and how they apply to a [`DeltaConfig`].

use anyhow::Result;
use clap::Args;
use dedelta_core::delta::DeltaKind;
use dedelta_core::sketch::{SketchKeep, SketchKind};
use dedelta_store::format::config::{default_reanchor, DeltaConfig, SketchIndexKind};
use dedelta_store::Error;

/// Resemblance detection and delta compression options (for `init`: the repository
/// defaults; for `backup`: overrides for this backup).
#[derive(Args, Clone, Default)]
pub struct DeltaArgs {
    /// Start from an eval preset's delta settings (`dedelta eval --help` lists them: `dedup`,
    /// `greedy`, `sidc`, `loopdelta`, ...); the other options change it. A `NAME-capT` preset
    /// also caps each backup at T (`backup`; `init` stores only the delta settings).
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Sketch method: none, ntransform, finesse or odess.
    #[arg(long)]
    sketch: Option<String>,
    /// Super-features per chunk (M).
    #[arg(long = "sf")]
    sf: Option<usize>,
    /// Features per super-feature (K).
    #[arg(long)]
    features_per_sf: Option<usize>,
    /// Delta codec: ddelta, edelta, xdelta or zstd (zstd with the base as reference prefix).
    #[arg(long)]
    delta: Option<String>,
    /// Sketch index: full or stream.
    #[arg(long)]
    sketch_index: Option<String>,
    /// Which full chunk the full sketch index keeps per super-feature: oldest (FirstFit, the
    /// default) or newest (LoopDelta: a newer chunk replaces the entry).
    #[arg(long)]
    sketch_keep: Option<String>,
    /// Sketch only the new chunks duplicate-adjacency did not resolve (DARE): on or off.
    #[arg(long)]
    sketch_dupadj_misses: Option<String>,
    /// Duplicate-adjacency detection (DARE): on or off.
    #[arg(long)]
    dupadj: Option<String>,
    /// Base cache size in MiB.
    #[arg(long)]
    base_cache_mib: Option<usize>,
    /// Containers whose sketches the stream sketch index keeps (and as many containers'
    /// worth of the backup's own new chunks).
    #[arg(long, value_name = "N")]
    stream_cache_containers: Option<usize>,
    /// Minimum saving for a delta to be kept, in percent of the chunk's compressed size.
    #[arg(long)]
    min_saving_percent: Option<f64>,
    /// Candidate bases tried per chunk from the sketch index (1 = the papers' FirstFit; more
    /// keeps the smallest delta of FirstFit's further matches too; at most 8).
    #[arg(long)]
    candidates: Option<usize>,
    /// With more than one candidate: try a further candidate only while the delta kept so far
    /// is above P percent of the chunk (0: try every candidate, best-of-N).
    #[arg(long, value_name = "P")]
    candidates_enough_percent: Option<f64>,
    /// Base re-anchoring: store a data chunk in full when its best delta is above P percent
    /// of the chunk, so later versions delta against the newer copy (0: never, the papers'
    /// one-level deltas against the first full copy).
    #[arg(long, value_name = "P")]
    reanchor_percent: Option<f64>,
    /// Longest delta chain: 1 is the papers' one-level deltas (a base is always stored in
    /// full); D lets a delta's base be a delta of depth up to D - 1 (repositories of format
    /// version 3; at most 16).
    #[arg(long, value_name = "D")]
    max_depth: Option<u8>,
    /// With `--sketch-index prefetch` (LoopDelta): a container goes on a backup's dense
    /// container list when the backup references more than this fraction of its chunks
    /// (default 0.3; the `loopdelta` presets 0.2 without Capping).
    #[arg(long, value_name = "R")]
    dense_threshold: Option<f64>,
    /// With `--sketch-index prefetch`: containers of full chunks the potential base chunk
    /// cache holds (default 150, or 20 for a backup with Capping).
    #[arg(long, value_name = "N")]
    prefetch_cache_containers: Option<usize>,
    /// With `--sketch-index prefetch`: how far deduplication (and with it the dense
    /// containers' loads) runs ahead of resemblance detection, in KiB of file data (default
    /// 2048; 0: a 1 MiB block at a time).
    #[arg(long, value_name = "KIB")]
    prefetch_lookahead_kib: Option<u64>,
}

impl DeltaArgs {
    /// Applies the given options to `cfg`, then validates it.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an unknown name or value, or what
    /// [`DeltaConfig::validate`] refuses.
    pub fn apply(&self, cfg: &mut DeltaConfig) -> Result<()> {
        let bad = |what: &str, v: &str| Error::InvalidOption(format!("unknown {what} {v:?}"));
        if let Some(p) = self.preset()? {
            *cfg = p.delta;
        }
        if let Some(s) = &self.sketch {
            cfg.sketch = match s.as_str() {
                "none" => None,
                other => {
                    Some(SketchKind::from_name(other).ok_or_else(|| bad("sketch method", other))?)
                }
            };
        }
        if let Some(m) = self.sf {
            cfg.sketch_params.sf_count = m;
        }
        if let Some(k) = self.features_per_sf {
            cfg.sketch_params.features_per_sf = k;
        }
        if let Some(d) = &self.delta {
            cfg.codec = DeltaKind::from_name(d).ok_or_else(|| bad("delta codec", d))?;
        }
        if let Some(i) = &self.sketch_index {
            cfg.sketch_index =
                SketchIndexKind::from_name(i).ok_or_else(|| bad("sketch index", i))?;
        }
        if let Some(k) = &self.sketch_keep {
            cfg.sketch_keep =
                SketchKeep::from_name(k).ok_or_else(|| bad("--sketch-keep value", k))?;
        }
        if let Some(d) = &self.sketch_dupadj_misses {
            cfg.sketch_dupadj_misses = match d.as_str() {
                "on" => true,
                "off" => false,
                other => return Err(bad("--sketch-dupadj-misses value (on|off)", other).into()),
            };
        }
        if let Some(d) = &self.dupadj {
            cfg.dupadj = match d.as_str() {
                "on" => true,
                "off" => false,
                other => return Err(bad("--dupadj value (on|off)", other).into()),
            };
        }
        if let Some(m) = self.base_cache_mib {
            cfg.base_cache_bytes = m << 20;
        }
        if let Some(n) = self.stream_cache_containers {
            cfg.stream_cache_containers = n;
        }
        if let Some(p) = self.min_saving_percent {
            cfg.min_saving = p / 100.0;
        }
        if let Some(n) = self.candidates {
            cfg.candidates = n;
        }
        if let Some(p) = self.candidates_enough_percent {
            cfg.candidates_enough = (p != 0.0).then_some(p / 100.0);
        }
        if let Some(p) = self.reanchor_percent {
            cfg.reanchor = (p != 0.0).then_some(p / 100.0);
        }
        if let Some(d) = self.max_depth {
            // The default re-anchoring bound follows the depth (one level drifts more), unless
            // the bound was set.
            if self.reanchor_percent.is_none()
                && cfg.reanchor == Some(default_reanchor(cfg.max_depth))
            {
                cfg.reanchor = Some(default_reanchor(d));
            }
            cfg.max_depth = d;
        }
        if let Some(t) = self.dense_threshold {
            cfg.dense_threshold = t;
        }
        if let Some(n) = self.prefetch_cache_containers {
            cfg.prefetch_cache_containers = Some(n);
        }
        if let Some(k) = self.prefetch_lookahead_kib {
            cfg.prefetch_lookahead_bytes = k.saturating_mul(1024);
        }
        cfg.validate()?;
        Ok(())
    }

    /// The eval preset `--preset` names, if any.
    ///
    /// # Errors
    /// An unknown name.
    pub fn preset(&self) -> Result<Option<dedelta_eval::configs::EvalConfig>> {
        let Some(name) = &self.preset else {
            return Ok(None);
        };
        let mut found = dedelta_eval::configs::parse(name)
            .map_err(|e| Error::InvalidOption(format!("--preset: {e}")))?;
        if found.len() != 1 {
            return Err(Error::InvalidOption(format!("--preset {name:?}: name one preset")).into());
        }
        Ok(found.pop())
    }
}
