//! Tests of [`super`] (config.rs).

use super::*;

fn with_compression(json: &str) -> Result<RepoConfig> {
    let mut v =
        serde_json::to_value(RepoConfig::new("0123456789abcdef0123456789abcdef".into())).unwrap();
    v["compression"] = serde_json::from_str(json).unwrap();
    RepoConfig::from_bytes(&envelope::seal(
        CONFIG_MAGIC,
        PLAIN_FORMAT_VERSION,
        &serde_json::to_vec(&v).unwrap(),
    ))
}

/// The config forms docs/format.md lists for `compression`.
#[test]
fn compression_forms() {
    assert_eq!(
        with_compression(r#"{"codec":"none"}"#).unwrap().compression,
        Compression::None
    );
    assert_eq!(
        with_compression(r#"{"codec":"zstd","level":19}"#)
            .unwrap()
            .compression,
        Compression::zstd(19)
    );
    for bad in [
        r#"{"codec":"zstd","level":0}"#,
        r#"{"codec":"zstd","level":23}"#,
        r#"{"codec":"zstd","level":3,"text_level":0}"#,
        r#"{"codec":"zstd","level":3,"text_level":"6"}"#,
        r#"{"codec":"zstd"}"#,
        r#"{"codec":"lz4"}"#,
        r#""zstd""#,
    ] {
        assert!(with_compression(bad).is_err(), "{bad} accepted");
    }
    let written = serde_json::to_value(Compression::None).unwrap();
    assert_eq!(written, serde_json::json!({"codec": "none"}));
    let written = serde_json::to_value(Compression::default()).unwrap();
    assert_eq!(
        written,
        serde_json::json!({"codec": "zstd", "level": 3, "text_level": 6})
    );
    let written = serde_json::to_value(Compression::zstd(3)).unwrap();
    assert_eq!(written, serde_json::json!({"codec": "zstd", "level": 3}));
    assert_eq!(
        with_compression(r#"{"codec":"zstd","level":3,"text_level":6}"#)
            .unwrap()
            .compression,
        Compression::default()
    );
}

/// The example in docs/format.md is what `init` writes by default, key for key.
#[test]
fn default_config_matches_the_doc_example() {
    let cfg = RepoConfig::new("0123456789abcdef0123456789abcdef".into());
    let v = serde_json::to_value(&cfg).unwrap();
    let expected = serde_json::json!({
        "version": 4, "id": "0123456789abcdef0123456789abcdef",
        "chunker": { "kind": "fastcdc", "min_size": 2048, "avg_size": 8192, "max_size": 65536 },
        "hash": "blake3-256",
        "compression": { "codec": "zstd", "level": 3, "text_level": 6 },
        "region_size": 524288, "container_size": 4194304,
        "delta": { "sketch": "odess", "sf_count": 3, "features_per_sf": 2, "codec": "edelta",
                   "sketch_index": "full", "dupadj": true, "min_saving": 0.1,
                   "base_cache_bytes": 268435456, "stream_cache_containers": 64,
                   "candidates": 2, "candidates_enough": 0.1,
                   "reanchor": 0.6, "max_depth": 8, "sketch_dupadj_misses": true }
    });
    assert_eq!(v, expected);
    let bytes = cfg.to_bytes();
    assert_eq!(RepoConfig::from_bytes(&bytes).unwrap(), cfg);
}

/// `delta.candidates`: absent means 1, written only when not 1, 1 ..= 8.
#[test]
fn candidates_key() {
    let cfg = DeltaConfig {
        candidates: 1,
        candidates_enough: None,
        ..DeltaConfig::recommended()
    };
    assert!(serde_json::to_value(&cfg)
        .unwrap()
        .get("candidates")
        .is_none());
    let four = DeltaConfig {
        candidates: 4,
        ..cfg.clone()
    };
    let v = serde_json::to_value(&four).unwrap();
    assert_eq!(v["candidates"], 4);
    assert_eq!(serde_json::from_value::<DeltaConfig>(v).unwrap(), four);
    for bad in [0, MAX_CANDIDATES + 1] {
        let c = DeltaConfig {
            candidates: bad,
            ..cfg.clone()
        };
        assert!(c.validate().is_err(), "{bad} accepted");
    }
    // `delta.candidates_enough`: absent means none (every candidate), in (0, 1].
    assert!(serde_json::to_value(&four)
        .unwrap()
        .get("candidates_enough")
        .is_none());
    let enough = DeltaConfig {
        candidates_enough: Some(0.25),
        ..four.clone()
    };
    let v = serde_json::to_value(&enough).unwrap();
    assert_eq!(v["candidates_enough"], 0.25);
    assert_eq!(serde_json::from_value::<DeltaConfig>(v).unwrap(), enough);
    for bad in [0.0, -0.1, 1.5, f64::NAN] {
        let c = DeltaConfig {
            candidates_enough: Some(bad),
            ..four.clone()
        };
        assert!(c.validate().is_err(), "{bad} accepted");
    }
}

/// `delta.reanchor`: absent means none (the papers' rule), written only when set,
/// in (0, 1]; a config without it (every repository before it) reads as before.
#[test]
fn reanchor_key() {
    let none = DeltaConfig {
        reanchor: None,
        ..DeltaConfig::recommended()
    };
    let v = serde_json::to_value(&none).unwrap();
    assert!(v.get("reanchor").is_none());
    assert_eq!(
        serde_json::from_value::<DeltaConfig>(v).unwrap().reanchor,
        None
    );
    let half = DeltaConfig {
        reanchor: Some(0.5),
        ..DeltaConfig::recommended()
    };
    let v = serde_json::to_value(&half).unwrap();
    assert_eq!(v["reanchor"], 0.5);
    assert_eq!(serde_json::from_value::<DeltaConfig>(v).unwrap(), half);
    for bad in [0.0, -0.1, 1.01, f64::NAN] {
        let c = DeltaConfig {
            reanchor: Some(bad),
            ..half.clone()
        };
        assert!(c.validate().is_err(), "{bad} accepted");
    }
}

/// Unknown keys are ignored; a missing `delta` means delta compression off; the payload's
/// `version` must be 1 ..= [`FORMAT_VERSION`], like the envelope's.
#[test]
fn keys_and_versions() {
    let cfg = RepoConfig::new("0123456789abcdef0123456789abcdef".into());
    let mut v = serde_json::to_value(&cfg).unwrap();
    v["some_future_key"] = serde_json::json!({"x": 1});
    v.as_object_mut().unwrap().remove("delta");
    let seal = |v: &serde_json::Value, version: u16| {
        envelope::seal(CONFIG_MAGIC, version, &serde_json::to_vec(v).unwrap())
    };
    let read = RepoConfig::from_bytes(&seal(&v, PLAIN_FORMAT_VERSION)).unwrap();
    assert_eq!(read.delta, DeltaConfig::default());
    assert!(!read.delta.enabled());
    // Inside `delta`, `sketch` may be absent (= null); the other keys are required.
    let mut d = serde_json::to_value(DeltaConfig::recommended()).unwrap();
    d.as_object_mut().unwrap().remove("sketch");
    let parsed: DeltaConfig = serde_json::from_value(d.clone()).unwrap();
    assert_eq!(parsed.sketch, None);
    d.as_object_mut().unwrap().remove("min_saving");
    assert!(serde_json::from_value::<DeltaConfig>(d).is_err());
    assert_eq!(read.container_version(), 2);
    // Envelope and payload disagree: damage.
    assert!(matches!(
        RepoConfig::from_bytes(&seal(&v, 2)),
        Err(Error::Corrupt { .. })
    ));
    // A version-1 config still opens, and its repository keeps version-1 containers.
    v["version"] = serde_json::json!(1);
    let old = RepoConfig::from_bytes(&seal(&v, 1)).unwrap();
    assert_eq!((old.version, old.container_version()), (1, 1));
    assert_eq!(RepoConfig::from_bytes(&old.to_bytes()).unwrap(), old);
    assert_eq!(&old.to_bytes()[envelope::VERSION_OFFSET..][..2], &[1, 0]);
    // A version this build does not know, in the envelope or in the payload.
    let next = FORMAT_VERSION + 1;
    assert!(matches!(
        RepoConfig::from_bytes(&seal(&v, next)),
        Err(Error::UnsupportedVersion { found, .. }) if found == u32::from(next)
    ));
    v["version"] = serde_json::json!(next);
    assert!(matches!(
        RepoConfig::from_bytes(&seal(&v, FORMAT_VERSION)),
        Err(Error::UnsupportedVersion { found, .. }) if found == u32::from(next)
    ));
    v["version"] = serde_json::json!(0);
    assert!(matches!(
        RepoConfig::from_bytes(&seal(&v, 1)),
        Err(Error::UnsupportedVersion { found: 0, .. })
    ));
}

/// `delta.max_depth`: absent means 1 (every repository before it: one-level deltas),
/// written only when not 1, 1 ..= 16; above 1 only in a repository of version 3, and a
/// version-2 repository's backups stay one level deep whatever its config says.
#[test]
fn max_depth_key() {
    let cfg = RepoConfig::new("0123456789abcdef0123456789abcdef".into());
    assert_eq!(cfg.delta.max_depth, DEFAULT_MAX_DEPTH);
    let mut one = cfg.delta.clone();
    one.max_depth = 1;
    let v = serde_json::to_value(&one).unwrap();
    assert!(v.get("max_depth").is_none());
    assert_eq!(
        serde_json::from_value::<DeltaConfig>(v).unwrap().max_depth,
        1
    );
    for bad in [0, MAX_DELTA_DEPTH + 1] {
        let mut d = cfg.delta.clone();
        d.max_depth = bad;
        assert!(d.validate().is_err(), "{bad} accepted");
    }
    let mut v2 = cfg.clone();
    v2.version = 2;
    assert!(v2.validate().is_err(), "chains in a version-2 repository");
    assert!(v2.check_depth(&cfg.delta).is_err());
    assert_eq!(v2.default_delta().max_depth, 1);
    v2.delta.max_depth = 1;
    v2.validate().unwrap();
    assert_eq!(v2.container_version(), 2);
    assert_eq!(cfg.default_delta(), cfg.delta);
    cfg.validate().unwrap();
}

/// An encrypted config is version 5 with the keyed hash; any other mix is refused.
#[test]
fn encryption_keys() {
    let cfg = RepoConfig::new("0123456789abcdef0123456789abcdef".into()).encrypted();
    assert_eq!(cfg.version, u32::from(ENCRYPTED_VERSION));
    cfg.validate().unwrap();
    assert_eq!(RepoConfig::from_bytes(&cfg.to_bytes()).unwrap(), cfg);
    let plain = RepoConfig::new("0123456789abcdef0123456789abcdef".into());
    assert!(!serde_json::to_string(&plain)
        .unwrap()
        .contains("encryption"));
    for bad in [
        RepoConfig {
            hash: HASH_BLAKE3.into(),
            ..cfg.clone()
        },
        RepoConfig {
            version: PLAIN_FORMAT_VERSION.into(),
            ..cfg.clone()
        },
        RepoConfig {
            encryption: Some("rot13".into()),
            ..cfg.clone()
        },
        RepoConfig {
            hash: HASH_BLAKE3_KEYED.into(),
            ..plain
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}
