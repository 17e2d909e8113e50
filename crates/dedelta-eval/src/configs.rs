//! The configurations an evaluation compares: one fresh repository each.
//!
//! Each differs from the recommended one ([`DeltaConfig::recommended`]: Odess 3x2, DupAdj,
//! full sketch index, Ddelta, re-anchoring at 30 %) in one dimension, so each row of the
//! report isolates one choice. Sketch methods are measured with DupAdj off, so the sketch
//! alone finds the bases. Then the papers' systems by name (`dare`, `sidc`, `greedy`), each
//! labelled by what it runs: they reproduce a paper's comparison side by side.

use crate::error::{EvalError, Result};
use dedelta_core::delta::DeltaKind;
use dedelta_core::sketch::{SketchKeep, SketchKind, SketchParams};
use dedelta_store::format::config::{DeltaConfig, SketchIndexKind};

/// One configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalConfig {
    /// Short name (report rows, repository directory).
    pub name: String,
    /// What it varies, for the report.
    pub description: String,
    /// The delta settings of its repository.
    pub delta: DeltaConfig,
}

fn cfg(name: &str, description: &str, f: impl FnOnce(&mut DeltaConfig)) -> EvalConfig {
    let mut delta = DeltaConfig::recommended();
    f(&mut delta);
    EvalConfig {
        name: name.into(),
        description: description.into(),
        delta,
    }
}

fn sketch_only(d: &mut DeltaConfig, kind: SketchKind, m: usize, k: usize) {
    d.sketch = Some(kind);
    d.sketch_params = SketchParams {
        sf_count: m,
        features_per_sf: k,
    };
    d.dupadj = false;
}

/// DARE (§3.1, §4): DupAdj first, SF-2F for its misses only.
fn dare(d: &mut DeltaConfig) {
    d.sketch = Some(SketchKind::NTransform);
    d.sketch_params = SketchParams {
        sf_count: 3,
        features_per_sf: 2,
    };
    d.reanchor = None;
    d.max_depth = 1;
    d.sketch_dupadj_misses = true;
}

/// Every preset configuration, in report order.
pub fn all() -> Vec<EvalConfig> {
    vec![
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
            "Odess 3x2 + DupAdj, full sketch index, Ddelta, re-anchoring at 30 %, delta chains \
             up to 8 deep (the default)",
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
            "recommended with one-level deltas (bases stored in full; re-anchoring at 30 %): \
             the default until 2026-11-25",
            |d| d.max_depth = 1,
        ),
        cfg(
            "one-level",
            "recommended without base re-anchoring: one-level deltas against the first full \
             copy for as long as they save space (the papers' rule)",
            |d| {
                d.reanchor = None;
                d.max_depth = 1;
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
                d.reanchor = None;
                d.max_depth = 1;
            },
        ),
        cfg(
            "greedy",
            "Greedy (LoopDelta §3.1): N-transform SF-4F (3 SF x 4 features) in the full sketch \
             index, no DupAdj, one-level",
            |d| {
                sketch_only(d, SketchKind::NTransform, 3, 4);
                d.reanchor = None;
                d.max_depth = 1;
            },
        ),
        cfg(
            "greedy-newest",
            "greedy with the full index keeping the newest chunk per super-feature (LoopDelta \
             §3.1.3 replaces the entry; greedy keeps the oldest, FirstFit)",
            |d| {
                sketch_only(d, SketchKind::NTransform, 3, 4);
                d.reanchor = None;
                d.max_depth = 1;
                d.sketch_keep = SketchKeep::Newest;
            },
        ),
        cfg(
            "recommended-newest",
            "recommended with the full index keeping the newest chunk per super-feature",
            |d| d.sketch_keep = SketchKeep::Newest,
        ),
        cfg("xdelta", "recommended with the Xdelta-style codec", |d| {
            d.codec = DeltaKind::Xdelta
        }),
        cfg("edelta", "recommended with the Edelta codec", |d| {
            d.codec = DeltaKind::Edelta
        }),
    ]
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
            _ => match presets.iter().find(|c| c.name == name) {
                Some(c) => vec![c.clone()],
                None => {
                    let known: Vec<&str> = presets.iter().map(|c| c.name.as_str()).collect();
                    return Err(EvalError::InvalidOption(format!(
                        "unknown configuration {name:?}; known: all, quick, {}",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_parse() {
        for c in all() {
            c.delta.validate().unwrap();
        }
        assert_eq!(parse("quick").unwrap().len(), 4);
        assert_eq!(parse("dedup,dedup,all").unwrap().len(), all().len());
        assert!(parse("nope").unwrap_err().to_string().contains("known"));
    }

    /// The papers' presets run what their labels say (issue 15: `ntransform-2f` was 6x2).
    #[test]
    fn paper_presets_are_what_they_say() {
        let get = |n: &str| parse(n).unwrap().remove(0).delta;
        let sf = |d: &DeltaConfig| (d.sketch_params.sf_count, d.sketch_params.features_per_sf);
        assert_eq!(sf(&get("ntransform-2f")), (3, 2));
        assert_eq!(sf(&get("ntransform-4f")), (3, 4));
        let dare = get("dare");
        assert!(dare.dupadj && dare.sketch == Some(SketchKind::NTransform));
        assert!(dare.sketch_dupadj_misses);
        assert!(!get("dare-sketch-all").sketch_dupadj_misses);
        assert!(!get("recommended").sketch_dupadj_misses);
        assert_eq!(sf(&dare), (3, 2));
        let sidc = get("sidc");
        assert_eq!(sidc.sketch_index, SketchIndexKind::Stream);
        assert!(!sidc.dupadj);
        let greedy = get("greedy");
        assert_eq!(greedy.sketch_index, SketchIndexKind::Full);
        assert!(!greedy.dupadj);
        assert_eq!(greedy.sketch_keep, SketchKeep::Oldest);
        let newest = get("greedy-newest");
        assert_eq!(newest.sketch_keep, SketchKeep::Newest);
        assert_eq!(
            DeltaConfig {
                sketch_keep: SketchKeep::Oldest,
                ..newest.clone()
            },
            greedy
        );
        for d in [dare, sidc, greedy, newest] {
            assert_eq!(d.reanchor, None);
        }
        let rec = get("recommended");
        assert_eq!(rec.sketch, Some(SketchKind::Odess));
        assert!(parse("recommended")
            .unwrap()
            .remove(0)
            .description
            .contains("Odess"));
    }
}
