//! Tests of the eval presets and their names.

use super::*;

/// `-caf` and `-inv` follow any preset, capped or not, in either order.
#[test]
fn loopdelta_modifiers_parse() {
    let c = parse("greedy-cap-caf-inv,greedy-caf,recommended-cap-inv").unwrap();
    assert_eq!(c[0].capping.map(|c| c.level), Some(LOOPDELTA_CAPPING_LEVEL));
    assert!(c[0].loopdelta.cache_aware_filter && c[0].loopdelta.inversed_delta);
    assert_eq!(c[0].delta, parse("greedy").unwrap()[0].delta);
    assert!(c[1].capping.is_none() && c[1].loopdelta.cache_aware_filter);
    assert!(!c[1].loopdelta.inversed_delta);
    assert!(c[2].loopdelta.inversed_delta && !c[2].loopdelta.cache_aware_filter);
    assert_eq!(c[2].name, "recommended-cap-inv");
    assert!(parse("greedy-foo").is_err());
    // `-local`: the deviation keeping dense containers on the client's disk, nothing else.
    let c = parse("loopdelta-local,loopdelta-cap-local,loopdelta").unwrap();
    assert!(c[0].loopdelta.keep_dense_local && c[0].loopdelta.cache_aware_filter);
    assert!(c[1].loopdelta.keep_dense_local && c[1].loopdelta.inversed_delta);
    assert!(c[1].capping.is_some() && !c[2].loopdelta.keep_dense_local);
    assert_eq!(c[0].delta, c[2].delta);
}

#[test]
fn presets_are_valid_and_parse() {
    for c in all() {
        c.delta.validate().unwrap();
    }
    assert_eq!(parse("quick").unwrap().len(), 4);
    assert_eq!(parse("dedup,dedup,all").unwrap().len(), all().len());
    let cap = &parse("dedup-cap,dedup-cap8").unwrap();
    assert_eq!(
        cap[0].capping.map(|c| c.level),
        Some(LOOPDELTA_CAPPING_LEVEL)
    );
    assert_eq!(cap[1].capping.map(|c| c.level), Some(8));
    assert_eq!(cap[1].delta, parse("dedup").unwrap()[0].delta);
    assert!(parse("dedup-cap0").is_err());
    assert!(parse("nothing-cap3").is_err());
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
    // The default since 2026-11-30: the same stored, fewer chunks sketched.
    assert!(get("recommended").sketch_dupadj_misses);
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
    let dupadj = get("dupadj-one-level");
    assert!(dupadj.dupadj && dupadj.sketch.is_none());
    for d in [&dare, &sidc, &greedy, &newest, &dupadj] {
        assert_eq!(d.reanchor, None);
        assert_eq!(d.max_depth, 1);
    }
    // The papers' presets keep the papers' codec when the default moves (Edelta since
    // 2026-11-29), so their figures stay comparable with earlier runs.
    for d in [dare, sidc, greedy, newest, dupadj, get("loopdelta")] {
        assert_eq!(d.codec, DeltaKind::Ddelta);
    }
    assert_eq!(get("recommended").codec, DeltaKind::Edelta);
    assert_eq!(get("ddelta").codec, DeltaKind::Ddelta);
    // LoopDelta differs from greedy and sidc only in where candidates come from.
    let ld = get("loopdelta");
    assert_eq!(ld.sketch_index, SketchIndexKind::Prefetch);
    assert_eq!(
        DeltaConfig {
            sketch_index: SketchIndexKind::Full,
            dense_threshold: DEFAULT_DENSE_THRESHOLD,
            ..ld.clone()
        },
        get("greedy")
    );
    // 0.2 without rewriting; the paper's 0.3 with Capping (§5.2.1), also for a sweep's T.
    assert_eq!(ld.dense_threshold, LOOPDELTA_DENSE_THRESHOLD);
    let ld_cap = parse("loopdelta-cap").unwrap().remove(0);
    assert_eq!(
        ld_cap.delta,
        DeltaConfig {
            dense_threshold: DEFAULT_DENSE_THRESHOLD,
            ..ld.clone()
        }
    );
    let ld_cap5 = parse("loopdelta-cap5").unwrap().remove(0);
    assert_eq!(ld_cap5.delta.dense_threshold, DEFAULT_DENSE_THRESHOLD);
    // `-laSIZE`: the look-ahead of deduplication over resemblance detection, and nothing else.
    let la = parse("loopdelta-la0,loopdelta-nocaf-la4m").unwrap();
    assert_eq!(la[0].name, "loopdelta-la0");
    assert_eq!(
        la[0].delta,
        DeltaConfig {
            prefetch_lookahead_bytes: 0,
            ..ld.clone()
        }
    );
    assert!(la[0].loopdelta.cache_aware_filter);
    assert_eq!(la[1].delta.prefetch_lookahead_bytes, 4 << 20);
    assert!(!la[1].loopdelta.cache_aware_filter);
    assert!(parse("loopdelta-lax").is_err());
    // `-pcN`: the potential base chunk cache's bound, and nothing else.
    let pc = parse("loopdelta-pc8").unwrap().remove(0);
    assert_eq!(
        pc.delta,
        DeltaConfig {
            prefetch_cache_containers: Some(8),
            ..ld.clone()
        }
    );
    assert!(parse("loopdelta-pc0").is_err() && parse("loopdelta-pcx").is_err());
    // The techniques of §4.4-§4.5: CAF in loopdelta, inversed deltas where Capping is.
    let full = parse("loopdelta,loopdelta-nocaf").unwrap();
    assert!(full[0].loopdelta.cache_aware_filter && !full[0].loopdelta.inversed_delta);
    assert!(!full[1].loopdelta.cache_aware_filter);
    assert_eq!(full[0].delta, full[1].delta);
    assert!(ld_cap.loopdelta.cache_aware_filter && ld_cap.loopdelta.inversed_delta);
    assert_eq!(
        ld_cap.capping.map(|c| c.level),
        Some(LOOPDELTA_CAPPING_LEVEL)
    );
    let rec = get("recommended");
    assert_eq!(rec.sketch, Some(SketchKind::Odess));
    assert!(parse("recommended")
        .unwrap()
        .remove(0)
        .description
        .contains("Odess"));
}

