//! The metrics of issue 15 on hand-made repositories: detection counted apart from
//! acceptance (`BackupSummary::delta_detected` and the `delta_rejected_*` counts, summed by
//! `stats`), and the papers' restore speed factor (`restore` with `cache_containers`).

use crate::delta::{dupadj_only_fixed, run_backup};
use crate::support::{config, files, init_repo, noise, restored_root, write_files};
use dedelta_core::chunker::ChunkerKind;
use dedelta_store::backend::FileKind;
use dedelta_store::commands::restore;
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::progress::NoProgress;
use dedelta_store::read::RestoreCacheChoice;
use std::fs;

/// Detection and acceptance are counted apart (issue 15), on a hand-made example. Ten
/// fixed-size chunks of noise (incompressible: a chunk costs at least its 2,048 bytes stored
/// in full); the second version edits chunks 1, 3 and 5 and keeps the others, so DupAdj pairs
/// each edited chunk with the parent's chunk at its place and encodes a delta of about the
/// bytes it rewrote: chunk 1 one byte (a delta of a few bytes), chunk 3 its first 1,000 bytes
/// (49 % of the chunk), chunk 5 its first 1,900 (93 %). The tree stream (one chunk of 402
/// bytes) adds one detected pair, dropped by the tree bound: three of its ten chunk ids are
/// new, 96 bytes of hash and their records, a delta above half the chunk.
///
/// | settings | kept | min_saving | re-anchoring bound |
/// |---|---|---|---|
/// | bound 30 %, min_saving 10 % | 1 | 0 | 3, 5 (both above 30 %; 5 also fails min_saving) |
/// | no bound, min_saving 10 % | 1, 3 | 5 (above 90 % of 2,048) | 0 |
/// | no bound, min_saving 0 | 1, 3, 5 | 0 | 0 |
#[test]
fn detection_and_acceptance_are_counted_apart() {
    for (reanchor, min_saving, kept, by_min_saving, by_bound) in [
        (Some(0.3), 0.1, 1, 0, 2),
        (None, 0.1, 2, 1, 0),
        (None, 0.0, 3, 0, 0),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let delta = DeltaConfig {
            sketch: None,
            dupadj: true,
            reanchor,
            min_saving,
            ..DeltaConfig::default()
        };
        let mut cfg = config(1, delta);
        cfg.chunker.kind = ChunkerKind::Fixed;
        let chunk = cfg.chunker.params.avg_size;
        assert_eq!(chunk, 2048);
        let repo = init_repo(&tmp.path().join("repo"), cfg);
        let old = noise(10 * chunk, 21);
        let mut new = old.clone();
        new[chunk + 7] ^= 0x55;
        let fresh = noise(2_000, 22);
        new[3 * chunk..3 * chunk + 1_000].copy_from_slice(&fresh[..1_000]);
        new[5 * chunk..5 * chunk + 1_900].copy_from_slice(&fresh[100..]);
        let src = tmp.path().join("src");
        let mut sums = Vec::new();
        for (n, data) in [old, new].into_iter().enumerate() {
            write_files(&src, &files([("f", data)]));
            sums.push(run_backup(&repo, &src, n as u64));
        }
        let s = &sums[1];
        let what = format!("reanchor {reanchor:?}, min_saving {min_saving}: {s:?}");
        // Three data chunks and one tree chunk detected.
        assert_eq!(s.delta_detected, 4, "{what}");
        assert_eq!(s.delta_chunks, kept, "{what}");
        assert_eq!(s.delta_rejected_min_saving, by_min_saving, "{what}");
        assert_eq!(s.delta_rejected_reanchor, by_bound, "{what}");
        assert_eq!(s.delta_rejected_tree_bound, 1, "{what}");
        assert_eq!(
            s.delta_detected,
            s.delta_chunks + s.delta_rejected(),
            "{what}"
        );
        // The detected pairs' deltas hold at least the bytes the edits rewrote.
        assert!(s.detected_delta_bytes >= 1 + 1_000 + 1_900, "{what}");
        assert!(s.detected_delta_bytes >= s.delta_bytes, "{what}");
        assert!(s.detected_dce() <= s.dce() + 1e-12, "{what}");
        // The first version has no parent and nothing to pair.
        assert_eq!(sums[0].delta_detected, 0, "{what}");
        // `stats` sums the snapshots' counts.
        let st = dedelta_store::commands::stats::stats(&repo).unwrap();
        assert_eq!(
            (
                st.delta_detected,
                st.delta_rejected_min_saving,
                st.delta_rejected_reanchor,
                st.delta_rejected_tree_bound,
                st.detected_delta_bytes,
            ),
            (4, by_min_saving, by_bound, 1, s.detected_delta_bytes),
            "{what}"
        );
        assert!((st.detected_dce - s.detected_dce()).abs() < 1e-12, "{what}");
    }
}

