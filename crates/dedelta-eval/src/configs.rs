//! The configurations an evaluation compares: one fresh repository each.
//!
//! Each differs from the recommended one ([`DeltaConfig::recommended`]: Odess 3x2, DupAdj,
//! full sketch index, Ddelta, delta chains, re-anchoring at 60 %, a second candidate for poor
//! deltas) in one dimension, so each row of the
//! report isolates one choice. Sketch methods are measured with DupAdj off, so the sketch
//! alone finds the bases. Then the papers' systems by name (`dare`, `sidc`, `greedy`), each
//! labelled by what it runs: they reproduce a paper's comparison side by side.
//!
//! The chunker is a second, orthogonal dimension ([`parse_chunkers`], `--chunker`): every
//! configuration runs with the repository default (FastCDC 2/8/64 KiB) unless a run names
//! chunkers, and then once per chunker, named `NAME@KIND-AVG` (Ddelta Table 4 compares Rabin
//! and Gear CDC under deduplication; DARE and Finesse chunk at 8 KiB, LoopDelta at 4 or 8).
//! A preset per chunker was rejected: 20 presets times 3 chunkers times 3 sizes is a list
//! nobody reads, while the product of two short lists says what runs.

use crate::error::{EvalError, Result};
use dedelta_core::chunker::{ChunkerKind, ChunkerParams};
use dedelta_core::delta::DeltaKind;
use dedelta_core::sketch::{SketchKeep, SketchKind, SketchParams};
use dedelta_store::commands::backup::caf::LoopDeltaOptions;
use dedelta_store::commands::backup::rewrite::Capping;
use dedelta_store::format::config::{
    ChunkerConfig, DeltaConfig, SketchIndexKind, DEFAULT_DENSE_THRESHOLD, ONE_LEVEL_REANCHOR,
};

/// One configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalConfig {
    /// Short name (report rows, repository directory).
    pub name: String,
    /// What it varies, for the report.
    pub description: String,
    /// The delta settings of its repository.
    pub delta: DeltaConfig,
    /// The chunker of its repository (the repository default unless `--chunker`).
    pub chunker: ChunkerConfig,
    /// Capping for every backup (LoopDelta's `-Cap` rows), or none.
    pub capping: Option<Capping>,
    /// The cache-aware filter and inversed deltas (LoopDelta §4.4-4.5; `-caf`, `-inv`).
    pub loopdelta: LoopDeltaOptions,
}

/// LoopDelta's capping level (§5: "Dedup-Cap15", "LD-Cap15"): 15 old containers per 20 MB
/// segment, with containers of 4 MB as ours.
pub const LOOPDELTA_CAPPING_LEVEL: usize = 15;

/// The repository default chunker: FastCDC 2/8/64 KiB.
pub fn default_chunker() -> ChunkerConfig {
    ChunkerConfig {
        kind: ChunkerKind::FastCdc,
        params: ChunkerParams::default(),
    }
}

fn cfg(name: &str, description: &str, f: impl FnOnce(&mut DeltaConfig)) -> EvalConfig {
    let mut delta = DeltaConfig::recommended();
    f(&mut delta);
    EvalConfig {
        name: name.into(),
        description: description.into(),
        delta,
        chunker: default_chunker(),
        capping: None,
        loopdelta: LoopDeltaOptions::default(),
    }
}

/// `base` with Capping at `level` (20 MiB segments), named `NAME-capLEVEL`, or `NAME-cap` at
/// LoopDelta's level.
fn capped(base: &EvalConfig, name: &str, level: usize) -> EvalConfig {
    let mut delta = base.delta.clone();
    if delta.dense_threshold == LOOPDELTA_DENSE_THRESHOLD {
        // With rewriting, the paper's threshold (§5.2.1).
        delta.dense_threshold = DEFAULT_DENSE_THRESHOLD;
    }
    EvalConfig {
        delta,
        name: name.into(),
        description: format!(
            "{} + Capping: at most {level} old containers per 20 MiB segment (Lillibridge et \
             al. FAST'13; LoopDelta's -Cap{level})",
            base.description
        ),
        capping: Some(Capping::new(level)),
        ..base.clone()
    }
}