#[test]
fn every_preset_uses_the_repository_default_chunker() {
    for c in all() {
        assert_eq!(c.chunker, default_chunker());
    }
    assert_eq!(chunker_label(&default_chunker()), "fastcdc-8k");
}

#[test]
fn chunkers_parse_with_the_default_proportions() {
    let p = |s: &str| parse_chunkers(s).unwrap();
    let sizes = |c: &ChunkerConfig| (c.params.min_size, c.params.avg_size, c.params.max_size);
    let got = p("rabin:8k, gear:2k,fastcdc:64KiB");
    assert_eq!(
        got.iter().map(|c| c.kind).collect::<Vec<_>>(),
        [ChunkerKind::Rabin, ChunkerKind::Gear, ChunkerKind::FastCdc]
    );
    assert_eq!(sizes(&got[0]), (2048, 8192, 65536));
    assert_eq!(sizes(&got[1]), (512, 2048, 16384));
    assert_eq!(sizes(&got[2]), (16384, 65536, 524288));
    assert_eq!(
        p("gear")[0],
        ChunkerConfig {
            kind: ChunkerKind::Gear,
            params: ChunkerParams::default()
        }
    );
    assert_eq!(p("fastcdc:8192")[0], default_chunker());
    assert_eq!(sizes(&p("rabin:1k/4k/16k")[0]), (1024, 4096, 16384));
    assert_eq!(p("rabin:8k,rabin:8192").len(), 1);
    assert_eq!(
        p("fixed:4096,gear:1m")
            .iter()
            .map(chunker_label)
            .collect::<Vec<_>>(),
        ["fixed-4k", "gear-1m"]
    );
    assert_eq!(chunker_label(&p("rabin:1k/4k/16k")[0]), "rabin-1k/4k/16k");
    for bad in [
        "",
        "lbfs:8k",
        "rabin:6k",
        "gear:8k/64k",
        "rabin:x",
        "fastcdc:32",
    ] {
        let e = parse_chunkers(bad).unwrap_err().to_string();
        assert!(e.contains("--chunker"), "{bad}: {e}");
    }
}

#[test]
fn with_chunkers_is_the_product_named_by_both() {
    let configs = parse("dedup,dare").unwrap();
    let chunkers = parse_chunkers("rabin,gear:2k").unwrap();
    let got = with_chunkers(&configs, &chunkers);
    let names: Vec<&str> = got.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "dedup@rabin-8k",
            "dedup@gear-2k",
            "dare@rabin-8k",
            "dare@gear-2k"
        ]
    );
    assert_eq!(got[2].delta, configs[1].delta);
    assert_eq!(got[3].chunker, chunkers[1]);
    assert!(got[1].description.contains("chunker gear 512/2048/16384 B"));
}
