//! The stored bytes do not change by accident: a fixed series of inputs, backed up with each
//! delta configuration, must produce containers with exactly these names (their BLAKE3
//! hashes). A refactoring that changes them changes the repository format; a deliberate format
//! change updates the names here, in the same commit as docs/format.md.
//!
//! Inputs come through the stdin source (name and time fixed), so that no path or clock of
//! the machine running the test reaches the tree stream (a stdin record has no owner, inode
//! or other times either).
//!
//! Tree stream version 2 (2026-11-24) changed every table: the tree chunks, which share
//! containers with the data, hold the new fields. The tree version is not tied to the
//! repository's: a version-1 repository gets version-2 trees too.
//!
//! Each repository format version has its table: a version-1 repository still writes
//! version-1 containers, byte for byte as before version 2 existed (so that builds that know
//! only version 1 keep reading it), a version-2 repository the lean version-2 metadata with
//! one-level deltas, and a version-3 repository the same layout with delta chains (whose
//! writers also compare a delta compressed, not raw, when deciding to keep it), with the
//! first version-3 defaults and with today's.
//! The version-1 tables are written with zstd level 3 for every region and Odess 3 x 4, as
//! every version-1 repository's config says; the version-2 tables with the defaults (level 6
//! for regions that look compressible, which these text records do; Odess 3 x 2).

use crate::support::{backup_options, config, init_repo, locked, me, time_of, xorshift};
use dedelta_core::compress::Compression;
use dedelta_core::delta::DeltaKind;
use dedelta_store::backend::FileKind;
use dedelta_store::commands::backup::{self, StdinSource};
use dedelta_store::format::config::{DeltaConfig, RepoConfig, ONE_LEVEL_REANCHOR};
use dedelta_store::progress::NoProgress;

/// Version `v` of a tar-like stream: text records, a few edited per version, one inserted.
fn version(v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 0..6000u64 {
        xorshift(&mut x);
        if i % 997 == v {
            out.extend_from_slice(format!("inserted in version {v}\n").as_bytes());
        }
        let edited = if (i * 31 + v * 7).is_multiple_of(101) {
            v
        } else {
            0
        };
        out.extend_from_slice(
            format!("record {i:05} value {:016x} edit {edited}\n", x % 100_003).as_bytes(),
        );
    }
    out
}

fn container_names(format_version: u32, delta: DeltaConfig, threads: usize) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RepoConfig {
        version: format_version,
        id: "golden".into(),
        container_size: 64 * 1024,
        compression: if format_version == 1 {
            Compression::zstd(3)
        } else {
            Compression::default()
        },
        ..config(1, delta)
    };
    let repo = init_repo(&tmp.path().join("repo"), cfg);
    let workers = backup::Workers::new(threads).unwrap();
    for v in 0..4 {
        let opts = backup::BackupOptions {
            stdin: Some(StdinSource {
                reader: Box::new(std::io::Cursor::new(version(v))),
                name: "stream.tar".into(),
                mtime_secs: 1_700_000_000 + v as i64,
                whole_or_nothing: false,
            }),
            host: "golden".into(),
            ..backup_options(vec![], time_of(v))
        };
        locked(&repo, &me(), |lock| {
            backup::backup(&repo, lock, opts, &workers, &NoProgress)
        })
        .unwrap();
    }
    crate::support::sorted_names(repo.backend().as_ref(), FileKind::Container)
}

/// Short prefixes of the expected names, to keep the table readable.
fn prefixes(names: &[String]) -> Vec<&str> {
    names.iter().map(|n| &n[..16]).collect()
}

#[test]
fn dedup_only_containers_are_unchanged() {
    let names = container_names(1, DeltaConfig::default(), 2);
    assert_eq!(prefixes(&names), EXPECTED_DEDUP, "{names:#?}");
    assert_eq!(container_names(1, DeltaConfig::default(), 1), names);
}

/// The delta settings version-1 repositories were created with (Odess 3 x 4, Ddelta, before
/// the re-anchoring key existed, every new chunk sketched: version-1 metadata records a
/// delta's super-features).
fn version_1_delta() -> DeltaConfig {
    let mut d = DeltaConfig::recommended();
    d.codec = DeltaKind::Ddelta;
    d.sketch_dupadj_misses = false;
    d.sketch_params.features_per_sf = 4;
    d.reanchor = None;
    d.max_depth = 1;
    d
}