/// The capped presets: `dedup-cap`, `recommended-cap` and `loopdelta-cap` (LD-Cap15) at
/// LoopDelta's level 15, and any `NAME-capT` for a sweep over T.
fn parse_capped(presets: &[EvalConfig], name: &str) -> Option<EvalConfig> {
    let (base, level) = name.split_once("-cap")?;
    let level = match level {
        "" => LOOPDELTA_CAPPING_LEVEL,
        t => t.parse::<usize>().ok().filter(|&t| t > 0)?,
    };
    let base = presets.iter().find(|c| c.name == base)?;
    Some(capped(base, name, level))
}

/// The LoopDelta modifiers, as suffixes of any preset (capped or not): `-caf` turns the
/// cache-aware filter on, `-inv` inversed delta compression (which needs Capping, e.g.
/// `greedy-cap-inv`); both may follow in either order (`greedy-cap-caf-inv`). CAF needs
/// `--fingerprint-index locality`. `-local` keeps the dense containers on the client's disk
/// between backups (`loopdelta-local`: a dedelta deviation from §4.3, `backup
/// --keep-dense-local`; only the `prefetch` sketch index has dense containers). `-laSIZE`
/// sets the `prefetch` index's look-ahead (`loopdelta-la4m`: deduplication 4 MiB ahead of
/// resemblance detection, `-la0` a block; `delta.prefetch_lookahead_bytes`). `-pcN` bounds
/// the `prefetch` index's potential base chunk cache at N containers (`loopdelta-pc8`;
/// `delta.prefetch_cache_containers`, else §5's 150, or 20 with Capping).
fn parse_modified(presets: &[EvalConfig], name: &str) -> Option<EvalConfig> {
    let (base, modifier) = name.rsplit_once('-')?;
    let mut c = presets
        .iter()
        .find(|c| c.name == base)
        .cloned()
        .or_else(|| parse_capped(presets, base))
        .or_else(|| parse_modified(presets, base))?;
    let what = match modifier {
        "caf" => {
            c.loopdelta.cache_aware_filter = true;
            "cache-aware filter (LoopDelta §4.4)"
        }
        "inv" => {
            c.loopdelta.inversed_delta = true;
            "inversed delta compression (LoopDelta §4.5)"
        }
        "local" => {
            c.loopdelta.keep_dense_local = true;
            "dense containers kept on the client's disk between backups (a deviation from \
             LoopDelta §4.3)"
        }
        m if m.starts_with("pc") => {
            let n = m[2..].parse::<usize>().ok().filter(|&n| n > 0)?;
            c.delta.prefetch_cache_containers = Some(n);
            c.name = name.into();
            c.description = format!(
                "{}, a potential base chunk cache of {n} containers",
                c.description
            );
            return Some(c);
        }
        m => {
            let bytes = parse_size(m.strip_prefix("la")?)?;
            c.delta.prefetch_lookahead_bytes = bytes as u64;
            c.name = name.into();
            c.description = format!(
                "{}, deduplication {} ahead of resemblance detection",
                c.description,
                size_label(bytes)
            );
            return Some(c);
        }
    };
    c.name = name.into();
    c.description = format!("{} + {what}", c.description);
    Some(c)
}

fn sketch_only(d: &mut DeltaConfig, kind: SketchKind, m: usize, k: usize) {
    d.sketch = Some(kind);
    d.sketch_params = SketchParams {
        sf_count: m,
        features_per_sf: k,
    };
    d.dupadj = false;
}

/// The papers' rules where they differ from the default: Ddelta as the codec, one-level
/// deltas against the first full copy for as long as they save space, FirstFit (one
/// candidate base).
fn papers(d: &mut DeltaConfig) {
    d.codec = DeltaKind::Ddelta;
    d.reanchor = None;
    d.max_depth = 1;
    d.candidates = 1;
    d.candidates_enough = None;
}

/// DARE (§3.1, §4): DupAdj first, SF-2F for its misses only.
fn dare(d: &mut DeltaConfig) {
    d.sketch = Some(SketchKind::NTransform);
    d.sketch_params = SketchParams {
        sf_count: 3,
        features_per_sf: 2,
    };
    papers(d);
    d.sketch_dupadj_misses = true;
}

/// LoopDelta (§4): the papers' one-level rules with N-transform SF-4F (3 SF x 4 features, as
/// `sidc` and `greedy`, so the three differ only in where candidates come from), no DupAdj,
/// and the `prefetch` sketch index: candidates only from the dense containers of the
/// lineage's last backup, loaded whole when deduplication prefetches them (§4.2-§4.3; the
/// locality fingerprint index), and from this backup's own new chunks.
///
/// The preset `loopdelta` adds the cache-aware filter (§4.4), `loopdelta-cap` Capping at 15
/// and inversed delta compression (§4.5, which works on what Capping gives up), and
/// `loopdelta-nocaf` is Table 2's "LD w/o CAF" (see [`all`]).
fn loopdelta(d: &mut DeltaConfig) {
    sketch_only(d, SketchKind::NTransform, 3, 4);
    papers(d);
    d.sketch_index = SketchIndexKind::Prefetch;
    d.dense_threshold = LOOPDELTA_DENSE_THRESHOLD;
}