/// The papers' restore speed factor on a hand-made example (issue 15). Fixed chunks of
/// 2,048 bytes, DupAdj alone. The first backup stores file `a` = chunks a0 a1 in container
/// C0; the second, of file `b` = a0' a1 x (a0 with one byte changed, then a1, then a new
/// chunk x), stores a0' as a delta of a0 (DupAdj's backward walk from the duplicate a1) and x
/// in full, in container C1. Restoring `b` uses, in order: C1 (a0'), C0 (its base a0), C0
/// (a1), C1 (x).
///
/// | cache | reads | containers read | regions read | MB per container read |
/// |---|---|---|---|---|
/// | 1 container | C1, C0 (evicts C1), hit, C1 (evicts C0) | 3 | 3 | 0.006144 / 3 |
/// | 2 containers | C1, C0, hit, hit | 2 | 2 | 0.006144 / 2 |
///
/// (The decoder asks for a0 only once, as a base; a1 in C0 is a separate chunk.)
#[test]
fn restore_speed_factor_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, chunk) = dupadj_only_fixed(tmp.path());
    let a = noise(2 * chunk, 31);
    let mut b = a.clone();
    b[10] ^= 1;
    b.extend(noise(chunk, 32));
    let src = tmp.path().join("src");
    write_files(&src, &files([("a", a)]));
    run_backup(&repo, &src, 0);
    fs::remove_file(src.join("a")).unwrap();
    write_files(&src, &files([("b", b.clone())]));
    let s = run_backup(&repo, &src, 1);
    assert_eq!((s.delta_chunks, s.containers_written), (1, 1), "{s:?}");
    assert_eq!(repo.backend().list(FileKind::Container).unwrap().len(), 2);
    let (_, snap) = repo.find_snapshot("latest").unwrap();
    for (cache, reads) in [(1, 3), (2, 2), (512, 2)] {
        let target = tmp.path().join(format!("out-{cache}"));
        let opts = restore::RestoreOptions {
            target: target.clone(),
            include: vec![],
            cache_bytes: 1 << 20,
            cache: RestoreCacheChoice::Lru { containers: cache },
            ..Default::default()
        };
        let st = restore::restore(&repo, &snap, &opts, &NoProgress).unwrap();
        assert_eq!(fs::read(restored_root(&target, &src).join("b")).unwrap(), b);
        let c = st.restore_cache;
        assert_eq!(c.cache_containers, cache);
        assert_eq!(c.containers_read, reads, "cache {cache}: {c:?}");
        // One region per container here (each holds less than a region).
        assert_eq!(c.regions_read, reads, "cache {cache}: {c:?}");
        assert_eq!(st.bytes_written, 3 * 2048);
        let want = 3.0 * 2048.0 / 1e6 / reads as f64;
        assert!((st.speed_factor().unwrap() - want).abs() < 1e-12);
    }
    // Forward assembly: one area holds the file, each container is read once.
    let opts = restore::RestoreOptions {
        target: tmp.path().join("out-forward"),
        include: vec![],
        cache_bytes: 1 << 20,
        cache: RestoreCacheChoice::Forward {
            area_bytes: 1 << 20,
        },
        ..Default::default()
    };
    let st = restore::restore(&repo, &snap, &opts, &NoProgress).unwrap();
    assert_eq!(
        fs::read(restored_root(&tmp.path().join("out-forward"), &src).join("b")).unwrap(),
        b
    );
    assert_eq!(
        (st.restore_cache.containers_read, st.restore_cache.areas),
        (2, 1)
    );
    // An area of one chunk (2,048 bytes) per chunk: C1 (a0' and its base in C0: 2 reads), C0
    // (a1), C1 (x).
    let opts = restore::RestoreOptions {
        target: tmp.path().join("out-forward-small"),
        cache: RestoreCacheChoice::Forward { area_bytes: 2048 },
        ..opts
    };
    let st = restore::restore(&repo, &snap, &opts, &NoProgress).unwrap();
    assert_eq!(
        (st.restore_cache.containers_read, st.restore_cache.areas),
        (4, 3)
    );
}