/// The delta settings of version-2 repositories: the defaults of the time, one level deep,
/// re-anchoring at 30 %, one candidate base.
fn version_2_delta() -> DeltaConfig {
    DeltaConfig {
        max_depth: 1,
        ..version_3_first_delta()
    }
}

/// The delta settings of the first version-3 repositories (2026-11-24): Ddelta, chains 8
/// deep, re-anchoring at 30 %, one candidate base.
fn version_3_first_delta() -> DeltaConfig {
    DeltaConfig {
        codec: DeltaKind::Ddelta,
        reanchor: Some(ONE_LEVEL_REANCHOR),
        candidates: 1,
        candidates_enough: None,
        sketch_dupadj_misses: false,
        ..DeltaConfig::recommended()
    }
}

#[test]
fn delta_containers_are_unchanged() {
    let names = container_names(1, version_1_delta(), 2);
    assert_eq!(prefixes(&names), EXPECTED_DELTA, "{names:#?}");
    assert_eq!(container_names(1, version_1_delta(), 1), names);
}

#[test]
fn dedup_only_containers_are_unchanged_v2() {
    let names = container_names(2, DeltaConfig::default(), 2);
    assert_eq!(prefixes(&names), EXPECTED_DEDUP_V2, "{names:#?}");
    assert_eq!(container_names(2, DeltaConfig::default(), 1), names);
}

#[test]
fn delta_containers_are_unchanged_v2() {
    let names = container_names(2, version_2_delta(), 2);
    assert_eq!(prefixes(&names), EXPECTED_DELTA_V2, "{names:#?}");
    assert_eq!(container_names(2, version_2_delta(), 1), names);
}

#[test]
fn delta_containers_are_unchanged_v3() {
    let names = container_names(3, version_3_first_delta(), 2);
    assert_eq!(prefixes(&names), EXPECTED_DELTA_V3, "{names:#?}");
    assert_eq!(container_names(3, version_3_first_delta(), 1), names);
}

/// Today's defaults: re-anchoring at 60 %, a second candidate base below 10 %, Edelta (since
/// 2026-11-29; with Ddelta the last container was c857606b3ac106ac instead of
/// 756bcbed934d2531), super-features only for what DupAdj leaves (since 2026-11-30: the same
/// containers).
#[test]
fn delta_containers_are_unchanged_v3_defaults() {
    let names = container_names(3, DeltaConfig::recommended(), 2);
    assert_eq!(prefixes(&names), EXPECTED_DELTA_V3_DEFAULTS, "{names:#?}");
    assert_eq!(container_names(3, DeltaConfig::recommended(), 1), names);
}

const EXPECTED_DELTA_V3_DEFAULTS: &[&str] = &[
    "0c23e9bdc60b1557",
    "445bc4641c3b0f11",
    "756bcbed934d2531",
    "7631a5add546450b",
];

const EXPECTED_DELTA_V3: &[&str] = &[
    "1647964af2603296",
    "2d6d71f2c12f788c",
    "7631a5add546450b",
    "c857606b3ac106ac",
];

const EXPECTED_DEDUP: &[&str] = &[
    "2c31bc45ce7b519d",
    "7e9ee4e2a951f09d",
    "afdcd252780e2c01",
    "f1de71a8a32ba034",
];
const EXPECTED_DELTA: &[&str] = &[
    "35e75358088133da",
    "49c73095369a4114",
    "49fcc8e9e7722607",
    "c024ed3c165264be",
];
const EXPECTED_DEDUP_V2: &[&str] = &[
    "d1d1e6de7c1715a3",
    "d5e82cda344eb508",
    "dff250f263f7df92",
    "e92fdf94a8f711ae",
];
const EXPECTED_DELTA_V2: &[&str] = &[
    "1647964af2603296",
    "438e3c34fdac7e00",
    "7631a5add546450b",
    "7ce73cdaaa319f3f",
];