/// The dense container threshold of LoopDelta without rewriting. The paper fixes 0.3 only
/// with Capping (§5.2.1: rewriting keeps the inherited containers dense); without it, its
/// Figure 6(a) has missed similar chunks growing from the lowest thresholds. Our sweep on the
/// Redis series (docs/eval/papers.md): 0.3 stores 6.2 % more than `greedy`, 0.2 4.4 %, for
/// 11 % more prefetched bytes.
pub const LOOPDELTA_DENSE_THRESHOLD: f64 = 0.2;

/// Every preset configuration, in report order.
pub fn all() -> Vec<EvalConfig> {
    let mut v = vec![
        cfg(
            "dedup",
            "deduplication only (no resemblance detection)",
            |d| {
                d.sketch = None;
                d.dupadj = false;
            },
        ),
        cfg(
            "ntransform-4f",
            "N-transform SF-4F (3 SF x 4 features), no DupAdj",
            |d| sketch_only(d, SketchKind::NTransform, 3, 4),
        ),
        cfg(
            "ntransform-2f",
            "N-transform SF-2F (3 SF x 2 features, DARE's SF-2F), no DupAdj",
            |d| sketch_only(d, SketchKind::NTransform, 3, 2),
        ),
        cfg("finesse", "Finesse 3x4, no DupAdj", |d| {
            sketch_only(d, SketchKind::Finesse, 3, 4)
        }),
        cfg("odess", "Odess 3x4, no DupAdj", |d| {
            sketch_only(d, SketchKind::Odess, 3, 4)
        }),
        cfg("dupadj-only", "DupAdj alone (no sketch)", |d| {
            d.sketch = None
        }),
        cfg(
            "recommended",
            "Odess 3x2 + DupAdj, full sketch index, Edelta, delta chains up to 8 deep, \
             re-anchoring at 60 %, a second candidate base below 10 % (the default)",
            |_| {},
        ),
        cfg(
            "stream-index",
            "recommended with the stream-informed sketch index",
            |d| d.sketch_index = SketchIndexKind::Stream,
        ),
        cfg(
            "stream-nodupadj",
            "stream-informed index, DupAdj off",
            |d| {
                d.sketch_index = SketchIndexKind::Stream;
                d.dupadj = false;
            },
        ),
        cfg(
            "recommended-4f",
            "recommended with Odess 3x4 (the default until 2026-11-24)",
            |d| d.sketch_params.features_per_sf = 4,
        ),
        cfg(
            "depth-1",
            "recommended with one-level deltas (bases stored in full; re-anchoring at 30 %) and \
             one candidate base: the default until 2026-11-24 (with 256 KiB regions)",
            |d| {
                d.max_depth = 1;
                d.reanchor = Some(ONE_LEVEL_REANCHOR);
                d.candidates = 1;
                d.candidates_enough = None;
            },
        ),
        cfg(
            "first-fit",
            "recommended with one candidate base per chunk (the papers' FirstFit)",
            |d| {
                d.candidates = 1;
                d.candidates_enough = None;
            },
        ),
        cfg(
            "one-level",
            "recommended without base re-anchoring: one-level deltas against the first full \
             copy for as long as they save space (the papers' rule)",
            papers,
        ),
        cfg(
            "dupadj-one-level",
            "DupAdj alone (no sketch), one-level, no re-anchoring: DARE Table 3's DupAdj row",
            |d| {
                d.sketch = None;
                papers(d);
            },
        ),
        cfg(
            "dare",
            "DARE: DupAdj + N-transform SF-2F (3 SF x 2 features), full sketch index, Ddelta, \
             one-level; super-features only for the chunks DupAdj could not resolve (DARE §3.1)",
            dare,
        ),
        cfg(
            "dare-sketch-all",
            "dare, but every new chunk sketched (with its fingerprint, before DupAdj): what \
             DARE's rule saves; stores the same",
            |d| {
                dare(d);
                d.sketch_dupadj_misses = false;
            },
        ),
        cfg(
            "sidc",
            "SIDC (Shilane et al.): N-transform SF-4F (3 SF x 4 features) in the stream-informed \
             index, no DupAdj, one-level",
            |d| {
                sketch_only(d, SketchKind::NTransform, 3, 4);
                d.sketch_index = SketchIndexKind::Stream;
                papers(d);
            },
        ),
        cfg(
            "greedy",
            "Greedy (LoopDelta §3.1): N-transform SF-4F (3 SF x 4 features) in the full sketch \
             index, no DupAdj, one-level",
            |d| {
                sketch_only(d, SketchKind::NTransform, 3, 4);
                papers(d);
            },
        ),
        cfg(
            "greedy-newest",
            "greedy with the full index keeping the newest chunk per super-feature (LoopDelta \
             §3.1.3 replaces the entry; greedy keeps the oldest, FirstFit)",
            |d| {
                sketch_only(d, SketchKind::NTransform, 3, 4);
                papers(d);
                d.sketch_keep = SketchKeep::Newest;
            },
        ),
        cfg(
            "recommended-newest",
            "recommended with the full index keeping the newest chunk per super-feature",
            |d| d.sketch_keep = SketchKeep::Newest,
        ),
        cfg(
            "loopdelta-nocaf",
            "LoopDelta without the cache-aware filter (Table 2's LD w/o CAF; §4.2-§4.3): \
             N-transform SF-4F, candidates only from dense containers prefetched whole with \
             their metadata and from this backup's new chunks, no base read, one-level",
            loopdelta,
        ),
        cfg("xdelta", "recommended with the Xdelta-style codec", |d| {
            d.codec = DeltaKind::Xdelta
        }),
        cfg(
            "ddelta",
            "recommended with the Ddelta codec (the default until 2026-11-29)",
            |d| d.codec = DeltaKind::Ddelta,
        ),
    ];
    // LoopDelta (§4.2-§4.5): the above with the cache-aware filter; capped (LD-Cap15), with
    // inversed delta compression too.
    let nocaf = v.iter().find(|c| c.name == "loopdelta-nocaf").cloned();
    if let Some(mut ld) = nocaf {
        ld.name = "loopdelta".into();
        ld.description = "LoopDelta (§4.2-§4.4): loopdelta-nocaf + the cache-aware filter".into();
        ld.loopdelta.cache_aware_filter = true;
        v.push(ld);
    }
    let mut extra: Vec<EvalConfig> = ["dedup-cap", "recommended-cap", "loopdelta-cap"]
        .iter()
        .filter_map(|n| parse_capped(&v, n))
        .collect();
    for c in extra.iter_mut().filter(|c| c.name == "loopdelta-cap") {
        c.loopdelta.inversed_delta = true;
        c.description = format!("{} + inversed delta compression (§4.5)", c.description);
    }
    v.extend(extra);
    v
}

/// Parses a comma-separated list of names; `all` is every preset, `quick` is dedup,
/// finesse, recommended and stream-index.
///
/// # Errors
/// An unknown name (the error lists the known ones).
pub fn parse(list: &str) -> Result<Vec<EvalConfig>> {
    let presets = all();
    let mut out: Vec<EvalConfig> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let picked: Vec<EvalConfig> = match name {
            "all" => presets.clone(),
            "quick" => presets
                .iter()
                .filter(|c| {
                    ["dedup", "finesse", "recommended", "stream-index"].contains(&c.name.as_str())
                })
                .cloned()
                .collect(),
            _ => match presets
                .iter()
                .find(|c| c.name == name)
                .cloned()
                .or_else(|| parse_capped(&presets, name))
                .or_else(|| parse_modified(&presets, name))
            {
                Some(c) => vec![c],
                None => {
                    let known: Vec<&str> = presets.iter().map(|c| c.name.as_str()).collect();
                    return Err(EvalError::InvalidOption(format!(
                        "unknown configuration {name:?}; known: all, quick, {} (and \
                         NAME-capT: NAME with Capping at level T; NAME-caf and NAME-inv: with the \
                         cache-aware filter and inversed deltas)",
                        known.join(", ")
                    )));
                }
            },
        };
        for c in picked {
            if !out.iter().any(|o| o.name == c.name) {
                out.push(c);
            }
        }
    }
    if out.is_empty() {
        return Err(EvalError::InvalidOption("no configuration given".into()));
    }
    Ok(out)
}

/// A size in bytes with an optional `k` (KiB) or `m` (MiB) suffix: `8k`, `8192`, `1m`.
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim().to_ascii_lowercase();
    let s = s
        .strip_suffix("ib")
        .or_else(|| s.strip_suffix('b'))
        .unwrap_or(&s);
    let (digits, unit) = match s.strip_suffix('k') {
        Some(d) => (d, 1024),
        None => match s.strip_suffix('m') {
            Some(d) => (d, 1024 * 1024),
            None => (s, 1),
        },
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// A size as the shortest of `N`, `Nk`, `Nm`.
fn size_label(b: usize) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}m", b >> 20)
    } else if b >= 1024 && b.is_multiple_of(1024) {
        format!("{}k", b >> 10)
    } else {
        b.to_string()
    }
}

/// The short name of a chunker, as configuration names carry it: `rabin-8k`, or
/// `gear-512/8k/64k` when the bounds are not the default ratio (a quarter and eight times
/// the average).
pub fn chunker_label(c: &ChunkerConfig) -> String {
    let p = &c.params;
    if p.min_size * 4 == p.avg_size && p.avg_size * 8 == p.max_size {
        format!("{}-{}", c.kind.name(), size_label(p.avg_size))
    } else {
        format!(
            "{}-{}/{}/{}",
            c.kind.name(),
            size_label(p.min_size),
            size_label(p.avg_size),
            size_label(p.max_size)
        )
    }
}

/// Parses `--chunker`: a comma-separated list of `KIND[:AVG]` or `KIND:MIN/AVG/MAX`, KIND one
/// of `fastcdc`, `gear`, `rabin`, `fixed`, sizes in bytes or with `k`/`m`. `KIND:AVG` takes
/// the repository default's proportions, a minimum of AVG/4 and a maximum of 8 x AVG
/// (`rabin:8k` is 2/8/64 KiB, `fastcdc:2k` 512 B/2/16 KiB, `gear:64k` 16/64/512 KiB);
/// `KIND` alone is 8 KiB.
///
/// # Errors
/// An unknown kind, an unreadable size, or sizes the chunker does not accept
/// ([`ChunkerParams::validate`]: a power-of-two average for the CDC chunkers, 64 B ..= 16 MiB).
pub fn parse_chunkers(list: &str) -> Result<Vec<ChunkerConfig>> {
    let mut out: Vec<ChunkerConfig> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = |why: String| EvalError::InvalidOption(format!("--chunker {item:?}: {why}"));
        let (kind, sizes) = item.split_once(':').unwrap_or((item, "8k"));
        let kind = ChunkerKind::from_name(&kind.to_ascii_lowercase()).ok_or_else(|| {
            bad("unknown chunker; known: fastcdc, gear, rabin, fixed".to_string())
        })?;
        let parsed: Vec<Option<usize>> = sizes.split('/').map(parse_size).collect();
        let params = match parsed.as_slice() {
            [Some(avg)] => ChunkerParams {
                min_size: avg / 4,
                avg_size: *avg,
                max_size: avg.saturating_mul(8),
            },
            [Some(min), Some(avg), Some(max)] => ChunkerParams {
                min_size: *min,
                avg_size: *avg,
                max_size: *max,
            },
            _ => return Err(bad("sizes are AVG or MIN/AVG/MAX (8k, 8192)".to_string())),
        };
        params.validate(kind).map_err(|e| bad(e.to_string()))?;
        let c = ChunkerConfig { kind, params };
        if !out.contains(&c) {
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err(EvalError::InvalidOption(
            "--chunker: no chunker given".into(),
        ));
    }
    Ok(out)
}

/// Every configuration with every chunker, configuration-major: `dedup@rabin-8k`,
/// `dedup@gear-8k`, `dare@rabin-8k`, ... Each keeps its delta settings; its description says
/// the chunker.
pub fn with_chunkers(configs: &[EvalConfig], chunkers: &[ChunkerConfig]) -> Vec<EvalConfig> {
    configs
        .iter()
        .flat_map(|c| {
            chunkers.iter().map(move |k| {
                let p = &k.params;
                EvalConfig {
                    name: format!("{}@{}", c.name, chunker_label(k)),
                    description: format!(
                        "{}; chunker {} {}/{}/{} B",
                        c.description,
                        k.kind.name(),
                        p.min_size,
                        p.avg_size,
                        p.max_size
                    ),
                    delta: c.delta.clone(),
                    chunker: *k,
                    capping: c.capping,
                    loopdelta: c.loopdelta,
                }
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "configs_tests.rs"]
mod tests;
